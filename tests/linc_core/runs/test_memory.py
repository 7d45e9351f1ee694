"""The memory estimate a scheduler reserves per run: its decoding term is one chunk's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from linc_core.decoding.config import ROLLOUTS_PER_CHUNK, DecodeConfig, best_of_k_chunk
from linc_core.evaluate.benchmark_sets import largest_customers
from linc_core.instances.benchmarks import BENCHMARKS, list_instances
from linc_core.runs.memory import (
    DECODE_GROWTH,
    DECODE_HEADROOM,
    DECODE_INSTANCE,
    DECODE_ROW,
    MIN_ROLLOUTS_PER_CHUNK,
    _decode_floats,
    chunk_under_limit,
    chunk_within,
    decoding_bytes,
    validation_bytes,
)
from linc_core.runs.plan import DataSource, resolve_run
from linc_core.utils.runtime import resident_bytes
from tests.conftest import make_instances


def test_a_decoding_holds_one_chunk_of_rows_and_rollouts() -> None:
    """The 56 Solomon-100 at z=800 x8 on CPU: 448 rows of 800 rollouts, decoded 10 rows
    (8,000 rollouts) at a time, by hand; a K past the chunk goes one row at a time, in blocks
    of the chunk (best_of_k's)."""
    chunk = ROLLOUTS_PER_CHUNK["cpu"]
    assert chunk == 8192
    assert best_of_k_chunk(800, chunk) == (10, 800)
    assert best_of_k_chunk(100_000, chunk) == (1, chunk)
    expected = DECODE_INSTANCE * 10 * 101 * 101 * 128 + DECODE_ROW * 10 * 800 * 101 * 128
    assert _decode_floats(10, 800, 101, 128) == pytest.approx(expected, rel=1e-12)


def test_a_validation_decodes_k_greedy_rollouts_of_each_of_its_instances() -> None:
    """32 validation instances of 50 customers, K = 64 on CPU: all 32 rows at once (2,048
    rollouts), by hand, with the safety factor (1.5) and 4 bytes a float; none without a set."""
    data = DataSource("generated", "cvrptw", 50)
    plan = resolve_run("full_linc", data, train={"num_rollouts": 64, "validation_size": 32})
    floats = DECODE_INSTANCE * 32 * 51 * 51 * 128 + DECODE_ROW * 32 * 64 * 51 * 128
    assert validation_bytes(plan) == int(1.5 * 4 * floats)
    unvalidated = resolve_run("full_linc", data, train={"validation_size": 0})
    assert validation_bytes(unvalidated) == 0
    solomon50 = DataSource("solomon50", "cvrptw", 50)
    on_training = resolve_run(
        "full_linc", solomon50, train={"num_rollouts": 64}, validation="training_set"
    )  # all 56 of the fixed set's instances (256 rows of 64 rollouts fit one chunk)
    floats = DECODE_INSTANCE * 56 * 51 * 51 * 128 + DECODE_ROW * 56 * 64 * 51 * 128
    assert validation_bytes(on_training) == int(1.5 * 4 * floats)


def test_each_evaluation_decoding_is_sized_by_the_decoders_own_chunks() -> None:
    """The 56 Solomon-100 x8 on CPU (8,192 rollouts per chunk): sampling z=800 holds 10 rows
    of 800; SGBS (from 128 greedy z-rollouts, beam 4 x expansion 4) 64 rows of 128; POMO's
    multistart 81 rows of its 100 starts, and its SGBS 81 rows of 100 starts."""
    for decoding, z_dim, shape in [
        ("sampling", 16, (10, 800)),
        ("sgbs", 16, (64, 128)),
        ("sampling", 0, (81, 100)),  # a model without z decodes its POMO starts
        ("sgbs", 0, (81, 100)),
    ]:
        config = DecodeConfig.for_evaluation(decoding, 800, 8, 0, z_dim)
        assert config.chunk_shape(100, 101, z_dim, "cpu") == shape, (decoding, z_dim)
    assert DecodeConfig(num_z=800).chunk_shape(100, 101, 16, "cuda:0") == (81, 800)


def test_the_largest_instance_of_each_named_set_is_declared(data_dir) -> None:
    """What the estimate reads without reading the set, checked against the shipped files
    (the DIMENSION of a .vrp counts the depot, of a .tsp the cities)."""
    for name, benchmark in BENCHMARKS.items():
        if benchmark.pattern == "*.txt":  # Solomon: 100 customer lines after the depot's
            assert largest_customers(name) == 100
            continue
        depot = 1 if benchmark.problem != "tsp" else 0
        sizes = []
        for path in list_instances(name, data_dir):
            with path.open() as handle:
                line = next(li for li in handle if li.upper().startswith("DIMENSION"))
            sizes.append(int(line.split(":")[-1]) - depot)
        assert largest_customers(name) == max(sizes), name
    assert largest_customers("solomon50") == 50
    assert largest_customers("synthetic-cvrp-70") == 70
    assert largest_customers("/some/folder") is None


def test_a_chunk_is_halved_until_its_decoding_fits() -> None:
    """Solomon-100 at z=800 x8 on CPU, by hand: the default chunk holds 10 rows of 800 (1.5 x 4
    bytes x (0.85 x 10 x 101^2 x 128 + 0.4 x 10 x 800 x 101 x 128) = 315 MB); 5 rows at 4,096,
    2 at 2,048, then one row in blocks of the chunk; never under 256 rollouts."""
    config = DecodeConfig(num_z=800, augment=8)

    def by_hand(rows: int, rollouts: int) -> int:
        floats = DECODE_INSTANCE * rows * 101**2 * 128 + DECODE_ROW * rows * rollouts * 101 * 128
        return int(1.5 * 4 * floats)

    whole = decoding_bytes(config, 100, 101, 16, 128)
    assert whole == by_hand(10, 800) and 310e6 < whole < 320e6
    assert DECODE_GROWTH == 3.0  # a chunk needs 4 times its estimate

    def chunk(free: int) -> int | None:
        return chunk_within(config, 100, 101, 16, 128, free)

    assert chunk(4 * whole) is None
    assert chunk(4 * whole - 1) == 4096
    assert chunk(4 * by_hand(5, 800) - 1) == 2048
    assert chunk(4 * by_hand(2, 800)) == 2048  # 2 rows of 800
    assert chunk(4 * by_hand(1, 800)) == 1024  # 1 row of 800
    assert chunk(4 * by_hand(1, 512)) == 512  # blocks of 512
    assert chunk(0) == MIN_ROLLOUTS_PER_CHUNK == 256


def test_a_set_is_chunked_for_its_largest_instance_in_what_the_process_has_left() -> None:
    """``chunk_under_limit``: of the limit less what this process holds, a quarter is kept
    back (``DECODE_HEADROOM``); the largest of the set's instances (100 customers beside 20)
    sizes the chunk. A user's chunk and an empty set are left alone."""
    assert DECODE_HEADROOM == 0.25
    config = DecodeConfig(num_z=800, augment=8)
    instances = [make_instances("cvrptw", 1, 20, seed=1), make_instances("cvrptw", 1, 100, seed=2)]
    whole = decoding_bytes(config, 100, 101, 16, 128)
    margin = 64 << 20  # what this process may take or give back between two readings
    model = {"width": 128, "z_dim": 16}

    def limit_leaving(free: int) -> int:  # the limit that leaves ``free`` for the chunks
        return resident_bytes() + int(free / (1 - DECODE_HEADROOM))

    assert chunk_under_limit(config, instances, limit_leaving(4 * whole + margin), **model) is None
    assert chunk_under_limit(config, instances, limit_leaving(4 * whole - margin), **model) == 4096
    # sized for the 20-customer instance alone, the default chunk would fit
    assert chunk_within(config, 20, 21, 16, 128, 4 * whole - margin) is None
    chosen = replace(config, max_rollouts_per_chunk=512)
    assert chunk_under_limit(chosen, instances, 0, **model) is None
    assert chunk_under_limit(config, [], 0, **model) is None
