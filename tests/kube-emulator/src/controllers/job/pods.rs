//! The Job's pods: building a pod from the template (names, labels, the ownerReference, the
//! tracking finalizer, the completion index), `manageJob`'s decision of how many pods to create or
//! delete, which active pods to remove first, and deleting them with their Events.
//!
//! It must not count finished pods or write the Job's status (`tracking` and the sync do).

use std::cmp::Reverse;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::indexes::Intervals;
use super::per_index;
use super::{COMPLETION_INDEX, JobController, JobError, Spec, Sync, completion_index};
use crate::controllers::events::EventType;
use crate::controllers::objects::{
    self, JOB_TRACKING_FINALIZER, is_deleting, pod_is_terminal, pod_phase, str_at,
};
use crate::store::Store;

/// The real controller creates or deletes at most this many pods per sync.
const MAX_POD_CREATE_DELETE_PER_SYNC: i64 = 500;
/// Longest `generateName` prefix the API server keeps.
const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// The order `controller.ActivePods` sorts in: the pods least worth keeping first (unbound, then
/// pending, then not ready, then most restarted, then newest).
fn removal_order(pod: &&Value) -> (bool, u8, bool, Reverse<i64>, Reverse<String>) {
    let bound = str_at(pod, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let phase = match pod_phase(pod) {
        "Pending" | "" => 0,
        "Running" => 2,
        _ => 1,
    };
    let restarts: i64 = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum()
        })
        .unwrap_or(0);
    let created = str_at(pod, "/metadata/creationTimestamp")
        .unwrap_or_default()
        .to_owned();
    (
        bound,
        phase,
        objects::pod_is_ready(pod),
        Reverse(restarts),
        Reverse(created),
    )
}

impl JobController {
    /// Deletes pods gracefully; with `release`, removes the tracking finalizer first (pods deleted
    /// for suspension or parallelism are not counted). Returns (deleted, of which ready).
    pub(super) fn delete_pods(
        &self,
        store: &Store,
        sync: &mut Sync<'_>,
        pods: &[Value],
        release: bool,
    ) -> (i64, i64) {
        let (mut deleted, mut deleted_ready) = (0, 0);
        for pod in pods {
            if release && let Err(e) = self.remove_tracking_finalizer(store, pod) {
                sync.fail(e);
                continue;
            }
            match objects::delete_gracefully(store, "pods", objects::namespace(pod), objects::name(pod), None)
            {
                Ok(_) => {
                    deleted += 1;
                    if objects::pod_is_ready(pod) {
                        deleted_ready += 1;
                    }
                    self.event(
                        store,
                        sync.job,
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("Deleted pod: {}", objects::name(pod)),
                    );
                }
                Err(source) => {
                    let e = JobError::DeletePod {
                        job: sync.job_name(),
                        pod: objects::display(pod),
                        source,
                    };
                    sync.fail(e);
                }
            }
        }
        (deleted, deleted_ready)
    }

