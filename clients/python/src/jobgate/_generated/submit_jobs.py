from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .fragments import JobFields


class SubmitJobs(BaseModel):
    submit_jobs: "SubmitJobsSubmitJobs" = Field(alias="submitJobs")


class SubmitJobsSubmitJobs(BaseModel):
    created: list[Optional[bool]]
    jobs: list[Optional["SubmitJobsSubmitJobsJobs"]]
    errors: list["SubmitJobsSubmitJobsErrors"]


SubmitJobsSubmitJobsJobs = JobFields


class SubmitJobsSubmitJobsErrors(BaseModel):
    index: int
    code: str
    message: str
    field: Optional[str]


SubmitJobs.model_rebuild()
SubmitJobsSubmitJobs.model_rebuild()
