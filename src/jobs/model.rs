//! The job domain: what a job is, which inputs are valid, and how a phase is derived from a
//! workload's status.
//!
//! This module owns the types every other layer speaks (`Job`, `JobSpec`, `JobPhase`,
//! `JobEvent`, `WorkloadStatus`) and the rules over them: input validation and the
//! forward-only phase rules. It imports nothing else of jobgate's and does no I/O, so that
//! the rules can be tested alone and reused unchanged by every executor.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where a job is in its life. Phases only move forward: PENDING → RUNNING → SUCCEEDED |
/// FAILED, and PENDING/RUNNING → CANCELLED; a terminal phase never changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobPhase {
    pub const ALL: [JobPhase; 5] = [
        JobPhase::Pending,
        JobPhase::Running,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    fn rank(self) -> u8 {
        match self {
            Self::Pending => 0,
            Self::Running => 1,
            Self::Succeeded | Self::Failed | Self::Cancelled => 2,
        }
    }

    /// Whether a job in `self` may move to `next`. Staying put is not a move.
    pub fn can_advance_to(self, next: JobPhase) -> bool {
        !self.is_terminal() && next.rank() > self.rank()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for JobPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Kubernetes-style condition: why a job is in its phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition_time: Option<DateTime<Utc>>,
}

impl Condition {
    pub fn truthy(type_: &str, reason: &str, message: impl Into<Option<String>>, at: DateTime<Utc>) -> Self {
        Self {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: Some(reason.to_owned()),
            message: message.into(),
            last_transition_time: Some(at),
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// Counts of a job's runs, as a batch/v1 Job reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    /// Active runs that are ready (Kubernetes: pods whose Ready condition is true).
    #[serde(default)]
    pub ready: i32,
    pub total: Option<i32>,
}

/// What an executor observes of a job's workload, shaped like a batch/v1 `JobStatus` so that
/// every executor reports the same thing and the phase is derived by one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// The workload's own conditions (Complete, Failed, SuccessCriteriaMet, FailureTarget,
    /// Suspended, ...).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    pub start_time: Option<DateTime<Utc>>,
    pub completion_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub ready: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    /// Completion indexes that have succeeded (Indexed completion mode).
    #[serde(default)]
    pub completed_indexes: BTreeSet<i32>,
    /// The result (termination message) of the workload, at most [`MAX_RESULT_BYTES`].
    pub result: Option<String>,
    /// A human-readable explanation from the executor, e.g. the tail of a failed run's log.
    pub message: Option<String>,
    /// Executor-private facts needed to recover after a restart (e.g. process groups).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub executor_state: serde_json::Value,
    /// How many runs make the whole, when the workload says (templates' kinds); the job's
    /// `completions` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i32>,
    /// The phase a template's status rules decoded, for kinds that are not shaped like a
    /// batch/v1 Job; it takes precedence over the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped: Option<MappedPhase>,
}

/// A phase decoded by a template's rules, with the reason and message that explain it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappedPhase {
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Default for MappedPhase {
    fn default() -> Self {
        Self {
            phase: JobPhase::Pending,
            reason: None,
            message: None,
        }
    }
}

/// The largest result kept, as for a Kubernetes termination message.
pub const MAX_RESULT_BYTES: usize = 4096;

/// A phase derived from a workload status, with the reason that explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DerivedPhase {
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl WorkloadStatus {
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_ && c.is_true())
    }

    /// The phase this status means, from its conditions first, as the batch/v1 Job
    /// controller defines them: SuccessCriteriaMet or Complete → SUCCEEDED; FailureTarget or
    /// Failed → FAILED with its reason; Suspended → PENDING; active runs or a start time →
    /// RUNNING; otherwise PENDING.
    pub fn derive_phase(&self) -> DerivedPhase {
        if let Some(m) = &self.mapped {
            return DerivedPhase {
                phase: m.phase,
                reason: m.reason.clone(),
                message: m.message.clone(),
            };
        }
        let from = |phase, c: &Condition| DerivedPhase {
            phase,
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
        for (type_, phase) in [
            ("Complete", JobPhase::Succeeded),
            ("SuccessCriteriaMet", JobPhase::Succeeded),
            ("Failed", JobPhase::Failed),
            ("FailureTarget", JobPhase::Failed),
        ] {
            if let Some(c) = self.condition(type_) {
                return from(phase, c);
            }
        }
        if let Some(c) = self.condition("Suspended") {
            return from(JobPhase::Pending, c);
        }
        if self.active > 0 || self.start_time.is_some() {
            return DerivedPhase {
                phase: JobPhase::Running,
                reason: Some("Started".into()),
                message: None,
            };
        }
        DerivedPhase {
            phase: JobPhase::Pending,
            reason: None,
            message: None,
        }
    }
}

/// An environment variable for the job's processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// A submission as the client sent it, before validation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubmitRequest {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub template: Option<String>,
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<Vec<EnvVar>>,
    pub parallelism: Option<i32>,
    pub completions: Option<i32>,
    pub backoff_limit: Option<i32>,
    pub active_deadline_seconds: Option<i32>,
    pub parameters: Option<serde_json::Value>,
    pub idempotency_key: Option<String>,
    pub resources: Option<ResourceRequirements>,
    pub service_account_name: Option<String>,
    pub ttl_seconds_after_finished: Option<i32>,
    pub depends_on: Option<Vec<String>>,
}

/// CPU and memory quantities in Kubernetes notation (`500m`, `2`, `256Mi`, `1G`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceList {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

