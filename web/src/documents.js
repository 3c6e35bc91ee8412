// Every GraphQL document the dashboard sends, in one place, so that a test can check them
// all against the server's schema (web/check-documents.mjs, run by tests/dashboard_documents.rs)
// without a browser: a field renamed or removed on the server fails a fast test.
//
// This module holds plain strings only (no imports, no JSX), so Node can load it as it is.

export const JOB_ROW_FIELDS = `
  id name namespace template phase submittedAt startedAt finishedAt message lastEventCursor
  progress { succeeded failed active ready total }
  queue { name reason position }
`;
export const JOB_FIELDS = `${JOB_ROW_FIELDS}
  result submitter dependencies { id name phase }
  conditions { type status reason message lastTransitionTime }
  queue { name state reason message clusterQueue since position localQueuePosition estimatedStartAt estimate }`;
export const PODS_FIELD = 'pods { name index phase exitCode reason message createdAt finishedAt }';
// A job's runs, each with its own output (read on demand with ATTEMPT_LOG_QUERY).
export const ATTEMPTS_FIELD = `attemptsOmitted
  attempts { name index number state startedAt finishedAt exitCode signal cause reason message pod processId }`;
// Where the job's time went (its trace's segments) and its trace id.
export const TIMELINE_FIELD = `traceId
  timeline { kind name startedAt endedAt durationSeconds attempt exitCode failed }`;
export const STATS_QUERY = `query Stats($windowMinutes: Int!, $bucketSeconds: Int!) {
  jobStats(windowMinutes: $windowMinutes, bucketSeconds: $bucketSeconds) {
    cursor
    counts { pending running succeeded failed cancelled total }
    activity { start submitted succeeded failed cancelled }
  }
}`;
export const EVENTS_SUBSCRIPTION = `subscription Events($after: String) {
  jobEvents(after: $after) {
    cursor phase previousPhase at reason message
    job { ${JOB_ROW_FIELDS} }
  }
}`;
export const JOBS_QUERY = `query Jobs($first: Int!, $after: String, $filter: JobFilter) {
  jobs(first: $first, after: $after, filter: $filter) {
    totalCount
    pageInfo { hasNextPage endCursor }
    edges { node { ${JOB_ROW_FIELDS} } }
  }
}`;
export const NAMESPACES_QUERY = `query { namespaces }`;
export const JOB_QUERY = `query Job($id: ID!) {
  job(id: $id) {
    ${JOB_FIELDS}
    spec {
      image command args env { name value } parallelism completions backoffLimit
      activeDeadlineSeconds parameters serviceAccountName ttlSecondsAfterFinished queueName priority
      resources { requests { cpu memory } limits { cpu memory } }
    }
    events(last: 200) { cursor phase previousPhase at reason message }
    ${PODS_FIELD}
    ${ATTEMPTS_FIELD}
    ${TIMELINE_FIELD}
  }
}`;
// What the detail page re-reads after each new event of its job: the pods, and the fields that
// only jobStatus carries, which pushes phase changes only (a change in Kueue, such as the
// pending reason or the admission, is an event that may keep the phase).
export const JOB_REREAD_QUERY = `query JobReread($id: ID!) { job(id: $id) { ${JOB_FIELDS} ${PODS_FIELD} ${ATTEMPTS_FIELD} ${TIMELINE_FIELD} } }`;
// One attempt's own output, a page at a time (cursors of the job's log).
export const ATTEMPT_LOG_QUERY = `query AttemptLog($id: ID!, $first: Int!, $after: String) {
  job(id: $id) {
    attempts { name logLines(first: $first, after: $after) { edges { node { text source cursor } } pageInfo { hasNextPage endCursor } } }
  }
}`;
export const STATUS_SUBSCRIPTION = `subscription Status($id: ID!) {
  jobStatus(id: $id) { cursor phase previousPhase at reason message job { ${JOB_FIELDS} } }
}`;
export const LOGS_SUBSCRIPTION = `subscription Logs($id: ID!, $tailLines: Int!, $after: String) {
  jobLogs(id: $id, follow: true, tailLines: $tailLines, after: $after) { text source cursor }
}`;
// A page of a job's archived output, for the lines before those the log view shows.
export const LOG_LINES_QUERY = `query LogLines($id: ID!, $first: Int!, $after: String) {
  job(id: $id) {
    logArchive { lines truncated }
    logLines(first: $first, after: $after) { edges { node { text source cursor } } }
  }
}`;
export const CANCEL_MUTATION = `mutation Cancel($id: ID!) { cancelJob(id: $id) { job { ${JOB_FIELDS} } } }`;
export const TEMPLATES_QUERY = `query Templates {
  templates {
    name description kind available unavailableReason parameterSchema
    fields { name label description type required default choices minimum maximum placeholder }
  }
}`;
export const FROM_QUERY = `query From($id: ID!) {
  job(id: $id) {
    name namespace template
    spec {
      image command args env { name value } parallelism completions backoffLimit
      activeDeadlineSeconds parameters serviceAccountName ttlSecondsAfterFinished dependsOn
      resources { requests { cpu memory } limits { cpu memory } }
    }
  }
}`;
export const SUBMIT_MUTATION = `mutation Submit($input: SubmitJobInput!) {
  submitJob(input: $input) { created job { id } }
}`;
export const WEBHOOK_FIELDS = `
  id url state disabledReason cursor lag attempts lastError lastAttemptAt nextAttemptAt createdAt
  filter { phases namespace nameContains }`;
export const WEBHOOKS_QUERY = `query Webhooks { webhooks { ${WEBHOOK_FIELDS} } }`;
export const CREATE_WEBHOOK_MUTATION = `mutation CreateWebhook($input: CreateWebhookInput!) {
  createWebhook(input: $input) { secret webhook { ${WEBHOOK_FIELDS} } }
}`;
export const DELETE_WEBHOOK_MUTATION = `mutation DeleteWebhook($id: ID!) { deleteWebhook(id: $id) { id } }`;
export const SCHEDULE_FIELDS = `
  id name namespace cron timeZone concurrencyPolicy startingDeadlineSeconds suspended owner
  lastFireTime blockedReason nextFireTimes(count: 3)
  recentRuns(last: 5) { tick startedAt job { id name phase } }`;
export const SCHEDULES_QUERY = `query Schedules($first: Int!) {
  schedules(first: $first) { edges { node { ${SCHEDULE_FIELDS} } } }
}`;
export const SCHEDULE_EVENTS_SUBSCRIPTION = `subscription ScheduleEvents($after: String) {
  scheduleEvents(after: $after) { cursor kind scheduleId }
}`;
export const CREATE_SCHEDULE_MUTATION = `mutation CreateSchedule($input: CreateScheduleInput!) {
  createSchedule(input: $input) { schedule { id } }
}`;
export const PAUSE_SCHEDULE_MUTATION = `mutation PauseSchedule($id: ID!) { pauseSchedule(id: $id) { id suspended } }`;
export const RESUME_SCHEDULE_MUTATION = `mutation ResumeSchedule($id: ID!) { resumeSchedule(id: $id) { id suspended } }`;
export const TRIGGER_SCHEDULE_MUTATION = `mutation TriggerSchedule($id: ID!) { triggerSchedule(id: $id) { job { id } } }`;
export const DELETE_SCHEDULE_MUTATION = `mutation DeleteSchedule($id: ID!) { deleteSchedule(id: $id) { schedule { id } } }`;
