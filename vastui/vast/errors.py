"""Typed errors for Vast.ai API calls. Each carries the server's `msg` when it sent one."""

from __future__ import annotations

from collections.abc import Callable

from vastui.sanitize import sanitize_line


class VastError(Exception):
    """Base class. `str()` is always one line that an operator can act on."""


class VastHTTPError(VastError):
    """The server answered with an error status."""

    def __init__(
        self, status: int, msg: str, *, code: str | None = None, endpoint: str = ""
    ) -> None:
        self.status = status
        self.msg = msg
        self.code = code
        self.endpoint = endpoint
        where = f" on {endpoint}" if endpoint else ""
        tag = f" [{code}]" if code else ""
        super().__init__(f"Vast API error {status}{tag}{where}: {msg}")


class VastAuthError(VastHTTPError):
    """401/403: bad, deleted or under-scoped API key."""

    def __str__(self) -> str:
        return f"Vast API key rejected ({self.status} on {self.endpoint or 'request'}): {self.msg}"


class VastNotFound(VastHTTPError):
    """404/410: no such offer or instance."""


class VastRateLimited(VastHTTPError):
    """429 still standing after the retry budget (or a daily quota, never retried)."""


class VastServerError(VastHTTPError):
    """5xx still standing after the retry budget."""


class VastUnreachable(VastError):
    """Connection errors or timeouts still standing after the retry budget."""

    def __init__(self, base_url: str, detail: str) -> None:
        self.base_url = base_url
        self.detail = detail
        super().__init__(f"Vast API unreachable at {base_url}: {detail}")


class VastProtocolError(VastError):
    """The server answered 200 with something we cannot use (bad JSON, wrong shape)."""


class VastMalformedResponse(VastProtocolError):
    """The answer could not be decoded safely (bad JSON, too deeply nested, absurd numbers)."""

    def __init__(self, endpoint: str, detail: str) -> None:
        self.endpoint = endpoint
        where = f" to {endpoint}" if endpoint else ""
        super().__init__(f"malformed response from Vast{where}: {detail}")


class VastResponseTooLarge(VastProtocolError):
    """The answer grew past the size limit for its endpoint; the rest was not read."""

    def __init__(self, endpoint: str, limit: int) -> None:
        self.endpoint = endpoint
        self.limit = limit
        super().__init__(
            f"response from Vast to {endpoint} is larger than {_size(limit)}; not read further"
        )


def _size(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} bytes"


class CreateOutcomeUnknown(VastError):
    """A create request failed ambiguously and no instance with its label was found.

    The caller must not blindly retry: the instance may still appear. Reconcile by label later.
    """

    def __init__(self, offer_id: int, label: str, detail: str) -> None:
        self.offer_id = offer_id
        self.label = label
        super().__init__(
            f"create on offer {offer_id} (label {label}) has an unknown outcome: {detail}; "
            "not retried, reconcile by label"
        )


class CreateAnswerInvalid(CreateOutcomeUnknown):
    """The create answered success with an unusable `new_contract` and no instance with the
    label was found yet: the rent may exist, so it is resolved by label, never re-sent."""


def _identity(text: str) -> str:
    return text


def error_from_response(
    status: int,
    body: object,
    text: str,
    endpoint: str,
    redact: Callable[[str], str] = _identity,
) -> VastHTTPError:
    """Build the typed error for a non-2xx answer, pulling Vast's `msg`/`error` out of the body.

    The body is the server's text: it is redacted (it may echo our key) and made display-safe
    before it goes into a message that reaches logs and screens.
    """
    code: str | None = None
    msg = ""
    if isinstance(body, dict):
        raw_code = body.get("error")
        code = sanitize_line(redact(raw_code), 80) if isinstance(raw_code, str) else None
        for key in ("msg", "message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                msg = value
                break
    if not msg:
        msg = " ".join(text.split()) or "(empty body)"
    # Redact the whole text before cutting it, so a cut never leaves half a secret behind.
    msg = sanitize_line(redact(msg), 300)
    cls: type[VastHTTPError]
    if status in (401, 403):
        cls = VastAuthError
    elif status in (404, 410):
        cls = VastNotFound
    elif status == 429:
        cls = VastRateLimited
    elif status >= 500:
        cls = VastServerError
    else:
        cls = VastHTTPError
    return cls(status, msg, code=code, endpoint=endpoint)
