//! A minimal Kueue (kueue.x-k8s.io/v1beta1), active once a test registers Kueue's CRDs
//! (`Emulator::register_kueue`): for each batch/v1 Job labelled `kueue.x-k8s.io/queue-name`
//! it creates the Job's `Workload` (owned by the Job, `spec.queueName`, one pod set `main`),
//! admits workloads in queue order while their ClusterQueue's quota allows, and unsuspends
//! admitted Jobs; a workload that cannot be admitted gets `QuotaReserved=False`, reason
//! `Pending`, with Kueue's message; a finished Job's workload gets `Finished=True` and frees
//! its quota for the next one. [`evict`] evicts (or preempts) a workload on demand: `Evicted`
//! (and `Preempted`) `True`, the Job suspended again, its quota released once its pods are
//! gone, and the workload requeued behind the others until quota allows again.
//!
//! Shapes follow Kueue's: condition types, reasons and messages as Kueue writes them, quota as
//! a ClusterQueue's `spec.resourceGroups[].flavors[].resources[].nominalQuota` for `pods` and
//! `cpu` (other resources are not counted), `status.admission` with the ClusterQueue and pod
//! set assignments; `spec.priority` from the Job's WorkloadPriorityClass or its pods'
//! PriorityClass, and queue order by priority then time (`kueue_order`). Not simulated:
//! cohorts and borrowing, automatic preemption, admission checks, `waitForPodsReady`, kinds
//! other than batch/v1 Job.
//!
//! It must not touch what the Job controller owns (pods, Job status): it only flips
//! `spec.suspend`, as Kueue does.

use std::time::Duration;

use serde_json::{Value, json};

use super::kueue_order::{CLUSTER_QUEUES, LOCAL_QUEUES, is_pending, sort_in_queue_order, workload_priority};
use super::objects::{self, is_deleting, str_at};
use super::runner::Reconciler;
use crate::store::{Change, ChangeKind, Store, StoreError, now_timestamp};

pub(crate) const WORKLOADS: &str = "workloads.kueue.x-k8s.io";
const JOBS: &str = "jobs.batch";
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
const POD_SET: &str = "main";

#[derive(Debug, thiserror::Error)]
pub(crate) enum KueueError {
    #[error("writing {what}: {source}")]
    Write { what: String, source: StoreError },
}

fn write_error(what: impl Into<String>) -> impl FnOnce(StoreError) -> KueueError {
    let what = what.into();
    move |source| KueueError::Write { what, source }
}

/// Keeps no state: Kueue's objects and the Jobs say everything. One key: Kueue's scheduler
/// considers all pending workloads of a ClusterQueue at once.
pub(crate) struct Kueue;

impl Reconciler for Kueue {
    type Key = ();
    type Nudge = ();
    type Error = KueueError;
    const NAME: &'static str = "kueue-controller-manager";

    fn resync(&mut self, _: &Store) -> Vec<()> {
        vec![()]
    }

    fn keys_for(&mut self, change: &Change, keys: &mut Vec<()>) {
        let concerned = match change.resource.as_str() {
            JOBS => {
                objects::label(&change.object, QUEUE_LABEL).is_some() && change.kind != ChangeKind::Deleted
            }
            WORKLOADS | LOCAL_QUEUES | CLUSTER_QUEUES => true,
            _ => false,
        };
        if concerned {
            keys.push(());
        }
    }

    fn reconcile(&mut self, store: &Store, _: &()) -> Result<Option<Duration>, KueueError> {
        if store.resource(WORKLOADS).is_none() {
            return Ok(None); // Kueue is not installed
        }
        let (jobs, _) = store.list(JOBS, None, &|j| objects::label(j, QUEUE_LABEL).is_some());
        let (workloads, _) = store.list(WORKLOADS, None, &|_| true);
        for job in &jobs {
            let owned = workloads.iter().find(|w| owner_uid(w) == Some(objects::uid(job)));
            match owned {
                None if !is_deleting(job) && !job_finished(job).0 => create_workload(store, job)?,
                None => {}
                Some(w) => follow_job(store, job, w)?,
            }
        }
        let (workloads, _) = store.list(WORKLOADS, None, &|_| true);
        admit(store, &workloads)?;
        Ok(None)
    }
}

