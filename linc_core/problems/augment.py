"""The 8 dihedral augmentations of the square ``[0, G]^2``.

Reflections and the diagonal swap keep every distance (and so every cost, window and
feasibility decision) unchanged, while the policy sees 8 different coordinate sets.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from linc_core.instances import Instance

NUM_DIHEDRAL = 8


def dihedral_coordinates(locs: Tensor, grid_size: Tensor) -> Tensor:
    """All 8 images of ``locs`` under the symmetries of the square of side ``grid_size``.

    Order: (x, y), (G-x, y), (x, G-y), (G-x, G-y), (y, x), (G-y, x), (y, G-x), (G-y, G-x).

    Args:
        locs: ``[B, N, 2]``; grid_size: ``[B]``.

    Returns:
        ``[8, B, N, 2]``.
    """
    g = grid_size.view(-1, 1)
    x, y = locs[..., 0], locs[..., 1]
    gx, gy = g - x, g - y
    pairs = [(x, y), (gx, y), (x, gy), (gx, gy), (y, x), (gy, x), (y, gx), (gy, gx)]
    return torch.stack([torch.stack(p, dim=-1) for p in pairs])


def augment_dihedral(instance: Instance) -> Instance:
    """The batch repeated 8 times with transformed coordinates, augmentation-major.

    Row ``a * B + b`` is augmentation ``a`` of instance ``b``; every other field is repeated.

    Returns:
        an ``Instance`` with ``8 * B`` rows.
    """
    repeated = instance.repeat(NUM_DIHEDRAL)
    locs = dihedral_coordinates(instance.locs, instance.grid_size).flatten(0, 1)
    return replace(repeated, locs=locs)
