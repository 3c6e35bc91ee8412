//! Authorization as kube-apiserver's RBAC authorizer decides it: Roles and ClusterRoles (verbs,
//! apiGroups, resources with `resource/subresource` and `*` wildcards, resourceNames), granted
//! by RoleBindings (in their namespace, a ClusterRole's rules too) and ClusterRoleBindings (in
//! every namespace and at the cluster scope) to Users, Groups and ServiceAccounts. Members of
//! `system:masters` may do anything, as on a real server.
//!
//! The policy is loaded at start from multi-document YAML (objects of other kinds are ignored)
//! and changed while the emulator runs by applying more ([`Policy::apply_yaml`]: an object
//! replaces the one of its kind, namespace and name), as RBAC changes apply at once on a real
//! cluster: the next request is decided by the new policy. It must not authenticate (that is
//! [`super::authn`]) nor serve RBAC objects over the API.

use std::collections::{BTreeMap, HashMap};
use std::sync::{PoisonError, RwLock};

use anyhow::Context;
use serde_json::Value;

use super::authn::{MASTERS, UserInfo};
use super::status::ApiError;

/// What a resource request asks to do, as the authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    pub group: String,
    /// The plural resource (`pods`), without the subresource.
    pub resource: String,
    /// `log`, `status`, or empty.
    pub subresource: String,
    /// Empty at the cluster scope.
    pub namespace: String,
    /// Empty for a collection.
    pub name: String,
}

/// One rule of a Role or ClusterRole.
#[derive(Clone, Debug, Default)]
struct Rule {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Rule {
    fn allows(&self, a: &Attributes) -> bool {
        let any = |list: &[String], wanted: &str| list.iter().any(|x| x == "*" || x == wanted);
        let resource_matches = self.resources.iter().any(|r| {
            if a.subresource.is_empty() {
                r == "*" || *r == a.resource
            } else {
                r == "*"
                    || *r == format!("{}/{}", a.resource, a.subresource)
                    || *r == format!("*/{}", a.subresource)
            }
        });
        let name_matches = self.names.is_empty() || (!a.name.is_empty() && self.names.contains(&a.name));
        any(&self.verbs, &a.verb) && any(&self.groups, &a.group) && resource_matches && name_matches
    }
}

/// A subject of a binding.
#[derive(Clone, Debug)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    /// Whether the subject names `user`; a ServiceAccount without a namespace is in the
    /// binding's (`binding_namespace`).
    fn names(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user.name,
            "Group" => user.in_group(&self.name),
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                user.name == format!("system:serviceaccount:{namespace}:{}", self.name)
            }
            _ => false,
        }
    }
}

/// A RoleBinding (with its namespace) or a ClusterRoleBinding (namespace empty).
#[derive(Clone, Debug)]
struct Binding {
    namespace: String,
    role_kind: String,
    role_name: String,
    subjects: Vec<Subject>,
}

/// The RBAC objects in force, changed as a whole by each [`Policy::apply_yaml`].
#[derive(Debug, Default)]
pub struct Policy {
    objects: RwLock<Objects>,
}

/// RBAC objects by namespace (empty for cluster-scoped ones) and name.
#[derive(Clone, Debug, Default)]
struct Objects {
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_roles: HashMap<String, Vec<Rule>>,
    /// RoleBindings (namespace set) and ClusterRoleBindings (namespace empty), in the order
    /// a refusal names missing roles in.
    bindings: BTreeMap<(String, String), Binding>,
}

/// How a request was decided, with the reason a refusal carries (a binding to a missing role).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
}

impl Policy {
    /// Reads Role, ClusterRole, RoleBinding and ClusterRoleBinding objects from multi-document
    /// YAML (e.g. `kubectl kustomize deploy/overlays/prod`); other kinds are skipped.
    pub fn from_yaml(yaml: &str) -> anyhow::Result<Policy> {
        let policy = Policy::default();
        policy.apply_yaml(yaml)?;
        Ok(policy)
    }