impl ResourceList {
    fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none()
    }
}

/// What a job's containers request and may use at most (Kubernetes executor).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRequirements {
    #[serde(default)]
    pub requests: ResourceList,
    #[serde(default)]
    pub limits: ResourceList,
}

/// The value of a Kubernetes quantity (`100m`, `1.5`, `64Mi`, `1e3`) in base units, or `None`
/// when `s` is not one. Negative quantities are refused: no resource is negative.
pub fn parse_quantity(s: &str) -> Option<f64> {
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let digits = &exp[1..];
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10f64.powi(digits.parse::<i32>().ok()?)
        }
        _ => return None,
    };
    let v = value * scale;
    v.is_finite().then_some(v)
}

/// A validated job specification: what will run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    pub name: Option<String>,
    pub namespace: String,
    pub template: String,
    pub image: Option<String>,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub parallelism: i32,
    pub completions: i32,
    pub backoff_limit: i32,
    pub active_deadline_seconds: Option<i32>,
    pub parameters: Option<serde_json::Value>,
    // Fields added after the first release are skipped when empty, so that the fingerprint
    // of a spec that does not use them is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Jobs that must succeed before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
}

impl JobSpec {
    /// A stable fingerprint of the spec, used to tell an idempotent retry (same key, same
    /// input) from a conflicting reuse of a key.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_vec(self).expect("a JobSpec always serialises");
        let digest = Sha256::digest(canonical);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Limits that validation enforces; set by configuration.
#[derive(Clone, Debug)]
pub struct ValidationLimits {
    pub max_parallelism: i32,
    pub max_completions: i32,
    pub max_backoff_limit: i32,
    pub default_namespace: String,
    pub templates: Vec<String>,
    /// Namespaces jobs may use; empty means any.
    pub allowed_namespaces: Vec<String>,
    /// `serviceAccountName` values jobs may ask for; empty means none may be asked for.
    pub service_accounts: Vec<String>,
    /// Whether `image` is required (it is where jobs run in containers).
    pub require_image: bool,
    /// For templates other than `container`: the input fields each uses and requires.
    pub template_inputs: std::collections::BTreeMap<String, TemplateInputs>,
}

/// The optional `SubmitJobInput` fields a template uses, and those it requires; a job that
/// gives a field its template does not use is refused rather than silently ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateInputs {
    pub fields: Vec<String>,
    pub required: Vec<String>,
}

impl Default for ValidationLimits {
    fn default() -> Self {
        Self {
            max_parallelism: 64,
            max_completions: 10_000,
            max_backoff_limit: 100,
            default_namespace: "default".into(),
            templates: vec!["container".into()],
            allowed_namespaces: Vec::new(),
            service_accounts: Vec::new(),
            require_image: false,
            template_inputs: Default::default(),
        }
    }
}

/// An invalid submission: which input field is wrong and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field's path in the GraphQL input, e.g. `input.env[2].name`.
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ValidationError {
    ValidationError {
        field: field.into(),
        message: message.into(),
    }
}

const MAX_NAME_LEN: usize = 63;
const MAX_ARG_BYTES: usize = 128 * 1024;
const MAX_ITEMS: usize = 1024;
const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;
/// The most jobs one job may depend on.
pub const MAX_DEPENDENCIES: usize = 100;

/// A DNS-1123 label, as Kubernetes requires of names and namespaces.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A C identifier, as a shell and Kubernetes' `env` accept for variable names.
fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Names jobgate sets itself for every run; a job may not override them.
pub const RESERVED_ENV: [&str; 3] = ["JOB_COMPLETION_INDEX", "JOBGATE_RESULT_FILE", "JOBGATE_JOB_ID"];

fn positive(field: &str, value: Option<i32>, default: i32, max: i32) -> Result<i32, ValidationError> {
    match value {
        None => Ok(default),
        Some(v) if v < 1 => Err(invalid(field, format!("must be at least 1, got {v}"))),
        Some(v) if v > max => Err(invalid(field, format!("must be at most {max}, got {v}"))),
        Some(v) => Ok(v),
    }
}

