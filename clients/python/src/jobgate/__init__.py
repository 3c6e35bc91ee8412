"""jobgate's Python client: submit batch jobs, wait for them and follow them live.

``Client`` blocks; ``AsyncClient`` is the same API for asyncio. Both read the server and
token from ``JOBGATE_SERVER`` and ``JOBGATE_TOKEN`` when not given. Errors are the
exceptions of :mod:`jobgate.errors`, one per GraphQL error code.
"""

from ._generated.enums import AttemptState, FailureCause, JobPhase
from ._generated.input_types import SubmitJobInput
from .aio import TERMINAL, AsyncClient, Job, LogLine, StatusEvent, SubmitManyError
from .client import Client
from .errors import (
    BadUserInput,
    ConnectionFailed,
    CursorExpired,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Forbidden,
    JobgateError,
    LimitExceeded,
    NotFound,
    QuotaExceeded,
    RateLimited,
    Unauthenticated,
    Unavailable,
    WaitTimeout,
)

__all__ = [
    "TERMINAL",
    "AsyncClient",
    "AttemptState",
    "BadUserInput",
    "Client",
    "ConnectionFailed",
    "CursorExpired",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FailureCause",
    "Forbidden",
    "Job",
    "JobPhase",
    "JobgateError",
    "LimitExceeded",
    "LogLine",
    "NotFound",
    "QuotaExceeded",
    "RateLimited",
    "StatusEvent",
    "SubmitJobInput",
    "SubmitManyError",
    "Unauthenticated",
    "Unavailable",
    "WaitTimeout",
]
