//! The kinds the store serves: each one's group, version, names and scope, and the built-in set
//! every emulator starts with. Kinds registered from a CRD use the same type.
//!
//! It must not hold objects or know how a kind is validated or defaulted (the API layer's).

/// A kind the emulator serves: built in (namespaces, pods, pods/log, configmaps, events (core/v1
/// and events.k8s.io/v1), batch/v1 jobs, coordination.k8s.io/v1 leases, scheduling.k8s.io/v1
/// priorityclasses, apiextensions.k8s.io/v1 customresourcedefinitions,
/// admissionregistration.k8s.io/v1 validatingwebhookconfigurations) or registered from a CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub short_names: Vec<String>,
}

impl ResourceType {
    /// `"batch/v1"`, or `"v1"` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store key and the resource's name in API messages: `"jobs.batch"`, or `"pods"` for core.
    pub fn key(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn builtin(
        group: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status_subresource: bool,
        short_names: &[&str],
    ) -> Self {
        ResourceType {
            group: group.to_owned(),
            version: "v1".to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_ascii_lowercase(),
            namespaced,
            status_subresource,
            short_names: short_names.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// The kinds every emulator serves from the start.
    pub fn builtins() -> Vec<ResourceType> {
        vec![
            Self::builtin("", "Namespace", "namespaces", false, true, &["ns"]),
            Self::builtin("", "Pod", "pods", true, true, &["po"]),
            Self::builtin("", "ConfigMap", "configmaps", true, false, &["cm"]),
            Self::builtin("", "Event", "events", true, false, &["ev"]),
            Self::builtin("events.k8s.io", "Event", "events", true, false, &["ev"]),
            Self::builtin("batch", "Job", "jobs", true, true, &[]),
            Self::builtin("coordination.k8s.io", "Lease", "leases", true, false, &[]),
            Self::builtin(
                "scheduling.k8s.io",
                "PriorityClass",
                "priorityclasses",
                false,
                false,
                &["pc"],
            ),
            Self::builtin(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
                true,
                &["crd", "crds"],
            ),
            Self::builtin(
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                false,
                false,
                &[],
            ),
        ]
    }
}
