//! The rules a submission must pass before it is accepted: names, sizes, limits set by
//! configuration, template inputs, resources and dependencies. Pure: it reads no state, so
//! that an invalid submission changes nothing.

use std::collections::BTreeSet;

use super::json::check_json;
use super::queueing::{PRIORITY_CEILING, PRIORITY_FLOOR, PriorityLimits};
use super::retry::{RetryContext, RetryPolicy};
use super::spec::{JobSpec, ResourceRequirements, SubmitRequest, parse_quantity};

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
    /// Whether jobs may be queued in Kueue (`queueName`), and the queue of those that name
    /// none.
    pub kueue: KueueLimits,
    /// Why a job's retry back-off cannot be set on this server (its executor's is fixed);
    /// `None` where the executor applies it.
    pub fixed_backoff: Option<String>,
    /// The highest priority each tenant's jobs may ask for.
    pub priorities: PriorityLimits,
}

/// What the server allows of Kueue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KueueLimits {
    /// Kueue integration is on: `queueName` is accepted.
    pub enabled: bool,
    /// The LocalQueue of jobs (of kinds Kueue can queue) that name none.
    pub default_queue: Option<String>,
}

/// The optional `SubmitJobInput` fields a template uses, and those it requires; a job that
/// gives a field its template does not use is refused rather than silently ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateInputs {
    pub fields: Vec<String>,
    pub required: Vec<String>,
    /// Why Kueue cannot queue the template's kind; `None` when it can.
    pub not_queueable: Option<String>,
    /// Why the template takes no `retryPolicy`; `None` when it does.
    pub retry_refusal: Option<String>,
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
            kueue: KueueLimits::default(),
            fixed_backoff: None,
            priorities: PriorityLimits::default(),
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

/// The container of the `container` template's runs, on every executor.
pub const JOB_CONTAINER: &str = "job";

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
            // As the Job controller: with limits per index, the job's own is unbounded unless
            // given.
            None if self
                .retry_policy
                .as_ref()
                .is_some_and(|p| p.backoff_limit_per_index.is_some()) =>
            {
                i32::MAX
            }
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
        if let Some(p) = &self.parameters {
            if !p.is_object() {
                return Err(invalid("input.parameters", "must be an object"));
            }
            // What is stored must read back: the same bound holds for every stored value.
            check_json(p).map_err(|e| invalid("input.parameters", e.to_string()))?;
        }
        if let Some(key) = &self.idempotency_key {
            if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
                return Err(invalid(
                    "input.idempotencyKey",
                    format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes"),
                ));
            }
            // Stored in a text column, which PostgreSQL refuses NUL in; control characters
            // are no part of a key anyone types.
            if key.chars().any(char::is_control) {
                return Err(invalid(
                    "input.idempotencyKey",
                    "must not contain control characters",
                ));
            }
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
        let queue_name = self.queue_name(&template, inputs, limits)?;
        let retry_policy = self.retry_policy(&template, inputs, completions, limits)?;
        let priority = self.priority(&namespace, limits)?;
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
            queue_name,
            retry_policy,
            priority,
        })
    }

    /// The priority: within the bounds any job may ask for, and at most its tenant's maximum
    /// (the operator's `--max-priority`, `--tenant-max-priority`).
    fn priority(&self, namespace: &str, limits: &ValidationLimits) -> Result<i32, ValidationError> {
        let priority = self.priority.unwrap_or(0);
        if !(PRIORITY_FLOOR..=PRIORITY_CEILING).contains(&priority) {
            return Err(invalid(
                "input.priority",
                format!("must be between {PRIORITY_FLOOR} and {PRIORITY_CEILING}, got {priority}"),
            ));
        }
        let max = limits.priorities.max_of(namespace);
        if priority > max {
            return Err(invalid(
                "input.priority",
                format!("namespace {namespace} may ask for priorities up to {max}, got {priority}"),
            ));
        }
        Ok(priority)
    }

    /// The retry policy: refused for templates that take none, checked against the job.
    fn retry_policy(
        &self,
        template: &str,
        inputs: Option<&TemplateInputs>,
        completions: i32,
        limits: &ValidationLimits,
    ) -> Result<Option<RetryPolicy>, ValidationError> {
        let Some(request) = &self.retry_policy else {
            return Ok(None);
        };
        if let Some(why) = inputs.and_then(|i| i.retry_refusal.as_deref()) {
            return Err(invalid(
                "input.retryPolicy",
                format!("template {template} takes no retryPolicy: {why}"),
            ));
        }
        // The container template's pods have one container; a template's are its own.
        let containers: &[&str] = &[JOB_CONTAINER];
        let context = RetryContext {
            completions,
            max_backoff_limit: limits.max_backoff_limit,
            containers: inputs.is_none().then_some(containers),
            fixed_backoff: limits.fixed_backoff.as_deref(),
        };
        request
            .validate(&context)
            .map(Some)
            .map_err(|e| invalid(e.field, e.message))
    }

    /// The LocalQueue the job waits in: its own `queueName`, refused when Kueue is off or
    /// cannot queue the template's kind; else the default queue where Kueue can queue it.
    fn queue_name(
        &self,
        template: &str,
        inputs: Option<&TemplateInputs>,
        limits: &ValidationLimits,
    ) -> Result<Option<String>, ValidationError> {
        let not_queueable = inputs.and_then(|i| i.not_queueable.as_deref());
        let Some(queue) = &self.queue_name else {
            return Ok(limits
                .kueue
                .default_queue
                .clone()
                .filter(|_| limits.kueue.enabled && not_queueable.is_none()));
        };
        if !limits.kueue.enabled {
            return Err(invalid(
                "input.queueName",
                "this server does not queue jobs in Kueue (it runs without --kueue); omit queueName",
            ));
        }
        if let Some(why) = not_queueable {
            return Err(invalid(
                "input.queueName",
                format!("template {template} cannot be queued in Kueue: {why}"),
            ));
        }
        if !is_queue_name(queue) {
            return Err(invalid(
                "input.queueName",
                format!(
                    "{queue:?} is not a LocalQueue name (1 to 63 lowercase letters, digits, '-' or '.', starting and ending alphanumeric)"
                ),
            ));
        }
        Ok(Some(queue.clone()))
    }
}

/// Whether `s` can name a namespace (a DNS-1123 label).
pub fn is_namespace_name(s: &str) -> bool {
    is_dns_label(s)
}

/// Whether `s` can name a LocalQueue and be the value of Kueue's queue-name label.
pub fn is_queue_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
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
