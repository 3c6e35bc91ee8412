from pydantic import Field

from .base_model import BaseModel
from .fragments import JobFields


class SubmitJob(BaseModel):
    submit_job: "SubmitJobSubmitJob" = Field(alias="submitJob")


class SubmitJobSubmitJob(BaseModel):
    created: bool
    job: "SubmitJobSubmitJobJob"


SubmitJobSubmitJobJob = JobFields
SubmitJob.model_rebuild()
SubmitJobSubmitJob.model_rebuild()
