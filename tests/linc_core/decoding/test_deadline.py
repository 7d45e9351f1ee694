"""A decode's deadline (``linc_core.decoding.deadline``): past it, decoding stops within one
decision step, whatever the method; before it, the answer is the same as without one."""

from __future__ import annotations

import time

import pytest
import torch

from linc_core.decoding import DeadlineExceeded, DecodeConfig, decode
from linc_core.decoding.deadline import with_deadline
from linc_core.evaluate import evaluate_policy
from linc_core.train.data import generate
from tests.conftest import tiny_policy


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


@pytest.mark.parametrize("method", ["sampling", "greedy", "multistart", "sgbs"])
def test_a_decode_past_its_deadline_stops_and_one_before_it_is_unchanged(policy, method):
    instances = generate("cvrptw", 2, 8, seed=3)
    config = DecodeConfig(method=method, num_z=4, augment=1, sgbs_z=4)
    with pytest.raises(DeadlineExceeded, match="stopped at its deadline"):
        decode(policy, instances, config, deadline=time.monotonic() - 1.0)
    free = decode(policy, instances, config)
    timed = decode(policy, instances, config, deadline=time.monotonic() + 600)
    assert torch.equal(free.cost, timed.cost) and free.routes == timed.routes


def test_a_long_decode_stops_within_a_step_of_its_deadline(policy):
    # ~100 customers x 4096 rollouts: tens of seconds of decoding on a shared core
    instance = generate("cvrptw", 1, 100, seed=4)
    config = DecodeConfig(method="sampling", num_z=512, augment=8)
    steps: list[float] = []

    def count(done: int) -> None:  # after each chunk; the check itself is per decision
        steps.append(time.monotonic())

    began = time.monotonic()
    with pytest.raises(DeadlineExceeded) as stopped:
        evaluate_policy(policy, instance, config, progress=count, deadline=began + 0.5)
    took = time.monotonic() - began
    assert not steps  # it stopped inside the first chunk, between two decisions
    assert stopped.value.seconds_over < 2.0 and took < 3.0


def test_the_choice_rule_checks_the_clock_before_each_decision():
    calls: list[int] = []

    def choose(state, step):
        calls.append(step)
        return step

    assert with_deadline(choose, None) is choose
    in_time = with_deadline(choose, time.monotonic() + 600)
    assert in_time(None, 7) == 7 and calls == [7]
    with pytest.raises(DeadlineExceeded):
        with_deadline(choose, time.monotonic() - 0.1)(None, 8)
    assert calls == [7]  # the late decision was never taken
