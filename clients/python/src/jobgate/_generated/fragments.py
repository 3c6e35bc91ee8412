from datetime import datetime
from typing import Any, Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import (
    AttemptState,
    ExitCodeOperator,
    FailureCause,
    JobPhase,
    QueueState,
    RetryAction,
)


class JobFields(BaseModel):
    id: str
    name: Optional[str]
    namespace: str
    template: str
    phase: JobPhase
    submitted_at: datetime = Field(alias="submittedAt")
    started_at: Optional[datetime] = Field(alias="startedAt")
    finished_at: Optional[datetime] = Field(alias="finishedAt")
    message: Optional[str]
    result: Optional[str]
    last_event_cursor: str = Field(alias="lastEventCursor")
    submitter: Optional[str]
    depends_on: list[str] = Field(alias="dependsOn")
    progress: Optional["JobFieldsProgress"]
    queue: Optional["JobFieldsQueue"]
    attempts: list["JobFieldsAttempts"]
    spec: "JobFieldsSpec"


class JobFieldsProgress(BaseModel):
    succeeded: int
    failed: int
    active: int
    ready: int
    total: Optional[int]


class JobFieldsQueue(BaseModel):
    name: str
    state: QueueState
    reason: Optional[str]
    message: Optional[str]


class JobFieldsAttempts(BaseModel):
    name: str
    index: int
    number: int
    state: AttemptState
    started_at: Optional[datetime] = Field(alias="startedAt")
    finished_at: Optional[datetime] = Field(alias="finishedAt")
    exit_code: Optional[int] = Field(alias="exitCode")
    signal: Optional[int]
    cause: Optional[FailureCause]
    reason: Optional[str]
    message: Optional[str]
    pod: Optional[str]


class JobFieldsSpec(BaseModel):
    image: Optional[str]
    command: list[str]
    args: list[str]
    env: list["JobFieldsSpecEnv"]
    parallelism: int
    completions: int
    backoff_limit: int = Field(alias="backoffLimit")
    active_deadline_seconds: Optional[int] = Field(alias="activeDeadlineSeconds")
    parameters: Optional[Any]
    idempotency_key: Optional[str] = Field(alias="idempotencyKey")
    service_account_name: Optional[str] = Field(alias="serviceAccountName")
    ttl_seconds_after_finished: Optional[int] = Field(alias="ttlSecondsAfterFinished")
    queue_name: Optional[str] = Field(alias="queueName")
    depends_on: list[str] = Field(alias="dependsOn")
    resources: Optional["JobFieldsSpecResources"]
    retry_policy: Optional["JobFieldsSpecRetryPolicy"] = Field(alias="retryPolicy")


class JobFieldsSpecEnv(BaseModel):
    name: str
    value: str


class JobFieldsSpecResources(BaseModel):
    requests: "JobFieldsSpecResourcesRequests"
    limits: "JobFieldsSpecResourcesLimits"


class JobFieldsSpecResourcesRequests(BaseModel):
    cpu: Optional[str]
    memory: Optional[str]


class JobFieldsSpecResourcesLimits(BaseModel):
    cpu: Optional[str]
    memory: Optional[str]


class JobFieldsSpecRetryPolicy(BaseModel):
    rules: list["JobFieldsSpecRetryPolicyRules"]
    backoff: Optional["JobFieldsSpecRetryPolicyBackoff"]
    backoff_limit_per_index: Optional[int] = Field(alias="backoffLimitPerIndex")
    max_failed_indexes: Optional[int] = Field(alias="maxFailedIndexes")


class JobFieldsSpecRetryPolicyRules(BaseModel):
    action: RetryAction
    exit_codes: Optional["JobFieldsSpecRetryPolicyRulesExitCodes"] = Field(
        alias="exitCodes"
    )
    causes: Optional[list[FailureCause]]


class JobFieldsSpecRetryPolicyRulesExitCodes(BaseModel):
    operator: ExitCodeOperator
    values: list[int]
    container_name: Optional[str] = Field(alias="containerName")


class JobFieldsSpecRetryPolicyBackoff(BaseModel):
    initial_seconds: float = Field(alias="initialSeconds")
    max_seconds: float = Field(alias="maxSeconds")
    factor: float
    jitter: float


class LogLineFields(BaseModel):
    text: str
    source: Optional[str]
    cursor: Optional[str]


class StatusEventFields(BaseModel):
    cursor: str
    phase: JobPhase
    previous_phase: Optional[JobPhase] = Field(alias="previousPhase")
    at: datetime
    reason: Optional[str]
    message: Optional[str]
    job: "StatusEventFieldsJob"


class StatusEventFieldsJob(JobFields):
    pass


JobFields.model_rebuild()
LogLineFields.model_rebuild()
StatusEventFields.model_rebuild()
