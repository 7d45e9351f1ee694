"""The guard on how far a reader travels to follow a sweep's config: the walk of
tests/walk/config_walk.py from ``orchestration.experiment.ablation.run_ablation`` stays within the
limits below, and the walk itself can fail.

    python -m tests.walk.test_config_walk     # the walk's path, the modules and the returns
"""

from __future__ import annotations

from tests.walk.config_walk import load, main, returns_by_module, walk

# Measured after issue 35 (one Sweep, SweepFolder, SweepRuns): 26 modules, 31 returns; before
# it 25 and 31 (the walk follows the config into every room the sweep uses: storage, seal,
# tracking, Ray, report). The target, 12 and 12, is not reached: these hold the line.
# Issue 38 added the main table and time to quality: 28 and 34. Then the restore path became
# one read, decide, one write (tune_state.check_state, SweepFolder.read_all/write_all) with the
# seal record beside it, the Tune callbacks one list (experiment.callbacks), and the sweep's
# report a function of its runs (report.sweep_report: compare_to read from the parent run's
# params, so the config no longer flows into the report): 22 modules, 27 returns. Most returns
# left are to the Sweep itself (11), which calls each step of the lifecycle in turn. Then a
# trial's tracking journal became untrusted input with its checks in one module
# (tracking.journal, read by the run writer and, for a run the trial never made, by the sweep's
# runs): 23 modules, 29 returns. Then a sweep resumed only with the settings it began with (its
# parent run's params against this run's, by trial.plan.changed_settings, where the sweep's runs
# read the recorded parent run) and not begun anew over a saved one (tune_state.check_state asks
# the folder): 23 modules, 32 returns.
MAX_MODULES = 23
MAX_RETURNS = 32


def test_following_an_ablations_config_stays_in_a_few_modules() -> None:
    found = walk()
    assert len(found.entered) <= MAX_MODULES, found.entered
    assert found.returns <= MAX_RETURNS, returns_by_module(found)


def test_the_walk_follows_config_and_counts_returns(tmp_path) -> None:
    """The measure can fail: a planted chain a -> b -> a -> c counts three modules and two
    returns; a call that receives nothing of config is not followed."""
    package = tmp_path / "p"
    package.mkdir()
    (package / "a.py").write_text(
        "from p.b import step, Thing\nfrom p.c import unrelated\n"
        "def start(config):\n    spec = config.x\n    thing = Thing(spec)\n"
        "    thing.go(1)\n    unrelated(2)\n    return step(spec)\n"
    )
    (package / "b.py").write_text(
        "from p.c import deep\nclass Thing:\n    def __init__(self, spec):\n"
        "        self.spec = spec\n    def go(self, n):\n        return deep(self.spec)\n"
        "def step(spec):\n    return spec\n"
    )
    (package / "c.py").write_text("def deep(v):\n    return v\ndef unrelated(v):\n    return v\n")
    files = {f"p.{name}": package / f"{name}.py" for name in ("a", "b", "c")}
    found = walk(("p.a", "start", "config"), load(files), driver=("p",))
    assert found.entered == ["p.a", "p.b", "p.c"]
    # a -> b.Thing <- a; a -> b.go -> c.deep <- b <- a; a -> b.step <- a: pairs (a, b), (b, c)
    assert found.returns == 2
    assert sum(step.startswith("<- ") for step in found.path) == 4
    assert "-> p.c.unrelated" not in found.path


if __name__ == "__main__":
    main()
