//! Discovery and other non-resource paths: `/version`, `/api`, `/api/v1`, `/apis`,
//! `/apis/{group}`, `/apis/{group}/{version}`, health checks, and a declined OpenAPI.
//!
//! Always the legacy documents with `Content-Type: application/json`, whatever the `Accept`
//! header asks: that is how a server declines aggregated discovery without breaking client-go.
//! `/openapi/v2` and `/openapi/v3` answer 404, so kubectl must run `create`/`apply` with
//! `--validate=false`. Built from the store's registered kinds, so CRDs appear once registered.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::status::{ApiError, json_response};
use super::{ApiState, kueue_visibility};
use crate::store::ResourceType;

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn verbs(rt: &ResourceType) -> Vec<&'static str> {
    if rt.key() == "namespaces" {
        VERBS
            .iter()
            .copied()
            .filter(|v| *v != "deletecollection")
            .collect()
    } else {
        VERBS.to_vec()
    }
}

/// The `APIResourceList` entries of one group version.
fn resource_list(types: &[ResourceType]) -> Vec<Value> {
    let mut out = Vec::new();
    for rt in types {
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": verbs(rt),
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if matches!(rt.key().as_str(), "pods" | "jobs.batch") {
            entry["categories"] = json!(["all"]);
        }
        out.push(entry);
        if rt.status_subresource {
            out.push(json!({"name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced, "kind": rt.kind, "verbs": ["get", "patch", "update"]}));
        }
        if rt.key() == "pods" {
            out.push(json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}));
        }
    }
    out
}

/// Non-core groups and their versions, sorted, with Kueue's aggregated visibility group
/// while it is served.
fn served_groups(api: &ApiState, types: &[ResourceType]) -> BTreeMap<String, Vec<String>> {
    let mut groups = groups(types);
    if kueue_visibility::served(api) {
        groups.insert(
            kueue_visibility::GROUP.to_owned(),
            kueue_visibility::VERSIONS
                .iter()
                .map(|v| (*v).to_owned())
                .collect(),
        );
    }
    groups
}

/// Non-core groups and their versions, sorted.
fn groups(types: &[ResourceType]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rt in types.iter().filter(|r| !r.group.is_empty()) {
        let versions = groups.entry(rt.group.clone()).or_default();
        if !versions.contains(&rt.version) {
            versions.push(rt.version.clone());
        }
    }
    groups
}

fn group_document(name: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": versions, "preferredVersion": versions.first().cloned().unwrap_or(json!({}))})
}

/// Answers a non-resource path (`segs` = the path's segments).
pub fn answer(api: &ApiState, method: &Method, segs: &[&str]) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::method_not_allowed().into_response();
    }
    let types = api.store.resources();
    let body = match segs {
        [] => {
            let mut paths = vec![
                "/api".to_owned(),
                "/api/v1".to_owned(),
                "/apis".to_owned(),
                "/version".to_owned(),
            ];
            for (g, versions) in served_groups(api, &types) {
                paths.push(format!("/apis/{g}"));
                paths.extend(versions.iter().map(|v| format!("/apis/{g}/{v}")));
            }
            json!({"paths": paths})
        }
        ["version"] => json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0", "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0",
            "compiler": "gc", "platform": "linux/amd64",
        }),
        ["healthz" | "livez" | "readyz", ..] => return (StatusCode::OK, "ok").into_response(),
        ["api"] => {
            let address = api.advertise.lock().unwrap_or_else(|p| p.into_inner()).clone();
            json!({"kind": "APIVersions", "versions": ["v1"],
                   "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]})
        }
        ["api", "v1"] => {
            let core: Vec<ResourceType> = types.into_iter().filter(|r| r.group.is_empty()).collect();
            json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": resource_list(&core)})
        }
        ["apis"] => {
            let list: Vec<Value> = served_groups(api, &types)
                .iter()
                .map(|(g, v)| group_document(g, v))
                .collect();
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list})
        }
        ["apis", group] => match served_groups(api, &types).get(*group) {
            Some(versions) => {
                let mut doc = group_document(group, versions);
                doc["kind"] = json!("APIGroup");
                doc["apiVersion"] = json!("v1");
                doc
            }
            None => return ApiError::no_route().into_response(),
        },
        ["apis", group, version]
            if *group == kueue_visibility::GROUP
                && kueue_visibility::served(api)
                && kueue_visibility::VERSIONS.contains(version) =>
        {
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"),
                   "resources": kueue_visibility::resource_list()})
        }
        ["apis", group, version] => {
            let members: Vec<ResourceType> = types
                .into_iter()
                .filter(|r| r.group == *group && r.version == *version)
                .collect();
            if members.is_empty() {
                return ApiError::no_route().into_response();
            }
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"),
                   "resources": resource_list(&members)})
        }
        _ => return ApiError::no_route().into_response(),
    };
    json_response(StatusCode::OK, &body)
}