fn owner_uid(workload: &Value) -> Option<&str> {
    objects::controller_ref(workload).and_then(|o| str_at(o, "/uid"))
}

pub(super) fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| str_at(c, "/type") == Some(type_))
}

pub(super) fn is_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| str_at(c, "/status") == Some("True"))
}

/// Sets a metav1.Condition as `apimeta.SetStatusCondition` does: its transition time moves
/// only when its status changes. Returns whether anything changed.
fn set_condition(object: &mut Value, type_: &str, status: &str, reason: &str, message: &str) -> bool {
    let now = now_timestamp();
    if !object["status"].is_object() {
        object["status"] = json!({});
    }
    let conditions = &mut object["status"]["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("made an array above");
    let generation = json!(1);
    match list.iter_mut().find(|c| str_at(c, "/type") == Some(type_)) {
        Some(c) => {
            let same = str_at(c, "/status") == Some(status)
                && str_at(c, "/reason") == Some(reason)
                && str_at(c, "/message") == Some(message);
            if same {
                return false;
            }
            if str_at(c, "/status") != Some(status) {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(status);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        None => list.push(json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now, "observedGeneration": generation,
        })),
    }
    true
}

/// Whether a workload holds quota: reserved and not finished.
pub(super) fn holds_quota(workload: &Value) -> bool {
    is_true(workload, "QuotaReserved") && !is_true(workload, "Finished")
}

/// Whether the Job finished, and whether it succeeded.
fn job_finished(job: &Value) -> (bool, bool) {
    if is_true(job, "Complete") {
        (true, true)
    } else if is_true(job, "Failed") {
        (true, false)
    } else {
        (false, false)
    }
}

/// Kueue's name for a Job's workload: `job-<name>-<5 hex digits of a hash of its uid>`.
fn workload_name(job: &Value) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for b in objects::uid(job).bytes() {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("job-{}-{:05x}", objects::name(job), hash & 0xf_ffff)
}

fn create_workload(store: &Store, job: &Value) -> Result<(), KueueError> {
    let ns = objects::namespace(job).unwrap_or("default");
    let count = job
        .pointer("/spec/parallelism")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let workload = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": ns,
            "labels": {"kueue.x-k8s.io/job-uid": objects::uid(job)},
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": objects::name(job),
                "uid": objects::uid(job), "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "queueName": objects::label(job, QUEUE_LABEL),
            "active": true,
            "podSets": [{
                "name": POD_SET,
                "count": count,
                "template": job.pointer("/spec/template").cloned().unwrap_or(json!({})),
            }],
        },
        "status": {},
    });
    let mut workload = workload;
    if let (Some(spec), Value::Object(priority)) =
        (workload["spec"].as_object_mut(), workload_priority(store, job))
    {
        spec.extend(priority);
    }
    match store.create(WORKLOADS, Some(ns), workload) {
        Ok(_) | Err(StoreError::AlreadyExists) => Ok(()),
        Err(e) => Err(write_error(format!(
            "the workload of job {}",
            objects::display(job)
        ))(e)),
    }
}

