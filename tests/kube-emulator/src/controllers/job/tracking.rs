//! Counting finished pods the way the real controller does, with the
//! `batch.kubernetes.io/job-tracking` finalizer: a finished pod's uid goes into
//! `status.uncountedTerminatedPods`, its finalizer is removed, then the uid moves into the
//! `succeeded`/`failed` counters, each step its own status write; the final condition follows once
//! nothing is left to count.
//!
//! It must not create pods or decide the Job's outcome (the sync decides; this records it).

use std::collections::HashSet;

use serde_json::Value;

use super::failure_policy;
use super::status::{COMPLETE, Condition, FAILED, FAILURE_TARGET, JobStatus, SUCCESS_CRITERIA_MET};
use super::{JobController, JobError, JobKey, Sync, completion_index};
use crate::controllers::events::EventType;
use crate::controllers::objects::{self, JOB_TRACKING_FINALIZER, is_deleting, pod_phase};
use crate::store::Store;

pub(super) fn has_tracking_finalizer(pod: &Value) -> bool {
    objects::has_finalizer(pod, JOB_TRACKING_FINALIZER)
}

impl JobController {
    pub(super) fn remove_tracking_finalizer(&self, store: &Store, pod: &Value) -> Result<(), JobError> {
        objects::remove_finalizer(
            store,
            "pods",
            objects::namespace(pod),
            objects::name(pod),
            JOB_TRACKING_FINALIZER,
        )
        .map_err(|source| JobError::RemoveFinalizer {
            pod: objects::display(pod),
            source,
        })
    }

