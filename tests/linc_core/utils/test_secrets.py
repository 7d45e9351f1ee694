"""The one masking of secrets: URIs, credential parameters and keys, learnt secrets, logs."""

from __future__ import annotations

import io
import json
import logging
import random
import shlex
import time
import warnings
from collections import namedtuple
from urllib.parse import quote

import pytest
import yaml

from linc_core.utils import secrets
from linc_core.utils.secrets import (
    MASK,
    RedactSecrets,
    is_secret_variable,
    learn_secrets,
    redact,
    redact_logging,
)
from tests.conftest import fresh_python


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
        # ...but a token sent as the user (basic auth with no password) is a secret
        (
            "store http://ghp_Tok3nSecretValue99@127.0.0.1:9 down",
            "store http://***@127.0.0.1:9 down",
        ),
        ("https://x.org/hook?auth=T0kenValue&a=1", "https://x.org/hook?auth=***&a=1"),
        (
            "DefaultEndpointsProtocol=https;AccountKey=abc123==;",
            "DefaultEndpointsProtocol=https;AccountKey=***;",
        ),
        (
            '{"cookie": "session=abc123def", "bearer": "eyJhbGciOi"}',
            '{"cookie": "***", "bearer": "***"}',
        ),
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
        ("X-Api-Key: k-0123456789abc", "X-Api-Key: ***"),
        ("curl -H 'Private-Token: glpat-xyz' u", "curl -H 'Private-Token: ***' u"),
        (
            "X-Request-Id: 42 and linc-ablation: 12 trials",
            "X-Request-Id: 42 and linc-ablation: 12 trials",
        ),
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


def test_a_learnt_secret_is_masked_as_json_writes_it_too(monkeypatch) -> None:
    monkeypatch.setenv("DB_PASS", "pässwörd#12345")
    written = json.dumps({"error": "login with pässwörd#12345 refused"})
    assert "p\\u00e4ssw\\u00f6rd#12345" in written  # how JSON writes it
    assert redact(written) == '{"error": "login with *** refused"}'
    assert redact(json.dumps("pässwörd#12345", ensure_ascii=False)) == '"***"'


STATE_KEY = "9f2c41d07be35a68c1e0f4d2a7b6935e"  # a LINC_STATE_KEY of this test


def test_the_state_key_of_the_environment_is_masked_in_a_fresh_process(monkeypatch) -> None:
    """A trial process never reads the sweep-state key, yet its environment holds it: every
    process masks it from its first print (issue: an override ${oc.env:LINC_STATE_KEY} of
    tracking.experiment printed it in clear), also percent-encoded, in a repr, in a log line."""
    monkeypatch.setenv("LINC_STATE_KEY", STATE_KEY)
    out = fresh_python(
        "import json, logging, sys\n"
        "from urllib.parse import quote\n"
        "from linc_core.utils.secrets import redact, redact_logging\n"
        f"key = {STATE_KEY!r}\n"
        "print(redact(f'tracking.experiment={key}'))\n"
        "print(redact({'tracking': {'experiment': key, 'tags': [quote(key), key.upper()]}}))\n"
        "print(redact(json.dumps({'experiment': 'x' + key + 'y'})))\n"
        "logging.basicConfig(stream=sys.stdout)\n"
        "redact_logging()\n"
        "logging.getLogger('trial').warning('experiment %s', key)\n"
    )
    assert STATE_KEY not in out and STATE_KEY.upper() not in out, out
    assert out.count(MASK) == 6 and "WARNING:trial:experiment ***" in out, out


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("LINC_STATE_KEY", True),
        ("OPENAI_API_KEY", True),
        ("RAY_AUTH_TOKEN", True),
        ("MLFLOW_FLASK_SERVER_SECRET", True),
        ("MLFLOW_AUTH_ADMIN_PASSWORD", True),
        ("GPG_PASSPHRASE", True),
        ("DB_PASS", True),
        ("REDIS_AUTH", True),
        ("BYPASS", False),
        ("linc_state_key", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),  # as before: CREDENTIAL_PATTERN names it (key_id)
        ("PWD", False),  # the shell's folder
        ("LINC_KEY_FILE", False),  # a path, not a key
        ("MONKEY", False),
        ("HOTKEY", False),
        ("LINC_DATA_DIR", False),
        ("KEYBOARD_LAYOUT", False),
    ],
)
def test_environment_variables_named_like_a_secret_are_secrets(name: str, secret: bool) -> None:
    assert is_secret_variable(name) is secret


