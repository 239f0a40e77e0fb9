"""Secrets out of text: error messages, log lines, anything that may reach a screen or a file.

A server may echo what it was sent (headers, the query string) in an error body, and an HTTP
library may quote a URL in an exception. Everything vastui shows or writes about a failed call
passes through `redact` with the secrets it knows (the Vast API key), and bearer tokens and
`api_key=` parameters are masked whatever their value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
# A secret shorter than this is not masked: replacing every "k" of a log, or every "ab" of a
# fingerprint, hides nothing and corrupts the text. A key this short is refused where it is
# loaded (config/secrets.py); a real Vast key is 64 characters.
MIN_SECRET_LEN = 6

# `Authorization: Bearer <token>` echoed back, in any case, with or without quotes around it.
_BEARER = re.compile(r"(?i)\b(bearer)(\s+|%20|\+)[^\s\"',;&<>\\]+")
# `?api_key=...` / `&api_key=...` / `"api_key": "..."` (the query-parameter form Vast accepts).
_API_KEY_PARAM = re.compile(r"(?i)(api[_-]?key[\"']?\s*[=:]\s*[\"']?)[^\s\"',;&<>\\]+")


def _forms(secret: str) -> set[str]:
    """The spellings a secret can take on its way back: raw, URL-encoded, JSON-escaped."""
    return {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every known secret, bearer token and `api_key` value replaced by `***`."""
    for secret in secrets:
        if not secret or len(secret.strip()) < MIN_SECRET_LEN:
            continue
        # Longest form first, so a shorter form never splits a longer one half-masked.
        for form in sorted(_forms(secret), key=len, reverse=True):
            text = text.replace(form, MASK)
    text = _BEARER.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    return _API_KEY_PARAM.sub(lambda m: f"{m[1]}{MASK}", text)


class SecretFilter(logging.Filter):
    """A logging filter that redacts a record's final message (attach to a logger or handler).

    Records are formatted once here (`getMessage`) so a secret passed as an argument is caught
    as surely as one in the format string; exception text is redacted too.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets: set[str] = {s for s in secrets if s and len(s.strip()) >= MIN_SECRET_LEN}

    def add(self, secret: str | None) -> None:
        if secret and len(secret.strip()) >= MIN_SECRET_LEN:
            self._secrets.add(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: logging reports it itself
            return True
        record.msg = redact(message, self._secrets)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(
                logging.Formatter().formatException(record.exc_info), self._secrets
            )
            record.exc_info = None
        return True
