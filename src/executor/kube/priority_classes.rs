//! The classes a job's priority maps to on Kubernetes, as an operator configures them
//! (`--kueue-priority-class PRIORITY=NAME`, `--pod-priority-class PRIORITY=NAME`): a job
//! takes the class of the highest PRIORITY at or below its own priority, and none when its
//! priority is below every configured one.
//!
//! A WorkloadPriorityClass is named by the `kueue.x-k8s.io/priority-class` label on a queued
//! job's object (Kueue reads it on every kind it queues, so it applies to templates' kinds
//! too); a PriorityClass is the pods' `priorityClassName`, set on the container template's
//! batch Job only (a template's kind keeps its pod templates where its own schema puts
//! them; a template sets `priorityClassName` itself where it wants one).
//!
//! It must not talk to the API server: the classes are the cluster's, created by its admin.

use std::collections::BTreeMap;
use std::str::FromStr;

/// Kueue's label naming a queued object's WorkloadPriorityClass.
pub const KUEUE_PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// One `PRIORITY=NAME` of a flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClassRule {
    pub priority: i32,
    pub name: String,
}

impl FromStr for PriorityClassRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (priority, name) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected PRIORITY=NAME, e.g. 100=high"))?;
        let priority = priority
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: PRIORITY must be an integer"))?;
        let name = name.trim();
        let valid =
            !name.is_empty() && name.len() <= 253 && name.split('.').all(crate::model::is_namespace_name);
        if !valid {
            return Err(format!(
                "{s:?}: NAME must be a Kubernetes object name (lowercase letters, digits, '-' and '.')"
            ));
        }
        Ok(Self {
            priority,
            name: name.to_owned(),
        })
    }
}

/// Both mappings; empty maps no class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriorityClasses {
    /// Lowest priority → WorkloadPriorityClass, for jobs queued in Kueue.
    pub workload: BTreeMap<i32, String>,
    /// Lowest priority → PriorityClass, for the pods of batch Jobs.
    pub pod: BTreeMap<i32, String>,
}

impl PriorityClasses {
    /// From the flags' rules; a later rule for the same PRIORITY replaces an earlier one.
    pub fn new(workload: &[PriorityClassRule], pod: &[PriorityClassRule]) -> Self {
        let map = |rules: &[PriorityClassRule]| rules.iter().map(|r| (r.priority, r.name.clone())).collect();
        Self {
            workload: map(workload),
            pod: map(pod),
        }
    }

    /// The WorkloadPriorityClass of a job of `priority`.
    pub fn workload_class(&self, priority: i32) -> Option<&str> {
        class_at(&self.workload, priority)
    }

    /// The PriorityClass of the pods of a job of `priority`.
    pub fn pod_class(&self, priority: i32) -> Option<&str> {
        class_at(&self.pod, priority)
    }
}

fn class_at(map: &BTreeMap<i32, String>, priority: i32) -> Option<&str> {
    map.range(..=priority).next_back().map(|(_, name)| name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_takes_the_class_of_the_highest_priority_at_or_below_its_own() {
        let rules: Vec<PriorityClassRule> = ["0=normal", "100=high", "-10=low"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let classes = PriorityClasses::new(&rules, &[]);
        assert_eq!(classes.workload_class(-11), None);
        assert_eq!(classes.workload_class(-10), Some("low"));
        assert_eq!(classes.workload_class(99), Some("normal"));
        assert_eq!(classes.workload_class(100), Some("high"));
        assert_eq!(classes.workload_class(i32::MAX), Some("high"));
        assert_eq!(classes.pod_class(100), None);
    }

    #[test]
    fn rules_parse_priority_equals_name() {
        assert!("x=high".parse::<PriorityClassRule>().is_err());
        assert!("5".parse::<PriorityClassRule>().is_err());
        assert!("5=High".parse::<PriorityClassRule>().is_err());
        assert_eq!(
            "-5=batch.low".parse::<PriorityClassRule>(),
            Ok(PriorityClassRule {
                priority: -5,
                name: "batch.low".into()
            })
        );
    }
}
