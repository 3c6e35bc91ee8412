//! Where each job waiting in Kueue stands in line: one shared refresher (the `positions`
//! part) reads Kueue's pending-workloads visibility API (`visibility.kueue.x-k8s.io`) and
//! keeps a map job → (position in its ClusterQueue, in its LocalQueue) that every reader
//! (`Job.queue`, however many clients ask) reads without a request of its own.
//!
//! Every refresh interval (`--kueue-positions-interval-ms`), and soon after a tracked job's
//! Workload changes (an admission moves everyone behind it; at most every 0.5 s), it looks,
//! in memory, for tracked jobs whose Workload is pending (or evicted and requeued); only when
//! there are some does it ask Kueue, once per LocalQueue holding them (`…/namespaces/{ns}/localqueues/{name}/
//! pendingworkloads`, pages of [`PAGE`], stopping once all of that queue's jobs are found).
//! The LocalQueue route answers both positions and needs only namespaced RBAC, which is what
//! a jobgate confined to its namespaces holds. Requests grow with the LocalQueues in use,
//! never with jobs or readers. `v1beta2` is asked first, `v1beta1` where only that is
//! served (older Kueue releases).
//!
//! When the API is not served or is forbidden, positions are null, the reason is what
//! `QueuePlace::estimate` says, and it is logged once per distinct reason; readiness is not
//! affected (positions are a courtesy, not a duty of the executor).
//!
//! It must not write to the cluster or report observations: it only reads Kueue's view.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use super::manifest::workload_name;
use super::{KubeShared, api_error_text};
use crate::model::{QueuePlace, QueueState};

/// The visibility API's group.
const GROUP: &str = "visibility.kueue.x-k8s.io";
/// Versions asked, the newest first.
const VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];
/// The least time between two refreshes that Workload changes start.
const CHANGE_GAP: Duration = Duration::from_millis(500);
/// Workloads asked per page.
pub(super) const PAGE: usize = 500;

/// Where a job stands: 1-based positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    cluster_queue: u32,
    local_queue: u32,
}

/// The refresher's results, read by [`KubeShared::queue_place`].
#[derive(Default)]
pub(super) struct QueuePositions {
    state: Mutex<PositionsState>,
    /// Told when a tracked job's Workload changed: its place (or others') may have moved.
    changed: tokio::sync::Notify,
}

impl QueuePositions {
    /// A tracked job's Workload changed: refresh soon (at most every [`CHANGE_GAP`]).
    pub(super) fn workload_changed(&self) {
        self.changed.notify_one();
    }
}

#[derive(Default)]
struct PositionsState {
    places: HashMap<String, Place>,
    /// Why positions are unknown (the API is missing or refused), when they are.
    unavailable: Option<String>,
    /// Reasons already logged.
    logged: HashSet<String>,
    /// The version that answered last.
    version: Option<&'static str>,
}

/// Why a LocalQueue's positions could not be read.
enum ReadError {
    /// The visibility API refused or is missing: it concerns every queue.
    Unavailable(String),
    /// Something passing (a network error, a 5xx): kept positions stay until the next try.
    Passing(String),
}

impl KubeShared {
    /// Starts the refresher, when Kueue integration is on.
    pub(super) fn start_queue_positions(self: &Arc<Self>) {
        if !self.ctx.config.kueue {
            return;
        }
        let shared = self.clone();
        self.ctx.tasks.spawn(async move {
            let interval = shared.ctx.config.kueue_positions_interval;
            loop {
                shared.refresh_positions().await;
                tokio::select! {
                    () = shared.ctx.shutdown.cancelled() => return,
                    () = tokio::time::sleep(interval) => {}
                    () = shared.positions.changed.notified() => {}
                }
                // Changes arrive in bursts (a submission wave, an admission pass): one refresh
                // answers them all.
                tokio::select! {
                    () = shared.ctx.shutdown.cancelled() => return,
                    () = tokio::time::sleep(interval.min(CHANGE_GAP)) => {}
                }
            }
        });
    }

    /// Where a tracked job waiting in Kueue stands now; `None` for a job not waiting there.
    pub(super) fn queue_place(&self, job_id: &str) -> Option<QueuePlace> {
        let waiting = self
            .jobs
            .tracked
            .get(job_id)
            .is_some_and(|t| t.queue.as_ref().is_some_and(|q| is_waiting(q.status.as_deref())));
        if !waiting {
            return None;
        }
        let state = self
            .positions
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(why) = &state.unavailable {
            return Some(QueuePlace {
                estimate: Some(why.clone()),
                ..QueuePlace::default()
            });
        }
        let place = state.places.get(job_id)?;
        Some(QueuePlace {
            position: Some(place.cluster_queue),
            local_queue_position: Some(place.local_queue),
            estimated_start_at: None,
            estimate: Some(
                "Kueue's visibility API gives places in line, not start times: a job starts once the workloads ahead of it are admitted or leave".to_owned(),
            ),
        })
    }