impl SubmitRequest {
    /// Checks every field and returns the spec to run, or the first invalid field.
    pub fn validate(&self, limits: &ValidationLimits) -> Result<JobSpec, ValidationError> {
        if let Some(name) = &self.name
            && !is_dns_label(name)
        {
            return Err(invalid(
                "input.name",
                "must be a DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
            ));
        }
        let namespace = match &self.namespace {
            Some(ns) if !is_dns_label(ns) => {
                return Err(invalid("input.namespace", "must be a DNS-1123 label"));
            }
            Some(ns) => ns.clone(),
            None => limits.default_namespace.clone(),
        };
        if !limits.allowed_namespaces.is_empty() && !limits.allowed_namespaces.contains(&namespace) {
            return Err(invalid(
                "input.namespace",
                format!(
                    "jobgate may not run jobs in namespace {namespace:?}; allowed: {}",
                    limits.allowed_namespaces.join(", ")
                ),
            ));
        }
        let template = self.template.clone().unwrap_or_else(|| "container".into());
        if !limits.templates.contains(&template) {
            return Err(invalid(
                "input.template",
                format!(
                    "unknown template {template:?}; available: {}",
                    limits.templates.join(", ")
                ),
            ));
        }
        if let Some(image) = &self.image
            && (image.trim().is_empty() || image.len() > 512 || image.contains(char::is_whitespace))
        {
            return Err(invalid(
                "input.image",
                "must be a non-empty image reference without spaces",
            ));
        }
        let inputs = limits.template_inputs.get(&template);
        if let Some(inputs) = inputs {
            self.check_template_inputs(&template, inputs)?;
        }
        let require_image = inputs.map_or(limits.require_image, |i| i.required.iter().any(|f| f == "image"));
        if require_image && self.image.is_none() {
            return Err(invalid(
                "input.image",
                "is required: jobs run as containers on this server",
            ));
        }
        let command = self.command.clone().unwrap_or_default();
        let require_command = inputs.is_none_or(|i| i.required.iter().any(|f| f == "command"));
        if (require_command || self.command.is_some()) && (command.is_empty() || command[0].trim().is_empty())
        {
            return Err(invalid("input.command", "must name a program to run"));
        }
        let args = self.args.clone().unwrap_or_default();
        for (field, list) in [("input.command", &command), ("input.args", &args)] {
            if list.len() > MAX_ITEMS {
                return Err(invalid(field, format!("must have at most {MAX_ITEMS} items")));
            }
            if let Some(i) = list.iter().position(|a| a.contains('\0')) {
                return Err(invalid(format!("{field}[{i}]"), "must not contain NUL"));
            }
        }
        let arg_bytes: usize = command.iter().chain(&args).map(String::len).sum();
        if arg_bytes > MAX_ARG_BYTES {
            return Err(invalid(
                "input.args",
                format!("command and args exceed {MAX_ARG_BYTES} bytes"),
            ));
        }
        let env = self.env.clone().unwrap_or_default();
        if env.len() > MAX_ITEMS {
            return Err(invalid(
                "input.env",
                format!("must have at most {MAX_ITEMS} items"),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, var) in env.iter().enumerate() {
            if !is_env_name(&var.name) {
                return Err(invalid(
                    format!("input.env[{i}].name"),
                    format!(
                        "{:?} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                        var.name
                    ),
                ));
            }
            if RESERVED_ENV.contains(&var.name.as_str()) {
                return Err(invalid(
                    format!("input.env[{i}].name"),
                    format!("{} is set by jobgate", var.name),
                ));
            }
            if var.value.contains('\0') {
                return Err(invalid(format!("input.env[{i}].value"), "must not contain NUL"));
            }
            if !seen.insert(var.name.as_str()) {
                return Err(invalid(
                    format!("input.env[{i}].name"),
                    format!("{} is set twice", var.name),
                ));
            }
        }
        let parallelism = positive("input.parallelism", self.parallelism, 1, limits.max_parallelism)?;
        let completions = positive("input.completions", self.completions, 1, limits.max_completions)?;
        let backoff_limit = match self.backoff_limit {
            None => 6,
            Some(v) if v < 0 => {
                return Err(invalid(
                    "input.backoffLimit",
                    format!("must not be negative, got {v}"),
                ));
            }
            Some(v) if v > limits.max_backoff_limit => {
                return Err(invalid(
                    "input.backoffLimit",
                    format!("must be at most {}, got {v}", limits.max_backoff_limit),
                ));
            }
            Some(v) => v,
        };
        let active_deadline_seconds = match self.active_deadline_seconds {
            Some(v) if v < 1 => {
                return Err(invalid(
                    "input.activeDeadlineSeconds",
                    format!("must be at least 1, got {v}"),
                ));
            }
            other => other,
        };
        if let Some(p) = &self.parameters
            && !p.is_object()
        {
            return Err(invalid("input.parameters", "must be an object"));
        }
        if let Some(key) = &self.idempotency_key
            && (key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN)
        {
            return Err(invalid(
                "input.idempotencyKey",
                format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes"),
            ));
        }
        let resources = match &self.resources {
            Some(r) => validate_resources(r)?,
            None => None,
        };
        if let Some(sa) = &self.service_account_name
            && !limits.service_accounts.contains(sa)
        {
            return Err(invalid(
                "input.serviceAccountName",
                if limits.service_accounts.is_empty() {
                    "this server allows no serviceAccountName; omit it".to_owned()
                } else {
                    format!(
                        "{sa:?} is not allowed; allowed: {}",
                        limits.service_accounts.join(", ")
                    )
                },
            ));
        }
        if let Some(ttl) = self.ttl_seconds_after_finished
            && ttl < 0
        {
            return Err(invalid(
                "input.ttlSecondsAfterFinished",
                format!("must not be negative, got {ttl}"),
            ));
        }
        let depends_on = self.depends_on.clone().unwrap_or_default();
        if depends_on.len() > MAX_DEPENDENCIES {
            return Err(invalid(
                "input.dependsOn",
                format!(
                    "must list at most {MAX_DEPENDENCIES} jobs, got {}",
                    depends_on.len()
                ),
            ));
        }
        for (i, id) in depends_on.iter().enumerate() {
            if id.is_empty() || id.len() > 64 || id.contains(char::is_whitespace) {
                return Err(invalid(
                    format!("input.dependsOn[{i}]"),
                    format!("{id:?} is not a job id"),
                ));
            }
            if depends_on[..i].contains(id) {
                return Err(invalid(
                    format!("input.dependsOn[{i}]"),
                    format!("{id} is listed twice"),
                ));
            }
        }
        Ok(JobSpec {
            name: self.name.clone(),
            namespace,
            template,
            image: self.image.clone(),
            command,
            args,
            env,
            parallelism,
            completions,
            backoff_limit,
            active_deadline_seconds,
            parameters: self.parameters.clone(),
            resources,
            service_account_name: self.service_account_name.clone(),
            ttl_seconds_after_finished: self.ttl_seconds_after_finished,
            depends_on,
        })
    }
}

impl SubmitRequest {
    /// The optional input fields given, by their GraphQL names.
    fn given_fields(&self) -> [(&'static str, bool); 11] {
        [
            ("image", self.image.is_some()),
            ("command", self.command.is_some()),
            ("args", self.args.is_some()),
            ("env", self.env.is_some()),
            ("parallelism", self.parallelism.is_some()),
            ("completions", self.completions.is_some()),
            ("backoffLimit", self.backoff_limit.is_some()),
            ("activeDeadlineSeconds", self.active_deadline_seconds.is_some()),
            ("resources", self.resources.is_some()),
            ("serviceAccountName", self.service_account_name.is_some()),
            (
                "ttlSecondsAfterFinished",
                self.ttl_seconds_after_finished.is_some(),
            ),
        ]
    }

    fn check_template_inputs(&self, template: &str, inputs: &TemplateInputs) -> Result<(), ValidationError> {
        for (field, given) in self.given_fields() {
            let used = inputs.fields.iter().any(|f| f == field);
            if given && !used {
                return Err(invalid(
                    format!("input.{field}"),
                    format!(
                        "template {template} does not use {field}; it uses {}",
                        if inputs.fields.is_empty() {
                            "none of the optional fields".to_owned()
                        } else {
                            inputs.fields.join(", ")
                        }
                    ),
                ));
            }
            if !given && inputs.required.iter().any(|f| f == field) {
                return Err(invalid(
                    format!("input.{field}"),
                    format!("is required by template {template}"),
                ));
            }
        }
        Ok(())
    }
}

/// Checks each quantity and that no request exceeds its limit, as the API server would.
fn validate_resources(r: &ResourceRequirements) -> Result<Option<ResourceRequirements>, ValidationError> {
    let mut values = [[None; 2]; 2];
    for (i, (kind, list)) in [("requests", &r.requests), ("limits", &r.limits)]
        .into_iter()
        .enumerate()
    {
        for (j, (resource, quantity)) in [("cpu", &list.cpu), ("memory", &list.memory)]
            .into_iter()
            .enumerate()
        {
            if let Some(q) = quantity {
                let field = format!("input.resources.{kind}.{resource}");
                let v = parse_quantity(q).ok_or_else(|| {
                    invalid(
                        &field,
                        format!("{q:?} is not a quantity (e.g. 500m, 2, 256Mi, 1G)"),
                    )
                })?;
                if v <= 0.0 {
                    return Err(invalid(field, "must be greater than zero"));
                }
                values[i][j] = Some(v);
            }
        }
    }
    for (j, resource) in ["cpu", "memory"].into_iter().enumerate() {
        if let (Some(request), Some(limit)) = (values[0][j], values[1][j])
            && request > limit
        {
            return Err(invalid(
                format!("input.resources.requests.{resource}"),
                format!("must not exceed limits.{resource}"),
            ));
        }
    }
    Ok((!r.requests.is_empty() || !r.limits.is_empty()).then(|| r.clone()))
}

/// A job as jobgate knows it: its spec plus its observed state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: String,
    pub spec: JobSpec,
    pub phase: JobPhase,
    pub submitted_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// jobgate's conditions, explaining each phase it entered, plus the workload's own.
    pub conditions: Vec<Condition>,
    pub progress: Progress,
    pub message: Option<String>,
    pub result: Option<String>,
    pub idempotency_key: Option<String>,
    /// Who submitted the job (the authenticated identity's name, as shown), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter: Option<String>,
    /// The submitter's principal (`token:…`, `jwt:…`, `anonymous`), which scopes its
    /// idempotency keys; never shown. Absent on jobs stored before principals existed, whose
    /// keys are scoped by `submitter` (see [`Job::key_scope`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_key: Option<String>,
    /// The last status the executor observed.
    pub workload: WorkloadStatus,
    /// The cursor of the last event recorded for this job.
    pub last_event_seq: i64,
}

/// What an observation or a command changed about a job, ready to record as an event.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub previous_phase: Option<JobPhase>,
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Job {
    /// A freshly accepted job, PENDING.
    pub fn accepted(id: String, spec: JobSpec, idempotency_key: Option<String>, now: DateTime<Utc>) -> Self {
        let total = Some(spec.completions);
        Self {
            id,
            spec,
            phase: JobPhase::Pending,
            submitted_at: now,
            started_at: None,
            finished_at: None,
            conditions: vec![Condition::truthy(
                "Accepted",
                "Submitted",
                Some("accepted by jobgate".into()),
                now,
            )],
            progress: Progress {
                total,
                ..Progress::default()
            },
            message: None,
            result: None,
            idempotency_key,
            submitter: None,
            submitter_key: None,
            workload: WorkloadStatus::default(),
            last_event_seq: 0,
        }
    }

    /// What the job's idempotency key is scoped by: its submitter's principal, or, for a job
    /// stored before principals existed, its submitter's name.
    pub fn key_scope(&self) -> Option<&str> {
        self.submitter_key.as_deref().or(self.submitter.as_deref())
    }

    /// Folds an executor's observation into the job. Returns the transition to record, or
    /// `None` when nothing a client can see changed. A terminal job never changes, and a
    /// stale status can never move the phase backward.
    pub fn observe(&mut self, status: WorkloadStatus, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let derived = status.derive_phase();
        let progress = Progress {
            succeeded: status.succeeded,
            failed: status.failed,
            active: status.active,
            ready: status.ready,
            total: match &status.mapped {
                Some(_) => status.total,
                None => Some(self.spec.completions),
            },
        };
        let before = (self.progress, self.result.clone(), self.message.clone());
        let previous = self.phase;
        self.progress = progress;
        if status.result.is_some() {
            self.result.clone_from(&status.result);
        }
        if status.message.is_some() {
            self.message.clone_from(&status.message);
        }
        if self.started_at.is_none() {
            self.started_at = status.start_time;
        }
        self.workload = status;
        let moved = previous.can_advance_to(derived.phase);
        if moved {
            // A failure keeps the cause the executor saw after the condition's summary,
            // e.g. "Job has reached the specified backoff limit: run 3 exited with code 1".
            let detail = match (&derived.message, &self.workload.message) {
                (Some(summary), Some(cause)) if derived.phase == JobPhase::Failed => {
                    Some(format!("{summary}: {cause}"))
                }
                (Some(summary), _) => Some(summary.clone()),
                (None, cause) => cause.clone(),
            };
            self.enter(
                derived.phase,
                derived.reason.clone(),
                derived.message.clone(),
                now,
            );
            self.message = detail;
        }
        let after = (self.progress, self.result.clone(), self.message.clone());
        if !moved && before == after {
            return None;
        }
        let message_changed = before.2 != after.2;
        Some(Transition {
            previous_phase: Some(previous),
            phase: self.phase,
            reason: if moved {
                derived.reason
            } else {
                Some("ProgressUpdated".into())
            },
            message: if moved || message_changed {
                self.message.clone()
            } else {
                None
            },
        })
    }

    /// Records that creating the job's workload failed for a reason that may pass (the
    /// cluster is unreachable, overloaded or forbids it for now): the job stays PENDING with a
    /// `WorkloadCreated=False` condition saying why. Returns a transition only when the reason
    /// changes, so that retries do not flood the history.
    pub fn launch_delayed(&mut self, reason: &str, message: &str, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let unchanged = self.conditions.iter().any(|c| {
            c.type_ == WORKLOAD_CREATED && c.status == "False" && c.reason.as_deref() == Some(reason)
        });
        if unchanged {
            return None;
        }
        self.set_workload_created("False", reason, message, now);
        self.message = Some(message.to_owned());
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
        })
    }

