//! What the pod watcher saw of each job's pods: its runs, the log tails captured as each pod
//! of a tracked job ended, and waiting for a finishing job's pods to end.
//!
//! Pods of jobs this executor does not track are kept too (without log captures): with
//! replicas on one database, another replica launched the job, and this one must still show
//! its runs and logs to its own clients. They go when their pods are deleted.
//!
//! Pods are how a job's result, failure cause and output are known: a Job's own status only
//! counts them. A pod that ends gets its log tail captured at once, because a Job removed by
//! its TTL right after finishing takes its pods, and their logs, with it. Every change bumps
//! `pods_version`, so that whoever waits for pods needs no polling.
//!
//! It must not report observations: `reconcile.rs` and `workloads.rs` read what is kept here
//! when they finish a job.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::manifest::JOB_ID_LABEL;
use super::status::{self, PodInfo, PodPhase};
use super::{Inner, label};
use crate::executor::RunInfo;

/// The pods of one tracked job, and the log tails captured as they ended: a Job removed by
/// its TTL right after finishing takes its pods' logs with it.
///
/// The pods are a `Vec` sorted by name, not a map: nearly every job has one pod at a time,
/// and a `BTreeMap` allocates a whole node (room for 11 pods, about 2 KiB) for the first,
/// which was most of the executor's memory per tracked job.
#[derive(Default)]
pub(super) struct JobPods {
    /// Sorted by name (pod names are unique in a job's namespace).
    pods: Vec<PodInfo>,
    /// Log tails of the most recently ended pods, by pod name.
    pub(super) logs: BTreeMap<String, Vec<String>>,
    /// Log captures in flight.
    capturing: usize,
}

/// How many ended pods' log tails are kept per job.
pub(super) const CAPTURED_PODS: usize = 5;

impl JobPods {
    pub(super) fn infos(&self) -> Vec<PodInfo> {
        self.pods.clone()
    }

    /// Where the pod named `name` is, or would be inserted.
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.pods.binary_search_by(|p| p.name.as_str().cmp(name))
    }

    fn get(&self, name: &str) -> Option<&PodInfo> {
        self.find(name).ok().map(|i| &self.pods[i])
    }

    /// Adds the pod, or replaces what was known of it.
    fn insert(&mut self, info: PodInfo) {
        match self.find(&info.name) {
            Ok(i) => self.pods[i] = info,
            Err(i) => self.pods.insert(i, info),
        }
    }

    fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.pods.remove(i);
        }
    }

    /// Keeps the log tails of the [`CAPTURED_PODS`] latest runs.
    fn keep_recent_logs(&mut self) {
        while self.logs.len() > CAPTURED_PODS {
            let oldest = self
                .logs
                .keys()
                .min_by_key(|name| {
                    let info = self.get(name);
                    (info.and_then(|p| p.index), info.and_then(|p| p.finished_at))
                })
                .cloned();
            match oldest {
                Some(name) => self.logs.remove(&name),
                None => break,
            };
        }
    }
}

