"""``linc-data``: where linc reads the benchmark data (:mod:`linc_core.instances.benchmarks`),
and fetching a set from CVRPLIB (:mod:`linc_core.instances.download`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from linc_core.commands.flags import OneLineParser
from linc_core.instances import (
    InstanceError,
)
from linc_core.instances.benchmarks import DATA_DIR_ENV, data_dir
from linc_core.instances.download import (
    CVRPLIB_URL,
    CVRPLIB_URL_ENV,
    DOWNLOAD_SETS,
    Downloaded,
    DownloadError,
    download_set,
)


# ---------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="linc-data", description="Locate or download LINC benchmark data.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("where", help=f"print the data folder (${DATA_DIR_ENV} or ../shared/data)")
    download = commands.add_parser("download", help="download a CVRPLIB set, file by file")
    download.add_argument("set", choices=sorted(DOWNLOAD_SETS), help="which set")
    download.add_argument("--dest", required=True, type=Path, help="destination folder")
    download.add_argument("--names", nargs="+", help="only these instances (default: the set)")
    download.add_argument("--solutions", action="store_true", help="also fetch the .sol files")
    download.add_argument(
        "--base-url", help=f"CVRPLIB base URL (default ${CVRPLIB_URL_ENV} or {CVRPLIB_URL})"
    )
    download.add_argument("--overwrite", action="store_true", help="re-fetch existing files")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``linc-data``: ``where`` and ``download SET --dest DIR``.

    Returns:
        The process exit code (0 on success, 1 on a reported error).
    """
    args = build_parser().parse_args(argv)
    try:
        if args.command == "where":
            print(data_dir())
            return 0
        done = download_set(
            args.set,
            args.dest,
            args.names,
            solutions=args.solutions,
            base_url=args.base_url,
            overwrite=args.overwrite,
        )
    except DownloadError as err:
        print(f"linc-data: {err}", file=sys.stderr)
        if err.done is not None and err.done.files:  # what the files before it came to
            print(f"before it: {summary(err.done, args.dest)}", file=sys.stderr)
        return 1
    except (FileNotFoundError, InstanceError, KeyError) as err:
        print(f"linc-data: {err}", file=sys.stderr)
        return 1
    print(summary(done, args.dest))
    return 0


def summary(done: Downloaded, dest: Path) -> str:
    """One line: the files in ``dest`` by how they were checked against linc's record of their
    content (``linc_core.instances.download``)."""
    counts = [
        (len(done.matched), "matching linc's record of their content"),
        (len(done.unrecorded), "fetched with no record, checked by their reader only"),
        (len(done.present), "already there with no record (--overwrite fetches them again)"),
    ]
    parts = "; ".join(f"{count} {what}" for count, what in counts if count)
    noun = "file" if done.files == 1 else "files"
    return f"{done.files} {noun} in {dest}: {parts}"


if __name__ == "__main__":
    raise SystemExit(main())
