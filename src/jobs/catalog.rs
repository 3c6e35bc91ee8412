//! Workload templates as clients see them: which submission fields a template uses, with
//! their labels, defaults, limits and allowed values, and the JSON Schema of its
//! `parameters`. A form (the dashboard's) is built from this, so it must say what validation
//! really enforces.
//!
//! It owns the description only: validation stays in `model` (`SubmitRequest::validate`),
//! turning a job into a workload in the executors. It must not do I/O.

use serde_json::{Value, json};

use crate::model::ValidationLimits;
use crate::templates::{TemplateSet, WorkloadTemplate};

/// What kind of value a field takes, so that a client knows which control to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    String,
    /// A list of strings (command, args).
    StringList,
    Int,
    /// A list of `{name, value}` environment variables.
    Env,
    /// `{requests, limits}` of cpu and memory.
    Resources,
}

/// One `SubmitJobInput` field a template uses.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateField {
    /// The `SubmitJobInput` field it fills.
    pub name: &'static str,
    pub label: String,
    pub description: String,
    pub field_type: FieldType,
    pub required: bool,
    /// The value the server uses when the field is omitted.
    pub default: Option<Value>,
    /// The only values accepted, when the server limits them.
    pub choices: Option<Vec<String>>,
    pub minimum: Option<i64>,
    pub maximum: Option<i64>,
    pub placeholder: Option<&'static str>,
}

/// A named recipe a job may use.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    pub name: String,
    pub description: String,
    /// What a job of this template becomes.
    pub kind: String,
    /// Whether jobs can use it now.
    pub available: bool,
    /// Why not, when it cannot be used now.
    pub unavailable_reason: Option<String>,
    pub fields: Vec<TemplateField>,
    /// JSON Schema of `parameters`; `None` when the template takes none.
    pub parameter_schema: Option<Value>,
}

/// Where jobs run, as far as the form is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// Local processes: no image, no Kubernetes fields.
    Local,
    /// Kubernetes batch/v1 Jobs, with the server's default `ttlSecondsAfterFinished`.
    Kubernetes { ttl_seconds_after_finished: i32 },
}

fn field(
    name: &'static str,
    label: &'static str,
    field_type: FieldType,
    description: impl Into<String>,
) -> TemplateField {
    TemplateField {
        name,
        label: label.to_owned(),
        description: description.into(),
        field_type,
        required: false,
        default: None,
        choices: None,
        minimum: None,
        maximum: None,
        placeholder: None,
    }
}

/// The templates this server offers: `container`, then the workload templates.
pub fn builtin(limits: &ValidationLimits, runtime: Runtime, workloads: &TemplateSet) -> Vec<Template> {
    let mut all = vec![container(limits, runtime)];
    all.extend(workloads.iter().map(|t| workload(t, limits, runtime)));
    all
}

/// A workload template as a form sees it: the container's fields it uses, as it labels them.
fn workload(t: &WorkloadTemplate, limits: &ValidationLimits, runtime: Runtime) -> Template {
    let ttl = match runtime {
        Runtime::Kubernetes { .. } => runtime,
        Runtime::Local => Runtime::Kubernetes {
            ttl_seconds_after_finished: 3600,
        },
    };
    let known = container(limits, ttl).fields;
    let mut fields: Vec<TemplateField> = known
        .iter()
        .filter(|f| f.name == "name" || f.name == "namespace")
        .cloned()
        .collect();
    for (name, text) in &t.fields {
        let Some(mut f) = known.iter().find(|f| f.name == name).cloned() else {
            continue; // e.g. serviceAccountName on a server that allows none
        };
        if let Some(label) = &text.label {
            f.label.clone_from(label);
        }
        if let Some(description) = &text.description {
            f.description = description.clone();
        }
        f.required = t.required.contains(name);
        fields.push(f);
    }
    fields.extend(
        known
            .iter()
            .filter(|f| f.name == "dependsOn" || f.name == "priority")
            .cloned(),
    );
    Template {
        name: t.name.clone(),
        description: t.description.clone(),
        kind: format!("{} {}", t.api_version, t.kind),
        available: true,
        unavailable_reason: None,
        fields,
        parameter_schema: t.parameters.clone(),
    }
}

/// `priority`, up to the highest maximum any namespace has (the server refuses more than the
/// job's own namespace may ask for, next to the field).
fn priority_field(limits: &ValidationLimits) -> TemplateField {
    let highest = limits
        .priorities
        .tenants
        .values()
        .copied()
        .chain([limits.priorities.default])
        .max()
        .unwrap_or(limits.priorities.default);
    TemplateField {
        minimum: Some(crate::model::PRIORITY_FLOOR.into()),
        maximum: Some(highest.into()),
        ..field(
            "priority",
            "Priority",
            FieldType::Int,
            "Where the job goes in its queue: higher starts first among its namespace's waiting jobs; 0 when empty.",
        )
    }
}

