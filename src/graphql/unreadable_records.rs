//! The administrators' view of stored rows that cannot be decoded (`unreadableRecords`).
//!
//! It only translates what the job service lists; it decides nothing about who may see it
//! (the service does).

use async_graphql::{ID, SimpleObject};
use chrono::{DateTime, Utc};

use crate::jobs::service::UnreadableRecord;

/// A stored row jobgate cannot decode (edited by hand, damaged on disk). It is left out of
/// every answer while everything else is served; a read of it alone answers `DATA_LOSS`. It
/// leaves this list once it reads whole again (repaired) or is deleted and read no more.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "UnreadableRecord")]
pub struct UnreadableRecordObject {
    /// `job` (a job's row), `event` (the job snapshot of one status event) or `webhook`.
    pub kind: String,
    /// The row's key: a job's or webhook's id, an event's cursor.
    pub key: String,
    /// The job the row belongs to, when known.
    pub job_id: Option<ID>,
    /// Why it cannot be decoded.
    pub error: String,
    /// When this process first found it.
    pub first_seen: DateTime<Utc>,
}

impl From<UnreadableRecord> for UnreadableRecordObject {
    fn from(r: UnreadableRecord) -> Self {
        Self {
            kind: r.kind.to_owned(),
            key: r.key,
            job_id: r.job_id.map(ID),
            error: r.error,
            first_seen: r.first_seen,
        }
    }
}
