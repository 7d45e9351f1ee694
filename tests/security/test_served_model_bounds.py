"""A served linc policy under hostile requests: one request must not freeze or kill it.

Attacked as a client of ``mlflow models serve -m <model> --env-manager local`` on loopback
would: a 20 MB body, a 3,000-customer row, a decoding budget of num_z 65536 x augment 8,
malformed and deeply nested JSON, rows with bad values or shapes, text that is no instance and
3.2 MB of blank lines. Each answer must come in under 5 s as HTTP 400 with one line (no
traceback, no server path) while the server's process tree stays under 2 GB and ``/ping``,
polled from a thread during the request, answers every time. A request within the limits that
decodes past the deadline is answered 504 and stops computing (the worker's CPU falls idle);
SIGTERM then ends the server while a request computes. Before the fix: the blank lines froze
the worker (and ``/ping``) for minutes, the 3,000 customers took it past 6 GB, the budget
computed for minutes after a 504, bad rows answered ``NaN`` or a traceback.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import psutil
import pytest

from linc_core.train.data import generate
from tests.conftest import served_model

DEADLINE = 3.0  # LINC_SERVE_DEADLINE_SECONDS of the server under test (default 30)
ANSWER_SECONDS = 5.0
RSS_BYTES = 2 * 2**30
SMALL = {"method": "sampling", "num_z": 4, "augment": 1, "seed": 0}


@pytest.fixture(scope="module")
def server(tiny_policy_model):
    # One torch thread: the tests share two cores between two workers, and a second pool of
    # threads in the server only oversubscribes them (a 10-customer request with two other
    # processes busy: 0.09-0.12 s at two threads, 0.04 s at one; in CI, once, past the 3 s
    # deadline). The requests decoded here are single-thread work.
    env = {"LINC_SERVE_DEADLINE_SECONDS": str(DEADLINE), "OMP_NUM_THREADS": "1"}
    with served_model(str(tiny_policy_model), env) as served:
        yield served


@dataclass
class Answer:
    status: int
    text: str
    seconds: float
    peak_rss: int = 0
    pings: list[float | None] = field(default_factory=list)  # seconds, None: no answer


def tree(server) -> list[psutil.Process]:
    """The server's processes: the mlflow command and the uvicorn worker it runs."""
    try:
        root = psutil.Process(server.process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def rss(server) -> int:
    total = 0
    for process in tree(server):
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def ping(server) -> float | None:
    began = time.monotonic()
    try:
        with urllib.request.urlopen(f"{server.url}/ping", timeout=2) as answer:  # noqa: S310
            return time.monotonic() - began if answer.status == 200 else None
    except OSError:
        return None


def post(server, body: bytes | dict, params: dict | None = None) -> Answer:
    """POST ``body`` (JSON; bytes starting ``instance`` as CSV) to /invocations while a thread
    polls /ping and the server's RSS."""
    if isinstance(body, dict):
        body = json.dumps(body | ({"params": params} if params else {})).encode()
    kind = "text/csv" if body.startswith(b"instance") else "application/json"
    request = urllib.request.Request(f"{server.url}/invocations", body, {"Content-Type": kind})
    answer = Answer(0, "", 0.0, rss(server))
    done = threading.Event()

    def watch() -> None:
        while True:
            answer.pings.append(ping(server))
            answer.peak_rss = max(answer.peak_rss, rss(server))
            if done.wait(0.1):
                return

    watcher = threading.Thread(target=watch)
    watcher.start()
    began = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
            answer.status, answer.text = response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        answer.status, answer.text = refused.code, refused.read().decode()
    finally:
        answer.seconds = time.monotonic() - began
        done.set()
        watcher.join()
    return answer


def strict_json(text: str) -> dict:
    """``text`` as JSON; NaN and Infinity (which Python writes, but JSON has not) refused."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the answer: not JSON")

    return json.loads(text, parse_constant=refuse)


def assert_bounded(server, answer: Answer) -> None:
    """Within the time and memory bounds, /ping answering during and after."""
    assert answer.seconds < ANSWER_SECONDS, f"answered in {answer.seconds:.1f} s"
    assert answer.peak_rss < RSS_BYTES, f"server at {answer.peak_rss / 2**20:.0f} MiB"
    assert None not in answer.pings, f"/ping unanswered during the request: {answer.pings}"
    assert ping(server) is not None


def assert_one_line(answer: Answer, status: int, *fragments: str) -> str:
    assert answer.status == status, answer.text[:500]
    body = strict_json(answer.text)
    message = body["message"]
    assert "\n" not in message and len(message) <= 400, message
    assert "stack_trace" not in body and "Traceback" not in answer.text
    assert not re.search(r"\.py\b|site-packages|/tmp/|/work/", answer.text), answer.text
    for fragment in fragments:
        assert fragment in message, message
    return message


def row(customers: int, seed: int = 5, **change) -> dict:
    """One cvrptw instance as a ``dataframe_split`` row of arrays."""
    instance = generate("cvrptw", 1, customers, seed=seed)
    fields = {
        "locs": instance.locs[0].tolist(),
        "demand": instance.demand[0].tolist(),
        "capacity": float(instance.capacity[0]),
        "time_windows": instance.time_windows[0].tolist(),
        "service_time": instance.service_time[0].tolist(),
    } | change
    return {"dataframe_split": {"columns": list(fields), "data": [list(fields.values())]}}


def text_row(text: str) -> dict:
    return {"dataframe_split": {"columns": ["instance"], "data": [[text]]}}


def with_nan_coordinate() -> dict:
    body = row(10)
    body["dataframe_split"]["data"][0][0][2] = [math.nan, 1.0]  # json.dumps writes NaN
    return body


def solomon_row(token: str, column: int = 1) -> dict:
    """A 2-customer Solomon file's text whose customer 2 has ``token`` in ``column``."""
    customer = ["2", "45", "70", "30", "825", "870", "90"]
    customer[column] = token
    text = (
        "C101\nVEHICLE\nNUMBER CAPACITY\n25 200\nCUSTOMER\n"
        "CUST NO.  XCOORD.   YCOORD.    DEMAND   READY TIME  DUE DATE   SERVICE   TIME\n"
        "0 40 50 0 0 1236 0\n1 45 68 10 912 967 90\n" + " ".join(customer) + "\n"
    )
    return text_row(text)


HOSTILE = {
    "20 MB body": (lambda: text_row("x" * 20_000_000), "LINC_SERVE_MAX_REQUEST_BYTES"),
    "3,000-customer row": (lambda: row(3000), "3000 customers, more than 1000"),
    "num_z 65536 x augment 8": (lambda: row(10), "LINC_SERVE_MAX_BUDGET"),
    "malformed JSON": (lambda: b'{"dataframe_split": {"columns": ["ins', "valid JSON"),
    "JSON nested 100,000 deep": (
        lambda: b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nested too deeply",
    ),  # fmt: skip
    "an integer of 100,001 digits": (
        lambda: b'{"inputs": {"instance": [1' + b"0" * 100_000 + b"]}}",
        "an integer of more than 4300 digits",
    ),  # fmt: skip
    "capacity 1e-300": (
        lambda: row(3, capacity=1e-300, demand=[0.0, *[1e-301] * 3]),
        "float32's smallest normal number",
    ),  # fmt: skip
    "capacity -10": (lambda: row(10, capacity=-10.0), "'capacity' = -10"),
    "capacity 0": (lambda: row(10, capacity=0.0), "'capacity' = 0"),
    "negative demand": (lambda: row(10, demand=[0.0, 2.0, -4.0, *[1.0] * 8]), "'demand[2]' = -4"),
    "NaN coordinate": (with_nan_coordinate, "'locs[2]' = [nan, 1.0]: non-finite"),
    "shapes that disagree": (lambda: row(10, demand=[0.0, 1.0]), "'demand' = 'shape [2]'"),
    "text that is no instance": (lambda: text_row("GET /etc/passwd"), "neither a Solomon file"),
    # a file's text is read from a server temp file: the answer names the row, never that path
    "inf coordinate in a file": (lambda: solomon_row("inf"), "row 0 (C101): field 'CUSTOMER row 2"),
    "1e400 coordinate in a file": (lambda: solomon_row("1e400", 2), "YCOORD.' = '1e400'"),
    "negative demand in a file": (lambda: solomon_row("-5", 3), "row 0 (C101): field 'demand[2]'"),
    # JSON writes a line break in 2 bytes: 1.9 MB of them fit the 4 MB body (the sniffing
    # alone is tested linear to 3.2 MB in tests/linc_core/instances/test_any_file.py)
    "1.9 MB of blank lines": (lambda: text_row("\n" * 1_900_000 + "x"), "neither a Solomon"),
    # MLflow reads no CSV for a signature with array columns: its one line
    "3.2 MB of blank lines as CSV": (
        lambda: b'instance\n"' + b"\n" * 3_200_000 + b'x"\n',
        "CSV",
    ),  # fmt: skip
    "200,000 rows": (
        lambda: {"dataframe_records": [{"instance": "x"}] * 200_000},
        "LINC_SERVE_MAX_ROWS",
    ),  # fmt: skip
    "num_z not a number": (lambda: row(10), "signature"),
}
PARAMS = {"num_z 65536 x augment 8": {"num_z": 65536, "augment": 8}, "num_z not a number": {
    "num_z": "lots"}}  # fmt: skip


@pytest.mark.parametrize("attack", list(HOSTILE))
def test_a_hostile_request_is_one_line_400_in_bounded_time_and_memory(server, attack) -> None:
    make, fragment = HOSTILE[attack]
    answer = post(server, make(), PARAMS.get(attack, SMALL))
    assert_one_line(answer, 400, fragment)
    assert_bounded(server, answer)
    print(
        f"{attack}: {answer.status} in {answer.seconds:.2f} s, server peak "
        f"{answer.peak_rss / 2**20:.0f} MiB, {len(answer.pings)} pings answered"
    )


def test_every_input_form_gets_an_answer_or_one_clear_error(server, data_dir) -> None:
    lines = (data_dir / "solomon100" / "C101.txt").read_text().splitlines()
    last = next(i for i, line in enumerate(lines) if line.split()[:1] == ["10"])
    c101 = "\n".join(lines[: last + 1]) + "\n"  # its depot and first 10 customers
    answers = {
        "dataframe_split": post(server, text_row(c101), SMALL),
        "dataframe_records": post(server, {"dataframe_records": [{"instance": c101}]}, SMALL),
        "inputs (columns)": post(server, {"inputs": {"instance": [c101]}}, SMALL),
        "dataframe_split (arrays)": post(server, row(10), SMALL),
    }
    for form, answer in answers.items():
        assert answer.status == 200, f"{form}: {answer.text[:300]}"
        (prediction,) = strict_json(answer.text)["predictions"]
        assert prediction["feasible"] is True and isinstance(prediction["cost"], float), form
        assert_bounded(server, answer)
    # what MLflow's signature cannot take is one line saying what to send, never an empty answer
    bare = post(server, {"inputs": [c101]}, SMALL)
    assert_one_line(bare, 400, "no rows", "{'instance': [texts]}")
    records = post(server, {"instances": [strict_json(json.dumps(row(5)))]}, SMALL)
    assert_one_line(records, 400)


def test_a_request_past_its_deadline_is_504_and_stops_computing(server) -> None:
    # within every limit (2,000,000 = 250 x 8 x 1000) but seconds of decoding
    answer = post(server, row(1000, seed=7), {"num_z": 250, "augment": 8})
    assert_one_line(answer, 504, f"stopped at the {DEADLINE:g} s deadline")
    assert DEADLINE <= answer.seconds < DEADLINE + 2.0
    assert_bounded(server, answer)
    assert len(answer.pings) >= 10 and max(answer.pings) < 1.0, answer.pings  # type: ignore[type-var]
    # the worker is idle at once: no decoding goes on behind the answer
    workers = tree(server)
    before = sum(sum(p.cpu_times()[:2]) for p in workers)
    time.sleep(1.0)
    assert sum(sum(p.cpu_times()[:2]) for p in workers) - before < 0.3
    small = post(server, row(10), SMALL)
    assert small.status == 200 and small.seconds < ANSWER_SECONDS
    print(
        f"past the deadline: {answer.status} in {answer.seconds:.2f} s, server peak "
        f"{answer.peak_rss / 2**20:.0f} MiB, {len(answer.pings)} pings, slowest "
        f"{max(answer.pings):.3f} s; next request {small.status} in {small.seconds:.2f} s"  # type: ignore[type-var]
    )


def test_sigterm_ends_the_server_while_a_request_computes(server) -> None:
    # runs last: the worker once ignored SIGTERM for 15 minutes, its GIL held by the sniffing
    workers = tree(server)
    computing = threading.Thread(
        target=post, args=(server, row(1000, seed=7), {"num_z": 250, "augment": 8})
    )
    computing.start()
    time.sleep(1.0)
    began = time.monotonic()
    os.killpg(server.process.pid, signal.SIGTERM)
    gone, alive = psutil.wait_procs(workers, timeout=DEADLINE + 10)
    computing.join()
    took = time.monotonic() - began
    assert not alive, f"still running {took:.1f} s after SIGTERM: {alive}"
    print(f"SIGTERM mid-request: the server's processes ended within {took:.2f} s")
