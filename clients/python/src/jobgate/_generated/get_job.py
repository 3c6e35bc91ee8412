from typing import Optional

from .base_model import BaseModel
from .fragments import JobFields


class GetJob(BaseModel):
    job: Optional["GetJobJob"]


GetJobJob = JobFields
GetJob.model_rebuild()
