from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .fragments import JobFields


class ListJobs(BaseModel):
    jobs: "ListJobsJobs"


class ListJobsJobs(BaseModel):
    edges: list["ListJobsJobsEdges"]
    page_info: "ListJobsJobsPageInfo" = Field(alias="pageInfo")
    partial: bool


class ListJobsJobsEdges(BaseModel):
    cursor: str
    node: "ListJobsJobsEdgesNode"


ListJobsJobsEdgesNode = JobFields


class ListJobsJobsPageInfo(BaseModel):
    has_next_page: bool = Field(alias="hasNextPage")
    end_cursor: Optional[str] = Field(alias="endCursor")


ListJobs.model_rebuild()
ListJobsJobs.model_rebuild()
ListJobsJobsEdges.model_rebuild()