/// `container`: the job's command in a container (a batch/v1 Job) or, on the local executor,
/// as a local process group with the same semantics.
fn container(limits: &ValidationLimits, runtime: Runtime) -> Template {
    let kubernetes = matches!(runtime, Runtime::Kubernetes { .. });
    let mut fields = vec![
        TemplateField {
            placeholder: Some("nightly-report"),
            ..field(
                "name",
                "Name",
                FieldType::String,
                "A label for people: 1-63 lowercase letters, digits or '-' (a DNS-1123 label); not unique.",
            )
        },
        TemplateField {
            default: Some(json!(limits.default_namespace)),
            choices: (!limits.allowed_namespaces.is_empty()).then(|| limits.allowed_namespaces.clone()),
            ..field("namespace", "Namespace", FieldType::String, "Where the job runs.")
        },
    ];
    if kubernetes {
        fields.push(TemplateField {
            required: limits.require_image,
            placeholder: Some("busybox:1.36"),
            ..field("image", "Image", FieldType::String, "The container image to run.")
        });
    }
    fields.extend([
        TemplateField {
            required: true,
            placeholder: Some("sh\n-c\necho hello > $JOBGATE_RESULT_FILE"),
            ..field(
                "command",
                "Command",
                FieldType::StringList,
                "The program and its first arguments, one per line. Each run may write its result (at most 4 KiB) to $JOBGATE_RESULT_FILE.",
            )
        },
        field("args", "Arguments", FieldType::StringList, "More arguments, one per line."),
        field(
            "env",
            "Environment",
            FieldType::Env,
            "Environment variables of each run. JOB_COMPLETION_INDEX and JOBGATE_RESULT_FILE are set for you.",
        ),
        TemplateField {
            default: Some(json!(1)),
            minimum: Some(1),
            maximum: Some(limits.max_parallelism.into()),
            ..field("parallelism", "Parallelism", FieldType::Int, "How many runs at once.")
        },
        TemplateField {
            default: Some(json!(1)),
            minimum: Some(1),
            maximum: Some(limits.max_completions.into()),
            ..field(
                "completions",
                "Completions",
                FieldType::Int,
                "How many successful runs complete the job; each run gets its index in JOB_COMPLETION_INDEX.",
            )
        },
        TemplateField {
            default: Some(json!(6)),
            minimum: Some(0),
            maximum: Some(limits.max_backoff_limit.into()),
            ..field(
                "backoffLimit",
                "Backoff limit",
                FieldType::Int,
                "How many failed runs are retried before the job fails.",
            )
        },
        TemplateField {
            placeholder: Some("0193a4c2-…"),
            ..field(
                "dependsOn",
                "Depends on",
                FieldType::StringList,
                "IDs of jobs that must succeed before this one starts, one per line (a reduce step lists its map step). If one fails or is cancelled, this job fails with DependencyFailed.",
            )
        },
        priority_field(limits),
        TemplateField {
            minimum: Some(1),
            ..field(
                "activeDeadlineSeconds",
                "Deadline (seconds)",
                FieldType::Int,
                "Seconds from its start after which the job fails with DeadlineExceeded; none when empty.",
            )
        },
    ]);
    if let Runtime::Kubernetes {
        ttl_seconds_after_finished,
    } = runtime
    {
        fields.push(field(
            "resources",
            "Resources",
            FieldType::Resources,
            "CPU and memory each run requests (for scheduling) and may use at most, e.g. 500m and 256Mi.",
        ));
        if !limits.service_accounts.is_empty() {
            fields.push(TemplateField {
                choices: Some(limits.service_accounts.clone()),
                ..field(
                    "serviceAccountName",
                    "Service account",
                    FieldType::String,
                    "The Kubernetes service account the job's pods run as.",
                )
            });
        }
        fields.push(TemplateField {
            default: Some(json!(ttl_seconds_after_finished)),
            minimum: Some(0),
            ..field(
                "ttlSecondsAfterFinished",
                "Keep finished Job (seconds)",
                FieldType::Int,
                "How long Kubernetes keeps the finished Job and its pods; jobgate keeps the history, result and log tail regardless.",
            )
        });
    }
    Template {
        name: "container".into(),
        description: if kubernetes {
            "Runs a command in a container image as a Kubernetes batch/v1 Job.".into()
        } else {
            "Runs a command as local processes, with the semantics of a Kubernetes batch/v1 Job.".into()
        },
        kind: if kubernetes {
            "batch/v1 Job"
        } else {
            "local process"
        }
        .into(),
        available: true,
        unavailable_reason: None,
        fields,
        parameter_schema: None,
    }
}
