//! Validation of a [`Config`]: what single values cannot check (combinations, the
//! authentication rules, the local executor's isolation). It must not start anything: it only
//! reads the files the settings name (the tokens file, the user database).

use std::path::PathBuf;

use crate::auth::{Auth, AuthSettings, JwtSettings};
use crate::executor::local::sandbox::RunAs;
use crate::model::Scope;

use super::{Config, ConfigError, ExecutorKind};

impl Config {
    /// Checks what single values cannot: combinations, and the authentication rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ws_max_frame_bytes > self.ws_max_message_bytes {
            return Err(ConfigError::Invalid(format!(
                "--ws-max-frame-bytes ({}) is larger than --ws-max-message-bytes ({})",
                self.ws_max_frame_bytes, self.ws_max_message_bytes
            )));
        }
        for origin in &self.allowed_origins {
            let ok = origin == "*"
                || ((origin.starts_with("http://") || origin.starts_with("https://"))
                    && !origin.ends_with('/')
                    && origin
                        .split("://")
                        .nth(1)
                        .is_some_and(|h| !h.is_empty() && !h.contains('/')));
            if !ok {
                return Err(ConfigError::Invalid(format!(
                    "--allowed-origins: {origin:?} is not an origin like https://example.com or https://example.com:8443 (no path, no trailing slash), nor *"
                )));
            }
        }
        crate::hosts::AllowedHosts::parse(&self.allowed_hosts).map_err(ConfigError::Invalid)?;
        self.auth_settings()?;
        if let Some(queue) = self.default_queue()
            && !crate::model::is_queue_name(&queue)
        {
            return Err(ConfigError::Invalid(format!(
                "--default-queue: {queue:?} is not a LocalQueue name (1 to 63 lowercase letters, digits, '-' or '.', starting and ending alphanumeric)"
            )));
        }
        if self.kueue_enabled() && self.executor != ExecutorKind::Kubernetes {
            return Err(ConfigError::Invalid(
                "--kueue and --default-queue need --executor kubernetes: Kueue queues Kubernetes workloads"
                    .into(),
            ));
        }
        self.validate_queue()?;
        if self.executor == ExecutorKind::Local {
            self.validate_local()?;
        }
        Ok(())
    }

    /// The local executor's isolation settings: a user to switch to that exists and is not
    /// root, a work directory outside the data directory, and no tenants sharing jobgate's
    /// own user unless told they may.
    fn validate_local(&self) -> Result<(), ConfigError> {
        let run_as = self.run_as()?;
        let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
        let (work, data) = (absolute(&self.local_work_root()), absolute(&self.data_dir));
        if work.starts_with(&data) || data.starts_with(&work) {
            return Err(ConfigError::Invalid(format!(
                "--local-work-dir {} and --data-dir {} must not contain one another: jobs must get no path into jobgate's data",
                work.display(),
                data.display()
            )));
        }
        if run_as.is_some() || self.local_trusted_tenants {
            return Ok(());
        }
        if let Some(why) = self.tenants_differ()? {
            return Err(ConfigError::Invalid(format!(
                "the local executor would run every job as jobgate's own user (uid {}) while callers have different namespaces ({why}): any tenant's job could read the others' logs and results and jobgate's database and credentials. Run jobgate as root, so that jobs run as an unprivileged user (--run-as-user, `nobody` by default); use --executor kubernetes for tenants that must not trust each other; or, if every caller may see everything anyway, set --local-trusted-tenants",
                nix::unistd::geteuid()
            )));
        }
        Ok(())
    }

    /// Why callers can have different scopes, if they can: JWTs (whose claims name any
    /// namespaces), or static tokens and anonymous access with different namespaces once
    /// narrowed to `--allowed-namespaces`. Reads the tokens file.
    fn tenants_differ(&self) -> Result<Option<String>, ConfigError> {
        let settings = self.auth_settings()?;
        if settings.jwt.hs256_secret_file.is_some() || settings.jwt.jwks_file.is_some() {
            return Ok(Some(
                "JWTs are accepted, and their claims may name any namespaces".to_owned(),
            ));
        }
        let auth = Auth::load(&settings).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let allowed: std::collections::BTreeSet<String> = self.allowed_namespaces().into_iter().collect();
        let usable = |scope: &Scope| -> Option<std::collections::BTreeSet<String>> {
            match (scope.list(), allowed.is_empty()) {
                (None, true) => None,
                (None, false) => Some(allowed.clone()),
                (Some(set), true) => Some(set.clone()),
                (Some(set), false) => Some(set.intersection(&allowed).cloned().collect()),
            }
        };
        let text = |set: &Option<std::collections::BTreeSet<String>>| match set {
            None => "every namespace".to_owned(),
            Some(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
        };
        let scopes = auth.static_scopes();
        let Some((first, first_scope)) = scopes.first() else {
            return Ok(None);
        };
        let first_usable = usable(first_scope);
        Ok(scopes.iter().find_map(|(name, scope)| {
            let other = usable(scope);
            (other != first_usable).then(|| {
                format!(
                    "{first} may use {}, {name} may use {}",
                    text(&first_usable),
                    text(&other)
                )
            })
        }))
    }

    /// The user local jobs run as: `--run-as-user`, or `nobody` when jobgate is root; none
    /// (jobgate's own user) otherwise. Refuses a user that does not exist, root, and a switch
    /// that jobgate, not being root, could not make.
    pub fn run_as(&self) -> Result<Option<RunAs>, ConfigError> {
        let root = nix::unistd::geteuid().is_root();
        let given = self
            .run_as_user
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        let spec = match (given, root) {
            (Some(spec), true) => spec,
            (Some(spec), false) => {
                return Err(ConfigError::Invalid(format!(
                    "--run-as-user {spec:?}: jobgate runs as uid {}, not root, so it cannot start jobs as another user; run it as root, or leave --run-as-user unset (jobs then run as jobgate's own user: see docs/CONFIG.md)",
                    nix::unistd::geteuid()
                )));
            }
            (None, true) => "nobody",
            (None, false) => return Ok(None),
        };
        RunAs::resolve(spec).map(Some).map_err(|e| {
            ConfigError::Invalid(if given.is_none() {
                format!("jobgate runs as root, so local jobs run as an unprivileged user, `nobody` by default: {e}; set --run-as-user (USER or UID:GID)")
            } else {
                e
            })
        })
    }

    /// `--local-work-dir`, or `<temp dir>/jobgate-<uid>`.
    pub(super) fn local_work_root(&self) -> PathBuf {
        self.local_work_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join(format!("jobgate-{}", nix::unistd::geteuid())))
    }

    /// Who may call, from the authentication settings: see `--anonymous`.
    pub fn auth_settings(&self) -> Result<AuthSettings, ConfigError> {
        let mut settings = AuthSettings {
            anonymous: None,
            api_token: self.api_token.clone().filter(|t| !t.trim().is_empty()),
            api_tokens_file: self.api_tokens_file.clone(),
            jwt: JwtSettings {
                hs256_secret_file: self.jwt_hs256_secret_file.clone(),
                jwks_file: self.jwt_jwks_file.clone(),
                issuer: self.jwt_issuer.clone(),
                audience: self.jwt_audience.clone(),
                namespaces_claim: self.jwt_namespaces_claim.clone(),
                roles_claim: self.jwt_roles_claim.clone(),
            },
        };
        let credentials = settings.has_credentials();
        let anonymous = match self.anonymous {
            Some(allowed) => allowed,
            None if credentials => false,
            None if self.listen.ip().is_loopback() => true,
            None => {
                return Err(ConfigError::Invalid(format!(
                    "jobgate would listen on {} with no credentials configured: set --api-tokens-file, --jwt-jwks-file or --jwt-hs256-secret-file, or allow anonymous access explicitly with --anonymous true",
                    self.listen
                )));
            }
        };
        if !anonymous && !credentials {
            return Err(ConfigError::Invalid(
                "--anonymous false with no credentials configured would let nobody in".into(),
            ));
        }
        settings.anonymous = anonymous.then(|| self.anonymous_scope());
        Ok(settings)
    }

    fn anonymous_scope(&self) -> Scope {
        let namespaces: Vec<&String> = self
            .anonymous_namespaces
            .iter()
            .filter(|ns| !ns.trim().is_empty())
            .collect();
        if namespaces.is_empty() {
            Scope::All
        } else {
            Scope::namespaces(namespaces.into_iter().cloned())
        }
    }

    /// The anonymous scope, for the start-up log.
    pub fn anonymous_scope_text(&self) -> String {
        match self.anonymous_scope().list() {
            None => "every namespace".to_owned(),
            Some(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }
}