    /// Records that the workload exists after earlier failed attempts; nothing to record when
    /// the first attempt succeeded.
    pub fn launch_succeeded(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        let delayed = self
            .conditions
            .iter()
            .any(|c| c.type_ == WORKLOAD_CREATED && c.status == "False");
        if self.phase.is_terminal() || !delayed {
            return None;
        }
        let message = "the workload was created";
        self.set_workload_created("True", "Created", message, now);
        self.message = None;
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some("WorkloadCreated".into()),
            message: Some(message.into()),
        })
    }

    /// Fails a job whose workload cannot be created (the cluster rejected it for good).
    pub fn launch_failed(&mut self, reason: &str, message: &str, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let previous = self.phase;
        self.set_workload_created("False", reason, message, now);
        self.enter(
            JobPhase::Failed,
            Some(reason.to_owned()),
            Some(message.to_owned()),
            now,
        );
        Some(Transition {
            previous_phase: Some(previous),
            phase: JobPhase::Failed,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
        })
    }

    fn set_workload_created(&mut self, status: &str, reason: &str, message: &str, now: DateTime<Utc>) {
        self.conditions.retain(|c| c.type_ != WORKLOAD_CREATED);
        self.conditions.push(Condition {
            type_: WORKLOAD_CREATED.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: Some(now),
        });
    }

    /// Holds a just-accepted job until `waiting` (the dependencies that have not finished)
    /// succeed: it stays PENDING with a `DependenciesSucceeded=False` condition.
    pub fn wait_for_dependencies(&mut self, waiting: &[String], now: DateTime<Utc>) -> Transition {
        let message = format!("waiting for {} to succeed", jobs_named(waiting));
        self.set_dependencies_condition("False", WAITING_FOR_DEPENDENCIES, &message, now);
        self.message = Some(message.clone());
        Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(WAITING_FOR_DEPENDENCIES.into()),
            message: Some(message),
        }
    }

    /// Whether the job is held until its dependencies succeed.
    pub fn is_waiting_for_dependencies(&self) -> bool {
        !self.phase.is_terminal()
            && self
                .conditions
                .iter()
                .any(|c| c.type_ == DEPENDENCIES_SUCCEEDED && c.status == "False")
    }

    /// Every dependency succeeded: the job may launch.
    pub fn dependencies_succeeded(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        if !self.is_waiting_for_dependencies() {
            return None;
        }
        let message = "every dependency succeeded; the job can start".to_owned();
        self.set_dependencies_condition("True", DEPENDENCIES_SUCCEEDED, &message, now);
        self.message = None;
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(DEPENDENCIES_SUCCEEDED.into()),
            message: Some(message),
        })
    }

    /// A dependency ended without success (`phase`): the job fails without running.
    pub fn dependency_failed(
        &mut self,
        dependency: &str,
        phase: JobPhase,
        now: DateTime<Utc>,
    ) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let previous = self.phase;
        let message = format!("dependency {dependency} ended {phase}, so this job will not run");
        self.set_dependencies_condition("False", DEPENDENCY_FAILED, &message, now);
        self.enter(
            JobPhase::Failed,
            Some(DEPENDENCY_FAILED.into()),
            Some(message.clone()),
            now,
        );
        Some(Transition {
            previous_phase: Some(previous),
            phase: JobPhase::Failed,
            reason: Some(DEPENDENCY_FAILED.into()),
            message: Some(message),
        })
    }

    fn set_dependencies_condition(&mut self, status: &str, reason: &str, message: &str, now: DateTime<Utc>) {
        self.conditions.retain(|c| c.type_ != DEPENDENCIES_SUCCEEDED);
        self.conditions.push(Condition {
            type_: DEPENDENCIES_SUCCEEDED.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: Some(now),
        });
    }

    /// Cancels the job, if it has not finished.
    pub fn cancel(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let previous = self.phase;
        let message = Some("cancelled by request".to_owned());
        self.enter(
            JobPhase::Cancelled,
            Some("CancelledByUser".into()),
            message.clone(),
            now,
        );
        self.progress.active = 0;
        Some(Transition {
            previous_phase: Some(previous),
            phase: JobPhase::Cancelled,
            reason: Some("CancelledByUser".into()),
            message,
        })
    }

    fn enter(
        &mut self,
        phase: JobPhase,
        reason: Option<String>,
        message: Option<String>,
        now: DateTime<Utc>,
    ) {
        let type_ = match phase {
            JobPhase::Pending => "Pending",
            JobPhase::Running => "Running",
            JobPhase::Succeeded => "Complete",
            JobPhase::Failed => "Failed",
            JobPhase::Cancelled => "Cancelled",
        };
        self.phase = phase;
        if phase == JobPhase::Running && self.started_at.is_none() {
            self.started_at = Some(now);
        }
        if phase.is_terminal() {
            self.finished_at = Some(self.workload.completion_time.unwrap_or(now));
        }
        if message.is_some() {
            self.message.clone_from(&message);
        }
        self.conditions.retain(|c| c.type_ != type_);
        self.conditions.push(Condition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: reason.or_else(|| Some(type_.to_owned())),
            message,
            last_transition_time: Some(now),
        });
    }
}

