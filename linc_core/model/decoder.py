"""Decoder context: a masked multi-head glimpse from the current state, plus PolyNet's z residual.

Keys and values are projected once per instance (``precompute``); each step builds a query from
the step context: ``W_last [E_current; scalars]`` with the problem's context scalars (its spec's
``context_scalars``: CVRPTW load and time, CVRP load, TSP none), plus ``W_first E_first`` where
the spec asks for it (TSP's ``first_node_query``); it attends over the feasible nodes, and adds
``poly_2(relu(poly_1([h0; z])))`` when z-vectors are used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig
from linc_core.model.encoder import attention
from linc_core.problems.base import gather_rows
from linc_core.problems.spec import CONTEXT_SCALARS, problem_spec


@dataclass(frozen=True)
class DecoderCache:
    """Per-instance projections, computed once per rollout batch.

    Attributes:
        embeddings: ``[B, N, D]`` encoder output (the single-head logit keys).
        keys, values: ``[B, H, N, D/H]`` glimpse keys and values.
        node_query: ``[B, N, D]`` the embedding part of the step query, ``E W_q[:, :D]^T``.
        first_query: ``[B, N, D]`` TSP's first-node query projection (None otherwise).
    """

    embeddings: Tensor
    keys: Tensor
    values: Tensor
    node_query: Tensor
    first_query: Tensor | None


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.embedding_dim
        self.num_heads = config.num_heads
        self.problem = config.problem
        spec = problem_spec(config.problem)
        self.Wq_last = nn.Linear(d + spec.context_scalars, d, bias=False)
        self.Wq_first = nn.Linear(d, d, bias=False) if spec.first_node_query else None
        self.Wk = nn.Linear(d, d, bias=False)
        self.Wv = nn.Linear(d, d, bias=False)
        self.multi_head_combine = nn.Linear(d, d)
        self.z_dim = config.z_dim
        if config.z_dim > 0:
            self.poly_layer_1 = nn.Linear(d + config.z_dim, config.poly_hidden_dim)
            self.poly_layer_2 = nn.Linear(config.poly_hidden_dim, d)

    def precompute(self, embeddings: Tensor) -> DecoderCache:
        b, n, d = embeddings.shape
        h = self.num_heads

        def heads(t: Tensor) -> Tensor:
            return t.view(b, n, h, d // h).transpose(1, 2)

        first = self.Wq_first(embeddings) if self.Wq_first is not None else None
        # W_q [E_current; scalars] = (E W_q[:, :D]^T)[current] + scalars W_q[:, D:]^T: the
        # embedding part is projected once per node here instead of once per rollout and step.
        node_query = nn.functional.linear(embeddings, self.Wq_last.weight[:, :d])
        return DecoderCache(
            embeddings,
            heads(self.Wk(embeddings)),
            heads(self.Wv(embeddings)),
            node_query,
            first,
        )

    def forward(
        self,
        cache: DecoderCache,
        current: Tensor,
        scalars: Tensor,
        mask: Tensor,
        z: Tensor | None,
        first: Tensor | None = None,
    ) -> Tensor:
        """The decoder context ``h``.

        Args:
            cache: from ``precompute``.
            current: ``[B, K]`` current node. first: ``[B, K]`` start city (TSP only).
            scalars: ``[B, K, S]`` load / time inputs (S = ``CONTEXT_SCALARS[problem]``).
            mask: ``[B, K, N]`` bool feasibility (True = may attend).
            z: ``[B, K, z_dim]`` or None.

        Returns:
            ``[B, K, D]``.
        """
        b, k = current.shape
        d = cache.embeddings.shape[-1]
        h = self.num_heads
        query = gather_rows(cache.node_query, current)  # [B, K, D]
        if scalars.shape[-1] > 0:
            scalar_weight = self.Wq_last.weight[:, d:]  # [D, S]
            query = torch.addmm(query.view(b * k, d), scalars.reshape(b * k, -1), scalar_weight.t())
            query = query.view(b, k, d)
        if cache.first_query is not None:
            query = query + gather_rows(cache.first_query, first)
        query = query.view(b, k, h, d // h).transpose(1, 2)  # [B, H, K, D/H]
        glimpse = attention(query, cache.keys, cache.values, mask.unsqueeze(1))  # [B, H, K, D/H]
        context = self.multi_head_combine(glimpse.transpose(1, 2).reshape(b, k, d))
        if self.z_dim > 0:
            if z is None:
                raise ValueError("this model was built with z_dim > 0: pass z vectors")
            poly = torch.relu(self.poly_layer_1(torch.cat([context, z.to(context.dtype)], dim=-1)))
            context = context + self.poly_layer_2(poly)
        return context


__all__ = ["CONTEXT_SCALARS", "Decoder", "DecoderCache"]
