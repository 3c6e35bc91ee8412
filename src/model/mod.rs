//! The job domain, at the bottom of the crate: what a job is, which inputs are valid, and how
//! a phase is derived from a workload's status.
//!
//! This module owns the types every other layer speaks (`Job`, `JobSpec`, `JobPhase`,
//! `JobEvent`, `WorkloadStatus`, `JobFilter`, `Scope`) and the rules over them: input
//! validation and the forward-only phase rules. It imports nothing else of jobgate's and does
//! no I/O, so that the rules can be tested alone and reused unchanged by the store, every
//! executor, the service and the API. Nothing here may import from another module of the
//! crate: everything else imports this.

mod attempt;
mod cause;
mod events;
mod filter;
mod job;
mod json;
mod log_lines;
mod phase;
mod queueing;
mod retry;
mod schedule;
mod scope;
mod shard;
mod spec;
mod timeline;
mod trace;
mod validation;

pub use attempt::{ATTEMPT_FAILED, ATTEMPT_SUCCEEDED, AttemptState, JobAttempt, MAX_ATTEMPTS};
pub use cause::FailureCause;
pub use events::JobEvent;
pub use filter::JobFilter;
pub use job::{
    DEPENDENCIES_SUCCEEDED, DEPENDENCY_FAILED, Job, Transition, WAITING_FOR_DEPENDENCIES, WORKLOAD_CREATED,
};
pub use json::{
    JOB_NESTING, JsonBoundError, MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_JSON_KEY_BYTES, MAX_JSON_MEMBERS,
    check_json,
};
pub use log_lines::{LogArchive, LogGap, LogLine, LogLoss, LogRange, MAX_LOG_LINE, clip_log_line};
pub use phase::{
    Condition, DerivedPhase, JobPhase, MAX_RESULT_BYTES, MappedPhase, Progress, QueuePlace, QueueState,
    QueueStatus, WorkloadStatus, clip,
};
pub use queueing::{
    ADMITTED, BACKING_OFF, DEFAULT_MAX_PRIORITY, LOCAL_QUEUE, PRIORITY_CEILING, PRIORITY_FLOOR,
    PriorityLimits, QueuePolicy, QueueWait, TENANT_LIMIT, WAITING_FOR_CAPACITY,
};
pub use retry::{
    DISRUPTION_TARGET, ExitCodeMatch, ExitCodeOperator, FailedRun, MAX_EXIT_CODE_VALUES, MAX_RETRY_RULES,
    OOM_EXIT_CODE, RetryAction, RetryBackoff, RetryBackoffRequest, RetryContext, RetryPolicy,
    RetryPolicyError, RetryPolicyRequest, RetryRule, RetryRuleRequest, RuleDecision, RuleMatch,
};
pub use schedule::{
    ConcurrencyPolicy, CronRule, Due, MAX_BACKFILL_TICKS, MAX_CRON_BYTES, MAX_SCHEDULE_NAME_BYTES,
    MAX_TICKS_COUNTED, MAX_TIME_ZONE_BYTES, RunCause, Schedule, ScheduleEvent, ScheduleEventKind,
    ScheduleLimits, check_schedule, due_tick, schedule_of, schedule_principal, tick_key, tick_of_key,
};
pub use scope::Scope;
pub use shard::{SHARD_COUNT, SHARD_LABEL, ShardSet, shard_of};
pub use spec::{EnvVar, JobSpec, ResourceList, ResourceRequirements, SubmitRequest, parse_quantity};
pub use timeline::{SegmentKind, TimelineSegment};
pub use trace::{JobTrace, MAX_TRACE_STATE, TraceParent, trace_env};
pub use validation::{
    JOB_CONTAINER, KueueLimits, MAX_DEPENDENCIES, RESERVED_ENV, TemplateInputs, ValidationError,
    ValidationLimits, is_namespace_name, is_queue_name,
};

#[cfg(test)]
mod tests;
