"""The trial plan: what one Tune trial runs, resolved once from its config on the worker.

Tune hands each trial a plain mapping (the composed config with the trial's variant, seed or
searched values filled in: Tune needs a mapping for grid search, restore and Optuna).
:meth:`TrialPlan.from_mapping` resolves it once into the run
(:class:`linc_core.runs.plan.RunPlan`: effective model and training configs, data, validation
and evaluation sources) and the platform around it: the resources and the fault injection. The
tracking target (store, experiment, parent run, sweep) is the driver's, handed down with the
mapping, never resolved again here. The trainable then reads the plan and nothing else; the plan's
:meth:`~TrialPlan.params` are what the trial logs to MLflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from linc_core.runs.plan import RunPlan
from orchestration.config.platform import PlatformConfig, trial_label
from orchestration.config.sections import ClusterSpec, FaultSpec
from orchestration.tracking.params import flatten_params
from orchestration.tracking.target import TrackingTarget


@dataclass(frozen=True)
class TrialPlan:
    """The effective settings of one trial (see the module docstring)."""

    run: RunPlan
    tracking: TrackingTarget
    resources: ClusterSpec
    fault: FaultSpec
    label: str = ""  # the values of the tracking target's run_name_keys (a search's parameters)
    trial_number: int | None = None  # a search's trial: its number in the Optuna study

    @classmethod
    def from_config(
        cls, config: PlatformConfig, tracking: TrackingTarget | None = None
    ) -> TrialPlan:
        """The plan of ``config``'s own trial, logging to ``tracking`` (None: resolved here
        from the config, creating a local store)."""
        if tracking is None:
            tracking = TrackingTarget.resolve(config.tracking, config.cluster.storage_path())
        return cls(config.run, tracking, config.cluster, config.fault)

    @classmethod
    def from_mapping(
        cls,
        values: Mapping[str, Any],
        tracking: TrackingTarget | None = None,
        storage: str | None = None,
    ) -> TrialPlan:
        """Validate and resolve a trial's config (Tune's mapping).

        ``tracking`` and ``storage`` (the sweep driver's, decided on every run of the sweep)
        replace what the mapping says: a restored trial's mapping is the one it was first given,
        which may name another store or folder (a moved sweep, a changed ``tracking.uri``), and
        its secrets are masked (what Tune keeps is: :func:`linc_core.utils.secrets.redact`).
        """
        config = PlatformConfig.from_mapping(values)
        if storage is not None:
            cluster = dataclasses.replace(config.cluster, storage=storage)
            config = dataclasses.replace(config, cluster=cluster)
        plan = cls.from_config(config, tracking)
        label = trial_label(values, plan.tracking.run_name_keys)
        return dataclasses.replace(plan, label=label, trial_number=config.tracking.trial_number)

    @property
    def run_name(self) -> str:
        """``full_linc-seed1234``, then a search's values: ``... learning_rate=0.000846``; a
        search's trial by its study number first (runs that differ in their first characters):
        ``#003 learning_rate=0.000846 tau_start=5.85 full_linc-seed1234``."""
        named = f"{self.run.variant}-seed{self.run.train.seed}"
        if self.trial_number is not None:
            return f"#{self.trial_number:03d} {self.label} {named}".replace("  ", " ")
        return f"{named} {self.label}".rstrip()

    @property
    def study_tags(self) -> dict[str, str]:
        """A search's trial run's tags naming its Optuna trial (none outside a search)."""
        if self.trial_number is None:
            return {}
        return {
            "optuna.trial_number": str(self.trial_number),
            "optuna.study": str(self.tracking.sweep),
        }

    def settings(self, in_effect: bool = False) -> dict[str, Any]:
        """The run's effective settings, the resources and the fault injection, nested
        (``in_effect``: without the settings its switches never read)."""
        return self.run.settings(in_effect) | {
            "resources": dataclasses.asdict(self.resources),
            "fault": dataclasses.asdict(self.fault),
            "tracking": {"experiment": self.tracking.experiment, "sweep": self.tracking.sweep},
        }

    def params(
        self, data_id: str | None = None, varied: tuple[str, ...] = (), **extra: Any
    ) -> dict[str, str]:
        """The MLflow params: the settings in effect (plus ``data.id`` and ``extra`` sections)
        flattened to dotted keys; a setting that does not apply (None) is left out.

        ``varied``: config keys that differ between a sweep's trials, left out of the sweep's
        parent run, which is no trial (``model.variant``: the variant and its model; a
        searched ``model.overrides.F``: ``model.F``).
        """
        settings = self.settings(in_effect=True) | extra
        if data_id is not None:
            settings["data"] = settings["data"] | {"id": data_id}
        for key in varied:
            if key == "model.variant":
                settings.pop("variant", None)
                settings.pop("model", None)
                continue
            section, _, name = key.partition(".")
            name = name.removeprefix("overrides.")
            if isinstance(settings.get(section), dict):
                settings[section] = {k: v for k, v in settings[section].items() if k != name}
        return flatten_params(_without_none(settings))


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _without_none(v) if isinstance(v, Mapping) else v
        for k, v in values.items()
        if v is not None
    }


# The settings a trial's numbers follow, by their params' prefixes, but those that change how, not
# what, it computes. A checkpoint also resumes under more epochs, but a finished trial does not
# run again: a sweep resumed so would mix trials of both.
DECIDING = ("task.", "model.", "data.", "train.", "validation.", "evaluation.")
HOW_NOT_WHAT = frozenset({"train.device", "train.compile", "train.replay_chunk"})


def changed_settings(saved: Mapping[str, str], params: Mapping[str, str]) -> list[str]:
    """``KEY=NOW (saved: THEN)`` for every deciding setting of ``params`` (a plan's
    :meth:`TrialPlan.params`) that differs from the same key of ``saved`` (params logged
    before, say by a sweep's parent run); a key only one side has is no change."""
    return [
        f"{key}={now} (saved: {saved[key]})"
        for key, now in sorted(params.items())
        if key.startswith(DECIDING) and key not in HOW_NOT_WHAT and saved.get(key, now) != now
    ]


__all__ = ["DECIDING", "HOW_NOT_WHAT", "TrialPlan", "changed_settings"]
