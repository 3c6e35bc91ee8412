//! The TTL-after-finished controller: a Job with `spec.ttlSecondsAfterFinished` is deleted that
//! many seconds after its `Complete`/`Failed` condition's `lastTransitionTime`, the way the real
//! controller deletes it: foreground propagation (the Job gets `deletionTimestamp` and the
//! `foregroundDeletion` finalizer; the garbage collector removes its pods, then the finalizer)
//! with a uid precondition, so a Job re-created under the same name is never hit. One timer per
//! Job; a Job whose TTL changes is simply re-evaluated.
//!
//! It deletes finished Jobs and nothing else.

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use super::objects::{self, FOREGROUND_FINALIZER, is_deleting, str_at};
use super::runner::Reconciler;
use crate::store::{Change, ChangeKind, Store, StoreError, now_timestamp};

type JobKey = (String, String);

#[derive(Debug, thiserror::Error)]
pub(crate) enum TtlError {
    #[error("deleting expired job {job}: {source}")]
    Delete { job: String, source: StoreError },
}

/// Keeps no state: the Job's conditions and TTL say everything, and the runner keeps the timers.
pub(crate) struct TtlController;

fn ttl_seconds(job: &Value) -> Option<i64> {
    job.pointer("/spec/ttlSecondsAfterFinished")
        .and_then(Value::as_i64)
        .filter(|t| *t >= 0)
}

/// When the Job finished: the `lastTransitionTime` of its True `Complete` or `Failed` condition.
fn finished_at(job: &Value) -> Option<chrono::DateTime<Utc>> {
    job.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find_map(|c| {
            let kind = str_at(c, "/type")?;
            if (kind == "Complete" || kind == "Failed") && str_at(c, "/status") == Some("True") {
                objects::parse_time(str_at(c, "/lastTransitionTime")?)
            } else {
                None
            }
        })
}

impl Reconciler for TtlController {
    type Key = JobKey;
    type Nudge = ();
    type Error = TtlError;
    const NAME: &'static str = "ttl-after-finished-controller";

    fn resync(&mut self, store: &Store) -> Vec<JobKey> {
        let (jobs, _) = store.list("jobs.batch", None, &|j| ttl_seconds(j).is_some());
        jobs.iter()
            .map(|j| {
                (
                    objects::namespace(j).unwrap_or_default().to_owned(),
                    objects::name(j).to_owned(),
                )
            })
            .collect()
    }

    fn keys_for(&mut self, change: &Change, keys: &mut Vec<JobKey>) {
        if change.resource == "jobs.batch"
            && change.kind != ChangeKind::Deleted
            && ttl_seconds(&change.object).is_some()
        {
            let job = &change.object;
            keys.push((
                objects::namespace(job).unwrap_or_default().to_owned(),
                objects::name(job).to_owned(),
            ));
        }
    }

    fn reconcile(&mut self, store: &Store, key: &JobKey) -> Result<Option<Duration>, TtlError> {
        let (ns, name) = key;
        let Some(job) = store.get("jobs.batch", Some(ns), name) else {
            return Ok(None);
        };
        let (Some(ttl), Some(finished)) = (ttl_seconds(&job), finished_at(&job)) else {
            return Ok(None);
        };
        if is_deleting(&job) {
            return Ok(None);
        }
        let expires = finished + chrono::Duration::seconds(ttl);
        let left = expires - Utc::now();
        if left > chrono::Duration::zero() {
            return Ok(Some(left.to_std().unwrap_or_default()));
        }
        let uid = objects::uid(&job).to_owned();
        let result = store.modify("jobs.batch", Some(ns), name, &mut |o| {
            if objects::uid(o) != uid {
                return Err(StoreError::Conflict(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    objects::uid(o)
                )));
            }
            if is_deleting(o) {
                return Ok(());
            }
            let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
                return Ok(());
            };
            let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = finalizers.as_array_mut()
                && !list.iter().any(|f| f == FOREGROUND_FINALIZER)
            {
                list.push(json!(FOREGROUND_FINALIZER));
            }
            meta.insert("deletionTimestamp".into(), json!(now_timestamp()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            Ok(())
        });
        match result {
            Ok(_) => {
                tracing::debug!(job = %objects::display(&job), "deleted a finished job after its TTL");
                Ok(None)
            }
            // Gone or replaced meanwhile: nothing of ours to delete.
            Err(StoreError::NotFound | StoreError::Conflict(_)) => Ok(None),
            Err(source) => Err(TtlError::Delete {
                job: objects::display(&job),
                source,
            }),
        }
    }
}
