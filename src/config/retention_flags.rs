//! The retention flags' values: `--retention-days` and `--retention-namespace
//! NAMESPACE=DAYS|forever`, parsed and bounded. It must not decide what retention deletes
//! (`jobs::retention` does).

/// One namespace's retention (`--retention-namespace NAMESPACE=DAYS|forever`).
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceRetention {
    pub namespace: String,
    /// `None`: kept forever.
    pub days: Option<f64>,
}

pub(super) fn parse_retention_days(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        // Up to a thousand years: beyond that, Duration arithmetic would overflow.
        Ok(days) if days.is_finite() && days > 0.0 && days <= 365_000.0 => Ok(days),
        _ => Err(format!(
            "{text:?} is not a number of days above 0 (e.g. 30, or 0.5)"
        )),
    }
}

pub(super) fn parse_namespace_retention(text: &str) -> Result<NamespaceRetention, String> {
    let Some((namespace, days)) = text.split_once('=') else {
        return Err(format!("{text:?} is not NAMESPACE=DAYS or NAMESPACE=forever"));
    };
    let namespace = namespace.trim();
    if !crate::model::is_namespace_name(namespace) {
        return Err(format!("{namespace:?} is not a namespace name"));
    }
    let days = match days.trim() {
        "forever" => None,
        days => Some(parse_retention_days(days)?),
    };
    Ok(NamespaceRetention {
        namespace: namespace.to_owned(),
        days,
    })
}