/// The condition that says whether a job's workload could be created.
pub const WORKLOAD_CREATED: &str = "WorkloadCreated";
/// The condition that says whether a job's dependencies have succeeded (jobs with `dependsOn`).
pub const DEPENDENCIES_SUCCEEDED: &str = "DependenciesSucceeded";
pub const WAITING_FOR_DEPENDENCIES: &str = "WaitingForDependencies";
pub const DEPENDENCY_FAILED: &str = "DependencyFailed";

/// "job a", "jobs a and b", "jobs a, b and 3 more".
fn jobs_named(ids: &[String]) -> String {
    match ids {
        [one] => format!("job {one}"),
        [a, b] => format!("jobs {a} and {b}"),
        [a, b, rest @ ..] => format!("jobs {a}, {b} and {} more", rest.len()),
        [] => "no job".to_owned(),
    }
}

/// One recorded status change of a job; `seq` is its cursor.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEvent {
    pub seq: i64,
    pub job_id: String,
    pub phase: JobPhase,
    pub previous_phase: Option<JobPhase>,
    pub at: DateTime<Utc>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The job as it was right after this event.
    pub job: std::sync::Arc<Job>,
}

/// A filter on jobs, shared by the `jobs` query and the `jobEvents` subscription.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub phases: Option<Vec<JobPhase>>,
    pub namespace: Option<String>,
    pub name_contains: Option<String>,
    /// The caller's namespaces: jobs outside them never match.
    pub scope: Scope,
}

