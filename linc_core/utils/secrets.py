"""Secrets in what leaves the process: :func:`redact`, the one masking of every value linc
writes out (tracking params, tags and artifacts, Tune's config, journals, records, console
lines, log records, warnings and error messages). The process itself keeps the real values.

What is masked, as ``***``:

* the password of a URI's user info: ``postgresql://linc:***@db:5432/linc``,
  ``http://user:***@host`` (a user name alone is kept), all of it up to the last '@' before the
  host, whatever it holds (quotes, spaces, '<', '>', '/', '@'), also in a repr, JSON or a shell
  line (see :func:`_uri_passwords`);
* the value of a credential parameter, in a query string or as ``key=value`` text
  (``?access_key=***&region=eu``, ``password=***`` of a libpq connection string), of a quoted
  ``'password': '***'`` pair, of an ``Authorization`` scheme (``Authorization: Bearer ***``)
  and of a header named like a credential (``X-Api-Key: ***``);
* in a mapping, the value of every key whose name looks like a credential (everything nested
  under it too);
* any secret this process has learnt, wherever it appears in text: the passwords and
  credential values :func:`redact` met before (so that a library echoing a connection string
  in its own words is masked too), and the values of credential environment variables
  (``AWS_SECRET_ACCESS_KEY``, ``MLFLOW_TRACKING_PASSWORD``, ``PGPASSWORD``, and any whose name
  ends in ``_KEY``, ``_TOKEN``, ``_SECRET``, ``_PASSWORD``, ``_PASSPHRASE``, ``_PASS`` or
  ``_AUTH``, such as ``LINC_STATE_KEY`` or ``REDIS_AUTH``), learnt afresh by every call in
  every process, and the URI passwords in the environment (``MLFLOW_TRACKING_URI``); each also
  as JSON writes it (``\\u00e4`` for an 'ä'). A learnt secret shorter than
  :data:`MIN_SECRET_LENGTH` characters is not searched for in free text (it would mask unrelated
  words); one shorter than :data:`ANYWHERE_LENGTH` only as a whole word.

A credential name is what :data:`CREDENTIAL_PATTERN` matches (secret, password, token,
access key, credential, signature, api key...). Masking is idempotent: ``redact(redact(x)) ==
redact(x)``, so a recorded (masked) value compares equal to the masked configured one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

MASK = "***"
# Names of settings, query parameters and environment variables that hold a secret.
CREDENTIAL_PATTERN = re.compile(
    r"secret|passw(?:or)?d|passphrase|token|key_id|access[_-]?key|credential|api[_-]?key"
    r"|private[_-]?key|account[_-]?key|signature|authorization|cookie|bearer"
    r"|(?<![a-z0-9])(?:sig|pwd|auth)(?![a-z0-9])",
    re.IGNORECASE,
)
# An environment variable named so holds a secret even where CREDENTIAL_PATTERN misses the name
# (LINC_STATE_KEY, SOME_SERVICE_KEY); only the environment's names: in a setting, ``sort_key`` or
# ``metric_key`` names no secret. An id (AWS_ACCESS_KEY_ID) does not end so.
SECRET_VARIABLE_END = re.compile(
    r"_(?:KEY|TOKEN|SECRET|PASSWORD|PASSPHRASE|PASS|AUTH)$", re.IGNORECASE
)
MIN_SECRET_LENGTH = 8
ANYWHERE_LENGTH = 12

# scheme://user: before a URI's password (see _uri_passwords); a user name ends at a space, a
# quote, '<', '>' or an IPv6 host's '['
_URI_USER = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@\[\]'\"<>]*:")
# scheme://TOKEN@: a user name of 16 characters or more, with no password, is a token sent as
# the user (https://ghp_...@host, which requests sends as basic auth); a shorter
# one (postgres@, git@) is a user's name and stays
_URI_TOKEN_USER = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<secret>[^\s:/?#@\[\]'\"<>]{16,})@"
)
# A quote that ends a quoted value (in a repr, JSON, YAML, a shell line): one not escaped (by a
# backslash, or doubled as YAML and SQL do) and followed by what may follow such a value. A quote
# inside a password is followed by more of it.
_AFTER_QUOTE = r"(?=[\s,;:)\]}>'\"]|$)"
_CLOSING = {
    "'": re.compile(r"(?<![\\'])'(?!')" + _AFTER_QUOTE),
    '"': re.compile(r'(?<![\\"])"(?!")' + _AFTER_QUOTE),
    "\\'": re.compile(r"(?<!\\)\\'" + _AFTER_QUOTE),  # in a repr or JSON itself quoted
    '\\"': re.compile(r'(?<!\\)\\"' + _AFTER_QUOTE),
}
# host:port (or host:/path) and then text: no user info, whatever '@' follows on the line
_PORT = re.compile(r"\d*(?:[/?#\s]|$)")
# name=VALUE in a query string or a key-value connection string
_PAIR = re.compile(
    r"(?P<head>(?<![\w.\-])(?P<name>[A-Za-z][\w.\-]*)\s*=\s*)"
    r"(?P<secret>'[^']*'|\"[^\"]*\"|[^\s&;,#'\"<>)\]}]*[^\s&;,#'\"<>)\]}:.])"
)
# 'name': 'VALUE' (a mapping printed as text: repr or JSON)
_QUOTED_PAIR = re.compile(
    r"(?P<head>(?P<q>['\"])(?P<name>[^'\"\s]+)(?P=q)\s*:\s*)(?P<secret>'[^']*'|\"[^\"]*\")"
)
# Name: VALUE of an HTTP header whose name reads as a credential (X-Api-Key, Private-Token)
_HEADER = re.compile(
    r"(?P<head>(?<![\w.\-])(?P<name>[A-Za-z][\w\-]*-[\w\-]+):[ \t]*)(?P<secret>[^\s'\",;]+)"
)
_AUTH_SCHEME = re.compile(
    r"(?P<head>\bAuthorization['\"]?\s*[:=]\s*['\"]?(?:Bearer|Basic|Token)\s+)"
    r"(?P<secret>[A-Za-z0-9._~+/=\-]+)",
    re.IGNORECASE,
)
_HEX = re.compile(r"[0-9A-Fa-f]+")
_NOT_SECRETS = frozenset({"true", "false", "none", "null", MASK})
_NOT_SECRET_VARIABLES = frozenset({"PWD", "OLDPWD"})  # the shell's folders, not a password

_learnt: set[str] = set()
_lock = threading.Lock()
_pattern_cache: dict[frozenset[str], re.Pattern[str] | None] = {}


def looks_like_credential(name: str) -> bool:
    """True when ``name`` (a key, a dotted key, a variable's name) names a secret."""
    return CREDENTIAL_PATTERN.search(name) is not None


def is_secret_variable(name: str) -> bool:
    """True when the environment variable ``name`` holds a secret (its value is masked)."""
    if name in _NOT_SECRET_VARIABLES:
        return False
    return looks_like_credential(name) or SECRET_VARIABLE_END.search(name) is not None


def redact(value: Any) -> Any:
    """A masked copy of ``value`` (see the module docstring): a string, a mapping (a new
    ``dict``), a list or tuple (same type), each nested value masked; anything else as it is.
    Secrets met on the way are learnt for later calls."""
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, Mapping):
        return {key: _redact_item(str(key), item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        masked = [redact(item) for item in value]
        if isinstance(value, list):
            return masked
        return type(value)(*masked) if hasattr(value, "_fields") else type(value)(masked)
    return value


def learn_secrets(value: Any) -> None:
    """Learn the secrets in ``value`` (as :func:`redact` does) without masking anything: for
    a process that holds a setting before it writes anything of it."""
    redact(value)


def _redact_item(key: str, item: Any) -> Any:
    if not looks_like_credential(key) or item is None or isinstance(item, bool) or item == "":
        return redact(item)
    _learn_all(item)
    return MASK


def _learn_all(item: Any) -> None:
    if isinstance(item, Mapping):
        for nested in item.values():
            _learn_all(nested)
    elif isinstance(item, list | tuple):
        for nested in item:
            _learn_all(nested)
    elif item is not None and not isinstance(item, bool):
        _learn(str(item))


def _learn(secret: str) -> None:
    secret = secret.strip().strip("'\"")
    if len(secret) < MIN_SECRET_LENGTH or secret.lower() in _NOT_SECRETS or MASK in secret:
        return
    plain = re.sub(r"\\(.)", r"\1", secret)  # as written in a repr or JSON: its quotes escaped
    forms = {secret, plain, plain.replace("'", "\\'"), plain.replace('"', '\\"')}
    forms |= {json.dumps(plain)[1:-1], json.dumps(plain, ensure_ascii=False)[1:-1]}
    forms |= {unquote(secret), quote(secret, safe=""), quote(unquote(secret), safe="")}
    if _HEX.fullmatch(secret):  # a key as hex reads the same in either case
        forms |= {secret.lower(), secret.upper()}
    with _lock:
        _learnt.update(f for f in forms if len(f) >= MIN_SECRET_LENGTH)


def _uri_passwords(text: str) -> list[tuple[int, int]]:
    """(start, end) of every URI password in ``text``: after ``scheme://user:``, up to the last
    '@' before the host (as urllib3 reads it; SQLAlchemy stops at the first, masking more is
    safe), any character but a line break (quotes, '<', '>', spaces, '/', '?', '@' included).

    Where the URI ends is read from how it is embedded: in quotes (``'...'``, ``"..."``, JSON's
    ``\\"...\\"``), at the closing one if an '@' comes before it; else at the line's end or the
    next ``scheme://user:``. The password is all up to the last '@' before that end, so that a
    passphrase such as ``my p@ss word`` is masked whole; the price: in ``u:p@h/db is down, ask
    a@b.org`` (unquoted, on one line) ``p@h/db is down, ask a`` is masked. A span holding a space
    that starts as a port is none (``http://h:5000 (by a@b.org)``: a host and its port)."""
    spans: list[tuple[int, int]] = []
    head = _URI_USER.search(text)
    while head is not None:  # each stretch of text is read once: linear in long lines
        start = head.end()
        following = _URI_USER.search(text, start)  # its user info ("a://b" may be a password)
        limit = following.start() if following is not None else len(text)
        if (newline := text.find("\n", start, limit)) >= 0:
            limit = newline
        opener = text[max(0, head.start() - 2) : head.start()]
        opener = opener if opener in _CLOSING else opener[-1:]
        closing = _CLOSING[opener].search(text, start, limit) if opener in _CLOSING else None
        if closing is not None and text.find("@", start, closing.start()) >= 0:
            limit = closing.start()  # else the password holds that quote and what follows it
        at = text.rfind("@", start, limit)
        if at >= 0 and not (any(c.isspace() for c in text[start:at]) and _PORT.match(text, start)):
            spans.append((start, at))
        head = following
    return spans


def _mask_uri_passwords(text: str) -> str:
    pieces, done = [], 0
    for start, end in _uri_passwords(text):
        _learn(text[start:end])
        pieces += [text[done:start], MASK]
        done = end
    return "".join(pieces) + text[done:]


def _mask_token_user(match: re.Match[str]) -> str:
    _learn(match["secret"])
    return f"{match['head']}{MASK}@"


def _mask_group(match: re.Match[str]) -> str:
    _learn(match["secret"])
    return f"{match['head']}{MASK}"


def _mask_named(match: re.Match[str]) -> str:
    if not looks_like_credential(match["name"]):
        return match[0]
    secret = match["secret"]
    quote_char = secret[0] if secret[:1] in ("'", '"') else ""
    _learn(secret)
    return f"{match['head']}{quote_char}{MASK}{quote_char}"


def _redact_text(text: str) -> str:
    _learn_environment()
    # the secrets learnt before, first: a pattern below could take a part of one for a value
    # (in password='it\'s pa55word', the value 'it\'), and the rest no longer reads as the secret
    if (learnt := _literal_pattern()) is not None:
        text = learnt.sub(MASK, text)
    if "://" in text:
        text = _mask_uri_passwords(text)
        text = _URI_TOKEN_USER.sub(_mask_token_user, text)
    if "=" in text:
        text = _PAIR.sub(_mask_named, text)
    if ":" in text and ("'" in text or '"' in text):
        text = _QUOTED_PAIR.sub(_mask_named, text)
    if "uthorization" in text:
        text = _AUTH_SCHEME.sub(_mask_group, text)
    if "-" in text and ":" in text:
        text = _HEADER.sub(_mask_named, text)
    pattern = _literal_pattern()
    return text if pattern is None else pattern.sub(MASK, text)


_ENVIRONMENT_ATTEMPTS = 20


def environment_snapshot() -> dict[str, str]:
    """``os.environ`` as a plain dict, safe while another thread sets and unsets variables.

    ``os.environ.items()`` reads one variable at a time in Python code: one that another thread
    removes in between raises ``KeyError`` (MLflow's telemetry thread sets and unsets
    ``_MLFLOW_TELEMETRY_SESSION_ID``; ``linc-ablation`` once ended in that traceback), and the
    iteration itself may see the mapping change size. CPython keeps the variables in one dict,
    ``os.environ._data``, which one C call copies whole; elsewhere the read is retried.
    """
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        copied = dict(data)  # one C-level copy: no other thread runs in between
        return {os.fsdecode(key): os.fsdecode(value) for key, value in copied.items()}
    for _ in range(_ENVIRONMENT_ATTEMPTS - 1):
        try:
            return dict(os.environ.items())
        except (KeyError, RuntimeError):  # a variable removed, or the mapping resized, meanwhile
            continue
    return dict(os.environ.items())


def _learn_environment() -> None:
    """The secrets of the environment: credential variables' values, URI passwords."""
    for name, value in environment_snapshot().items():
        if not value:
            continue
        if is_secret_variable(name):
            _learn(value)
        elif "://" in value and "@" in value:
            for start, end in _uri_passwords(value):
                _learn(value[start:end])


def _literal_pattern() -> re.Pattern[str] | None:
    with _lock:
        secrets = frozenset(_learnt)
    if secrets not in _pattern_cache:
        parts = []
        for secret in sorted(secrets, key=len, reverse=True):  # the longest form first
            escaped = re.escape(secret)
            if len(secret) < ANYWHERE_LENGTH:  # a short one only as a whole word
                escaped = rf"(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_])"
            parts.append(escaped)
        _pattern_cache.clear()
        _pattern_cache[secrets] = re.compile("|".join(parts)) if parts else None
    return _pattern_cache[secrets]


class RedactSecrets(logging.Filter):
    """A handler's filter that masks every record: its message, its traceback, its stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a broken format: leave it to the handler
            return True
        masked = _redact_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = _redact_text(record.stack_info)
        return True


class _StderrHandler(logging.StreamHandler):
    """What Python's last-resort handler does (warnings and errors, the bare message, to the
    current ``sys.stderr``), as a handler that can carry a filter."""

    def __init__(self) -> None:
        super().__init__()
        self.setLevel(logging.WARNING)

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def redact_logging() -> None:
    """Mask every log record and warning this process prints: :class:`RedactSecrets` on every
    handler present (the root logger gets a last-resort-like one when it has none) and on
    Python's warning text. Idempotent; call again after a library added its own handlers."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_StderrHandler())
    loggers = [root] + [
        logger
        for logger in logging.root.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                handler.addFilter(RedactSecrets())
    if not getattr(warnings.formatwarning, "redacts", False):
        original = warnings.formatwarning

        def formatwarning(*args: Any, **kwargs: Any) -> str:
            return _redact_text(original(*args, **kwargs))

        formatwarning.redacts = True  # type: ignore[attr-defined]
        warnings.formatwarning = formatwarning


__all__ = [
    "ANYWHERE_LENGTH",
    "CREDENTIAL_PATTERN",
    "MASK",
    "MIN_SECRET_LENGTH",
    "SECRET_VARIABLE_END",
    "RedactSecrets",
    "environment_snapshot",
    "is_secret_variable",
    "learn_secrets",
    "looks_like_credential",
    "redact",
    "redact_logging",
]
