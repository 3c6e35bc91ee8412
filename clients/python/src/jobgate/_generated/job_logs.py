from pydantic import Field

from .base_model import BaseModel
from .fragments import LogLineFields


class JobLogs(BaseModel):
    job_logs: "JobLogsJobLogs" = Field(alias="jobLogs")


JobLogsJobLogs = LogLineFields
JobLogs.model_rebuild()
