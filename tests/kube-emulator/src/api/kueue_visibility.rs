//! Kueue's pending-workloads visibility API (the aggregated group
//! `visibility.kueue.x-k8s.io`, versions `v1beta2` (preferred) and `v1beta1`), served while
//! Kueue's CRDs are registered, as Kueue's visibility server answers it:
//!
//! - `GET …/clusterqueues/{name}/pendingworkloads` and
//!   `GET …/namespaces/{ns}/localqueues/{name}/pendingworkloads`, with `offset` (default 0)
//!   and `limit` (default 1000, at most 100,000), answer a `PendingWorkloadsSummary`: items
//!   with `metadata` (name, namespace, ownerReferences, creationTimestamp), `priority`,
//!   `localQueueName`, `positionInClusterQueue` and `positionInLocalQueue` (both from 0).
//!   In a ClusterQueue, `offset` skips its first workloads and positions in a LocalQueue
//!   count every earlier one; in a LocalQueue, `offset` skips that queue's first workloads.
//! - an unknown ClusterQueue or LocalQueue is `404 NotFound`,
//!   `clusterqueue.visibility.kueue.x-k8s.io "NAME" not found` (`localqueue…` likewise);
//! - `clusterqueues` and `localqueues` themselves have no verbs (405);
//! - RBAC: the verb is `get` on `clusterqueues/pendingworkloads` (cluster scope) or
//!   `localqueues/pendingworkloads` (in the namespace), group `visibility.kueue.x-k8s.io`.
//!
//! Requests are counted as `clusterqueues.visibility.kueue.x-k8s.io/pendingworkloads` (and
//! `localqueues…`), verb `get`. The order is the simulated Kueue's (`controllers::kueue_order`).
//!
//! It must not write: the visibility server reads Kueue's queues.

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::status::{ApiError, json_response};
use super::{ApiState, Query, rbac};
use crate::api::authn::UserInfo;
use crate::controllers::kueue::WORKLOADS;
use crate::controllers::kueue_order::{cluster_queue_of_local, pending_workloads, priority};

/// The API group.
pub const GROUP: &str = "visibility.kueue.x-k8s.io";
/// Served versions, the preferred first.
pub const VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];
const DEFAULT_LIMIT: i64 = 1000;
const MAX_LIMIT: i64 = 100_000;

/// Whether the group is served: Kueue is installed.
pub fn served(api: &ApiState) -> bool {
    api.store.resource(WORKLOADS).is_some()
}

/// The `APIResourceList` entries of a served version.
pub fn resource_list() -> Vec<Value> {
    vec![
        json!({"name": "clusterqueues", "singularName": "clusterqueue", "namespaced": false, "kind": "ClusterQueue", "verbs": []}),
        json!({"name": "clusterqueues/pendingworkloads", "singularName": "", "namespaced": false, "kind": "PendingWorkloadsSummary", "verbs": ["get"]}),
        json!({"name": "localqueues", "singularName": "localqueue", "namespaced": true, "kind": "LocalQueue", "verbs": []}),
        json!({"name": "localqueues/pendingworkloads", "singularName": "", "namespaced": true, "kind": "PendingWorkloadsSummary", "verbs": ["get"]}),
    ]
}

/// Which queue a request reads.
enum Queue {
    Cluster(String),
    Local { namespace: String, name: String },
}

fn not_found(kind: &str, name: &str) -> ApiError {
    ApiError::with_status(
        404,
        "NotFound",
        format!("{kind}.{GROUP} {name:?} not found"),
        json!({"name": name, "group": GROUP, "kind": kind}),
    )
}