impl Inner {
    pub(super) fn on_pod_deleted(self: &Arc<Self>, pod: &Pod) {
        self.on_pod(pod);
        if let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
            self.forget_follow(namespace, name);
        }
        let (Some(id), Some(name)) = (label(&pod.metadata, JOB_ID_LABEL), pod.metadata.name.as_deref())
        else {
            return;
        };
        let tracked = self.tracked.contains_key(id);
        let removed = self.pods.get_mut(id).is_some_and(|mut job| {
            // A tracked job keeps its ended pods for its final report; nothing else does.
            let remove = !tracked || job.get(name).is_some_and(|p| !p.phase.is_terminal());
            if remove {
                job.remove(name);
            }
            remove
        });
        if !tracked {
            self.pods
                .remove_if(id, |_, job| job.pods.is_empty() && job.capturing == 0);
        }
        if removed {
            self.pods_version.send_modify(|v| *v += 1);
        }
    }

    /// A pod was added or changed. A pod that has just ended gets its log tail captured at
    /// once, before a TTL or a clean-up can delete it.
    pub(super) fn on_pod(self: &Arc<Self>, pod: &Pod) {
        let Some(id) = label(&pod.metadata, JOB_ID_LABEL) else {
            return;
        };
        let tracked = self.tracked.contains_key(id);
        let Some(info) = status::pod_info(pod) else {
            return;
        };
        let mut job = self.pods.entry(id.to_owned()).or_default();
        let previous = job.get(&info.name);
        if previous == Some(&info) {
            return;
        }
        // Only a tracked job's final report reads captured tails.
        let ended = tracked
            && info.phase.is_terminal()
            && info.started
            && !previous.is_some_and(|p| p.phase.is_terminal())
            && pod.metadata.namespace.is_some();
        let name = info.name.clone();
        let container = info.container.clone();
        let considered = info.clone();
        job.insert(info);
        if ended {
            job.capturing += 1;
        }
        drop(job);
        self.pods_version.send_modify(|v| *v += 1);
        self.consider_follow(&considered, id);
        if let (true, Some(namespace)) = (ended, pod.metadata.namespace.clone()) {
            let inner = self.clone();
            let id = id.to_owned();
            self.tasks.spawn(async move {
                let lines = inner
                    .pod_log(&namespace, &name, container, inner.config.captured_log_lines)
                    .await;
                if let Some(mut job) = inner.pods.get_mut(&id) {
                    job.capturing -= 1;
                    match lines {
                        Ok(lines) => {
                            job.logs.insert(name, lines);
                            job.keep_recent_logs();
                        }
                        Err(e) => tracing::debug!(pod = %name, error = %e, "no log to capture"),
                    }
                }
                inner.pods_version.send_modify(|v| *v += 1);
            });
        }
    }

    /// The job's pods whose container has started, in index then creation order.
    pub(super) fn started_pods(&self, id: &str) -> Vec<PodInfo> {
        let mut pods: Vec<PodInfo> = self
            .pods
            .get(id)
            .map(|p| p.pods.iter().filter(|p| p.started).cloned().collect())
            .unwrap_or_default();
        pods.sort_by_key(|p| (p.index, p.created_at));
        pods
    }

    /// Waits until the pod watch shows every pod of the job terminal (and at least
    /// `counted` of them), or the finish grace passes. False when shutting down.
    pub(super) async fn wait_for_pods(&self, id: &str, counted: Option<i32>) -> bool {
        let deadline = tokio::time::Instant::now() + self.config.finish_grace;
        let mut changes = self.pods_version.subscribe();
        loop {
            let settled = self.pods.get(id).is_some_and(|job| {
                let terminal = job.pods.iter().filter(|p| p.phase.is_terminal()).count() as i32;
                terminal == job.pods.len() as i32
                    && counted.is_none_or(|c| terminal >= c)
                    && job.capturing == 0
            });
            if settled || counted == Some(0) {
                return true;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return true,
                _ = self.shutdown.cancelled() => return false,
            }
        }
    }

    /// The job's runs as the pod watcher saw them, oldest first.
    pub(super) fn runs(&self, job_id: &str) -> Vec<RunInfo> {
        let mut pods = self.pods.get(job_id).map(|p| p.infos()).unwrap_or_default();
        pods.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        pods.into_iter()
            .map(|p| RunInfo {
                name: p.name,
                index: p.index,
                phase: match p.phase {
                    PodPhase::Pending => "Pending",
                    PodPhase::Running => "Running",
                    PodPhase::Succeeded => "Succeeded",
                    PodPhase::Failed => "Failed",
                },
                exit_code: p.exit_code,
                reason: p.reason,
                message: p.message,
                created_at: p.created_at,
                finished_at: p.finished_at,
            })
            .collect()
    }
}
