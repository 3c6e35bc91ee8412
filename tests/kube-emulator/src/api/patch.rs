//! The four PATCH flavours, applied to a JSON object:
//!
//! - `application/merge-patch+json`: RFC 7386 (maps merge, `null` deletes, arrays replace);
//! - `application/json-patch+json`: RFC 6902 operations (a failing op or `test` → 422);
//! - `application/strategic-merge-patch+json`: built-in kinds only. Maps merge as in a merge
//!   patch; lists whose field has a merge key in the real API types (`containers`, `env`,
//!   `volumes`, … by `name`; `conditions` by `type`; `ownerReferences` by `uid`; …) merge element
//!   by element; `finalizers` merge as a set; other lists are replaced. Directives: `$patch:
//!   replace|delete` (maps and list elements), `$retainKeys`, `$deleteFromPrimitiveList/<field>`,
//!   `$setElementOrder/<field>` (accepted; order is not enforced). Merge keys are looked up by
//!   field *name*, not by the full schema path: exact for Pods, Jobs and Events.
//! - `application/apply-patch+yaml` (server-side apply), simplified: the applied configuration is
//!   merged into the live object like a strategic merge patch (a merge patch for custom kinds)
//!   and creates the object if it is absent. Field ownership is not tracked, so there are no
//!   apply conflicts and fields dropped from a later configuration are not removed.
//!
//! Owns the patch algebra only: no store, no HTTP, no status-subresource rules.

use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

pub const ACCEPTED: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
    "application/strategic-merge-patch+json",
];

impl PatchType {
    /// The flavour named by a `Content-Type` (parameters such as `charset` ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Failed(String),
}

/// Parses a patch body (`Apply` may be YAML; the others are JSON).
pub fn parse_body(kind: PatchType, body: &[u8]) -> Result<Value, PatchError> {
    match kind {
        PatchType::Apply => serde_yaml_ng::from_slice::<Value>(body)
            .map_err(|e| PatchError::Malformed(format!("error decoding YAML: {e}"))),
        _ => serde_json::from_slice(body)
            .map_err(|e| PatchError::Malformed(format!("invalid JSON patch: {e}"))),
    }
}

