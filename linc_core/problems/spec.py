"""What linc knows about one routing problem, in one place: :class:`ProblemSpec`, and the
registry every consumer reads it from.

A problem lives in a folder ``linc_core/problems/<name>/`` (its environment, its generator) whose
``__init__`` builds one ``ProblemSpec`` and registers it. Nothing else in linc names a problem:
the consumers look the spec up by ``instance.problem`` or ``config.problem``:

==========================  ==========================================================
spec field                  read by
==========================  ==========================================================
``has_depot``               ``Instance`` (customer count), the encoder, the rollout start,
                            the solution format (routes or one tour)
``instance_fields``,        ``Instance`` (the extra tensors), the Parquet layout
``extra_fields``            (:mod:`linc_core.instances.parquet`)
``check_data``              :func:`linc_core.instances.validate_instance` (every reader)
``file_formats``            :mod:`linc_core.instances.any_file`, the benchmark sets
``env``                     :func:`make_env`, hence training, decoding, the diagnostics
``consequence_features``,   ``ModelConfig`` (which features exist, which are centred),
``relative_features``       the environments' ``feature_names``
``summary``                 ``ModelConfig.summary_stats`` (the partial step summary r_t)
``context_scalars``,        the decoder's query (``linc_core.model.decoder``)
``first_node_query``
``node_features``           the encoder's inputs (``linc_core.model.features``)
``generate``,               the training data (``linc_core.train.data.generate``), a
``generator_config``        generated data set's identity (``orchestration.data``)
``verify``                  :func:`linc_core.verify.verify_instance`
``pyvrp_fleet``             :func:`linc_core.evaluate.pyvrp_solver.build_model`
``cost_convention``         :func:`linc_core.verify.convention_for` of the bare name
``model_defaults``          ``ModelConfig.for_problem``
==========================  ==========================================================

The built-in problems (``cvrptw``, ``cvrp``, ``tsp``) are imported on first use, so reading a
spec never loads what the consumers are built from (the model, PyVRP); a problem defined
elsewhere (a notebook, a test) joins with :func:`register_problem` and is then read through the
same registry. Adding a problem: docs/tutorials/add_a_problem.py;
``tests/linc_core/problems/test_extra_problem.py`` registers one (CVRP with a route-length
limit) from one module and trains, decodes and verifies it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Annotated, Any, NamedTuple

from linc_core.utils.typed import OneOfNames, did_you_mean

# The built-in problems, each the package that registers it (imported on first use).
BUILTIN_PROBLEMS: tuple[str, ...] = ("cvrptw", "cvrp", "tsp")
STANDARD_FIELDS: tuple[str, ...] = (
    "locs",
    "grid_size",
    "demand",
    "capacity",
    "time_windows",
    "service_time",
    "travel_time_scale",
)


class FileFormat(NamedTuple):
    """A benchmark file format a problem's instances come in: its file suffix (lower case), its
    reader (``path -> B = 1 Instance``, validated) and its name in messages."""

    suffix: str
    read: Callable[..., Any]
    title: str


@dataclass(frozen=True)
class ProblemSpec:
    """One routing problem, as every part of linc needs it (see the module docstring).

    Attributes:
        name: the problem's name (``Instance.problem``, ``ModelConfig.problem``).
        has_depot: node 0 is a depot and a solution is routes of customers ``1..N-1``; else
            a solution is one closed tour over all N nodes, started at node 0.
        instance_fields: the ``Instance`` fields the problem's data carries, in Parquet column
            order (``locs`` and ``grid_size`` first); the others keep the ``Instance``
            defaults (demand 0, capacity inf, windows ``[0, inf]``, service 0, alpha 1).
        extra_fields: tensors beyond ``Instance``'s own, in ``Instance.extras``: name -> values
            per node (0: one value per instance ``[B]``, 1: ``[B, N]``, w: ``[B, N, w]``);
            stored as float32 Parquet columns after ``instance_fields``.
        env: ``env(instance, num_rollouts, **options) -> RoutingEnv``.
        consequence_features: the columns of ``env.consequences`` (the LINC candidate table).
        relative_features: those that are differences of one-step outcomes (may be centred).
        summary: the partial step summary r_t: (statistic over F, feature) pairs after |F|/n.
        context_scalars: S, the scalars of ``env.decoder_context`` the decoder's query reads
            (``load``, then ``elapsed``).
        first_node_query: the query adds ``W_first E_first`` (a tour's first node: TSP).
        node_features: ``(instance, time_scale [B]) -> [B, n, F]`` per-customer encoder inputs
            after the scaled coordinates (``F = node_feature_width``; None: coordinates only).
        node_feature_width: F.
        generate: ``(batch, num_customers, seed, options) -> Instance``, the training
            generator, seeded; ``options`` is the generator's config (None: its default).
        generator_config: that default config (a dataclass; None: the generator takes none),
            part of a generated data set's identity.
        verify: ``(instance, index, routes, convention) -> VerifyResult``, the independent
            check of a solution (:mod:`linc_core.verify`).
        check_data: ``(instance, row, source) -> None``, the problem's data checks after the
            common ones (finite coordinates, a customer); raises ``InstanceError``.
        pyvrp_fleet: ``(model, locations, instance, index, scale) -> None``: the depot,
            clients and vehicle types of a PyVRP model (None: no PyVRP reference).
        cost_convention: the distance convention of the problem's generated instances.
        file_formats: benchmark formats whose files hold this problem: name -> FileFormat.
        model_defaults: ``ModelConfig`` values of the problem's reference model.
        generated_sizes: the sizes (customers) ``generate`` makes without options (CVRP: those
            with a standard capacity); None: any size. A run of another size is refused when it
            is planned, not by its generator in every trial.
    """

    name: str
    has_depot: bool
    instance_fields: tuple[str, ...]
    env: Callable[..., Any]
    consequence_features: tuple[str, ...]
    relative_features: tuple[str, ...]
    summary: tuple[tuple[str, str], ...]
    context_scalars: int
    generate: Callable[..., Any]
    verify: Callable[..., Any]
    node_features: Callable[..., Any] | None = None
    node_feature_width: int = 0
    first_node_query: bool = False
    generator_config: Any = None
    extra_fields: Mapping[str, int] = field(default_factory=dict)
    check_data: Callable[..., None] | None = None
    pyvrp_fleet: Callable[..., None] | None = None
    cost_convention: str = "exact"
    file_formats: Mapping[str, FileFormat] = field(default_factory=dict)
    model_defaults: Mapping[str, Any] = field(default_factory=dict)
    generated_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        where = f"problem {self.name!r}"
        unknown = [f for f in self.instance_fields if f not in STANDARD_FIELDS]
        if self.instance_fields[:2] != ("locs", "grid_size") or unknown:
            raise ValueError(
                f"{where}: instance_fields must start with locs, grid_size and name Instance "
                f"fields {STANDARD_FIELDS}, got {self.instance_fields}"
            )
        clash = set(self.extra_fields) & {*STANDARD_FIELDS, "name", "names", "problem"}
        if clash or any(width < 0 for width in self.extra_fields.values()):
            raise ValueError(f"{where}: extra_fields {dict(self.extra_fields)} (new names, >= 0)")
        for kind, names in (
            ("relative_features", self.relative_features),
            ("summary", tuple(feature for _, feature in self.summary)),
        ):
            missing = [n for n in names if n not in self.consequence_features]
            if missing:
                raise ValueError(f"{where}: {kind} names {missing}, not consequence features")
        if (self.node_features is None) != (self.node_feature_width == 0):
            raise ValueError(f"{where}: node_features and node_feature_width go together")


_REGISTERED: dict[str, ProblemSpec] = {}
PROBLEMS: Mapping[str, ProblemSpec] = MappingProxyType(_REGISTERED)
"""The problems registered so far (the built-ins join on first use: read through
:func:`problem_spec` and :func:`problem_names`)."""


def problem_names() -> tuple[str, ...]:
    """Every problem linc knows: the built-ins, then the registered ones."""
    return (*BUILTIN_PROBLEMS, *(n for n in _REGISTERED if n not in BUILTIN_PROBLEMS))


def problem_spec(name: str) -> ProblemSpec:
    """The spec of problem ``name``.

    Raises:
        ValueError: an unknown name, in one line naming the known ones.
    """
    spec = _REGISTERED.get(name)
    if spec is None and name in BUILTIN_PROBLEMS:
        import_module(f"linc_core.problems.{name}")  # registers it
        spec = _REGISTERED[name]
    if spec is None:
        known = problem_names()
        hint = did_you_mean(str(name), known)
        raise ValueError(f"unknown problem {name!r}{hint}; known problems: {', '.join(known)}")
    return spec


def register_problem(spec: ProblemSpec) -> ProblemSpec:
    """Make ``spec`` known to every part of linc; returns it.

    Raises:
        ValueError: another spec of that name is registered already.
    """
    held = _REGISTERED.get(spec.name)
    if held is not None and held is not spec:
        raise ValueError(f"problem {spec.name!r} is registered already")
    _REGISTERED[spec.name] = spec
    return spec


def unregister_problem(name: str) -> None:
    """Forget a registered problem that is not built in (a test's, a notebook's)."""
    if name in BUILTIN_PROBLEMS:
        raise ValueError(f"problem {name!r} is built in")
    _REGISTERED.pop(name, None)


def make_env(instance: Any, num_rollouts: int, **options: Any) -> Any:
    """The environment of ``instance.problem`` over ``num_rollouts`` rollouts per instance.

    Args:
        options: environment options (``enforce_depot_return`` for CVRPTW).
    """
    return problem_spec(instance.problem).env(instance, num_rollouts, **options)


class SpecTable(Mapping[str, Any]):
    """A read-only ``problem -> spec.<attribute>`` table over the registry (the tables linc
    had before the specs, ``CONSEQUENCE_FEATURES["cvrp"]``, read from the specs)."""

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def __getitem__(self, name: str) -> Any:
        if name not in problem_names():
            raise KeyError(name)
        return getattr(problem_spec(name), self.attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(problem_names())

    def __len__(self) -> int:
        return len(problem_names())


# What linc kept as tables of problems before the specs, read from the specs.
CONSEQUENCE_FEATURES: Mapping[str, tuple[str, ...]] = SpecTable("consequence_features")
RELATIVE_FEATURES: Mapping[str, tuple[str, ...]] = SpecTable("relative_features")
PARTIAL_SUMMARY: Mapping[str, tuple[tuple[str, str], ...]] = SpecTable("summary")
CONTEXT_SCALARS: Mapping[str, int] = SpecTable("context_scalars")

# One type for a problem's name everywhere (configs, instances, data sets): a str naming a
# known problem. Not a Literal: a registered problem must pass every config's check too.
ProblemName = Annotated[str, OneOfNames(problem_names)]

__all__ = [
    "BUILTIN_PROBLEMS",
    "CONSEQUENCE_FEATURES",
    "CONTEXT_SCALARS",
    "PARTIAL_SUMMARY",
    "RELATIVE_FEATURES",
    "PROBLEMS",
    "STANDARD_FIELDS",
    "FileFormat",
    "ProblemName",
    "ProblemSpec",
    "SpecTable",
    "make_env",
    "problem_names",
    "problem_spec",
    "register_problem",
    "unregister_problem",
]