/// Keeps a Job and its workload in step: a finished Job's workload is finished; an evicted
/// workload's Job is suspended, and its quota released once its pods are gone.
fn follow_job(store: &Store, job: &Value, workload: &Value) -> Result<(), KueueError> {
    let ns = objects::namespace(workload);
    let name = objects::name(workload);
    if is_true(workload, "Finished") {
        return Ok(());
    }
    let (finished, succeeded) = job_finished(job);
    if finished {
        let (reason, message) = if succeeded {
            ("Succeeded", "Job finished successfully".to_owned())
        } else {
            let why = condition(job, "Failed")
                .and_then(|c| str_at(c, "/message"))
                .unwrap_or("Job failed");
            ("Failed", why.to_owned())
        };
        modify(store, ns, name, &mut |w| {
            set_condition(w, "Finished", "True", reason, &message);
        })?;
        return Ok(());
    }
    if !is_true(workload, "Evicted") || !is_true(workload, "QuotaReserved") {
        return Ok(());
    }
    let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    if !suspended {
        let job_name = objects::name(job).to_owned();
        store
            .modify(JOBS, objects::namespace(job), &job_name, &mut |j| {
                j["spec"]["suspend"] = json!(true);
                Ok(())
            })
            .map(|_| ())
            .or_else(ignore_gone)
            .map_err(write_error(format!("suspending job {job_name}")))?;
        return Ok(());
    }
    let active = job.pointer("/status/active").and_then(Value::as_i64).unwrap_or(0);
    if active > 0 {
        return Ok(()); // its pods are still stopping: the quota stays in use
    }
    let evicted = condition(workload, "Evicted")
        .and_then(|c| str_at(c, "/message"))
        .unwrap_or_default()
        .to_owned();
    let reason = condition(workload, "Evicted")
        .and_then(|c| str_at(c, "/reason"))
        .unwrap_or("Evicted")
        .to_owned();
    modify(store, ns, name, &mut |w| {
        set_condition(w, "QuotaReserved", "False", "Pending", &evicted);
        set_condition(
            w,
            "Admitted",
            "False",
            "NoReservation",
            "The workload has no reservation",
        );
        set_condition(w, "Requeued", "True", &reason, &evicted);
        w["status"]["admission"] = Value::Null;
        if let Some(status) = w["status"].as_object_mut() {
            status.remove("admission");
        }
    })
}

fn ignore_gone(e: StoreError) -> Result<(), StoreError> {
    match e {
        StoreError::NotFound => Ok(()),
        e => Err(e),
    }
}

fn modify(
    store: &Store,
    ns: Option<&str>,
    name: &str,
    change: &mut dyn FnMut(&mut Value),
) -> Result<(), KueueError> {
    store
        .modify(WORKLOADS, ns, name, &mut |w| {
            change(w);
            Ok(())
        })
        .map(|_| ())
        .or_else(ignore_gone)
        .map_err(write_error(format!("workload {name}")))
}

/// Quantities of `pods` and `cpu` (in millicores) a workload needs.
fn needs(workload: &Value) -> [(&'static str, i64); 2] {
    let mut pods = 0;
    let mut cpu = 0;
    for set in workload
        .pointer("/spec/podSets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let count = set.get("count").and_then(Value::as_i64).unwrap_or(1);
        pods += count;
        let per_pod: i64 = set
            .pointer("/template/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| str_at(c, "/resources/requests/cpu"))
            .filter_map(millicores)
            .sum();
        cpu += count * per_pod;
    }
    [("pods", pods), ("cpu", cpu)]
}

/// A cpu (or count) quantity in thousandths: `250m` → 250, `2` → 2000.
fn millicores(q: &str) -> Option<i64> {
    match q.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => q.parse::<f64>().ok().map(|v| (v * 1000.0).round() as i64),
    }
}

/// A ClusterQueue's nominal quota of each counted resource in its first flavor, with the
/// flavor's name. A resource it does not list may not be used at all, as in Kueue.
fn quota(cluster_queue: &Value) -> (String, Vec<(String, i64)>) {
    let flavor = cluster_queue
        .pointer("/spec/resourceGroups/0/flavors/0")
        .cloned()
        .unwrap_or(json!({}));
    let name = str_at(&flavor, "/name").unwrap_or("default-flavor").to_owned();
    let resources = flavor
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let resource = str_at(r, "/name")?.to_owned();
            let nominal = match r.get("nominalQuota")? {
                Value::Number(n) => n.as_f64().map(|v| (v * 1000.0).round() as i64)?,
                Value::String(s) => millicores(s)?,
                _ => return None,
            };
            // Pods are counted whole; cpu in millicores.
            Some((
                resource.clone(),
                if resource == "pods" {
                    nominal / 1000
                } else {
                    nominal
                },
            ))
        })
        .collect();
    (name, resources)
}

