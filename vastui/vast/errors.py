"""Typed errors for Vast.ai API calls. Each carries the server's `msg` when it sent one."""

from __future__ import annotations


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


def error_from_response(status: int, body: object, text: str, endpoint: str) -> VastHTTPError:
    """Build the typed error for a non-2xx answer, pulling Vast's `msg`/`error` out of the body."""
    code: str | None = None
    msg = ""
    if isinstance(body, dict):
        raw_code = body.get("error")
        code = raw_code if isinstance(raw_code, str) else None
        for key in ("msg", "message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                msg = value
                break
    if not msg:
        msg = " ".join(text.split())[:300] or "(empty body)"
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
