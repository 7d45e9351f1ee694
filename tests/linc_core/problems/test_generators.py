"""Tests of the uniform TSP and CVRP samplers (``linc_core.problems.{tsp,cvrp}.generator``)."""

from __future__ import annotations

import pytest
import torch

from linc_core.problems.cvrp import CVRP_CAPACITY_BY_SIZE, generate_cvrp
from linc_core.problems.tsp import generate_tsp
from tests.instance_helpers import same_tensors


def test_tsp_seeded_uniform_unit_square() -> None:
    a = generate_tsp(16, 20, seed=3)
    assert a.problem == "tsp" and a.locs.shape == (16, 20, 2) and a.locs.dtype == torch.float32
    assert same_tensors(a, generate_tsp(16, 20, seed=3))
    assert not torch.equal(a.locs, generate_tsp(16, 20, seed=4).locs)
    assert float(a.locs.min()) >= 0.0 and float(a.locs.max()) < 1.0
    assert torch.all(a.grid_size == 1.0)
    assert torch.all(a.demand == 0) and torch.all(torch.isinf(a.capacity))


@pytest.mark.parametrize("size", sorted(CVRP_CAPACITY_BY_SIZE))
def test_cvrp_capacity_table_and_demands(size: int) -> None:
    batch = 8 if size >= 500 else 64
    inst = generate_cvrp(batch, size, seed=size)
    assert inst.problem == "cvrp" and inst.locs.shape == (batch, size + 1, 2)
    assert torch.all(inst.capacity == CVRP_CAPACITY_BY_SIZE[size])
    demand = inst.demand
    assert torch.all(demand[:, 0] == 0)
    customers = demand[:, 1:]
    assert torch.all(customers == customers.round())
    assert int(customers.min()) == 1 and int(customers.max()) == 9
    assert float(inst.locs.min()) >= 0.0 and float(inst.locs.max()) < 1.0
    assert torch.all(inst.grid_size == 1.0)


def test_cvrp_seeding_and_capacity_errors() -> None:
    a = generate_cvrp(8, 20, seed=1)
    assert same_tensors(a, generate_cvrp(8, 20, seed=1))
    assert not torch.equal(a.locs, generate_cvrp(8, 20, seed=2).locs)
    # The depot is uniform too, not fixed.
    assert a.locs[:, 0].std(dim=0).min() > 0.05
    with pytest.raises(ValueError, match="no standard capacity"):
        generate_cvrp(4, 33, seed=0)
    assert torch.all(generate_cvrp(4, 33, seed=0, capacity=41.0).capacity == 41.0)
    with pytest.raises(ValueError):
        generate_cvrp(4, 20, seed=0, capacity=0.0)
    with pytest.raises(ValueError):
        generate_cvrp(0, 20, seed=0)
