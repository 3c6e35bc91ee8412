from typing import Any, Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import (
    ConcurrencyPolicy,
    ExitCodeOperator,
    FailureCause,
    JobPhase,
    RetryAction,
)


class CreateScheduleInput(BaseModel):
    """A new schedule."""

    name: str
    "Unique in its namespace; 1 to 128 bytes."
    cron: str
    "Five fields (minute hour day month weekday), or six with seconds first; at most 256\nbytes."
    time_zone: Optional[str] = Field(alias="timeZone", default=None)
    "An IANA time zone (`Europe/Berlin`); default `UTC`."
    concurrency_policy: Optional[ConcurrencyPolicy] = Field(
        alias="concurrencyPolicy", default=None
    )
    "Default ALLOW."
    starting_deadline_seconds: Optional[int] = Field(
        alias="startingDeadlineSeconds", default=None
    )
    "How late (1 to 604800 s) a tick may still start, after downtime; default: however\nlate. Of several missed ticks only the latest ever starts."
    suspended: Optional[bool] = None
    "Created paused. Default false."
    job: "SubmitJobInput"
    "What each tick submits, checked as `submitJob` checks it (no idempotencyKey: each\ntick has its own)."


class CreateWebhookInput(BaseModel):
    url: str
    "Where to POST each event: an http:// or https:// URL on a public address."
    filter_: Optional["JobFilter"] = Field(alias="filter", default=None)
    "Which jobs' events to deliver (as for `jobEvents`); every job in the caller's\nnamespaces when omitted."


class EnvVarInput(BaseModel):
    name: str
    value: str


class ExitCodesInput(BaseModel):
    """Exit codes a rule matches: a run's non-zero exit code (a signal N counts as 128 + N) is
    (`IN`) or is not (`NOT_IN`) one of `values` (1 to 255 of them, each 0 to 255; 0 only with
    `NOT_IN`)."""

    operator: ExitCodeOperator
    values: list[int]
    container_name: Optional[str] = Field(alias="containerName", default=None)
    "Only this container's exit code (templates of batch/v1 Jobs with several containers);\nthe `container` template's one container is `job`. Every container's when omitted."


class JobFilter(BaseModel):
    phases: Optional[list[JobPhase]] = None
    "Only jobs in one of these phases."
    namespace: Optional[str] = None
    name_contains: Optional[str] = Field(alias="nameContains", default=None)
    "Only jobs whose name contains this text (case-sensitive)."


class ResourceListInput(BaseModel):
    """Kubernetes quantities, e.g. cpu `500m` or `2`, memory `256Mi` or `1G`."""

    cpu: Optional[str] = None
    memory: Optional[str] = None


class ResourcesInput(BaseModel):
    """What each run requests (for scheduling) and may use at most."""

    requests: Optional["ResourceListInput"] = None
    limits: Optional["ResourceListInput"] = None


class RetryBackoffInput(BaseModel):
    """The delay before a failed run is retried: `initialSeconds × factor^(n−1)` after the n-th
    failure (of its index, with `backoffLimitPerIndex`; of the job otherwise), at most
    `maxSeconds`, less a random part of up to `jitter` (0 to 1) of it.
    Omitted fields take the Job controller's values (10, 360, 2, 0). Local executor only: the
    Kubernetes Job controller's back-off is fixed."""

    initial_seconds: Optional[float] = Field(alias="initialSeconds", default=None)
    max_seconds: Optional[float] = Field(alias="maxSeconds", default=None)
    factor: Optional[float] = None
    jitter: Optional[float] = None


class RetryPolicyInput(BaseModel):
    """How failed runs are retried. On Kubernetes it becomes the Job's `podFailurePolicy`,
    `backoffLimitPerIndex` and `maxFailedIndexes`; the local executor applies the same rules."""

    rules: Optional[list["RetryRuleInput"]] = None
    "Ordered rules (at most 20); the first that matches a failed run decides. A failure\nno rule matches counts against `backoffLimit`."
    backoff: Optional["RetryBackoffInput"] = None
    backoff_limit_per_index: Optional[int] = Field(
        alias="backoffLimitPerIndex", default=None
    )
    "Indexed jobs (completions of 2 or more): failures each index may have before it fails;\nthe job's `backoffLimit` is then unbounded unless given."
    max_failed_indexes: Optional[int] = Field(alias="maxFailedIndexes", default=None)
    "With `backoffLimitPerIndex`: the job fails (`MaxFailedIndexesExceeded`) once more\nindexes than this have failed."


