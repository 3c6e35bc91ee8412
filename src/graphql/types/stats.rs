//! Counts of jobs by phase and recent activity, as one consistent snapshot (`jobStats`).

use async_graphql::SimpleObject;
use chrono::{DateTime, Utc};

use crate::model;

/// Counts by phase and recent activity, as one consistent snapshot.
#[derive(SimpleObject)]
pub struct JobStats {
    /// The cursor of the newest event the snapshot includes ("0" when there is none):
    /// subscribe to `jobEvents(after: cursor)` to keep the figures current with no gap and
    /// no double count.
    pub cursor: String,
    pub counts: PhaseCounts,
    /// Submissions and completions per bucket, oldest first, covering the window up to now.
    /// Buckets are aligned to multiples of `bucketSeconds` since the Unix epoch, so a client
    /// places a live event in its bucket with floor(epochSeconds / bucketSeconds) *
    /// bucketSeconds; the last bucket is the current one.
    pub activity: Vec<ActivityBucketView>,
}

/// How many jobs are in each phase.
#[derive(SimpleObject)]
pub struct PhaseCounts {
    pub pending: i64,
    pub running: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub total: i64,
}

#[derive(SimpleObject)]
#[graphql(name = "ActivityBucket")]
pub struct ActivityBucketView {
    pub start: DateTime<Utc>,
    /// Jobs whose `submittedAt` falls in the bucket.
    pub submitted: i64,
    /// Jobs that entered the phase in the bucket (the `at` of that event).
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
}

impl From<crate::jobs::service::Stats> for JobStats {
    fn from(stats: crate::jobs::service::Stats) -> Self {
        let count = |p| stats.counts.get(&p).copied().unwrap_or(0);
        Self {
            cursor: stats.cursor.to_string(),
            counts: PhaseCounts {
                pending: count(model::JobPhase::Pending),
                running: count(model::JobPhase::Running),
                succeeded: count(model::JobPhase::Succeeded),
                failed: count(model::JobPhase::Failed),
                cancelled: count(model::JobPhase::Cancelled),
                total: stats.counts.values().sum(),
            },
            activity: stats
                .activity
                .into_iter()
                .map(|b| ActivityBucketView {
                    start: DateTime::from_timestamp(b.start, 0).unwrap_or(DateTime::UNIX_EPOCH),
                    submitted: b.submitted,
                    succeeded: b.succeeded,
                    failed: b.failed,
                    cancelled: b.cancelled,
                })
                .collect(),
        }
    }
}
