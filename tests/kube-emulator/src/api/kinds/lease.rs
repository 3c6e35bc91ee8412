//! coordination.k8s.io/v1 Leases: the field types the real decoder enforces, and create/update
//! handling with the feature-gated `strategy`/`preferredHolder` fields.
//!
//! Pure object transformations: it must not touch the store or HTTP.

use serde_json::{Value, json};

use crate::api::status::{ApiError, FieldErrors};

/// The LeaseSpec field types the real decoder enforces (`int32`s, strings, `MicroTime`s).
pub(super) fn check_lease_shape(
    lease: &Value,
    wrong: &dyn Fn(&str, &str) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let Some(spec) = lease.get("spec").and_then(Value::as_object) else {
        return Ok(());
    };
    for (field, value) in spec {
        let ok = value.is_null()
            || match field.as_str() {
                "holderIdentity" | "strategy" | "preferredHolder" => value.is_string(),
                "leaseDurationSeconds" | "leaseTransitions" => {
                    value.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
                }
                "acquireTime" | "renewTime" => value
                    .as_str()
                    .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()),
                // Unknown fields are dropped by the real decoder; see `prepare_lease`.
                _ => true,
            };
        if !ok {
            let want = match field.as_str() {
                "leaseDurationSeconds" | "leaseTransitions" => "int32",
                "acquireTime" | "renewTime" => "MicroTime",
                _ => "string",
            };
            return wrong(&format!("LeaseSpec.spec.{field}"), want);
        }
    }
    Ok(())
}

/// Lease create and update (`pkg/registry/coordination/lease/strategy.go`,
/// `pkg/apis/coordination/validation`), with the CoordinatedLeaderElection feature gate off as on
/// a default v1.33 server: `strategy` and `preferredHolder` are dropped unless the stored lease
/// (`old`) already had them. The spec keeps only LeaseSpec's fields (the decoder drops the rest),
/// the times are re-encoded as `MicroTime` (UTC, six fractional digits), and
/// `leaseDurationSeconds` must be > 0, `leaseTransitions` >= 0.
pub(super) fn prepare_lease(old: Option<&Value>, lease: &mut Value, errs: &mut FieldErrors) {
    if !lease.get("spec").is_some_and(Value::is_object) {
        // LeaseSpec is a struct field: the real server always writes `spec`, `{}` when empty.
        lease["spec"] = json!({});
    }
    let Some(spec) = lease["spec"].as_object_mut() else {
        return;
    };
    spec.retain(|field, value| {
        !value.is_null()
            && matches!(
                field.as_str(),
                "holderIdentity"
                    | "leaseDurationSeconds"
                    | "acquireTime"
                    | "renewTime"
                    | "leaseTransitions"
                    | "strategy"
                    | "preferredHolder"
            )
    });
    for gated in ["strategy", "preferredHolder"] {
        if old.is_none_or(|o| o.pointer(&format!("/spec/{gated}")).is_none_or(Value::is_null)) {
            spec.remove(gated);
        }
    }
    for field in ["acquireTime", "renewTime"] {
        if let Some(t) = spec
            .get(field)
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        {
            let micro = t
                .with_timezone(&chrono::Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            spec.insert(field.to_owned(), json!(micro));
        }
    }
    if let Some(d) = spec.get("leaseDurationSeconds").and_then(Value::as_i64)
        && d <= 0
    {
        errs.invalid("spec.leaseDurationSeconds", &json!(d), "must be greater than 0");
    }
    if let Some(n) = spec.get("leaseTransitions").and_then(Value::as_i64)
        && n < 0
    {
        errs.invalid(
            "spec.leaseTransitions",
            &json!(n),
            "must be greater than or equal to 0",
        );
    }
    let strategy_set = spec
        .get("strategy")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if spec
        .get("preferredHolder")
        .and_then(Value::as_str)
        .is_some_and(|h| !h.is_empty())
        && !strategy_set
    {
        errs.forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        );
    }
}