/// Answers a request under `/apis/visibility.kueue.x-k8s.io/{version}/` (`rest`: the
/// segments after the version), for `user` when a policy is loaded.
pub fn answer(
    api: &ApiState,
    method: &Method,
    raw_query: Option<&str>,
    user: Option<&UserInfo>,
    version: &str,
    rest: &[&str],
) -> Response {
    if !served(api) || !VERSIONS.contains(&version) {
        api.faults.count_discovery();
        return ApiError::no_route().into_response();
    }
    let queue = match rest {
        ["clusterqueues", name, "pendingworkloads"] => Queue::Cluster((*name).to_owned()),
        ["namespaces", ns, "localqueues", name, "pendingworkloads"] => Queue::Local {
            namespace: (*ns).to_owned(),
            name: (*name).to_owned(),
        },
        ["clusterqueues", ..] | ["namespaces", _, "localqueues", ..] => {
            return ApiError::method_not_allowed().into_response();
        }
        _ => {
            api.faults.count_discovery();
            return ApiError::no_route().into_response();
        }
    };
    let (resource, namespace, name) = match &queue {
        Queue::Cluster(name) => ("clusterqueues", String::new(), name.clone()),
        Queue::Local { namespace, name } => ("localqueues", namespace.clone(), name.clone()),
    };
    if method != Method::GET {
        api.faults
            .count(&format!("{resource}.{GROUP}/pendingworkloads"), method.as_str());
        return ApiError::method_not_allowed().into_response();
    }
    api.faults
        .count(&format!("{resource}.{GROUP}/pendingworkloads"), "get");
    if let (Some(policy), Some(user)) = (&api.config.rbac, user) {
        let attributes = rbac::Attributes {
            verb: "get".to_owned(),
            group: GROUP.to_owned(),
            resource: resource.to_owned(),
            subresource: "pendingworkloads".to_owned(),
            namespace,
            name,
        };
        if let rbac::Decision::Deny(reason) = policy.authorize(user, &attributes) {
            return rbac::forbidden(user, &attributes, &reason).into_response();
        }
    }
    if let Some(code) = api.faults.take_failure() {
        return ApiError::injected(code).into_response();
    }
    match summary(api, raw_query, version, &queue) {
        Ok(body) => json_response(StatusCode::OK, &body),
        Err(e) => e.into_response(),
    }
}

fn summary(api: &ApiState, raw_query: Option<&str>, version: &str, queue: &Queue) -> Result<Value, ApiError> {
    let query = Query::parse(raw_query)?;
    let offset = query.int("offset")?.unwrap_or(0).max(0) as usize;
    let limit = match query.int("limit")?.unwrap_or(0) {
        0 => DEFAULT_LIMIT,
        n => n.clamp(0, MAX_LIMIT),
    } as usize;
    let items: Vec<Value> = match queue {
        Queue::Cluster(name) => {
            let pending =
                pending_workloads(&api.store, name).ok_or_else(|| not_found("clusterqueue", name))?;
            let mut in_local: std::collections::HashMap<(String, String), usize> = Default::default();
            pending
                .iter()
                .enumerate()
                .take(offset.saturating_add(limit))
                .filter_map(|(index, w)| {
                    let counter = in_local.entry(local_key(w)).or_default();
                    let local_position = *counter;
                    *counter += 1;
                    (index >= offset).then(|| item(w, index, local_position))
                })
                .collect()
        }
        Queue::Local { namespace, name } => {
            let cluster_queue = cluster_queue_of_local(&api.store, namespace, name)
                .ok_or_else(|| not_found("localqueue", name))?;
            let pending = pending_workloads(&api.store, &cluster_queue).unwrap_or_default();
            pending
                .iter()
                .enumerate()
                .filter(|(_, w)| local_key(w) == (namespace.clone(), name.clone()))
                .enumerate()
                .skip(offset)
                .take(limit)
                .map(|(local_position, (index, w))| item(w, index, local_position))
                .collect()
        }
    };
    Ok(json!({
        "kind": "PendingWorkloadsSummary",
        "apiVersion": format!("{GROUP}/{version}"),
        "metadata": {"creationTimestamp": null},
        "items": items,
    }))
}

/// A workload's LocalQueue: its namespace and `spec.queueName`.
fn local_key(workload: &Value) -> (String, String) {
    let text = |pointer: &str| {
        workload
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (text("/metadata/namespace"), text("/spec/queueName"))
}

fn item(workload: &Value, in_cluster_queue: usize, in_local_queue: usize) -> Value {
    let owners: Vec<Value> = workload
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(
            |o| json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["name"], "uid": o["uid"]}),
        )
        .collect();
    let (namespace, local_queue) = local_key(workload);
    json!({
        "metadata": {
            "name": workload.pointer("/metadata/name"),
            "namespace": namespace,
            "ownerReferences": owners,
            "creationTimestamp": workload.pointer("/metadata/creationTimestamp"),
        },
        "priority": priority(workload),
        "localQueueName": local_queue,
        "positionInClusterQueue": in_cluster_queue,
        "positionInLocalQueue": in_local_queue,
    })
}
