"""Named training protocols and variant lists: the settings a study runs every variant under.

A protocol is data: ``TrainConfig`` settings that apply to every variant (never over a switch
the variant sets itself, see :func:`linc_core.presets.variant_configs`) and the training set they
are defined on. ``linc-train --protocol NAME`` and the sweeps' ``train.protocol: NAME`` both read
the definitions here; so do ``ablation.variants: paper`` and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from linc_core.presets import ABLATION_VARIANTS, PRESETS
from linc_core.utils.typed import ConfigError, did_you_mean


@dataclass(frozen=True)
class TrainingProtocol:
    """A named training schedule on a named training set.

    Attributes:
        name: how configs and flags refer to it.
        data: the training set the schedule is defined on (``generated`` fresh instances, or
            ``solomon50``: the 56 Solomon-100 instances cut to their first 50 customers).
        train: ``TrainConfig`` fields; explicit settings of a run win over them, a variant's own
            switches win over both. ``init: reference`` applies to models the reference
            implementation builds; others start from linc's initialisation.
    """

    name: str
    data: Literal["generated", "solomon50"]
    train: Mapping[str, Any] = field(default_factory=dict)


PROTOCOLS: dict[str, TrainingProtocol] = {
    p.name: p
    for p in (
        # linc-train's quick default: a small budget on fresh seeded instances.
        TrainingProtocol(
            "generated",
            "generated",
            MappingProxyType(
                {"num_rollouts": 64, "batch_size": 32, "instances_per_epoch": 640, "epochs": 100}
            ),
        ),
        # The paper's ablation (reference section 5): K = 128, one batch of the 56 instances
        # per epoch, tau 100 -> 0.01 over the first 15%, best-only from 15%, 2000 epochs, from
        # the reference implementation's initial weights for the seed.
        TrainingProtocol(
            "ablation",
            "solomon50",
            MappingProxyType(
                {
                    "num_rollouts": 128,
                    "batch_size": 56,
                    "instances_per_epoch": 56,
                    "epochs": 2000,
                    "tau_start": 100.0,
                    "tau_end": 0.01,
                    "tau_anneal_ratio": 0.15,
                    "best_only_start_ratio": 0.15,
                    "validation_size": 0,
                    "init": "reference",
                }
            ),
        ),
    )
}

# Variant lists a sweep can name instead of listing its variants.
VARIANT_LISTS: dict[str, tuple[str, ...]] = {"paper": ABLATION_VARIANTS}


def protocol_named(name: str) -> TrainingProtocol:
    """``PROTOCOLS[name]``; an unknown name is a ``ConfigError`` naming ``train.protocol``."""
    if name not in PROTOCOLS:
        known, hint = sorted(PROTOCOLS), did_you_mean(str(name), PROTOCOLS)
        raise ConfigError(f"train.protocol: expected one of {known}, got {name!r}{hint}")
    return PROTOCOLS[name]


def variant_list(variants: str | Sequence[str]) -> tuple[str, ...]:
    """The variants of a sweep: a list name of ``VARIANT_LISTS`` or the variants themselves.

    Raises:
        ConfigError: an unknown list name or variant, or a variant named twice.
    """
    if isinstance(variants, str):
        if variants not in VARIANT_LISTS:
            raise ConfigError(
                f"ablation.variants: expected a list of variants or one of "
                f"{sorted(VARIANT_LISTS)}, got {variants!r}" + did_you_mean(variants, VARIANT_LISTS)
            )
        return VARIANT_LISTS[variants]
    found = tuple(variants)
    for variant in found:
        if variant not in PRESETS:
            raise ConfigError(
                f"ablation.variants: expected variants of {sorted(PRESETS)}, got {variant!r}"
                + did_you_mean(str(variant), PRESETS)
            )
    if not found or len(set(found)) != len(found):
        raise ConfigError(f"ablation.variants: expected distinct variants, got {list(found)}")
    return found


__all__ = ["PROTOCOLS", "VARIANT_LISTS", "TrainingProtocol", "protocol_named", "variant_list"]
