from pydantic import Field

from .base_model import BaseModel


class EventHead(BaseModel):
    job_stats: "EventHeadJobStats" = Field(alias="jobStats")


class EventHeadJobStats(BaseModel):
    cursor: str


EventHead.model_rebuild()
