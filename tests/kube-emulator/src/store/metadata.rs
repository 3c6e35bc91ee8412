//! Reading and stamping the metadata the store's rules depend on: the resourceVersion as a
//! number, the timestamp format, `generateName` suffixes, finalizers and the deletion state, and
//! whether a deleting object may leave the store now.
//!
//! Pure functions on one object: they must not take the store's lock or commit anything.

use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{ResourceType, StoreError};

/// Characters the real API server uses for `generateName` suffixes (no vowels, no confusables).
pub(super) const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The object's `metadata.resourceVersion` as a number, if it has a valid one.
pub fn resource_version(object: &Value) -> Option<u64> {
    object
        .pointer("/metadata/resourceVersion")?
        .as_str()?
        .parse()
        .ok()
}

/// Now, as the API writes timestamps (RFC 3339, UTC, second precision).
pub fn now_timestamp() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A random `generateName` suffix of `n` characters from the real server's alphabet.
pub fn random_suffix(n: usize) -> String {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        // Each v4 UUID carries 122 random bits; bytes 6 and 8 hold the fixed version/variant bits.
        let uuid = uuid::Uuid::new_v4();
        for (i, b) in uuid.as_bytes().iter().enumerate() {
            if i == 6 || i == 8 || out.len() == n {
                continue;
            }
            // Rejection sampling keeps the distribution uniform: 27 * 9 = 243.
            if *b < 243 {
                out.push(NAME_SUFFIX_ALPHABET[(*b as usize) % NAME_SUFFIX_ALPHABET.len()] as char);
            }
        }
    }
    out
}

pub(super) fn ns_key(rt: &ResourceType, namespace: Option<&str>) -> String {
    if rt.namespaced {
        namespace.unwrap_or_default().to_owned()
    } else {
        String::new()
    }
}

pub(super) fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(super) fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn pod_is_terminal(object: &Value) -> bool {
    matches!(
        object.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a deleting object may leave the store now: no finalizers left, and for a pod, it has
/// stopped running (terminal phase) or its deletion was immediate (grace period 0).
pub(super) fn may_be_removed(resource: &str, object: &Value) -> bool {
    if !is_deleting(object) || !finalizers(object).is_empty() {
        return false;
    }
    resource != "pods"
        || pod_is_terminal(object)
        || object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(0)
}

pub(super) fn metadata_mut(object: &mut Value) -> Result<&mut serde_json::Map<String, Value>, StoreError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| StoreError::Invalid("object must be a JSON object".into()))?;
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| StoreError::Invalid("metadata must be a JSON object".into()))
}