impl JobFilter {
    pub fn matches(&self, job: &Job) -> bool {
        self.scope.sees(job)
            && self.phases.as_ref().is_none_or(|p| p.contains(&job.phase))
            && self.namespace.as_ref().is_none_or(|ns| *ns == job.spec.namespace)
            && self.name_contains.as_ref().is_none_or(|n| {
                job.spec
                    .name
                    .as_deref()
                    .is_some_and(|name| name.contains(n.as_str()))
            })
    }
}

/// The namespaces a caller may see and use: every one (an admin, or open access), or a set.
/// A job outside the caller's scope does not exist for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    All,
    Namespaces(std::sync::Arc<std::collections::BTreeSet<String>>),
}

impl Scope {
    pub fn namespaces<I: IntoIterator<Item = S>, S: Into<String>>(namespaces: I) -> Self {
        Self::Namespaces(std::sync::Arc::new(
            namespaces.into_iter().map(Into::into).collect(),
        ))
    }

    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Namespaces(set) => set.contains(namespace),
        }
    }

    /// The namespaces, or `None` for every one.
    pub fn list(&self) -> Option<&std::collections::BTreeSet<String>> {
        match self {
            Self::All => None,
            Self::Namespaces(set) => Some(set),
        }
    }

    pub fn sees(&self, job: &Job) -> bool {
        self.allows(&job.spec.namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SubmitRequest {
        SubmitRequest {
            command: Some(vec!["echo".into(), "hi".into()]),
            ..SubmitRequest::default()
        }
    }

    fn field_of(r: SubmitRequest) -> String {
        r.validate(&ValidationLimits::default()).unwrap_err().field
    }

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        for (q, v) in [
            ("1", 1.0),
            ("500m", 0.5),
            ("2.5", 2.5),
            ("64Mi", 64.0 * 1024.0 * 1024.0),
            ("1G", 1e9),
            ("1e3", 1e3),
            ("1E-3", 1e-3),
            ("+4k", 4e3),
            (".5", 0.5),
        ] {
            assert_eq!(parse_quantity(q), Some(v), "{q}");
        }
        for bad in ["", "-1", "1.2.3", "abc", "1Zi", "1e", "1 Gi", "m", "."] {
            assert_eq!(parse_quantity(bad), None, "{bad:?}");
        }
    }

    fn resources(req_cpu: Option<&str>, lim_cpu: Option<&str>, req_mem: Option<&str>) -> SubmitRequest {
        SubmitRequest {
            resources: Some(ResourceRequirements {
                requests: ResourceList {
                    cpu: req_cpu.map(Into::into),
                    memory: req_mem.map(Into::into),
                },
                limits: ResourceList {
                    cpu: lim_cpu.map(Into::into),
                    memory: None,
                },
            }),
            ..request()
        }
    }

    #[test]
    fn resources_are_checked_like_the_api_server_does() {
        let ok = resources(Some("250m"), Some("1"), Some("64Mi"))
            .validate(&ValidationLimits::default())
            .unwrap();
        assert_eq!(ok.resources.unwrap().requests.cpu.as_deref(), Some("250m"));
        assert_eq!(
            field_of(resources(Some("lots"), None, None)),
            "input.resources.requests.cpu"
        );
        assert_eq!(
            field_of(resources(None, None, Some("0"))),
            "input.resources.requests.memory"
        );
        assert_eq!(
            field_of(resources(Some("2"), Some("1"), None)),
            "input.resources.requests.cpu",
            "a request above its limit"
        );
        let empty = resources(None, None, None)
            .validate(&ValidationLimits::default())
            .unwrap();
        assert_eq!(empty.resources, None, "nothing asked is nothing kept");
    }

    #[test]
    fn namespaces_service_accounts_ttl_and_image_follow_the_limits() {
        let limits = ValidationLimits {
            allowed_namespaces: vec!["default".into(), "ml".into()],
            service_accounts: vec!["trainer".into()],
            require_image: true,
            ..ValidationLimits::default()
        };
        let with_image = || SubmitRequest {
            image: Some("busybox:1.36".into()),
            ..request()
        };
        let field = |r: SubmitRequest| r.validate(&limits).unwrap_err().field;
        assert_eq!(field(request()), "input.image");
        assert!(with_image().validate(&limits).is_ok());
        assert_eq!(
            field(SubmitRequest {
                namespace: Some("other".into()),
                ..with_image()
            }),
            "input.namespace"
        );
        let spec = SubmitRequest {
            namespace: Some("ml".into()),
            service_account_name: Some("trainer".into()),
            ttl_seconds_after_finished: Some(0),
            ..with_image()
        }
        .validate(&limits)
        .unwrap();
        assert_eq!(spec.namespace, "ml");
        assert_eq!(spec.service_account_name.as_deref(), Some("trainer"));
        assert_eq!(spec.ttl_seconds_after_finished, Some(0));
        assert_eq!(
            field(SubmitRequest {
                service_account_name: Some("admin".into()),
                ..with_image()
            }),
            "input.serviceAccountName"
        );
        assert_eq!(
            field(SubmitRequest {
                ttl_seconds_after_finished: Some(-1),
                ..with_image()
            }),
            "input.ttlSecondsAfterFinished"
        );
        assert_eq!(
            field_of(SubmitRequest {
                service_account_name: Some("trainer".into()),
                ..request()
            }),
            "input.serviceAccountName",
            "no service account is allowed unless listed"
        );
    }

    #[test]
    fn new_spec_fields_do_not_change_old_fingerprints() {
        let spec = request().validate(&ValidationLimits::default()).unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        for key in ["resources", "serviceAccountName", "ttlSecondsAfterFinished"] {
            assert!(json.get(key).is_none(), "{key} is skipped when unset");
        }
    }

    #[test]
    fn launch_conditions_record_only_changes() {
        let spec = request().validate(&ValidationLimits::default()).unwrap();
        let mut job = Job::accepted("j".into(), spec, None, Utc::now());
        let now = Utc::now();
        assert!(
            job.launch_succeeded(now).is_none(),
            "a first-time launch records nothing"
        );
        let t = job
            .launch_delayed("ApiServerUnreachable", "connection refused", now)
            .unwrap();
        assert_eq!(t.phase, JobPhase::Pending);
        assert_eq!(t.reason.as_deref(), Some("ApiServerUnreachable"));
        assert!(job.launch_delayed("ApiServerUnreachable", "again", now).is_none());
        assert!(job.launch_delayed("ApiServerThrottling", "429", now).is_some());
        let c = job
            .conditions
            .iter()
            .find(|c| c.type_ == WORKLOAD_CREATED)
            .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("ApiServerThrottling"))
        );
        assert!(job.launch_succeeded(now).is_some());
        let c = job
            .conditions
            .iter()
            .find(|c| c.type_ == WORKLOAD_CREATED)
            .unwrap();
        assert_eq!(c.status, "True");
        assert_eq!(job.phase, JobPhase::Pending);
        let t = job.launch_failed("InvalidWorkload", "422", now).unwrap();
        assert_eq!(t.phase, JobPhase::Failed);
        assert!(
            job.launch_delayed("X", "y", now).is_none(),
            "a finished job never changes"
        );
    }

    #[test]
    fn defaults_follow_batch_v1() {
        let spec = request().validate(&ValidationLimits::default()).unwrap();
        assert_eq!(
            (spec.parallelism, spec.completions, spec.backoff_limit),
            (1, 1, 6)
        );
        assert_eq!(spec.namespace, "default");
        assert_eq!(spec.template, "container");
    }

    #[test]
    fn each_invalid_field_is_named() {
        assert_eq!(field_of(SubmitRequest::default()), "input.command");
        assert_eq!(
            field_of(SubmitRequest {
                command: Some(vec!["".into()]),
                ..request()
            }),
            "input.command"
        );
        assert_eq!(
            field_of(SubmitRequest {
                parallelism: Some(0),
                ..request()
            }),
            "input.parallelism"
        );
        assert_eq!(
            field_of(SubmitRequest {
                parallelism: Some(65),
                ..request()
            }),
            "input.parallelism"
        );
        assert_eq!(
            field_of(SubmitRequest {
                completions: Some(-1),
                ..request()
            }),
            "input.completions"
        );
        assert_eq!(
            field_of(SubmitRequest {
                backoff_limit: Some(-1),
                ..request()
            }),
            "input.backoffLimit"
        );
        assert_eq!(
            field_of(SubmitRequest {
                active_deadline_seconds: Some(0),
                ..request()
            }),
            "input.activeDeadlineSeconds"
        );
        assert_eq!(
            field_of(SubmitRequest {
                template: Some("spark".into()),
                ..request()
            }),
            "input.template"
        );
        assert_eq!(
            field_of(SubmitRequest {
                name: Some("Not_A_Label".into()),
                ..request()
            }),
            "input.name"
        );
        for bad in ["1X", "A-B", "", "has space", "JOB_COMPLETION_INDEX"] {
            let r = SubmitRequest {
                env: Some(vec![
                    EnvVar {
                        name: "OK".into(),
                        value: "1".into(),
                    },
                    EnvVar {
                        name: bad.into(),
                        value: "x".into(),
                    },
                ]),
                ..request()
            };
            assert_eq!(field_of(r), "input.env[1].name", "{bad:?} must be refused");
        }
    }

    #[test]
    fn fingerprint_tells_inputs_apart() {
        let a = request().validate(&ValidationLimits::default()).unwrap();
        let b = SubmitRequest {
            args: Some(vec!["x".into()]),
            ..request()
        }
        .validate(&ValidationLimits::default())
        .unwrap();
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
    }

    fn cond(type_: &str, reason: &str) -> Condition {
        Condition::truthy(type_, reason, None, Utc::now())
    }

    #[test]
    fn phase_derives_from_conditions_first() {
        let mut s = WorkloadStatus::default();
        assert_eq!(s.derive_phase().phase, JobPhase::Pending);
        s.active = 1;
        assert_eq!(s.derive_phase().phase, JobPhase::Running);
        s.conditions.push(cond("FailureTarget", "DeadlineExceeded"));
        let d = s.derive_phase();
        assert_eq!(
            (d.phase, d.reason.as_deref()),
            (JobPhase::Failed, Some("DeadlineExceeded"))
        );
        let mut s = WorkloadStatus {
            start_time: Some(Utc::now()),
            ..Default::default()
        };
        assert_eq!(s.derive_phase().phase, JobPhase::Running);
        s.conditions
            .push(cond("SuccessCriteriaMet", "CompletionsReached"));
        assert_eq!(s.derive_phase().phase, JobPhase::Succeeded);
        let suspended = WorkloadStatus {
            conditions: vec![cond("Suspended", "JobSuspended")],
            ..Default::default()
        };
        assert_eq!(suspended.derive_phase().phase, JobPhase::Pending);
        let false_condition = WorkloadStatus {
            conditions: vec![Condition {
                status: "False".into(),
                ..cond("Complete", "x")
            }],
            ..Default::default()
        };
        assert_eq!(false_condition.derive_phase().phase, JobPhase::Pending);
    }

    #[test]
    fn phases_only_move_forward() {
        use JobPhase::*;
        assert!(Pending.can_advance_to(Running));
        assert!(Pending.can_advance_to(Cancelled));
        assert!(Running.can_advance_to(Succeeded));
        assert!(!Running.can_advance_to(Pending));
        assert!(!Running.can_advance_to(Running));
        for terminal in [Succeeded, Failed, Cancelled] {
            for next in JobPhase::ALL {
                assert!(!terminal.can_advance_to(next));
            }
        }
    }

    #[test]
    fn stale_status_never_revives_a_job() {
        let spec = request().validate(&ValidationLimits::default()).unwrap();
        let mut job = Job::accepted("j".into(), spec, None, Utc::now());
        let running = WorkloadStatus {
            active: 1,
            start_time: Some(Utc::now()),
            ..Default::default()
        };
        let t = job.observe(running.clone(), Utc::now()).unwrap();
        assert_eq!(
            (t.previous_phase, t.phase),
            (Some(JobPhase::Pending), JobPhase::Running)
        );
        // An older status (nothing started) does not move it back.
        assert!(
            job.observe(WorkloadStatus::default(), Utc::now())
                .is_some_and(|t| t.phase == JobPhase::Running)
        );
        assert_eq!(job.phase, JobPhase::Running);
        job.cancel(Utc::now()).unwrap();
        assert_eq!(job.phase, JobPhase::Cancelled);
        let done = WorkloadStatus {
            conditions: vec![cond("Complete", "CompletionsReached")],
            ..running
        };
        assert!(job.observe(done, Utc::now()).is_none());
        assert_eq!(job.phase, JobPhase::Cancelled);
        assert!(job.cancel(Utc::now()).is_none());
    }
}
