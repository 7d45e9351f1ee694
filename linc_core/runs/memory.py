"""How much memory a run needs: an estimate from its plan, for schedulers.

A scheduler that knows what a run needs can refuse to start a second one on a node it would not
fit (Ray Tune's ``memory`` resource). The estimate adds, in bytes:

* a process base (Python, torch, and a Ray worker's and MLflow's imports): ``BASE_BYTES``;
* the parameters with their gradients and Adam moments: ``16 x P``;
* a training step: a term per instance, ``ALPHA x B (n+1)^2 D x 4`` (encoder activations and
  attention, kept for the backward pass), and a term per rollout, ``BETA x B K (n+1) D x 4``
  (the rollout and the replay chunks); the ``mlp`` scorer adds ``MLP_ROWS x B K (n+1) H x 4``
  (its candidate MLP over every rollout and candidate);
* the largest decoding (validation, and each decoding of the final evaluation):
  ``DECODE_INSTANCE x R (m+1)^2 D x 4`` for the R rows (instances x augmentations) decoded at
  once and ``DECODE_ROW x R k (m+1) D x 4`` for their k rollouts each: the decoders' own chunks
  (``DecodeConfig.chunk_shape``: at most ``ROLLOUTS_PER_CHUNK`` rollouts for the run's device,
  R = chunk // k rows of k = K sampled rollouts, POMO starts, or SGBS's width), m the evaluated
  instances' size (a named set's largest, ``largest_customers``, bounded by ``max_customers``);

times ``SAFETY``. With B instances per step, K rollouts, n customers, embedding D, scorer width
H. The constants were fitted to the growth of peak resident memory measured on CPU (torch 2.13,
one thread, CVRPTW, D = 128, 6 encoder layers; the fitted terms are upper bounds of these
points):

================  ====  ====  =====  ====================  =================
run               n     B     K      measured growth (MiB)  estimate (MiB)
================  ====  ====  =====  ====================  =================
full_linc step    50    16    64     162                   178
full_linc step    50    32    64     351                   355
full_linc step    50    16    128    223                   241
full_linc step    100   16    64     423                   573
naive_mlp step    50    16    64     502                   535
decode x8 aug     50    8     32     85                    89
decode x8 aug     50    16    32     169                   179
================  ====  ====  =====  ====================  =================

The decoding term alone (``decoding_bytes``), with the heap's growth over a long decoding
(``DECODE_GROWTH``), sizes ``linc-eval``'s CPU chunks to the memory the process has left, and
a Tune trial's final evaluation's to what its process has left of its reservation
(``chunk_under_limit``, ``chunk_within``), and ``linc-train`` holds a CPU run's estimate, with the
process's own resident memory as its base, against what the process may use
(:mod:`linc_core.runs.memory_limit`). The validation term alone (``validation_bytes``) is part of
the headroom a Tune trial keeps below its reservation as its heap grows
(``orchestration.trial.resources.trial_heap_ceiling``).

A trial reserves the estimate rounded up to 0.25 GiB: for ``preset=cpu-repro`` (n = 50,
B = 56, K = 128) 2.5 GiB for ``full_linc`` and 6.25 GiB for ``naive_mlp``; for
``preset=main-cpu`` 2.25 GiB for ``full_linc`` and 3.25 GiB for ``naive_mlp`` (its largest
chunk: SGBS's 64 rows of 128 rollouts on Solomon-100), for ``main-cpu-cvrp`` and
``main-cpu-tsp`` 3.75 GiB for ``full_linc`` (instances of up to 200 customers)
(``cluster.memory_per_trial_gb`` overrides the estimate). Before the decoding term knew the
chunks, ``preset=main-cpu``'s evaluation (the 56 Solomon-100 at z=800 x8: 358,400 rollouts,
decoded 16,384 at a time then) was taken as decoded at once: 10 GiB per trial, so a 2-core
machine with 17 GiB for Ray ran its trials one at a time instead of two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from linc_core.decoding.config import DecodeConfig, best_of_k_chunk
from linc_core.evaluate.benchmark_sets import largest_customers
from linc_core.instances.batch import Instance
from linc_core.problems.spec import problem_spec
from linc_core.runs.plan import RunPlan
from linc_core.utils.runtime import resident_bytes

BASE_BYTES = 1 << 30
SAFETY = 1.5
ALPHA = 5.6
BETA = 2.5
MLP_ROWS = 14.0
DECODE_INSTANCE = 0.85
DECODE_ROW = 0.4
FLOAT = 4
# The final evaluation set when its size is not in the plan (a data set's count is read only
# by the trial): the Solomon-50 set's size.
DEFAULT_EVALUATION_SIZE = 56


def parameter_count(plan: RunPlan) -> int:
    """The policy's parameter count, from a policy built on the CPU.

    Not on the meta device: entering ``torch.device("meta")`` imports ``torch._dynamo``, about
    a second and a half on a sweep driver's critical path, where the policy itself (a few MB)
    takes milliseconds. The global random stream is left as it was.
    """
    import torch

    from linc_core.model.policy import LincPolicy

    with torch.random.fork_rng(devices=[]):
        policy = LincPolicy(plan.model)
    return sum(p.numel() for p in policy.parameters())


def estimate_run_memory(plan: RunPlan, workers: int = 1, base_bytes: int = BASE_BYTES) -> int:
    """Bytes one process of the run needs (``workers`` data-parallel processes share each
    batch; see the module docstring for the terms and their measurements).

    Args:
        base_bytes: the process's own memory before the run: ``BASE_BYTES`` for a Ray worker
            not yet started; a running command passes what it holds
            (:func:`linc_core.utils.runtime.resident_bytes`).
    """
    model, train = plan.model, plan.train
    nodes, width = plan.data.num_customers + 1, model.embedding_dim
    batch, rollouts = train.batch_size / workers, train.num_rollouts
    step = ALPHA * batch * nodes * nodes * width + BETA * batch * rollouts * nodes * width
    step += _scorer_floats(plan, workers)
    decode = _validation_floats(plan)
    evaluation = plan.evaluation
    if evaluation.source != "none":
        customers = _evaluated_customers(plan)
        count = plan.validation.size if evaluation.source == "validation" else None
        all_rows = (count or DEFAULT_EVALUATION_SIZE) * evaluation.augment
        has_depot = problem_spec(plan.data.problem).has_depot
        for decoding in evaluation.decodings:
            config = DecodeConfig.for_evaluation(
                decoding, evaluation.rollouts, evaluation.augment, 0, model.z_dim
            )
            evaluated_nodes = customers + has_depot
            rows, per_row = config.chunk_shape(
                customers, evaluated_nodes, model.z_dim, train.device
            )
            floats = _decode_floats(min(rows, all_rows), per_row, evaluated_nodes, width)
            decode = max(decode, floats)
    working = FLOAT * (step + decode)
    return int(base_bytes + 16 * parameter_count(plan) + SAFETY * working)


def validation_bytes(plan: RunPlan) -> int:
    """Bytes the run's validation decoding holds at once (the estimate's term for it, with its
    safety factor): K greedy rollouts for each of the validation set's instances (the training
    set's, for ``validation="training_set"``)."""
    return int(SAFETY * FLOAT * _validation_floats(plan))