/// One scheduling pass: pending workloads in queue order (`kueue_order`), each admitted when
/// its ClusterQueue's unused quota fits it, else told why not.
fn admit(store: &Store, workloads: &[Value]) -> Result<(), KueueError> {
    let cluster_queue_of = |w: &Value| -> Result<String, String> {
        let queue = str_at(w, "/spec/queueName").unwrap_or_default();
        let local = store
            .get(LOCAL_QUEUES, objects::namespace(w), queue)
            .ok_or_else(|| format!("LocalQueue {queue} doesn't exist"))?;
        let cq = str_at(&local, "/spec/clusterQueue")
            .unwrap_or_default()
            .to_owned();
        if store.get(CLUSTER_QUEUES, None, &cq).is_none() {
            return Err(format!("ClusterQueue {cq} doesn't exist"));
        }
        Ok(cq)
    };
    // What each ClusterQueue has in use now.
    let mut used: std::collections::BTreeMap<String, [i64; 2]> = Default::default();
    for w in workloads.iter().filter(|w| holds_quota(w)) {
        if let Some(cq) = str_at(w, "/status/admission/clusterQueue") {
            let total = used.entry(cq.to_owned()).or_default();
            for (i, (_, n)) in needs(w).iter().enumerate() {
                total[i] += n;
            }
        }
    }
    let mut pending: Vec<&Value> = workloads.iter().filter(|w| is_pending(w)).collect();
    sort_in_queue_order(&mut pending);
    for w in pending {
        let ns = objects::namespace(w);
        let name = objects::name(w).to_owned();
        let cq = match cluster_queue_of(w) {
            Ok(cq) => cq,
            Err(why) => {
                modify(store, ns, &name, &mut |w| {
                    set_condition(w, "QuotaReserved", "False", "Inadmissible", &why);
                })?;
                continue;
            }
        };
        let cluster_queue = store.get(CLUSTER_QUEUES, None, &cq).unwrap_or_default();
        let (flavor, nominal) = quota(&cluster_queue);
        let in_use = used.entry(cq.clone()).or_default();
        let need = needs(w);
        let short = need.iter().enumerate().find_map(|(i, (resource, n))| {
            if *n == 0 {
                return None;
            }
            let Some((_, quota)) = nominal.iter().find(|(r, _)| r == resource) else {
                return Some(format!("resource {resource} unavailable in ClusterQueue"));
            };
            let missing = in_use[i] + n - quota;
            (missing > 0).then(|| {
                let missing = if *resource == "pods" {
                    missing.to_string()
                } else {
                    format!("{missing}m")
                };
                format!("insufficient unused quota for {resource} in flavor {flavor}, {missing} more needed")
            })
        });
        if let Some(short) = short {
            let message = format!("couldn't assign flavors to pod set {POD_SET}: {short}");
            modify(store, ns, &name, &mut |w| {
                set_condition(w, "QuotaReserved", "False", "Pending", &message);
            })?;
            continue;
        }
        for (i, (_, n)) in need.iter().enumerate() {
            in_use[i] += n;
        }
        let count = need[0].1;
        let usage: serde_json::Map<String, Value> = need
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| {
                (
                    r.to_string(),
                    json!(if *r == "pods" {
                        n.to_string()
                    } else {
                        format!("{n}m")
                    }),
                )
            })
            .collect();
        let flavors: serde_json::Map<String, Value> =
            usage.keys().map(|r| (r.clone(), json!(flavor))).collect();
        modify(store, ns, &name, &mut |w| {
            w["status"]["admission"] = json!({
                "clusterQueue": cq,
                "podSetAssignments": [{"name": POD_SET, "flavors": flavors, "resourceUsage": usage, "count": count}],
            });
            set_condition(
                w,
                "QuotaReserved",
                "True",
                "QuotaReserved",
                &format!("Quota reserved in ClusterQueue {cq}"),
            );
            set_condition(w, "Admitted", "True", "Admitted", "The workload is admitted");
            for reset in ["Evicted", "Preempted"] {
                if let Some(c) = w["status"]["conditions"]
                    .as_array_mut()
                    .and_then(|cs| cs.iter_mut().find(|c| str_at(c, "/type") == Some(reset)))
                    && str_at(c, "/status") == Some("True")
                {
                    let previously = format!("Previously: {}", str_at(c, "/message").unwrap_or_default());
                    c["status"] = json!("False");
                    c["reason"] = json!("QuotaReserved");
                    c["message"] = json!(previously);
                    c["lastTransitionTime"] = json!(now_timestamp());
                }
            }
        })?;
        // Admitted: the Job may run.
        if let Some(owner) = objects::controller_ref(w) {
            let job = str_at(owner, "/name").unwrap_or_default().to_owned();
            store
                .modify(JOBS, ns, &job, &mut |j| {
                    j["spec"]["suspend"] = json!(false);
                    Ok(())
                })
                .map(|_| ())
                .or_else(ignore_gone)
                .map_err(write_error(format!("unsuspending job {job}")))?;
        }
    }
    Ok(())
}

