"""Process-level settings: background imports, the allocator, peak RSS."""

from __future__ import annotations

import subprocess
import sys

from linc_core.runtime import import_in_background


def test_a_background_import_loads_the_module_and_a_bad_name_does_not_raise() -> None:
    script = (
        "import sys\n"
        "from linc_core.runtime import import_in_background\n"
        "assert 'colorsys' not in sys.modules\n"
        "import_in_background('no_such_module_linc', 'colorsys').join(30)\n"
        "print('colorsys' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "True"


def test_the_background_thread_does_not_keep_the_process_alive() -> None:
    thread = import_in_background("json")
    thread.join(30)
    assert thread.daemon and not thread.is_alive()


def test_peak_rss_grows_by_the_pages_a_process_touches() -> None:
    script = (
        "from linc_core.runtime import peak_rss_gb\n"
        "before = peak_rss_gb()\n"
        "block = b'x' * (300 * 1024 * 1024)\n"
        "print(peak_rss_gb() - before)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert 0.29 < float(out.stdout) < 0.4  # 300 MiB = 0.315 GB
