//! What mutations answer: the job submitted or cancelled, and each submission's own answer
//! of a bulk submission.

use async_graphql::SimpleObject;

use super::JobObject;

#[derive(SimpleObject)]
pub struct SubmitJobPayload {
    pub job: JobObject,
    /// False when an earlier submission with the same idempotencyKey was returned.
    pub created: bool,
}

/// The answer to `submitJobs`: one entry per input, in input order, in `jobs` and `created`;
/// the refused inputs in `errors`, by index.
#[derive(SimpleObject)]
pub struct SubmitJobsPayload {
    /// The job accepted for each input (or the earlier job its idempotencyKey returned), in
    /// input order; null where the input was refused (its reason is in `errors`).
    pub jobs: Vec<Option<JobObject>>,
    /// For each input, in input order: true when this call created its job, false when an
    /// earlier submission with the same idempotencyKey was returned, null when refused.
    pub created: Vec<Option<bool>>,
    /// The inputs that were refused, in input order.
    pub errors: Vec<SubmitJobsError>,
}

/// Why one input of `submitJobs` was refused: the code and message `submitJob` would have
/// answered for it alone.
#[derive(SimpleObject)]
pub struct SubmitJobsError {
    /// Its position in `inputs`, from 0.
    pub index: i32,
    /// `BAD_USER_INPUT`, `FORBIDDEN`, `QUOTA_EXCEEDED`, `UNAVAILABLE`, ... as for `submitJob`.
    pub code: String,
    pub message: String,
    /// For `BAD_USER_INPUT`, the input field at fault, e.g. `inputs[3].command`.
    pub field: Option<String>,
}

#[derive(SimpleObject)]
pub struct CancelJobPayload {
    pub job: JobObject,
}