    /// One refresh: the LocalQueues holding waiting jobs, each asked once (paged).
    async fn refresh_positions(&self) {
        // (namespace, LocalQueue) → the workload names (`jobgate-<id>`) of its waiting jobs.
        let mut queues: BTreeMap<(String, String), HashMap<String, String>> = BTreeMap::new();
        for t in self.jobs.tracked.iter() {
            let Some(status) = t.queue.as_ref().and_then(|q| q.status.as_deref()) else {
                continue;
            };
            if is_waiting(Some(status)) {
                queues
                    .entry((t.namespace.clone(), status.name.clone()))
                    .or_default()
                    .insert(workload_name(t.key()), t.key().clone());
            }
        }
        let mut places = HashMap::new();
        let mut unavailable = None;
        let mut passing = false;
        for ((namespace, queue), waiting) in &queues {
            match self.read_local_queue(namespace, queue, waiting).await {
                Ok(found) => places.extend(found),
                Err(ReadError::Unavailable(why)) => {
                    unavailable = Some(why);
                    break;
                }
                Err(ReadError::Passing(why)) => {
                    tracing::debug!(namespace, queue, "reading Kueue's pending workloads: {why}");
                    passing = true;
                }
            }
        }
        let mut state = self
            .positions
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(why) = &unavailable
            && state.logged.insert(why.clone())
        {
            tracing::warn!("positions in Kueue's queues are not shown: {why}");
        }
        if passing && unavailable.is_none() {
            // Keep what is known of the queues that did not answer this time.
            for (id, place) in std::mem::take(&mut state.places) {
                places.entry(id).or_insert(place);
            }
        }
        state.places = places;
        state.unavailable = unavailable;
    }

    /// The places of `waiting` (workload name → job id) in LocalQueue `namespace/queue`.
    async fn read_local_queue(
        &self,
        namespace: &str,
        queue: &str,
        waiting: &HashMap<String, String>,
    ) -> Result<HashMap<String, Place>, ReadError> {
        let mut found = HashMap::new();
        let mut offset = 0;
        loop {
            let items = self.read_page(namespace, queue, offset).await?;
            for item in &items {
                let owner = item
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find_map(|o| waiting.get(o.get("name")?.as_str()?));
                let position = |key: &str| {
                    item.get(key)
                        .and_then(Value::as_u64)
                        .and_then(|n| u32::try_from(n + 1).ok())
                };
                if let (Some(id), Some(cluster_queue), Some(local_queue)) = (
                    owner,
                    position("positionInClusterQueue"),
                    position("positionInLocalQueue"),
                ) {
                    found.insert(
                        id.clone(),
                        Place {
                            cluster_queue,
                            local_queue,
                        },
                    );
                }
            }
            if items.len() < PAGE || found.len() == waiting.len() {
                return Ok(found);
            }
            offset += PAGE;
        }
    }

    /// One page of a LocalQueue's pending workloads, from the version that answers.
    async fn read_page(&self, namespace: &str, queue: &str, offset: usize) -> Result<Vec<Value>, ReadError> {
        let known = self
            .positions
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .version;
        let versions: Vec<&'static str> = match known {
            Some(v) => vec![v],
            None => VERSIONS.to_vec(),
        };
        let mut last = None;
        for version in versions {
            let url = format!(
                "/apis/{GROUP}/{version}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads?limit={PAGE}&offset={offset}"
            );
            let request = match axum::http::Request::get(&url).body(Vec::new()) {
                Ok(r) => r,
                Err(e) => return Err(ReadError::Passing(e.to_string())),
            };
            match self.ctx.client.request::<Value>(request).await {
                Ok(summary) => {
                    self.positions
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .version = Some(version);
                    let items = summary.get("items").and_then(Value::as_array).cloned();
                    return Ok(items.unwrap_or_default());
                }
                // The LocalQueue is unknown to Kueue: none of its workloads waits in line.
                Err(kube::Error::Api(s)) if s.code == 404 && s.message.contains("localqueue") => {
                    return Ok(Vec::new());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    last = Some(format!(
                        "Kueue's visibility API ({GROUP}) is not served by this cluster: {}",
                        api_error_text(&kube::Error::Api(s))
                    ));
                }
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 401 => {
                    return Err(ReadError::Unavailable(format!(
                        "jobgate may not read Kueue's visibility API ({GROUP}, localqueues/pendingworkloads): {}",
                        api_error_text(&kube::Error::Api(s))
                    )));
                }
                Err(e) => return Err(ReadError::Passing(api_error_text(&e))),
            }
        }
        // A version that answered before may have gone (Kueue upgraded or removed): ask all
        // again next time.
        self.positions
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .version = None;
        Err(ReadError::Unavailable(last.unwrap_or_default()))
    }
}

/// Whether a Workload in this state waits in line: pending, or evicted and requeued.
fn is_waiting(status: Option<&crate::model::QueueStatus>) -> bool {
    status.is_some_and(|s| {
        matches!(
            s.state,
            QueueState::Pending | QueueState::Evicted | QueueState::Preempted
        )
    })
}
