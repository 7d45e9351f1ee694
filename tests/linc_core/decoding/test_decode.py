"""Decoding: budgets only ever help, SGBS never loses to its start, augmentation is consistent,
every decoded Solomon-100 solution passes the independent verifier."""

from __future__ import annotations

import math

import pytest
import torch

from linc_core.decoding import DecodeConfig, decode
from linc_core.instances import Instance, read_solomon, read_solomon_folder, truncate_customers
from linc_core.model import LincPolicy
from linc_core.model.sampling import rollout_keys, sample_with_uniforms, step_uniforms
from linc_core.problems.tsp import generate_tsp
from linc_core.verify import verify_instance
from tests.conftest import fresh_python, tiny_policy


@pytest.fixture(scope="module")
def policy() -> LincPolicy:
    return tiny_policy()


@pytest.fixture(scope="module")
def small_solomon(data_dir) -> Instance:
    """Three Solomon instances of different families cut to 15 customers (float64)."""
    files = ("C101.txt", "R201.txt", "RC105.txt")
    return Instance.concat(
        [truncate_customers(read_solomon(data_dir / "solomon100" / f), 15) for f in files]
    )


def assert_verified(instances: Instance, result, convention: str = "exact") -> None:
    for b, solution in enumerate(result.routes):
        checked = verify_instance(instances, b, solution, convention=convention)
        assert checked.feasible, (b, checked.violations[:3])
        if convention == "exact":
            assert checked.cost == pytest.approx(float(result.cost[b]), rel=1e-12)


def test_every_solomon100_solution_passes_the_verifier(policy, data_dir):
    instances, errors = read_solomon_folder(data_dir / "solomon100")
    assert not errors and len(instances) == 56
    batch = Instance.concat(instances)
    result = decode(policy, batch, DecodeConfig(method="sampling", num_z=2, augment=8, seed=3))
    assert result.cost.shape == (56,) and result.rollouts == 56 * 8 * 2
    assert_verified(batch, result, "exact")
    # The same routes also hold under the DIMACS times (truncated edges are never longer).
    for b, solution in enumerate(result.routes):
        assert verify_instance(batch, b, solution, convention="dimacs").feasible
        served = sorted(c for route in solution for c in route)
        assert served == list(range(1, 101))


def test_sgbs_is_never_worse_than_its_own_greedy_start(policy, small_solomon):
    sgbs = decode(policy, small_solomon, DecodeConfig(method="sgbs", sgbs_z=8, augment=1, seed=5))
    greedy = decode(
        policy, small_solomon, DecodeConfig(method="greedy", num_z=8, augment=1, seed=5)
    )
    assert_verified(small_solomon, sgbs)
    # SGBS's first stage is exactly that greedy decode (same z-vectors)...
    torch.testing.assert_close(sgbs.greedy_start_cost, greedy.cost, rtol=1e-5, atol=0)
    # ... and the search only keeps improvements, which an untrained model leaves plenty of.
    assert bool((sgbs.cost <= greedy.cost + 1e-9).all())
    assert bool((sgbs.cost < greedy.cost - 1e-6).any())


def test_more_z_samples_are_never_worse_under_a_fixed_seed(policy, small_solomon):
    few = decode(policy, small_solomon, DecodeConfig(method="sampling", num_z=4, seed=11))
    many = decode(policy, small_solomon, DecodeConfig(method="sampling", num_z=16, seed=11))
    assert bool((many.aug_cost <= few.aug_cost + 1e-9).all())
    assert bool((many.cost <= few.cost + 1e-9).all())
    # Chunking is invisible: rollout k of a row is the same rollout whatever the chunk size.
    # (un-augmented rows are augmented copy 0; 16 rollouts in blocks of 6 and one row a chunk)
    chunked = decode(
        policy,
        small_solomon,
        DecodeConfig(method="sampling", num_z=16, augment=1, seed=11, max_rollouts_per_chunk=6),
    )
    torch.testing.assert_close(chunked.cost, many.aug_cost[:, 0], rtol=1e-9, atol=0)
    # A different seed draws different z-vectors and samples.
    other = decode(policy, small_solomon, DecodeConfig(method="sampling", num_z=16, seed=12))
    assert not torch.equal(other.aug_cost, many.aug_cost)


def test_augmented_copies_are_rescored_on_the_original_instance(policy, small_solomon):
    result = decode(policy, small_solomon, DecodeConfig(method="greedy", num_z=4, seed=2))
    assert result.aug_cost.shape == (3, 8)
    for b in range(3):
        for a in range(8):
            checked = verify_instance(small_solomon, b, result.aug_routes[b][a], "exact")
            assert checked.feasible
            assert checked.cost == pytest.approx(float(result.aug_cost[b, a]), rel=1e-12)
        assert float(result.cost[b]) == float(result.aug_cost[b].min())
    # The copies are real transformations: the policy sees different inputs.
    assert any(len(set(result.aug_cost[b].tolist())) > 1 for b in range(3))
    # Copy 0 is the identity with the same per-row seeds as an un-augmented decode.
    plain = decode(policy, small_solomon, DecodeConfig(method="greedy", num_z=4, augment=1, seed=2))
    torch.testing.assert_close(plain.cost, result.aug_cost[:, 0], rtol=1e-9, atol=0)


def test_multistart_starts_each_rollout_at_its_own_customer(policy, small_solomon):
    five = decode(policy, small_solomon, DecodeConfig(method="multistart", num_starts=5, augment=1))
    every = decode(policy, small_solomon, DecodeConfig(method="multistart", augment=1))
    assert five.rollouts == 3 * 5 and every.rollouts == 3 * 15
    assert_verified(small_solomon, five)
    for solution in five.routes:
        assert solution[0][0] in range(1, 6)
    # All 15 starts include the first 5 (greedy is deterministic).
    assert bool((every.cost <= five.cost + 1e-9).all())


