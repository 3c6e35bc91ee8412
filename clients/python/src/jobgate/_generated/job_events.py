from pydantic import Field

from .base_model import BaseModel
from .fragments import StatusEventFields


class JobEvents(BaseModel):
    job_events: "JobEventsJobEvents" = Field(alias="jobEvents")


JobEventsJobEvents = StatusEventFields
JobEvents.model_rebuild()