def scorer_bytes(plan: RunPlan, workers: int = 1) -> int:
    """Bytes the ``mlp`` scorer's candidate MLP holds in a training step (the estimate's term
    for it, with its safety factor; 0 for other scorers): tensors of ``[B, K, n+1, H]``, each
    far above the allocator's mmap threshold, so given back as they are freed and taken afresh
    by every step, not kept in the heap between steps."""
    return int(SAFETY * FLOAT * _scorer_floats(plan, workers))


def _scorer_floats(plan: RunPlan, workers: int) -> float:
    model, train = plan.model, plan.train
    if model.scorer != "mlp":
        return 0.0
    batch, nodes = train.batch_size / workers, plan.data.num_customers + 1
    return MLP_ROWS * batch * train.num_rollouts * nodes * model.scorer_hidden_dim


def _validation_floats(plan: RunPlan) -> float:
    chunk = DecodeConfig().rollouts_per_chunk(plan.train.device)
    rows, per_row = best_of_k_chunk(plan.train.num_rollouts, chunk)  # K greedy rollouts a row
    nodes = plan.data.num_customers + 1
    validation = plan.validation
    # the one fixed training set (Solomon-50) validates on all its instances
    count = DEFAULT_EVALUATION_SIZE if validation.source == "training_set" else validation.size
    return _decode_floats(min(rows, count), per_row, nodes, plan.model.embedding_dim)


# A long decoding's peak rises past its first chunk's: the packed widths change from decision to
# decision and the heap keeps the holes they leave (glibc, with or without tune_cpu_allocator;
# the live tensors stay the same), within a chunk as well as across them. Over the 56
# Solomon-100 (one thread, tuned allocator, the heap trimmed between chunks, 2026-11-29) peak
# resident memory rose above the decoding's start by 2.8 times the chunk's estimate for
# sampling z=800 x8 at 4,096 rollouts a chunk (422 MiB), 2.0 times at 8,192 (593 MiB), and by
# 1.4 times for SGBS at 8,192 (918 MiB; 3.4 times at 16,384, 4,366 MiB, within its chunks); on
# a Xeon (2026-12-07) SGBS on 24 of them rose 2.5 times at 8,192 (1,591 MiB), 1.4 at 4,096;
# linc-eval at 8,192 in a 768 MiB cgroup was killed 106 s in when only a chunk's own tensors
# were counted. A chunk is sized for its estimate and this growth: 4 times its estimate.
DECODE_GROWTH = 3.0