def test_a_variable_ending_in_key_is_masked_but_a_settings_key_is_not(monkeypatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_KEY", "svc-key-0123456789")
    monkeypatch.setenv("LINC_KEY_FILE", "/home/me/keys/linc-state.key")
    assert redact("using svc-key-0123456789 now") == "using *** now"
    assert redact("reading /home/me/keys/linc-state.key") == "reading /home/me/keys/linc-state.key"
    # in a mapping only CREDENTIAL_PATTERN's names hide a value: a setting's sort_key is shown
    assert redact({"sort_key": "eval_cost"}) == {"sort_key": "eval_cost"}


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


# Each character a URI's password may hold that once ended the masking (issue: a password with
# a quote, '<', '>' or a space was neither masked nor learnt, and left in console lines, Tune's
# files, MLflow's config artifact and error messages).
SPECIAL_PASSWORDS = {
    "'": "se'cretPassw0rd",
    '"': 'se"cretPassw0rd',
    "<": "se<cretPassw0rd",
    ">": "se>cretPassw0rd",
    "space": "se cret Passw0rd",
    "all and '@'": "s'e\"c <r>e@t P@ss, 'w0rd'",
}
URI = "postgresql+psycopg2://linc:{}@db:5432/mlflow"


def embeddings(uri: str) -> dict[str, str]:
    """``uri`` as linc and its libraries write it down."""
    config = {"tracking": {"uri": uri, "experiment": "linc"}, "owner": "a@b.org"}
    return {
        "bare": f"linc-tune: tracking.uri: the database {uri} does not answer",
        "hydra override": f"tracking.uri={json.dumps(uri)}",  # "..." with \" inside
        "repr": repr(config),
        "json": json.dumps(config),
        "json in json": json.dumps(json.dumps(config)),
        "shell line": "linc-tune " + shlex.join(["--cfg", "job", f"tracking.uri={uri}"]),
        "yaml": yaml.safe_dump(config),
        "argv repr": repr(["linc-tune", f"tracking.uri={json.dumps(uri)}"]),
    }


@pytest.mark.parametrize("kind", list(SPECIAL_PASSWORDS))
def test_a_uri_password_is_masked_whatever_it_holds_wherever_it_is_written(kind) -> None:
    password = SPECIAL_PASSWORDS[kind]
    for where, text in embeddings(URI.format(password)).items():
        masked = redact(text)
        assert "cret" not in masked and "w0rd" not in masked, (where, masked)
        assert "linc:***@db:5432/mlflow" in masked, (where, masked)
        assert redact(masked) == masked, where  # idempotent
        if "owner" in text:  # the rest of the text stays as it was
            assert "a@b.org" in masked, (where, masked)


@pytest.mark.parametrize("kind", list(SPECIAL_PASSWORDS))
def test_a_uri_password_once_met_is_masked_later_alone(kind) -> None:
    password = SPECIAL_PASSWORDS[kind]
    redact(f"tracking.uri={URI.format(password)}")  # met (and learnt) in a config line
    later = {
        "as it is": f"FATAL: password {password} rejected",
        "repr": f"connect(password={password!r}) failed",
        "json": json.dumps({"detail": f"bad {password}"}),
        "percent-encoded": f"url {quote(password, safe='')} refused",
    }
    for where, text in later.items():
        masked = redact(text)
        assert "cret" not in masked and "w0rd" not in masked, (where, masked)


def test_a_quoted_uri_ends_at_its_closing_quote() -> None:
    # the naive quoting of a message: the password's own quote is not the closing one
    assert redact("refused: 'postgresql://u:p'w@h/db'") == "refused: 'postgresql://u:***@h/db'"
    # the first '@' is not the end of the password: the last one before the host is
    assert redact('"http://u:p@ss w@rd@h:5000/api"') == '"http://u:***@h:5000/api"'
    # a quote doubled (YAML, SQL) is no closing quote either
    assert redact("uri: 'http://u:it''s@me@h'") == "uri: 'http://u:***@h'"
    # a value after it keeps its '@'
    assert redact('{"a": "http://u:pw@h/x", "b": "x@y.org"}') == (
        '{"a": "http://u:***@h/x", "b": "x@y.org"}'
    )


@pytest.mark.parametrize(
    "text",
    [
        "MLflow at http://127.0.0.1:5000 (by admin@x.org)",  # a port, then prose
        "http://h:5000/x and mail a@b.org",
        "{'a': 'http://h:5000/x', 'b': 'x@y'}",
        "http://[::1]:5000/ x@y",
        "see postgresql://u:p w\nx@h",  # a password ends at the line's end
    ],
)
def test_a_host_and_port_before_an_at_sign_is_no_password(text: str) -> None:
    assert redact(text) == text


def test_uri_passwords_of_several_uris_on_one_line_are_masked_each() -> None:
    text = "Run http://localhost:5000 and http://user:pw@h, postgresql://v:q@h2/db"
    assert (
        redact(text) == "Run http://localhost:5000 and http://user:***@h, postgresql://v:***@h2/db"
    )


def test_uri_masking_of_random_passwords_never_leaks_and_is_idempotent() -> None:
    rng = random.Random(7)
    alphabet = "ab'\" <>@/:?#,;=\\09"
    for _ in range(300):
        secrets._learnt.clear()
        password = "Q" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) + "Z"
        for where, text in embeddings(URI.format(password)).items():
            masked = redact(text)
            assert "Q" not in masked and "Z" not in masked, (password, where, masked)
            assert redact(masked) == masked, (password, where, masked)


def test_uri_masking_is_linear_in_a_long_line() -> None:
    began = time.monotonic()
    redact("a://b:c " * 100_000 + "http://u:p w " * 50_000 + "@h")  # 1.45 MB, 150,000 URIs
    assert time.monotonic() - began < 5.0