/// Applies `patch` (already parsed) to `target`. `strategic_lists` says whether lists follow the
/// built-in types' merge keys (built-in kinds) or are replaced (custom kinds, apply only).
pub fn apply(
    kind: PatchType,
    target: &mut Value,
    patch: &Value,
    strategic_lists: bool,
) -> Result<(), PatchError> {
    match kind {
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(PatchError::Malformed(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            json_patch::merge(target, patch);
            Ok(())
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| PatchError::Malformed(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(target, &ops).map_err(|e| PatchError::Failed(e.to_string()))
        }
        PatchType::Strategic | PatchType::Apply => {
            if !patch.is_object() {
                return Err(PatchError::Malformed(
                    "a strategic merge patch must be a JSON object".into(),
                ));
            }
            if strategic_lists {
                strategic(target, patch, "");
            } else {
                json_patch::merge(target, patch);
            }
            Ok(())
        }
    }
}

enum ListStrategy {
    /// Elements are maps merged by this key.
    MergeBy(&'static str),
    /// A primitive list merged as a set.
    Set,
    Replace,
}

/// The strategy of a list field in the built-in API types (`patchStrategy`/`patchMergeKey`).
fn list_strategy(field: &str) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "containerStatuses"
        | "initContainerStatuses" => ListStrategy::MergeBy("name"),
        "volumeMounts" => ListStrategy::MergeBy("mountPath"),
        "volumeDevices" => ListStrategy::MergeBy("devicePath"),
        "ports" => ListStrategy::MergeBy("containerPort"),
        "conditions" => ListStrategy::MergeBy("type"),
        "ownerReferences" => ListStrategy::MergeBy("uid"),
        "hostAliases" => ListStrategy::MergeBy("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeBy("topologyKey"),
        "finalizers" => ListStrategy::Set,
        _ => ListStrategy::Replace,
    }
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

/// Strategic merge of `patch` into `target`, where `field` is the key `target` sits under.
fn strategic(target: &mut Value, patch: &Value, field: &str) {
    match patch {
        Value::Object(p) => {
            if directive(patch) == Some("replace") {
                let mut fresh = Value::Object(Map::new());
                let rest: Map<String, Value> = p
                    .iter()
                    .filter(|(k, _)| *k != "$patch")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                strategic(&mut fresh, &Value::Object(rest), field);
                *target = fresh;
                return;
            }
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let Some(t) = target.as_object_mut() else { return };
            if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
                let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
                t.retain(|k, _| keep.contains(&k.as_str()));
            }
            for (k, v) in p {
                if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
                    continue;
                }
                if let Some(list_field) = k.strip_prefix("$deleteFromPrimitiveList/") {
                    let remove: Vec<&Value> = v.as_array().map(|a| a.iter().collect()).unwrap_or_default();
                    if let Some(list) = t.get_mut(list_field).and_then(Value::as_array_mut) {
                        list.retain(|x| !remove.contains(&x));
                    }
                    continue;
                }
                if v.is_null() || directive(v) == Some("delete") {
                    t.remove(k);
                    continue;
                }
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                strategic(slot, v, k);
            }
        }
        Value::Array(items) => merge_list(target, items, field),
        other => *target = other.clone(),
    }
}

fn merge_list(target: &mut Value, items: &[Value], field: &str) {
    let strategy = list_strategy(field);
    if matches!(strategy, ListStrategy::Replace) || items.iter().any(|i| directive(i) == Some("replace")) {
        let kept: Vec<Value> = items
            .iter()
            .filter(|i| directive(i) != Some("replace"))
            .map(|i| {
                let mut fresh = Value::Null;
                strategic(&mut fresh, i, "");
                fresh
            })
            .collect();
        *target = Value::Array(kept);
        return;
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Some(list) = target.as_array_mut() else { return };
    match strategy {
        ListStrategy::Set => {
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        ListStrategy::MergeBy(key) => {
            for item in items {
                let id = item.get(key);
                let position = id.and_then(|id| list.iter().position(|x| x.get(key) == Some(id)));
                if directive(item) == Some("delete") {
                    if let Some(id) = id {
                        list.retain(|x| x.get(key) != Some(id));
                    }
                    continue;
                }
                match position {
                    Some(i) => strategic(&mut list[i], item, ""),
                    None => {
                        let mut fresh = Value::Null;
                        strategic(&mut fresh, item, "");
                        list.push(fresh);
                    }
                }
            }
        }
        ListStrategy::Replace => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(mut target: Value, patch: Value) -> Value {
        apply(PatchType::Strategic, &mut target, &patch, true).expect("patch");
        target
    }

    #[test]
    fn merge_patch_replaces_arrays_and_deletes_nulls() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        apply(
            PatchType::Merge,
            &mut t,
            &json!({"a": {"b": null, "d": 3}, "l": [3]}),
            true,
        )
        .expect("merge");
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_ops_and_failing_test() {
        let mut t = json!({"spec": {"parallelism": 1}});
        let ops = json!([{"op": "replace", "path": "/spec/parallelism", "value": 2}, {"op": "add", "path": "/x", "value": [1]}]);
        apply(PatchType::Json, &mut t, &ops, true).expect("ops");
        assert_eq!(t, json!({"spec": {"parallelism": 2}, "x": [1]}));
        let failing = json!([{"op": "test", "path": "/spec/parallelism", "value": 9}]);
        assert!(matches!(
            apply(PatchType::Json, &mut t, &failing, true),
            Err(PatchError::Failed(_))
        ));
    }

    #[test]
    fn strategic_merges_containers_and_env_by_name() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "E1", "value": "1"}, {"name": "E2", "value": "2"}]},
            {"name": "b", "image": "y"}]}});
        let patched = smp(
            pod,
            json!({"spec": {"containers": [
            {"name": "a", "env": [{"name": "E2", "value": "two"}, {"name": "E3", "value": "3"}]},
            {"name": "c", "image": "z"}]}}),
        );
        assert_eq!(
            patched,
            json!({"spec": {"containers": [
                {"name": "a", "image": "x", "env": [{"name": "E1", "value": "1"}, {"name": "E2", "value": "two"}, {"name": "E3", "value": "3"}]},
                {"name": "b", "image": "y"},
                {"name": "c", "image": "z"}]}})
        );
    }

    #[test]
    fn strategic_directives() {
        let obj = json!({"metadata": {"finalizers": ["a", "batch.kubernetes.io/job-tracking"], "labels": {"x": "1", "y": "2"}},
                         "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}], "args": ["1", "2"]}});
        let patched = smp(
            obj,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["batch.kubernetes.io/job-tracking"], "labels": {"x": null}},
                   "spec": {"containers": [{"name": "b", "$patch": "delete"}], "args": ["3"]}}),
        );
        assert_eq!(patched["metadata"]["finalizers"], json!(["a"]));
        assert_eq!(patched["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(
            patched["spec"]["containers"],
            json!([{"name": "a", "image": "x"}])
        );
        assert_eq!(
            patched["spec"]["args"],
            json!(["3"]),
            "lists without a merge key are replaced"
        );

        let replaced = smp(
            json!({"spec": {"template": {"a": 1, "b": 2}}}),
            json!({"spec": {"template": {"$patch": "replace", "c": 3}}}),
        );
        assert_eq!(replaced, json!({"spec": {"template": {"c": 3}}}));
        let sets = smp(
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": ["b", "a"]}}),
        );
        assert_eq!(sets["metadata"]["finalizers"], json!(["a", "b"]));
        let conds = smp(
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}]}}),
        );
        assert_eq!(
            conds["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}])
        );
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
        let yaml = parse_body(PatchType::Apply, b"metadata:\n  labels:\n    a: b\n").expect("yaml");
        assert_eq!(yaml, json!({"metadata": {"labels": {"a": "b"}}}));
    }
}