def test_tsp_tours_are_complete_and_rescored_exactly():
    instances = generate_tsp(2, 12, seed=4)
    config = DecodeConfig(method="sampling", num_z=4, seed=1)
    result = decode(tiny_policy(problem="tsp"), instances, config)
    for b, solution in enumerate(result.routes):
        assert sorted(solution[0]) == list(range(12))
        checked = verify_instance(instances, b, solution, "exact")
        assert checked.feasible
        assert checked.cost == pytest.approx(float(result.cost[b]), rel=1e-9)


def test_counter_based_uniforms_are_uniform_and_keyed():
    keys = rollout_keys(torch.tensor([1, 2], dtype=torch.long), 0, 5000)
    u = step_uniforms(keys, 0)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    # mean 1/2 and variance 1/12 of U(0, 1), within 5 standard errors of 10000 draws
    assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / 10000)
    assert abs(float(u.var()) - 1 / 12) < 0.005
    assert not torch.equal(step_uniforms(keys, 1), u)
    # Rollout k's key does not depend on where the block starts.
    torch.testing.assert_close(rollout_keys(torch.tensor([1]), 3, 2)[0], keys[0, 3:5])
    # Inverse CDF: probability-0 actions are never drawn, mass splits as the probabilities.
    log_probs = torch.tensor([0.25, 0.0, 0.75]).log().expand(1, 5000, 3)
    drawn = sample_with_uniforms(log_probs, u[:1])
    assert not bool((drawn == 1).any())
    assert abs(float((drawn == 2).double().mean()) - 0.75) < 5 * math.sqrt(0.75 * 0.25 / 5000)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("method", "beam"),
        ("augment", 4),
        ("num_z", 0),
        ("expansion", 1),
        ("sgbs_z", 2),
        ("max_rollouts_per_chunk", 0),
    ],
)
def test_decode_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"DecodeConfig.{field}"):
        DecodeConfig(**{field: value})


def test_rollouts_per_chunk_default_follows_the_device_and_a_set_value_wins():
    """The GPU default is the one measured 3x faster on an H200 (docs/how-to/gpu.md)."""
    config = DecodeConfig()
    assert config.max_rollouts_per_chunk is None
    assert config.rollouts_per_chunk(torch.device("cpu")) == 8192
    assert config.rollouts_per_chunk(torch.device("cuda", 1)) == 65536
    assert DecodeConfig(max_rollouts_per_chunk=6).rollouts_per_chunk(torch.device("cuda")) == 6


def test_decode_refuses_a_model_of_another_problem(policy):
    with pytest.raises(ValueError, match="model is for cvrptw"):
        decode(policy, generate_tsp(1, 5, seed=0), DecodeConfig(method="greedy"))


def test_an_instance_decodes_the_same_wherever_it_sits_in_a_folder(policy, data_dir, tmp_path):
    """Seeds derive from an instance's content, not its position: R101 gets the same sampled
    solution first in a folder of three and last in a folder of four with other companions."""
    from linc_core.evaluate import evaluate_policy, load_benchmark

    source = data_dir / "solomon100"
    folders = {"first": ("a_R101", "b_C101", "c_RC201"), "last": ("a_C201", "b_R205", "z_R101")}
    folders["last"] += ("b_RC101",)
    config = DecodeConfig(method="sampling", num_z=4, augment=8, seed=21)
    costs = {}
    for label, names in folders.items():
        folder = tmp_path / label
        folder.mkdir()
        for name in names:
            (folder / f"{name}.txt").write_text((source / f"{name[2:]}.txt").read_text())
        bench = load_benchmark(str(folder))
        truncated = [truncate_customers(i, 20) for i in bench.instances]
        evaluation = evaluate_policy(policy, truncated, config, convention="exact")
        by_name = {row.instance: row.cost for row in evaluation.rows}
        costs[label] = next(cost for name, cost in by_name.items() if "R101" in name.upper())
        assert len(by_name) == len(names)
    assert costs["first"] == costs["last"]
    # ... and it is a real sampled decode: another seed gives another solution.
    other = evaluate_policy(
        policy,
        [truncate_customers(load_benchmark(str(tmp_path / "first")).instances[0], 20)],
        DecodeConfig(method="sampling", num_z=4, augment=8, seed=22),
    )
    assert other.rows[0].cost != costs["first"]


@pytest.mark.parametrize("method", ["sampling", "sgbs"])
def test_a_cpu_decoding_gives_the_freed_heap_back_between_its_chunks(method):
    """Under the tuned allocator 480 MB of freed tensors stay resident; a decoding of four
    chunks gives them back before its second (``trim_between_chunks``): SGBS on 24 Solomon-100
    held 2,583 MiB after three chunks of 8,192 rollouts without it, at most 600 MiB with it."""
    script = f"""
import torch
from linc_core.decoding import DecodeConfig, decode
from linc_core.utils.runtime import resident_bytes, tune_cpu_allocator
from tests.conftest import make_instances, tiny_policy
assert tune_cpu_allocator()
policy, instances = tiny_policy(), make_instances("cvrptw", 4, 10, seed=0)
config = DecodeConfig(method={method!r}, num_z=8, sgbs_z=8, augment=1, max_rollouts_per_chunk=8)
blocks = [torch.ones(2_000_000) for _ in range(60)]  # 8 MB each: in the heap, not mmap'd
del blocks
held = []
decode(policy, instances, config, progress=lambda done: held.append(resident_bytes()))
print(held[0], held[-1])
"""
    first, last = map(int, fresh_python(script).split())
    assert first > last + 400e6, (first, last)  # one row a chunk: four chunks