    /// `trackJobStatusAndRemoveFinalizers`: puts finished pods into `uncountedTerminatedPods` (with
    /// the interim condition) in one status write, removes their tracking finalizers, then moves
    /// them into the counters and, when nothing is left to count or terminating, writes the final
    /// condition in a second status write.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn track(
        &mut self,
        store: &Store,
        key: &JobKey,
        sync: &mut Sync<'_>,
        st: &mut JobStatus,
        stored: &JobStatus,
        mut finished: Option<Condition>,
        uncounted_succeeded: &HashSet<String>,
        uncounted_failed: &HashSet<String>,
    ) -> Result<(), JobError> {
        let job = sync.job;
        let mut with_finalizer: HashSet<String> = sync
            .pods
            .iter()
            .filter(|p| has_tracking_finalizer(p))
            .map(|p| objects::uid(p).to_owned())
            .collect();
        clean_uncounted(st, &with_finalizer);

        let mut ordered: Vec<&Value> = sync.pods.iter().collect();
        if sync.spec.indexed {
            ordered.sort_by_key(|p| completion_index(p));
        }
        let mut to_release: Vec<&Value> = Vec::new();
        let mut new_indexes = Vec::new();
        let decided_failure = finished.as_ref().is_some_and(|f| f.kind != SUCCESS_CRITERIA_MET);
        for pod in ordered {
            if !has_tracking_finalizer(pod) {
                continue;
            }
            let pod_uid = objects::uid(pod).to_owned();
            let failed = sync.spec.is_pod_failed(pod);
            let succeeded = pod_phase(pod) == "Succeeded";
            if !(is_deleting(job) || finished.is_some() || succeeded || failed) {
                continue;
            }
            // The latest failed pod of an index keeps its finalizer until its replacement exists.
            let awaits_replacement = sync
                .spec
                .valid_index(pod)
                .and_then(|ix| sync.replaced.get(&ix))
                .is_some_and(|r| objects::uid(&r.pod) == pod_uid);
            if awaits_replacement && !(is_deleting(job) || finished.is_some() || succeeded) {
                continue;
            }
            to_release.push(pod);
            if succeeded && !uncounted_failed.contains(&pod_uid) {
                if sync.spec.indexed {
                    if let Some(ix) = sync.spec.valid_index(pod)
                        && !sync.prev_indexes.has(ix)
                    {
                        new_indexes.push(ix);
                    }
                } else if !uncounted_succeeded.contains(&pod_uid) {
                    st.uncounted().succeeded.push(pod_uid);
                }
            } else if (failed || decided_failure)
                && !uncounted_failed.contains(&pod_uid)
                && (!sync.spec.indexed || sync.spec.valid_index(pod).is_some())
                && failure_policy::match_pod(sync.spec.failure_policy, pod).count
            {
                st.uncounted().failed.push(pod_uid);
            }
        }
        if sync.spec.indexed {
            for ix in new_indexes {
                sync.succeeded_indexes.insert(ix);
            }
            st.completed_indexes = sync.succeeded_indexes.to_string();
            st.failed_indexes = sync.failed_indexes.as_ref().map(ToString::to_string);
            st.succeeded = i64::try_from(sync.succeeded_indexes.total()).unwrap_or(i64::MAX);
        }
        if let Some(target) = finished.as_ref().filter(|f| f.kind == FAILURE_TARGET) {
            st.conditions.push(target.clone());
            finished = Some(Condition::new(
                FAILED,
                "True",
                &target.reason,
                &target.message,
                &sync.now,
            ));
        }
        if let Some(met) = finished.as_ref().filter(|f| f.kind == SUCCESS_CRITERIA_MET) {
            if st.condition(SUCCESS_CRITERIA_MET).is_none() {
                st.conditions.push(met.clone());
            }
            finished = Some(Condition::new(
                COMPLETE,
                "True",
                &met.reason,
                &met.message,
                &sync.now,
            ));
        }

        // First write: new uncounted pods and the interim condition, before any finalizer goes.
        if st != stored {
            self.write_status(store, job, st)?;
        }
        self.backoff.insert(key.clone(), sync.backoff.clone());
        let written = st.clone();

        let mut release_error = None;
        for pod in to_release {
            match self.remove_tracking_finalizer(store, pod) {
                Ok(()) => {
                    with_finalizer.remove(objects::uid(pod));
                }
                Err(e) => {
                    release_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = release_error {
            sync.fail(e);
        }
        clean_uncounted(st, &with_finalizer);

        let mut job_finished = false;
        if let Some(f) = &finished {
            let nothing_uncounted = st
                .uncounted_terminated_pods
                .as_ref()
                .is_none_or(|u| u.succeeded.is_empty() && u.failed.is_empty());
            if nothing_uncounted && sync.terminating == 0 {
                st.ensure_condition(&f.kind, "True", &f.reason, &f.message, &sync.now);
                if f.kind == COMPLETE {
                    st.completion_time = Some(sync.now.clone());
                }
                job_finished = true;
            }
        }
        // Second write: the counters, and the final condition once everything is counted.
        if *st != written {
            self.write_status(store, job, st)?;
        }
        if job_finished && let Some(f) = finished {
            if f.kind == COMPLETE {
                self.event(store, job, EventType::Normal, "Completed", "Job completed");
            } else {
                self.event(store, job, EventType::Warning, &f.reason, &f.message);
            }
            self.backoff.remove(key);
            self.started.remove(objects::uid(job));
        }
        Ok(())
    }
}

/// Moves the uids of pods whose tracking finalizer is gone from `uncountedTerminatedPods` into the
/// counters. Returns whether anything moved.
fn clean_uncounted(st: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let Some(uncounted) = st.uncounted_terminated_pods.as_mut() else {
        return false;
    };
    let before = (uncounted.succeeded.len(), uncounted.failed.len());
    uncounted.succeeded.retain(|u| with_finalizer.contains(u));
    uncounted.failed.retain(|u| with_finalizer.contains(u));
    let moved = (
        before.0 - uncounted.succeeded.len(),
        before.1 - uncounted.failed.len(),
    );
    st.succeeded += i64::try_from(moved.0).unwrap_or(0);
    st.failed += i64::try_from(moved.1).unwrap_or(0);
    moved != (0, 0)
}
