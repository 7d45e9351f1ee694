"""The one masking of secrets: URIs, credential parameters and keys, learnt secrets, logs."""

from __future__ import annotations

import io
import logging
import warnings
from collections import namedtuple

import pytest

from linc_core.utils import secrets
from linc_core.utils.secrets import MASK, RedactSecrets, learn_secrets, redact, redact_logging


@pytest.fixture(autouse=True)
def _forget(monkeypatch):
    """Each test starts from a process that has learnt nothing."""
    monkeypatch.setattr(secrets, "_learnt", set())
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            "postgresql://linc:Tr0ub4dor&3@127.0.0.1:5432/db",
            "postgresql://linc:***@127.0.0.1:5432/db",
        ),
        ("postgresql+psycopg2://u:p%40ss%2Fw@db/x", "postgresql+psycopg2://u:***@db/x"),
        ("postgresql://u:a/b?c@h/db", "postgresql://u:***@h/db"),  # SQLAlchemy takes up to '@'
        ("http://user:pw@host:5000/api", "http://user:***@host:5000/api"),
        ("redis://:only-a-password@h:6379", "redis://:***@h:6379"),
        # a user without a password, a port, a path: nothing to mask
        ("postgresql://postgres@127.0.0.1:5432/linc", "postgresql://postgres@127.0.0.1:5432/linc"),
        (
            "http://127.0.0.1:5000/#/experiments/1/runs",
            "http://127.0.0.1:5000/#/experiments/1/runs",
        ),
        ("sqlite:////tmp/runs/mlflow.db", "sqlite:////tmp/runs/mlflow.db"),
        ("mail me at a@b.org: http://h:1/x", "mail me at a@b.org: http://h:1/x"),
        (
            "s3://b/p?endpoint_override=127.0.0.1:9000&secret_key=ABCDEF&region=eu",
            "s3://b/p?endpoint_override=127.0.0.1:9000&secret_key=***&region=eu",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=0f9e&X-Amz-Expires=60",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60",
        ),
        ("https://acct.blob/c?sv=2021&sig=abc%3D&se=1", "https://acct.blob/c?sv=2021&sig=***&se=1"),
        ("host=db password='a b c' dbname=x", "host=db password='***' dbname=x"),
        ("token=abc learning_rate=0.001", "token=*** learning_rate=0.001"),
        ("s3://b/p?secret_key=abcd: unknown", "s3://b/p?secret_key=***: unknown"),
        ("{'password': 'zzzz', 'x': 1}", "{'password': '***', 'x': 1}"),
        ('{"api_key": "k-123", "n": 2}', '{"api_key": "***", "n": 2}'),
        ("Authorization: Bearer eyJhbGciOi.x-y", "Authorization: Bearer ***"),
        # prose about credentials is not a credential
        ("tracking.password: expected a name, got 3", "tracking.password: expected a name, got 3"),
        ("Basic authentication failed", "Basic authentication failed"),
    ],
)
def test_text_is_masked_where_a_secret_stands_and_nowhere_else(text: str, masked: str) -> None:
    assert redact(text) == masked
    assert redact(masked) == masked  # idempotent: a masked record compares equal


def test_a_learnt_password_is_masked_in_any_later_text_also_percent_encoded() -> None:
    redact("postgresql://linc:s3cr%40t-Pass-42@db/mlflow")  # learnt from the URI
    assert redact('FATAL: password "s3cr@t-Pass-42" rejected') == 'FATAL: password "***" rejected'
    assert redact("dsn s3cr%40t-Pass-42 echoed") == "dsn *** echoed"
    assert redact("x=s3cr@t-Pass-42y") == "x=***y"  # long: anywhere, even inside a word


def test_a_short_or_common_secret_does_not_mangle_unrelated_text() -> None:
    redact("postgresql://u:ablations@db/x")  # a common word of this project as the password
    assert redact("postgresql://u:ablations@db/x") == "postgresql://u:***@db/x"
    # shorter than ANYWHERE_LENGTH: only as a whole word, the project's names stay readable
    assert redact("linc-ablation ablations ablations_x") == "linc-ablation *** ablations_x"
    redact("postgresql://u:linc@db/x")  # too short to search for in free text at all
    assert redact("linc-tune and linc") == "linc-tune and linc"
    assert redact("postgresql://u:linc@db/x") == "postgresql://u:***@db/x"  # where it stands
    redact("password=true")  # a flag's word is no secret
    assert redact("forward: true") == "forward: true"


def test_credential_environment_variables_and_uri_passwords_are_learnt(monkeypatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:env-db-pass-9@h/d")
    text = "signature for wJalrXUtnFEMI/K7MDENG failed; env-db-pass-9 refused"
    assert redact(text) == "signature for *** failed; *** refused"


def test_mappings_mask_credential_keys_and_every_value_nested() -> None:
    Pair = namedtuple("Pair", "a b")
    values = {
        "tracking": {"uri": "http://u:pw-1234@h", "experiment": "linc"},
        "aws": {"secret_access_key": "x" * 20, "region": "eu", "session_token": None},
        "credentials": {"user": "me", "pass": "hunter22"},
        "flags": [True, 1.5, ("postgresql://a:bcdef@h/d",)],
        "pair": Pair("s3://b?token=t0k3n", 2),
        "password": "",
    }
    masked = redact(values)
    assert masked == {
        "tracking": {"uri": "http://u:***@h", "experiment": "linc"},
        "aws": {"secret_access_key": MASK, "region": "eu", "session_token": None},
        "credentials": MASK,
        "flags": [True, 1.5, ("postgresql://a:***@h/d",)],
        "pair": Pair("s3://b?token=***", 2),
        "password": "",
    }
    assert values["tracking"]["uri"] == "http://u:pw-1234@h"  # a copy: the real value stays
    assert redact("she typed hunter22") == "she typed ***"  # learnt from the masked key


def test_log_records_tracebacks_and_warnings_are_masked() -> None:
    learn_secrets("postgresql://linc:pg-pass-from-config@db/x")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactSecrets())
    logger = logging.getLogger("tests.secrets")
    logger.addHandler(handler)
    try:
        logger.warning("store %s unreachable", "http://u:pw@h")
        try:
            raise RuntimeError("connect pg-pass-from-config failed")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "store http://u:***@h unreachable" in out
    assert "RuntimeError: connect *** failed" in out
    assert "pg-pass-from-config" not in out and ":pw@" not in out

    redact_logging()
    with warnings.catch_warnings(record=False):
        text = warnings.formatwarning("DSN pg-pass-from-config", UserWarning, "f.py", 1)
    assert "pg-pass-from-config" not in text and MASK in text
