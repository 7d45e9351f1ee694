"""Model inputs: node features for the encoder and the scalar step context for the decoder.

The candidate consequence table is the environments' (``env.consequences``); this module only
scales instance data for the network. Two input scalings (reference section 1.2):

- ``grid`` (LINC): coordinates, windows, service and the elapsed time divided by the grid size;
- ``horizon`` (PolyNet/POMO): times divided by the depot due (or the latest finite customer
  due), coordinates by ``due / alpha`` so that scaled distances are scaled travel times.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from linc_core.config import ModelConfig
from linc_core.instances import Instance
from linc_core.problems.base import euclidean_distances
from linc_core.problems.cvrptw.env import UNBOUNDED_DUE
from linc_core.problems.spec import problem_spec


@dataclass(frozen=True)
class NodeInputs:
    """Encoder inputs.

    Attributes:
        depot: ``[B, 2]`` scaled depot coordinates (None without a depot: TSP).
        nodes: ``[B, n, F]`` per-customer (or per-city) inputs, F from the config.
        static: ``[B, n, S]`` kNN statistics (S may be 0).
        time_scale: ``[B]`` what elapsed time is divided by for the decoder context.
    """

    depot: Tensor | None
    nodes: Tensor
    static: Tensor
    time_scale: Tensor


def time_scale(instance: Instance, mode: str) -> Tensor:
    """``[B]`` divisor of times (and, for ``grid``, of coordinates)."""
    if mode == "grid":
        return instance.grid_size.clamp_min(1.0)
    due = instance.time_windows[..., 1]
    depot_due = due[:, 0]
    finite = torch.where(torch.isfinite(due[:, 1:]), due[:, 1:], torch.zeros_like(due[:, 1:]))
    fallback = finite.amax(1)
    usable = torch.isfinite(depot_due) & (depot_due > 1e-6) & (depot_due < UNBOUNDED_DUE)
    return torch.where(usable, depot_due, fallback).clamp_min(1.0)


def knn_statistics(scaled_locs: Tensor, names: tuple[str, ...], k: int) -> Tensor:
    """kNN distance statistics of each customer among the customers.

    Distances are over the scaled coordinates, divided by the instance's largest
    customer-customer distance; ``min(k, n - 1)`` neighbours (none: zeros).

    Args:
        scaled_locs: ``[B, n, 2]`` customer coordinates (depot excluded).

    Returns:
        ``[B, n, len(names)]`` in the order of ``names`` (``knn_nearest``, ``knn_mean``,
        ``knn_min``; nearest and min coincide, as in the reference).
    """
    b, n, _ = scaled_locs.shape
    if not names:
        return scaled_locs.new_zeros(b, n, 0)
    neighbours = min(k, n - 1)
    if neighbours <= 0:
        return scaled_locs.new_zeros(b, n, len(names))
    dist = euclidean_distances(scaled_locs)  # [B, n, n]
    scale = dist.flatten(1).amax(1).clamp_min(1e-12).view(b, 1, 1)
    eye = torch.eye(n, dtype=torch.bool, device=dist.device)
    nearest = dist.masked_fill(eye, float("inf")).topk(neighbours, dim=-1, largest=False).values
    nearest = nearest / scale  # [B, n, k] ascending
    stats = {
        "knn_nearest": nearest[..., 0],
        "knn_mean": nearest.mean(-1),
        "knn_min": nearest[..., 0],
    }
    return torch.stack([stats[name] for name in names], dim=-1)


def node_inputs(instance: Instance, config: ModelConfig) -> NodeInputs:
    """Scale an instance batch into encoder inputs.

    Per-node inputs: the scaled ``[x, y]``, then the problem's own (its spec's
    ``node_features``: CVRPTW ``[demand / capacity, ready, due]``, CVRP ``[demand /
    capacity]``, TSP none); with ``static_feature_mode == "concat"`` the kNN statistics are
    appended.
    """
    scale = time_scale(instance, config.input_scale)  # [B]
    # Horizon scaling divides coordinates by due / alpha: scaled distances are scaled times.
    xy_scale = scale if config.input_scale == "grid" else scale / instance.travel_time_scale
    locs = instance.locs / xy_scale.view(-1, 1, 1)
    spec = problem_spec(instance.problem)
    if spec.has_depot:
        depot, customers = locs[:, 0], locs[:, 1:]
    else:
        depot, customers = None, locs
    columns = [customers]
    if spec.node_features is not None:
        columns.append(spec.node_features(instance, scale))
    static = knn_statistics(customers, config.node_static_features, config.knn_k)
    if config.static_feature_mode == "concat":
        columns.append(static)
    return NodeInputs(
        depot=depot, nodes=torch.cat(columns, dim=-1), static=static, time_scale=scale
    )


def node_input_dim(config: ModelConfig) -> int:
    """F: width of ``NodeInputs.nodes`` for a config."""
    base = 2 + problem_spec(config.problem).node_feature_width
    if config.static_feature_mode == "concat":
        base += len(config.node_static_features)
    return base
