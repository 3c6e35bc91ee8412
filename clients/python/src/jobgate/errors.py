"""The exceptions the client raises: one class per GraphQL error code jobgate answers.

Every error the server sends carries ``extensions.code``; :func:`error_from_graphql` turns it
into the class below of that code (an unknown code is a plain :class:`JobgateError`), with
the server's message. Failures below GraphQL (the server unreachable, a connection cut, an
HTTP status without a GraphQL answer) are :class:`ConnectionFailed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional


class JobgateError(Exception):
    """An error jobgate answered, or the client could not reach it.

    ``code`` is the GraphQL ``extensions.code`` (None for a failure without an answer),
    ``message`` the server's words, ``extensions`` everything else it said, ``path`` where
    in the answer it applies.
    """

    code: Optional[str] = None
    #: Whether trying the same call again later may succeed.
    transient: bool = False

    def __init__(
        self,
        message: str,
        *,
        extensions: Optional[Mapping[str, Any]] = None,
        path: Optional[list[Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.extensions: dict[str, Any] = dict(extensions or {})
        self.path = path

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.code else self.message


class BadUserInput(JobgateError):
    """The input was refused (``BAD_USER_INPUT``); ``field`` names the input path when known."""

    code = "BAD_USER_INPUT"

    @property
    def field(self) -> Optional[str]:
        value = self.extensions.get("field")
        return value if isinstance(value, str) else None


class NotFound(JobgateError):
    """No such job (or one the caller may not see), ``NOT_FOUND``."""

    code = "NOT_FOUND"


class FailedPrecondition(JobgateError):
    """The call cannot apply in the current state (``FAILED_PRECONDITION``)."""

    code = "FAILED_PRECONDITION"


class Unauthenticated(JobgateError):
    """No token, or one the server does not accept (``UNAUTHENTICATED``)."""

    code = "UNAUTHENTICATED"


class Forbidden(JobgateError):
    """The token may not do this (``FORBIDDEN``)."""

    code = "FORBIDDEN"


class Unavailable(JobgateError):
    """The server cannot serve the call right now (``UNAVAILABLE``); retry later."""

    code = "UNAVAILABLE"
    transient = True


class RateLimited(JobgateError):
    """Too many calls (``RATE_LIMITED``); ``retry_after`` seconds when the server said."""

    code = "RATE_LIMITED"
    transient = True

    @property
    def retry_after(self) -> Optional[float]:
        value = self.extensions.get("retryAfterSeconds", self.extensions.get("retryAfter"))
        return float(value) if isinstance(value, (int, float)) else None


class QuotaExceeded(JobgateError):
    """The namespace's quota is used up (``QUOTA_EXCEEDED``)."""

    code = "QUOTA_EXCEEDED"


class LimitExceeded(JobgateError):
    """A server limit was reached (``LIMIT_EXCEEDED``)."""

    code = "LIMIT_EXCEEDED"


class DeadlineExceeded(JobgateError):
    """The server gave up on the call in time (``DEADLINE_EXCEEDED``)."""

    code = "DEADLINE_EXCEEDED"
    transient = True


class CursorExpired(JobgateError):
    """Retention deleted events after the cursor (``CURSOR_EXPIRED``).

    ``oldest_cursor`` is the oldest cursor the server still takes.
    """

    code = "CURSOR_EXPIRED"

    @property
    def oldest_cursor(self) -> Optional[str]:
        value = self.extensions.get("oldestCursor")
        return None if value is None else str(value)


class DataLoss(JobgateError):
    """The server lost data it had accepted (``DATA_LOSS``)."""

    code = "DATA_LOSS"


class ConnectionFailed(JobgateError):
    """The server could not be reached, or the connection broke before an answer.

    Transient, except when the server's TLS certificate was not trusted: trying again
    cannot change that (give the CA as ``verify=``).
    """

    transient = True


class WaitTimeout(JobgateError, TimeoutError):
    """``wait`` ran out of time before the job finished; the job goes on."""


_BY_CODE: dict[str, type[JobgateError]] = {
    cls.code: cls
    for cls in (
        BadUserInput,
        NotFound,
        FailedPrecondition,
        Unauthenticated,
        Forbidden,
        Unavailable,
        RateLimited,
        QuotaExceeded,
        LimitExceeded,
        DeadlineExceeded,
        CursorExpired,
        DataLoss,
    )
    if cls.code is not None
}


def error_from_graphql(error: Mapping[str, Any]) -> JobgateError:
    """The exception for one entry of a GraphQL ``errors`` list."""
    extensions = error.get("extensions")
    extensions = extensions if isinstance(extensions, Mapping) else {}
    code = extensions.get("code")
    message = str(error.get("message", "the server answered an error without a message"))
    path = error.get("path")
    cls = _BY_CODE.get(code, JobgateError) if isinstance(code, str) else JobgateError
    exc = cls(message, extensions=extensions, path=path if isinstance(path, list) else None)
    if cls is JobgateError and isinstance(code, str):
        exc.code = code
    return exc
