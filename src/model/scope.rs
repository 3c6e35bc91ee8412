//! `Scope`: the namespaces a caller may see and use. A job outside a caller's scope does not
//! exist for them.
//!
//! There is deliberately no default: every scope is an authenticated caller's (see `auth`),
//! and every read of the job service takes one, so a forgotten scope is a compile error
//! rather than a leak. `Scope::All` (an admin, open access) is only ever written out.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::job::Job;

/// The namespaces a caller may see and use: every one (an admin, or open access), or a set.
/// A job outside the caller's scope does not exist for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespaces(Arc<BTreeSet<String>>),
}

impl Scope {
    pub fn namespaces<I: IntoIterator<Item = S>, S: Into<String>>(namespaces: I) -> Self {
        Self::Namespaces(Arc::new(namespaces.into_iter().map(Into::into).collect()))
    }

    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Namespaces(set) => set.contains(namespace),
        }
    }

    /// The namespaces, or `None` for every one.
    pub fn list(&self) -> Option<&BTreeSet<String>> {
        match self {
            Self::All => None,
            Self::Namespaces(set) => Some(set),
        }
    }

    pub fn sees(&self, job: &Job) -> bool {
        self.allows(&job.spec.namespace)
    }

    /// A text equal for equal scopes and different for different ones: what callers who may
    /// share a rendering of the same event must have in common. (Namespace names are DNS
    /// labels, so they contain no comma; `*` is not one either.)
    pub fn key(&self) -> String {
        match self {
            Self::All => "*".to_owned(),
            Self::Namespaces(set) => set.iter().map(String::as_str).collect::<Vec<_>>().join(","),
        }
    }

    /// The namespaces both scopes allow.
    pub fn intersection(&self, other: &Scope) -> Scope {
        match (self, other) {
            (Self::All, s) | (s, Self::All) => s.clone(),
            (Self::Namespaces(a), Self::Namespaces(b)) => {
                Self::Namespaces(Arc::new(a.intersection(b).cloned().collect()))
            }
        }
    }

    /// The namespaces either scope allows.
    pub fn union(&self, other: &Scope) -> Scope {
        match (self, other) {
            (Self::All, _) | (_, Self::All) => Self::All,
            (Self::Namespaces(a), Self::Namespaces(b)) => {
                Self::Namespaces(Arc::new(a.union(b).cloned().collect()))
            }
        }
    }
}