# The least chunk linc-eval halves to: 256 rollouts at n = 100 hold about 15 MB (one row's
# encoding included, with the safety factor), a small part of linc-eval's own 0.45-0.5 GiB.
MIN_ROLLOUTS_PER_CHUNK = 256


def decoding_bytes(config: DecodeConfig, customers: int, nodes: int, z_dim: int, width: int) -> int:
    """Bytes one chunk of ``config``'s decoding holds on CPU (the estimate's decoding term, with
    its safety factor) for instances of ``customers`` customers (``nodes`` nodes)."""
    rows, per_row = config.chunk_shape(customers, nodes, z_dim, "cpu")
    return int(SAFETY * FLOAT * _decode_floats(rows, per_row, nodes, width))


def chunk_within(
    config: DecodeConfig, customers: int, nodes: int, z_dim: int, width: int, free_bytes: int
) -> int | None:
    """Rollouts per chunk for a CPU decoding that must fit in ``free_bytes``: None when
    ``config``'s own chunk fits, else its chunk halved until one fits (results do not depend
    on the chunk), at least ``MIN_ROLLOUTS_PER_CHUNK``. A chunk fits when its estimate and the
    heap's growth over a long decoding (``DECODE_GROWTH`` times it) do."""

    def fits(chosen: DecodeConfig) -> bool:
        chunk_bytes = decoding_bytes(chosen, customers, nodes, z_dim, width)
        return (1 + DECODE_GROWTH) * chunk_bytes <= free_bytes

    chunk = config.rollouts_per_chunk("cpu")
    if fits(config):
        return None
    while chunk > MIN_ROLLOUTS_PER_CHUNK:
        chunk = max(chunk // 2, MIN_ROLLOUTS_PER_CHUNK)
        if fits(replace(config, max_rollouts_per_chunk=chunk)):
            break
    return chunk


# Of the memory a decoding process has left, the share kept back from its chunks (for what the
# process holds after them: the rows and solutions, linc-eval's plots).
DECODE_HEADROOM = 0.25


def chunk_under_limit(
    config: DecodeConfig,
    instances: Sequence[Instance],
    limit_bytes: int,
    *,
    width: int,
    z_dim: int,
) -> int | None:
    """Rollouts per chunk for decoding ``instances`` on CPU in a process that may hold
    ``limit_bytes`` (``linc-eval``'s memory limit, a Tune trial's reservation), for a model of
    embedding ``width`` and ``z_dim``: ``chunk_within`` for the largest instance in what the
    process has left (less ``DECODE_HEADROOM`` of it). None when ``config``'s own chunk fits,
    or when its chunk is the user's (``max_rollouts_per_chunk``) or there are no instances."""
    if config.max_rollouts_per_chunk is not None or not instances:
        return None
    largest = max(instances, key=lambda instance: instance.num_nodes)
    free = int((limit_bytes - resident_bytes()) * (1 - DECODE_HEADROOM))
    return chunk_within(config, largest.num_customers, largest.num_nodes, z_dim, width, free)


def _decode_floats(rows: int, rollouts: int, nodes: int, width: int) -> float:
    """Floats one chunk of a decoding holds: its ``rows`` are encoded together and roll out
    ``rollouts`` each (the decoders' chunks: ``DecodeConfig.chunk_shape``)."""
    encoded = DECODE_INSTANCE * rows * nodes * nodes * width
    return encoded + DECODE_ROW * rows * rollouts * nodes * width


def _evaluated_customers(plan: RunPlan) -> int:
    """Customers of the largest instance the final evaluation decodes: a named set's
    (``largest_customers``; a folder's is not known before it is read: the training size),
    bounded by ``max_customers``."""
    evaluation = plan.evaluation
    largest = plan.data.num_customers
    if evaluation.source == "benchmark":
        largest = largest_customers(evaluation.uri or "") or largest
    elif evaluation.source == "solomon50":
        largest = largest_customers("solomon50") or largest
    if evaluation.max_customers is not None:
        largest = min(largest, evaluation.max_customers)
    return largest


__all__ = [
    "BASE_BYTES",
    "DECODE_GROWTH",
    "DECODE_HEADROOM",
    "MIN_ROLLOUTS_PER_CHUNK",
    "chunk_under_limit",
    "chunk_within",
    "decoding_bytes",
    "estimate_run_memory",
    "parameter_count",
    "scorer_bytes",
    "validation_bytes",
]
