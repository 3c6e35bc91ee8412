from pydantic import Field

from .base_model import BaseModel
from .fragments import JobFields


class CancelJob(BaseModel):
    cancel_job: "CancelJobCancelJob" = Field(alias="cancelJob")


class CancelJobCancelJob(BaseModel):
    job: "CancelJobCancelJobJob"


CancelJobCancelJobJob = JobFields
CancelJob.model_rebuild()
CancelJobCancelJob.model_rebuild()
