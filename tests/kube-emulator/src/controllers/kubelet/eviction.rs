//! How a pod's run ends when something other than its own process ends it: the kubelet's
//! node-pressure eviction (`EMULATOR_EVICT_ATTEMPTS`) and the scheduler's preemption
//! (`EMULATOR_PREEMPT_ATTEMPTS`, done through [`crate::controllers::disruption`]).
//!
//! Node-pressure eviction follows the eviction manager of Kubernetes ≥ 1.31 for a hard memory
//! threshold: a `Warning` `Evicted` Event with the eviction message, the containers killed at
//! once (exit 137), and the pod `Failed` with `status.reason: Evicted`, `status.message` and the
//! `DisruptionTarget` condition (reason `TerminationByKubelet`, the same message). The pod object
//! is not deleted: it stays `Failed`, as on a node.
//!
//! It must not delete pods itself or touch finalizers; preemption's delete is the scheduler's.

use std::time::Duration;

use serde_json::Value;

use super::{Kubelet, KubeletError, PodRun};
use crate::controllers::disruption;
use crate::controllers::events::EventType;
use crate::store::Store;

/// The eviction manager's message for a pod evicted under memory pressure, naming the container
/// whose usage it blames (its upstream format, with the emulated node's numbers).
pub(super) fn eviction_message(container: &str) -> String {
    format!(
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. \
         Container {container} was using 1048576Ki, request is 0, has larger consumption of memory. "
    )
}

impl Kubelet {
    /// Evicts the pod for node pressure, blaming container `blamed`: every container is killed at
    /// once and the pod ends `Failed` / `Evicted`.
    pub(super) fn evict_for_node_pressure(
        &mut self,
        store: &Store,
        pod: &Value,
        run: &mut PodRun,
        blamed: usize,
    ) -> Result<Option<Duration>, KubeletError> {
        let message = eviction_message(&run.containers[blamed].name);
        self.shared
            .recorder
            .record(store, pod, EventType::Warning, "Evicted", &message, self.source());
        self.kill_containers(store, pod, run, 137);
        run.evicted = Some(message);
        self.write_status(store, pod, run)?;
        Ok(None)
    }

    /// The scheduler preempts the pod (once): it marks it and deletes it; the containers go on
    /// until the deletion stops them.
    pub(super) fn preempt(&mut self, store: &Store, pod: &Value, run: &mut PodRun) {
        if run.preempted {
            return;
        }
        run.preempted = true;
        let node = self.shared.config.node_name.clone();
        if let Err(error) =
            disruption::preempt(store, &self.shared.recorder, &node, &run.namespace, &run.name)
        {
            tracing::warn!(pod = %super::objects::display(pod), %error, "preempting the pod failed");
        }
    }
}