    /// Creates or replaces the RBAC objects of `yaml` (as [`Policy::from_yaml`] reads them),
    /// as `kubectl apply` would: each replaces the object of its kind, namespace and name, and
    /// requests decided from then on see it. All or nothing: YAML with an invalid object
    /// changes nothing.
    pub fn apply_yaml(&self, yaml: &str) -> anyhow::Result<()> {
        let mut policy = self
            .objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for document in serde_yaml_ng::Deserializer::from_str(yaml) {
            let value = <Value as serde::Deserialize>::deserialize(document).context("parsing RBAC YAML")?;
            if value.is_null() {
                continue;
            }
            let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
            let text = |p: &str| {
                value
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let name = text("/metadata/name");
            let namespace = text("/metadata/namespace");
            match kind {
                "Role" | "ClusterRole" => {
                    let rules = value
                        .get("rules")
                        .and_then(Value::as_array)
                        .map(|rules| {
                            rules
                                .iter()
                                .map(|r| Rule {
                                    verbs: strings(r, "verbs"),
                                    groups: strings(r, "apiGroups"),
                                    resources: strings(r, "resources"),
                                    names: strings(r, "resourceNames"),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    if kind == "Role" {
                        anyhow::ensure!(!namespace.is_empty(), "Role {name:?} has no namespace");
                        policy.roles.insert((namespace, name), rules);
                    } else {
                        policy.cluster_roles.insert(name, rules);
                    }
                }
                "RoleBinding" | "ClusterRoleBinding" => {
                    anyhow::ensure!(
                        kind == "ClusterRoleBinding" || !namespace.is_empty(),
                        "RoleBinding {name:?} has no namespace"
                    );
                    let subjects = value
                        .get("subjects")
                        .and_then(Value::as_array)
                        .map(|subjects| {
                            subjects
                                .iter()
                                .map(|s| Subject {
                                    kind: strings_of(s, "kind"),
                                    name: strings_of(s, "name"),
                                    namespace: strings_of(s, "namespace"),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let namespace = if kind == "RoleBinding" {
                        namespace
                    } else {
                        String::new()
                    };
                    let binding = Binding {
                        namespace: namespace.clone(),
                        role_kind: text("/roleRef/kind"),
                        role_name: text("/roleRef/name"),
                        subjects,
                    };
                    policy.bindings.insert((namespace, name), binding);
                }
                _ => {}
            }
        }
        *self.objects.write().unwrap_or_else(PoisonError::into_inner) = policy;
        Ok(())
    }

    /// Decides `attributes` for `user`.
    pub fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        if user.in_group(MASTERS) {
            return Decision::Allow;
        }
        let objects = self.objects.read().unwrap_or_else(PoisonError::into_inner);
        objects.authorize(user, attributes)
    }
}

impl Objects {
    fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        let mut missing = Vec::new();
        for binding in self.bindings.values() {
            // A RoleBinding grants only in its own namespace.
            if !binding.namespace.is_empty() && binding.namespace != attributes.namespace {
                continue;
            }
            if !binding.subjects.iter().any(|s| s.names(user, &binding.namespace)) {
                continue;
            }
            let rules = match binding.role_kind.as_str() {
                "Role" => self
                    .roles
                    .get(&(binding.namespace.clone(), binding.role_name.clone())),
                _ => self.cluster_roles.get(&binding.role_name),
            };
            match rules {
                Some(rules) if rules.iter().any(|r| r.allows(attributes)) => return Decision::Allow,
                Some(_) => {}
                None if binding.role_kind == "Role" => missing.push(format!(
                    "role.rbac.authorization.k8s.io {:?} not found",
                    binding.role_name
                )),
                None => missing.push(format!(
                    "clusterrole.rbac.authorization.k8s.io {:?} not found",
                    binding.role_name
                )),
            }
        }
        if missing.is_empty() {
            Decision::Deny(String::new())
        } else if missing.len() == 1 {
            Decision::Deny(format!("RBAC: {}", missing[0]))
        } else {
            Decision::Deny(format!("RBAC: [{}]", missing.join(", ")))
        }
    }
}

fn strings_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The `403 Forbidden` the real server answers a refused resource request with:
/// `RESOURCE[.GROUP] ["NAME"] is forbidden: User "U" cannot VERB resource "R[/SUB]" in API
/// group "G" (in the namespace "NS" | at the cluster scope)[: REASON]`.
pub fn forbidden(user: &UserInfo, a: &Attributes, reason: &str) -> ApiError {
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {:?}", a.namespace)
    };
    let mut why = format!(
        "User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        user.name, a.verb, a.group
    );
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    ApiError::forbidden(&qualified, &a.group, &a.resource, &a.name, &why)
}

#[cfg(test)]
mod tests {
    use super::super::authn::{DEFAULT_USER, UserInfo};
    use super::*;

    const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: jobgate, namespace: team}
rules:
- {apiGroups: [batch], resources: [jobs], verbs: [create, get]}
- {apiGroups: [""], resources: [pods/log], verbs: [get]}
- {apiGroups: [coordination.k8s.io], resources: [leases], verbs: ["*"], resourceNames: [leader]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: jobgate, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: jobgate}
subjects: [{kind: ServiceAccount, name: jobgate, namespace: jobgate}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crd-reader}
rules:
- {apiGroups: [apiextensions.k8s.io], resources: ["*"], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: crd-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crd-reader}
subjects: [{kind: Group, name: "system:serviceaccounts:jobgate"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pods, namespace: other}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
subjects: [{kind: User, name: "system:serviceaccount:jobgate:jobgate"}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: jobgate, namespace: jobgate}
"#;

    fn ask(verb: &str, group: &str, resource: &str, sub: &str, namespace: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn applied_objects_take_effect_at_once_and_replace_their_namesakes() {
        let policy = Policy::from_yaml(POLICY).expect("policy");
        let sa = UserInfo::named(DEFAULT_USER, &[]);
        let lease = ask("create", "coordination.k8s.io", "leases", "", "team", "");
        assert!(policy.authorize(&sa, &lease) != Decision::Allow);
        // A new Role and its binding: allowed from the next request on.
        policy
            .apply_yaml(
                r#"
kind: Role
metadata: {name: leases, namespace: team}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create]}]
---
kind: RoleBinding
metadata: {name: leases, namespace: team}
roleRef: {kind: Role, name: leases}
subjects: [{kind: ServiceAccount, name: jobgate, namespace: jobgate}]
"#,
            )
            .expect("apply");
        assert_eq!(policy.authorize(&sa, &lease), Decision::Allow);
        // What was there before stays.
        assert_eq!(
            policy.authorize(&sa, &ask("create", "batch", "jobs", "", "team", "")),
            Decision::Allow
        );
        // The Role replaced by one without the verb: refused again.
        policy
            .apply_yaml("kind: Role\nmetadata: {name: leases, namespace: team}\nrules: []\n")
            .expect("apply");
        assert!(policy.authorize(&sa, &lease) != Decision::Allow);
        // The binding replaced by one naming a missing role: the refusal says so.
        policy
            .apply_yaml(
                "kind: RoleBinding\nmetadata: {name: leases, namespace: team}\nroleRef: {kind: Role, name: gone}\nsubjects: [{kind: ServiceAccount, name: jobgate, namespace: jobgate}]\n",
            )
            .expect("apply");
        assert_eq!(
            policy.authorize(&sa, &lease),
            Decision::Deny("RBAC: role.rbac.authorization.k8s.io \"gone\" not found".into())
        );
        // An invalid object changes nothing, not even the valid ones beside it.
        let refused = policy.apply_yaml(
            "kind: Role\nmetadata: {name: gone, namespace: team}\nrules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create]}]\n---\nkind: Role\nmetadata: {name: x}\n",
        );
        assert!(refused.is_err());
        assert!(policy.authorize(&sa, &lease) != Decision::Allow);
    }

    #[test]
    fn rules_grant_what_they_name_and_nothing_else() {
        let policy = Policy::from_yaml(POLICY).expect("policy");
        let sa = UserInfo::named(DEFAULT_USER, &[]);
        let allowed = |a: Attributes| policy.authorize(&sa, &a) == Decision::Allow;
        assert!(allowed(ask("create", "batch", "jobs", "", "team", "")));
        assert!(!allowed(ask("delete", "batch", "jobs", "", "team", "x")));
        assert!(!allowed(ask("create", "batch", "jobs", "", "elsewhere", "")));
        assert!(!allowed(ask("get", "", "pods", "", "team", "p")));
        assert!(allowed(ask("get", "", "pods", "log", "team", "p")));
        assert!(!allowed(ask("get", "batch", "jobs", "status", "team", "j")));
        assert!(allowed(ask(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "team",
            "leader"
        )));
        assert!(!allowed(ask(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "team",
            "other"
        )));
        assert!(!allowed(ask(
            "list",
            "coordination.k8s.io",
            "leases",
            "",
            "team",
            ""
        )));
        assert!(allowed(ask(
            "watch",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "",
            ""
        )));
        let other = UserInfo::named("system:serviceaccount:other:jobgate", &[]);
        assert!(policy.authorize(&other, &ask("create", "batch", "jobs", "", "team", "")) != Decision::Allow);
        assert!(
            policy.authorize(
                &UserInfo::named("x", &[MASTERS]),
                &ask("delete", "", "nodes", "", "", "n")
            ) == Decision::Allow
        );
        assert_eq!(
            policy.authorize(&sa, &ask("get", "", "pods", "", "other", "p")),
            Decision::Deny("RBAC: clusterrole.rbac.authorization.k8s.io \"pod-reader\" not found".into())
        );
    }

    #[test]
    fn refusals_read_as_the_real_server_writes_them() {
        let sa = UserInfo::named(DEFAULT_USER, &[]);
        let e = forbidden(&sa, &ask("delete", "", "pods", "", "default", "x"), "");
        assert_eq!(
            e.body(),
            serde_json::from_str::<Value>(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" is forbidden: User \"system:serviceaccount:jobgate:jobgate\" cannot delete resource \"pods\" in API group \"\" in the namespace \"default\"","reason":"Forbidden","details":{"name":"x","kind":"pods"},"code":403}"#).unwrap()
        );
        let e = forbidden(
            &sa,
            &ask(
                "watch",
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "",
                "",
                "",
            ),
            "",
        );
        assert_eq!(
            e.message,
            "customresourcedefinitions.apiextensions.k8s.io is forbidden: User \"system:serviceaccount:jobgate:jobgate\" cannot watch resource \"customresourcedefinitions\" in API group \"apiextensions.k8s.io\" at the cluster scope"
        );
        assert_eq!(
            *e.details,
            serde_json::json!({"group": "apiextensions.k8s.io", "kind": "customresourcedefinitions"})
        );
        let e = forbidden(&sa, &ask("get", "", "pods", "log", "default", "p"), "");
        assert!(
            e.message.starts_with("pods \"p\" is forbidden: User"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("cannot get resource \"pods/log\" in API group \"\" in the namespace \"default\"")
        );
    }
}
