"""Decoding throughput on Solomon n=100, CPU: z-sampling x8 rollouts/s and SGBS s/instance.

Model: the reference-size CVRPTW full LINC policy (weights seeded, untrained: decoding cost does
not depend on the weights). No peer runs here; the target is the paper's own budget on its GPU
(Solomon-100 table: LINC z = 800 x8 over 56 instances in 6 s = 59,733 rollouts/s; LINC SGBS in
24 s = 0.43 s per instance), so ``ratio`` says how far this CPU run is from that GPU figure.

- ``zsample``: complete rollouts per second of ``decode(method="sampling", augment=8)`` on
  ``instances`` Solomon files (z = 800 full, 64 quick), the default chunk (``ROLLOUTS_PER_CHUNK``).
- ``sgbs``: seconds per instance of ``decode(method="sgbs")`` with beam 4, expansion 4,
  z 128, augmentation 8 (quick: augmentation 1, one instance).
"""

from __future__ import annotations

import torch

from linc_core.config import ModelConfig
from linc_core.decoding import DecodeConfig, decode
from linc_core.instances import Instance, read_solomon
from linc_core.instances.benchmarks import data_dir
from linc_core.model import LincPolicy
from linc_core.utils.runtime import peak_rss_gb

PAPER_ROLLOUTS_PER_SECOND = 56 * 800 * 8 / 6.0
PAPER_SGBS_SECONDS = 24.0 / 56


def _solomon(names: tuple[str, ...]) -> Instance:
    folder = data_dir() / "solomon100"
    return Instance.concat([read_solomon(folder / f"{n}.txt") for n in names])


def bench_decode(quick: bool) -> list[dict]:
    torch.manual_seed(0)
    policy = LincPolicy(ModelConfig()).eval()
    names = ("C101", "R101") if quick else ("C101", "R101", "RC101", "R201")
    instances = _solomon(names)
    num_z = 64 if quick else 800
    sampling = decode(
        policy, instances, DecodeConfig(method="sampling", num_z=num_z, augment=8, seed=0)
    )
    peak_gb = peak_rss_gb()  # the bench process's peak so far, decoding included
    sgbs_instances = instances.select([0]) if quick else instances
    augment = 1 if quick else 8
    sgbs = decode(policy, sgbs_instances, DecodeConfig(method="sgbs", augment=augment, seed=0))
    sgbs_seconds = sgbs.seconds / sgbs_instances.batch_size
    return [
        {
            "name": (
                f"decode zsample n=100 z={num_z} x8, {len(names)} Solomon inst, rollouts/s "
                f"(peak RSS {peak_gb:.2f} GB)"
            ),
            "ours": sampling.rollouts_per_second,
            "ratio": sampling.rollouts_per_second / PAPER_ROLLOUTS_PER_SECOND,
            "target": PAPER_ROLLOUTS_PER_SECOND,
        },
        {
            "name": (
                f"decode sgbs n=100 b4 e4 z128 x{augment}, s/instance "
                f"({sgbs.rollouts} sims / {sgbs_instances.batch_size} inst)"
            ),
            "ours": sgbs_seconds,
            "ratio": sgbs_seconds / PAPER_SGBS_SECONDS,
            "target": PAPER_SGBS_SECONDS,
        },
    ]
