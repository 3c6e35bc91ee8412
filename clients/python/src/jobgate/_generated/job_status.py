from pydantic import Field

from .base_model import BaseModel
from .fragments import StatusEventFields


class JobStatus(BaseModel):
    job_status: "JobStatusJobStatus" = Field(alias="jobStatus")


JobStatusJobStatus = StatusEventFields
JobStatus.model_rebuild()
