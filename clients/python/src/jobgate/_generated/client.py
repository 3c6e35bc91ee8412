from collections.abc import AsyncIterator
from typing import Any, Optional, Union

from .base_client import BaseClient
from .base_model import UNSET, UnsetType
from .cancel_job import CancelJob
from .event_head import EventHead
from .get_job import GetJob
from .input_types import JobFilter, SubmitJobInput
from .job_events import JobEvents
from .job_log_lines import JobLogLines
from .job_logs import JobLogs
from .job_status import JobStatus
from .list_jobs import ListJobs
from .submit_job import SubmitJob
from .submit_jobs import SubmitJobs


def gql(q: str) -> str:
    return q


class Operations(BaseClient):
    async def event_head(self, **kwargs: Any) -> EventHead:
        query = gql("""
            query EventHead {
              jobStats(windowMinutes: 1, bucketSeconds: 60) {
                cursor
              }
            }
            """)
        variables: dict[str, object] = {}
        response = await self.execute(
            query=query, operation_name="EventHead", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return EventHead.model_validate(data)

    async def get_job(self, id: str, **kwargs: Any) -> GetJob:
        query = gql("""
            query GetJob($id: ID!) {
              job(id: $id) {
                ...JobFields
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }
            """)
        variables: dict[str, object] = {"id": id}
        response = await self.execute(
            query=query, operation_name="GetJob", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return GetJob.model_validate(data)

    async def list_jobs(
        self,
        first: Union[Optional[int], UnsetType] = UNSET,
        after: Union[Optional[str], UnsetType] = UNSET,
        filter_: Union[Optional[JobFilter], UnsetType] = UNSET,
        **kwargs: Any,
    ) -> ListJobs:
        query = gql("""
            query ListJobs($first: Int, $after: String, $filter: JobFilter) {
              jobs(first: $first, after: $after, filter: $filter) {
                edges {
                  cursor
                  node {
                    ...JobFields
                  }
                }
                pageInfo {
                  hasNextPage
                  endCursor
                }
                partial
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }
            """)
        variables: dict[str, object] = {
            "first": first,
            "after": after,
            "filter": filter_,
        }
        response = await self.execute(
            query=query, operation_name="ListJobs", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return ListJobs.model_validate(data)

    async def job_log_lines(
        self,
        id: str,
        first: int,
        after: Union[Optional[str], UnsetType] = UNSET,
        **kwargs: Any,
    ) -> JobLogLines:
        query = gql("""
            query JobLogLines($id: ID!, $first: Int!, $after: String) {
              job(id: $id) {
                id
                phase
                logLines(first: $first, after: $after) {
                  edges {
                    node {
                      ...LogLineFields
                    }
                  }
                  pageInfo {
                    hasNextPage
                    endCursor
                  }
                }
              }
            }

            fragment LogLineFields on LogLine {
              text
              source
              cursor
            }
            """)
        variables: dict[str, object] = {"id": id, "first": first, "after": after}
        response = await self.execute(
            query=query, operation_name="JobLogLines", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return JobLogLines.model_validate(data)

    async def submit_job(self, input: SubmitJobInput, **kwargs: Any) -> SubmitJob:
        query = gql("""
            mutation SubmitJob($input: SubmitJobInput!) {
              submitJob(input: $input) {
                created
                job {
                  ...JobFields
                }
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query, operation_name="SubmitJob", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return SubmitJob.model_validate(data)

    async def submit_jobs(
        self, inputs: list[SubmitJobInput], **kwargs: Any
    ) -> SubmitJobs:
        query = gql("""
            mutation SubmitJobs($inputs: [SubmitJobInput!]!) {
              submitJobs(inputs: $inputs) {
                created
                jobs {
                  ...JobFields
                }
                errors {
                  index
                  code
                  message
                  field
                }
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }
            """)
        variables: dict[str, object] = {"inputs": inputs}
        response = await self.execute(
            query=query, operation_name="SubmitJobs", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return SubmitJobs.model_validate(data)

    async def cancel_job(self, id: str, **kwargs: Any) -> CancelJob:
        query = gql("""
            mutation CancelJob($id: ID!) {
              cancelJob(id: $id) {
                job {
                  ...JobFields
                }
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }
            """)
        variables: dict[str, object] = {"id": id}
        response = await self.execute(
            query=query, operation_name="CancelJob", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return CancelJob.model_validate(data)

    async def job_status(self, id: str, **kwargs: Any) -> AsyncIterator[JobStatus]:
        query = gql("""
            subscription JobStatus($id: ID!) {
              jobStatus(id: $id) {
                ...StatusEventFields
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }

            fragment StatusEventFields on JobStatusEvent {
              cursor
              phase
              previousPhase
              at
              reason
              message
              job {
                ...JobFields
              }
            }
            """)
        variables: dict[str, object] = {"id": id}
        async for data in self.execute_ws(
            query=query, operation_name="JobStatus", variables=variables, **kwargs
        ):
            yield JobStatus.model_validate(data)

    async def job_events(
        self,
        filter_: Union[Optional[JobFilter], UnsetType] = UNSET,
        after: Union[Optional[str], UnsetType] = UNSET,
        job_id: Union[Optional[str], UnsetType] = UNSET,
        **kwargs: Any,
    ) -> AsyncIterator[JobEvents]:
        query = gql("""
            subscription JobEvents($filter: JobFilter, $after: String, $jobId: ID) {
              jobEvents(filter: $filter, after: $after, jobId: $jobId) {
                ...StatusEventFields
              }
            }

            fragment JobFields on Job {
              id
              name
              namespace
              template
              phase
              submittedAt
              startedAt
              finishedAt
              message
              result
              lastEventCursor
              submitter
              dependsOn
              progress {
                succeeded
                failed
                active
                ready
                total
              }
              queue {
                name
                state
                reason
                message
              }
              attempts {
                name
                index
                number
                state
                startedAt
                finishedAt
                exitCode
                signal
                cause
                reason
                message
                pod
              }
              spec {
                image
                command
                args
                env {
                  name
                  value
                }
                parallelism
                completions
                backoffLimit
                activeDeadlineSeconds
                parameters
                idempotencyKey
                serviceAccountName
                ttlSecondsAfterFinished
                queueName
                dependsOn
                resources {
                  requests {
                    cpu
                    memory
                  }
                  limits {
                    cpu
                    memory
                  }
                }
                retryPolicy {
                  rules {
                    action
                    exitCodes {
                      operator
                      values
                      containerName
                    }
                    causes
                  }
                  backoff {
                    initialSeconds
                    maxSeconds
                    factor
                    jitter
                  }
                  backoffLimitPerIndex
                  maxFailedIndexes
                }
              }
            }

            fragment StatusEventFields on JobStatusEvent {
              cursor
              phase
              previousPhase
              at
              reason
              message
              job {
                ...JobFields
              }
            }
            """)
        variables: dict[str, object] = {
            "filter": filter_,
            "after": after,
            "jobId": job_id,
        }
        async for data in self.execute_ws(
            query=query, operation_name="JobEvents", variables=variables, **kwargs
        ):
            yield JobEvents.model_validate(data)

    async def job_logs(
        self,
        id: str,
        follow: bool,
        tail_lines: int,
        after: Union[Optional[str], UnsetType] = UNSET,
        **kwargs: Any,
    ) -> AsyncIterator[JobLogs]:
        query = gql("""
            subscription JobLogs($id: ID!, $follow: Boolean!, $tailLines: Int!, $after: String) {
              jobLogs(id: $id, follow: $follow, tailLines: $tailLines, after: $after) {
                ...LogLineFields
              }
            }

            fragment LogLineFields on LogLine {
              text
              source
              cursor
            }
            """)
        variables: dict[str, object] = {
            "id": id,
            "follow": follow,
            "tailLines": tail_lines,
            "after": after,
        }
        async for data in self.execute_ws(
            query=query, operation_name="JobLogs", variables=variables, **kwargs
        ):
            yield JobLogs.model_validate(data)