class RetryRuleInput(BaseModel):
    """One rule: an action and exactly one of `exitCodes` or `causes`."""

    action: RetryAction
    exit_codes: Optional["ExitCodesInput"] = Field(alias="exitCodes", default=None)
    causes: Optional[list[FailureCause]] = None
    "`OOM_KILLED` (exit code 137), or `EVICTED` and/or `PREEMPTED` (on Kubernetes both\nmatch any pod with the `DisruptionTarget` condition); not both kinds in one rule."


class SubmitJobInput(BaseModel):
    """What to run. Omitted counts default as in a batch/v1 Job: parallelism 1, completions 1,
    backoffLimit 6."""

    name: Optional[str] = None
    "A DNS-1123 label naming the job (not unique)."
    namespace: Optional[str] = None
    "Defaults to the server's default namespace."
    template: Optional[str] = None
    "The workload template; `container` (the default) runs `command` + `args`."
    image: Optional[str] = None
    "The container image (used by the Kubernetes executor; the local executor ignores it)."
    command: Optional[list[str]] = None
    args: Optional[list[str]] = None
    env: Optional[list["EnvVarInput"]] = None
    parallelism: Optional[int] = None
    "How many runs at once."
    completions: Optional[int] = None
    "How many successful runs complete the job; each run gets `JOB_COMPLETION_INDEX`."
    backoff_limit: Optional[int] = Field(alias="backoffLimit", default=None)
    "How many failed runs are retried before the job fails."
    active_deadline_seconds: Optional[int] = Field(
        alias="activeDeadlineSeconds", default=None
    )
    "Seconds from start after which the job fails with `DeadlineExceeded`."
    parameters: Optional[Any] = None
    idempotency_key: Optional[str] = Field(alias="idempotencyKey", default=None)
    "Retrying with the same key and the same input returns the same job."
    resources: Optional["ResourcesInput"] = None
    "CPU and memory for each run's container (Kubernetes executor)."
    service_account_name: Optional[str] = Field(
        alias="serviceAccountName", default=None
    )
    "The Kubernetes service account the job's pods run as; one of those the server allows."
    ttl_seconds_after_finished: Optional[int] = Field(
        alias="ttlSecondsAfterFinished", default=None
    )
    "Seconds after the job finishes before Kubernetes deletes its Job; jobgate keeps the\nhistory, the result and the log tail it captured as each pod ended (with 0 the pods may\nbe gone before their logs can be read). The server's default when omitted."
    depends_on: Optional[list[str]] = Field(alias="dependsOn", default=None)
    "Jobs that must succeed first (at most 100). The job stays PENDING with reason\n`WaitingForDependencies` until they all have, and fails with `DependencyFailed` if one\nof them fails or is cancelled."
    queue_name: Optional[str] = Field(alias="queueName", default=None)
    "The Kueue LocalQueue the job waits in for admission (servers with Kueue integration;\nthe server's default queue when omitted). Refused for templates whose kind Kueue\ncannot queue. The job stays PENDING, its `queue` saying why, until Kueue admits it."
    retry_policy: Optional["RetryPolicyInput"] = Field(
        alias="retryPolicy", default=None
    )
    "Which failed runs fail the job at once, are retried without counting, count, or fail\ntheir index; the back-off between runs; limits per index. The `container` template\nand templates of batch/v1 Jobs that list it take one; other templates refuse it."
    priority: Optional[int] = None
    "Where the job goes in its queue: a tenant's jobs of higher priority start first\n(0 when omitted). The server may cap it per tenant."


class UpdateScheduleInput(BaseModel):
    """Changes to a schedule: the fields given replace the schedule's."""

    name: Optional[str] = None
    cron: Optional[str] = None
    time_zone: Optional[str] = Field(alias="timeZone", default=None)
    concurrency_policy: Optional[ConcurrencyPolicy] = Field(
        alias="concurrencyPolicy", default=None
    )
    starting_deadline_seconds: Optional[int] = Field(
        alias="startingDeadlineSeconds", default=None
    )
    clear_starting_deadline: Optional[bool] = Field(
        alias="clearStartingDeadline", default=None
    )
    "Removes the starting deadline."
    suspended: Optional[bool] = None
    job: Optional["SubmitJobInput"] = None
    "Replaces the whole submission (in the same namespace)."


CreateScheduleInput.model_rebuild()
CreateWebhookInput.model_rebuild()
ResourcesInput.model_rebuild()
RetryPolicyInput.model_rebuild()
RetryRuleInput.model_rebuild()
SubmitJobInput.model_rebuild()
UpdateScheduleInput.model_rebuild()
