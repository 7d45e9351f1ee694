"""``python -m linc_core.evaluate``: the ``linc-eval`` command."""

from linc_core.evaluate.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