    /// A pod from the template; `failure_counts` (counted, ignored) for a Job with
    /// `backoffLimitPerIndex`.
    fn new_pod(job: &Value, index: Option<u64>, failure_counts: Option<(i64, i64)>) -> Value {
        let job_name = objects::name(job);
        let template = job.pointer("/spec/template").unwrap_or(&Value::Null);
        let map = |p: &str| {
            template
                .pointer(p)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let mut labels = map("/metadata/labels");
        let mut annotations = map("/metadata/annotations");
        let mut spec = template
            .get("spec")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        let mut finalizers: Vec<Value> = template
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == JOB_TRACKING_FINALIZER) {
            finalizers.push(json!(JOB_TRACKING_FINALIZER));
        }
        let generate_name = match index {
            None => format!("{job_name}-"),
            Some(i) => {
                labels.insert(COMPLETION_INDEX.into(), json!(i.to_string()));
                annotations.insert(COMPLETION_INDEX.into(), json!(i.to_string()));
                if let Some((failures, ignored)) = failure_counts {
                    annotations.insert(per_index::INDEX_FAILURE_COUNT.into(), json!(failures.to_string()));
                    if ignored > 0 {
                        annotations.insert(
                            per_index::INDEX_IGNORED_FAILURE_COUNT.into(),
                            json!(ignored.to_string()),
                        );
                    }
                }
                spec["hostname"] = json!(format!("{job_name}-{i}"));
                for list in ["initContainers", "containers"] {
                    for c in spec
                        .get_mut(list)
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        add_completion_index_env(c);
                    }
                }
                let suffix = format!("-{i}-");
                let mut prefix = format!("{job_name}{suffix}");
                if prefix.len() > MAX_GENERATED_NAME_LENGTH {
                    let keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(suffix.len());
                    let cut = (0..=keep)
                        .rev()
                        .find(|&n| job_name.is_char_boundary(n))
                        .unwrap_or(0);
                    prefix = format!("{}{suffix}", &job_name[..cut]);
                }
                prefix
            }
        };
        let has_resources = spec
            .get("containers")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("resources")
                        .and_then(Value::as_object)
                        .is_some_and(|r| !r.is_empty())
                })
            });
        let mut metadata = Map::new();
        metadata.insert("generateName".into(), json!(generate_name));
        metadata.insert("namespace".into(), json!(objects::namespace(job)));
        if !labels.is_empty() {
            metadata.insert("labels".into(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            metadata.insert("annotations".into(), Value::Object(annotations));
        }
        metadata.insert(
            "ownerReferences".into(),
            json!([{
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job_name,
                "uid": objects::uid(job),
                "controller": true,
                "blockOwnerDeletion": true,
            }]),
        );
        metadata.insert("finalizers".into(), Value::Array(finalizers));
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": if has_resources { "Burstable" } else { "BestEffort" }},
        })
    }

    /// `manageJob`: suspension, too many pods, too few pods. Returns the new number of active pods.
    pub(super) fn manage(&mut self, store: &Store, sync: &mut Sync<'_>, active_pods: &[Value]) -> i64 {
        let mut active = sync.active;
        if sync.spec.suspend {
            let (removed, removed_ready) = self.delete_pods(store, sync, active_pods, true);
            sync.terminating += removed;
            sync.ready -= removed_ready;
            return active - removed;
        }
        let want = match sync.spec.completions {
            None if sync.succeeded > 0 => active,
            None => sync.spec.parallelism,
            Some(c) => (c - sync.succeeded).clamp(0, sync.spec.parallelism),
        };
        let rm_at_least = (active - want).max(0);
        let mut to_delete = self.pods_for_removal(&sync.spec, active_pods, rm_at_least);
        to_delete.truncate(MAX_POD_CREATE_DELETE_PER_SYNC as usize);
        if !to_delete.is_empty() {
            let (removed, removed_ready) = self.delete_pods(store, sync, &to_delete, true);
            sync.terminating += removed;
            sync.ready -= removed_ready;
            return active - removed;
        }
        let terminating = if sync.spec.only_replace_failed {
            sync.terminating
        } else {
            0
        };
        let diff = (want - terminating - active).min(MAX_POD_CREATE_DELETE_PER_SYNC);
        if diff <= 0 {
            return active;
        }
        let by_index = sync.spec.backoff_limit_per_index.is_some();
        // With a limit per index, each index backs off on its own (below).
        let remaining = if by_index {
            std::time::Duration::ZERO
        } else {
            sync.backoff.remaining(&self.shared.config, Instant::now())
        };
        if !remaining.is_zero() {
            sync.requeue_after(remaining);
            return active;
        }
        let indexes: Vec<Option<u64>> = if sync.spec.indexed {
            let mut taken = Intervals::default();
            let in_use = active_pods.iter().chain(
                sync.pods
                    .iter()
                    .filter(|p| sync.spec.only_replace_failed && is_deleting(p) && !pod_is_terminal(p)),
            );
            for ix in in_use.filter_map(completion_index) {
                taken.insert(ix);
            }
            for ix in sync.failed_indexes.iter().flat_map(Intervals::iter) {
                taken.insert(ix);
            }
            let completions = sync
                .spec
                .completions
                .and_then(|c| u64::try_from(c).ok())
                .unwrap_or(0);
            let count = usize::try_from(diff).unwrap_or(0);
            let missing = sync.succeeded_indexes.first_missing(&taken, count, completions);
            let ready = if by_index {
                per_index::ready_indexes(&self.shared.config, missing, &sync.replaced, Instant::now())
            } else {
                Ok(missing)
            };
            match ready {
                Ok(ready) => ready.into_iter().map(Some).collect(),
                Err(wait) => {
                    sync.requeue_after(wait);
                    return active;
                }
            }
        } else {
            (0..diff).map(|_| None).collect()
        };
        let key = (
            objects::namespace(sync.job).unwrap_or_default().to_owned(),
            objects::name(sync.job).to_owned(),
        );
        for index in indexes {
            match store.create(
                "pods",
                objects::namespace(sync.job),
                Self::new_pod(
                    sync.job,
                    index,
                    by_index.then(|| {
                        let replaced = index.and_then(|ix| sync.replaced.get(&ix));
                        per_index::new_failure_counts(&sync.spec, replaced)
                    }),
                ),
            ) {
                Ok(pod) => {
                    active += 1;
                    self.shared.pods_created.fetch_add(1, Ordering::Relaxed);
                    self.index_pod(&key.0, objects::name(&pod), Some(key.clone()));
                    self.event(
                        store,
                        sync.job,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", objects::name(&pod)),
                    );
                }
                Err(source) => {
                    self.event(
                        store,
                        sync.job,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("Error creating: {source}"),
                    );
                    sync.fail(JobError::CreatePod {
                        job: sync.job_name(),
                        source,
                    });
                    // Like the real slow start: stop after a failure, retry on the next sync.
                    break;
                }
            }
        }
        active
    }

    /// `activePodsForRemoval`: for Indexed Jobs, pods with a duplicate, missing or out-of-range
    /// index first; then the least advanced pods until `rm_at_least` are chosen.
    fn pods_for_removal(&self, spec: &Spec<'_>, active_pods: &[Value], rm_at_least: i64) -> Vec<Value> {
        let mut rm: Vec<&Value> = Vec::new();
        let mut left: Vec<&Value> = Vec::new();
        if spec.indexed {
            let mut by_index: std::collections::BTreeMap<u64, Vec<&Value>> =
                std::collections::BTreeMap::new();
            for pod in active_pods {
                match spec.valid_index(pod) {
                    Some(ix) => by_index.entry(ix).or_default().push(pod),
                    None => rm.push(pod),
                }
            }
            for (_, mut same) in by_index {
                same.sort_by_key(removal_order);
                if let Some(keep) = same.pop() {
                    left.push(keep);
                }
                rm.extend(same);
            }
        } else {
            left.extend(active_pods);
        }
        let wanted = usize::try_from(rm_at_least).unwrap_or(0);
        if rm.len() < wanted {
            left.sort_by_key(removal_order);
            let more = wanted - rm.len();
            rm.extend(left.into_iter().take(more));
        }
        rm.into_iter().cloned().collect()
    }
}

/// `JOB_COMPLETION_INDEX` from the pod's completion-index label, unless the container sets it.
fn add_completion_index_env(container: &mut Value) {
    let Some(c) = container.as_object_mut() else {
        return;
    };
    let env = c.entry("env").or_insert_with(|| json!([]));
    let Some(env) = env.as_array_mut() else { return };
    if env
        .iter()
        .any(|e| str_at(e, "/name") == Some("JOB_COMPLETION_INDEX"))
    {
        return;
    }
    env.push(json!({
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{COMPLETION_INDEX}']")}},
    }));
}
