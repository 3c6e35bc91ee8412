//! The local queue's flags: `--max-running`, `--tenant-max-running NAMESPACE=N`,
//! `--default-tenant-max-running`, `--tenant-weight NAMESPACE=W`, `--max-priority`,
//! `--tenant-max-priority NAMESPACE=P`, parsed and bounded, and the policy they make. It
//! must not decide which job starts (the service's local queue does).

use std::collections::BTreeMap;

use crate::model::{PRIORITY_CEILING, PRIORITY_FLOOR, PriorityLimits, QueuePolicy};

use super::{Config, ConfigError, ExecutorKind};

/// One tenant's value of a `NAMESPACE=VALUE` flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantValue {
    pub namespace: String,
    pub value: i64,
}

fn tenant_value(text: &str, what: &str, min: i64, max: i64) -> Result<TenantValue, String> {
    let Some((namespace, value)) = text.split_once('=') else {
        return Err(format!("{text:?} is not NAMESPACE={what}"));
    };
    let namespace = namespace.trim();
    if !crate::model::is_namespace_name(namespace) {
        return Err(format!("{namespace:?} is not a namespace name"));
    }
    match value.trim().parse::<i64>() {
        Ok(value) if (min..=max).contains(&value) => Ok(TenantValue {
            namespace: namespace.to_owned(),
            value,
        }),
        _ => Err(format!("{value:?} is not a {what} from {min} to {max}")),
    }
}

pub(super) fn parse_tenant_slots(text: &str) -> Result<TenantValue, String> {
    tenant_value(text, "number of jobs", 1, i64::from(u32::MAX))
}

pub(super) fn parse_tenant_weight(text: &str) -> Result<TenantValue, String> {
    tenant_value(text, "weight", 1, 1_000_000)
}

pub(super) fn parse_tenant_priority(text: &str) -> Result<TenantValue, String> {
    tenant_value(
        text,
        "priority",
        i64::from(PRIORITY_FLOOR),
        i64::from(PRIORITY_CEILING),
    )
}

fn by_tenant<T>(values: &[TenantValue], convert: impl Fn(i64) -> T) -> BTreeMap<String, T> {
    values
        .iter()
        .map(|v| (v.namespace.clone(), convert(v.value)))
        .collect()
}

impl Config {
    /// The local queue's caps and weights.
    pub fn queue_policy(&self) -> QueuePolicy {
        let slots = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        QueuePolicy {
            max_running: self.max_running,
            tenant_max_running: by_tenant(&self.tenant_max_running, slots),
            default_tenant_max_running: self.default_tenant_max_running,
            tenant_weights: by_tenant(&self.tenant_weights, slots),
        }
    }

    /// The highest priority each tenant's jobs may ask for.
    pub fn priority_limits(&self) -> PriorityLimits {
        PriorityLimits {
            default: self.max_priority.unwrap_or(crate::model::DEFAULT_MAX_PRIORITY),
            tenants: by_tenant(&self.tenant_max_priorities, |p| {
                i32::try_from(p).unwrap_or(PRIORITY_CEILING)
            }),
        }
    }

    /// The queue's caps and weights name the local executor's queue: refused where it does
    /// not run. The priority limits bound every executor's jobs (on Kubernetes they decide
    /// which priority class a job may reach).
    pub(super) fn validate_queue(&self) -> Result<(), ConfigError> {
        let caps = [
            ("--max-running", self.max_running.is_some()),
            ("--tenant-max-running", !self.tenant_max_running.is_empty()),
            (
                "--default-tenant-max-running",
                self.default_tenant_max_running.is_some(),
            ),
            ("--tenant-weight", !self.tenant_weights.is_empty()),
        ];
        let caps: Vec<&str> = caps.iter().filter(|(_, set)| *set).map(|(f, _)| *f).collect();
        if self.executor == ExecutorKind::Kubernetes && !caps.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "{} set the local executor's queue; with --executor kubernetes, queue jobs in Kueue instead (--kueue, ClusterQueue quotas, fair sharing and WorkloadPriorityClasses)",
                caps.join(", ")
            )));
        }
        let shared = self
            .database_url
            .as_deref()
            .is_some_and(|url| !url.trim().is_empty());
        if shared && !caps.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "{} need a store of this jobgate's own (SQLite): the local queue keeps its count of running jobs in memory, so replicas sharing a PostgreSQL database would each allow the cap",
                caps.join(", ")
            )));
        }
        Ok(())
    }
}
