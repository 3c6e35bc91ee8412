from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import JobPhase
from .fragments import LogLineFields


class JobLogLines(BaseModel):
    job: Optional["JobLogLinesJob"]


class JobLogLinesJob(BaseModel):
    id: str
    phase: JobPhase
    log_lines: "JobLogLinesJobLogLines" = Field(alias="logLines")


class JobLogLinesJobLogLines(BaseModel):
    edges: list["JobLogLinesJobLogLinesEdges"]
    page_info: "JobLogLinesJobLogLinesPageInfo" = Field(alias="pageInfo")


class JobLogLinesJobLogLinesEdges(BaseModel):
    node: "JobLogLinesJobLogLinesEdgesNode"


JobLogLinesJobLogLinesEdgesNode = LogLineFields


class JobLogLinesJobLogLinesPageInfo(BaseModel):
    has_next_page: bool = Field(alias="hasNextPage")
    end_cursor: Optional[str] = Field(alias="endCursor")


JobLogLines.model_rebuild()
JobLogLinesJob.model_rebuild()
JobLogLinesJobLogLines.model_rebuild()
JobLogLinesJobLogLinesEdges.model_rebuild()
