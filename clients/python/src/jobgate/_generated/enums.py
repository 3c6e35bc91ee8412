from enum import Enum


class AttemptState(str, Enum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class ConcurrencyPolicy(str, Enum):
    ALLOW = "ALLOW"
    FORBID = "FORBID"
    REPLACE = "REPLACE"


class ExitCodeOperator(str, Enum):
    IN = "IN"
    NOT_IN = "NOT_IN"


class FailureCause(str, Enum):
    ERROR = "ERROR"
    OOM_KILLED = "OOM_KILLED"
    EVICTED = "EVICTED"
    PREEMPTED = "PREEMPTED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    GATEWAY_RESTARTED = "GATEWAY_RESTARTED"
    CANCELLED = "CANCELLED"


class JobPhase(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class QueueState(str, Enum):
    PENDING = "PENDING"
    QUOTA_RESERVED = "QUOTA_RESERVED"
    ADMITTED = "ADMITTED"
    EVICTED = "EVICTED"
    PREEMPTED = "PREEMPTED"
    FINISHED = "FINISHED"


class RetryAction(str, Enum):
    FAIL_JOB = "FAIL_JOB"
    IGNORE = "IGNORE"
    COUNT = "COUNT"
    FAIL_INDEX = "FAIL_INDEX"


class ScheduleEventKind(str, Enum):
    CREATED = "CREATED"
    UPDATED = "UPDATED"
    PAUSED = "PAUSED"
    RESUMED = "RESUMED"
    DELETED = "DELETED"
    FIRED = "FIRED"
    SKIPPED = "SKIPPED"


class TemplateFieldType(str, Enum):
    STRING = "STRING"
    STRING_LIST = "STRING_LIST"
    INT = "INT"
    ENV = "ENV"
    RESOURCES = "RESOURCES"


class TimelineSegmentKind(str, Enum):
    QUEUED = "QUEUED"
    LAUNCHING = "LAUNCHING"
    ATTEMPT = "ATTEMPT"
    FINISHING = "FINISHING"


class WebhookState(str, Enum):
    ACTIVE = "ACTIVE"
    RETRYING = "RETRYING"
    PARKED = "PARKED"
    DISABLED = "DISABLED"