/// Evicts the workload of Job `job` in `namespace` now, as Kueue does when it preempts it
/// (`preempted`) or deactivates it: `Evicted=True` (reason `Preempted` or
/// `InactiveWorkload`) and, when preempted, `Preempted=True`; the controller then suspends
/// the Job, releases the quota once its pods are gone, and requeues the workload. Returns
/// the workload's name, or `None` when the Job has none holding quota.
pub fn evict(store: &Store, namespace: &str, job: &str, preempted: bool) -> Option<String> {
    let job = store.get(JOBS, Some(namespace), job)?;
    let (workloads, _) = store.list(WORKLOADS, Some(namespace), &|w| {
        owner_uid(w) == Some(objects::uid(&job))
    });
    let workload = workloads.into_iter().find(|w| is_true(w, "QuotaReserved"))?;
    let name = objects::name(&workload).to_owned();
    let (reason, message) = if preempted {
        (
            "Preempted",
            "Preempted to accommodate a higher priority Workload".to_owned(),
        )
    } else {
        ("InactiveWorkload", "The workload is deactivated".to_owned())
    };
    store
        .modify(WORKLOADS, Some(namespace), &name, &mut |w| {
            set_condition(w, "Evicted", "True", reason, &message);
            if preempted {
                set_condition(w, "Preempted", "True", "InClusterQueue", &message);
            }
            Ok(())
        })
        .ok()?;
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_quota() {
        assert_eq!(millicores("250m"), Some(250));
        assert_eq!(millicores("2"), Some(2000));
        let cq = json!({"spec": {"resourceGroups": [{"coveredResources": ["pods", "cpu"],
            "flavors": [{"name": "default-flavor", "resources": [
                {"name": "pods", "nominalQuota": 3}, {"name": "cpu", "nominalQuota": "1500m"}]}]}]}});
        let (flavor, nominal) = quota(&cq);
        assert_eq!(flavor, "default-flavor");
        assert_eq!(nominal, vec![("pods".to_owned(), 3), ("cpu".to_owned(), 1500)]);
    }

    #[test]
    fn set_condition_moves_the_transition_time_only_on_a_status_change() {
        let mut w = json!({});
        assert!(set_condition(&mut w, "QuotaReserved", "False", "Pending", "a"));
        assert!(!set_condition(&mut w, "QuotaReserved", "False", "Pending", "a"));
        assert!(set_condition(&mut w, "QuotaReserved", "False", "Pending", "b"));
        assert_eq!(w["status"]["conditions"].as_array().unwrap().len(), 1);
        assert!(is_true(
            &{
                set_condition(&mut w, "QuotaReserved", "True", "QuotaReserved", "c");
                w
            },
            "QuotaReserved"
        ));
    }
}
