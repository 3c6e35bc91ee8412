//! Workload templates: named recipes, defined by jobgate's operator in YAML, that turn a job
//! into one Kubernetes object of any kind, and map that kind's status back to jobgate's
//! phase, conditions, progress, result and message.
//!
//! It owns the template file format, loading (the built-ins embedded in the binary, then a
//! directory whose files may add templates or replace built-ins), the checks that stop
//! jobgate at start on a bad template (naming the file and the problem), validating a job's
//! `parameters` against the template's JSON Schema, and rendering the object. It must not
//! talk to the API server: the Kubernetes executor does, with what this module renders and
//! decodes. The `container` template is not one of these: it is built into the executors.
//!
//! A template file (see `templates/*.yaml` for the built-ins):
//!
//! ```yaml
//! name: argo-workflow                 # what SubmitJobInput.template names
//! description: One container step as an Argo Workflow.
//! apiVersion: argoproj.io/v1alpha1
//! kind: Workflow
//! fields: [image, command, args, env] # the SubmitJobInput fields it uses; others are refused
//! required: [image, command]
//! parameters: {type: object, properties: {…}}   # JSON Schema of `parameters`
//! manifest:                           # the object; jobgate sets name, namespace and labels
//!   spec: {…, image: "${job.image}"}  # ${…}: see `render`
//! status: {phase: [...], progress: {...}, result: [...]}   # see `rules`
//! children: [{apiVersion: v1, kind: ConfigMap, data: {…}}]  # created with it, owned by it
//! cancel: {patch: {spec: {shutdown: Terminate}}}          # default: delete the object
//! retentionSeconds: 3600              # delete finished objects (kinds with no native TTL)
//! takesRetryPolicy: true              # batch/v1 Jobs only: a job's retryPolicy sets the
//!                                     # Job's podFailurePolicy and per-index limits
//! ```

pub mod render;
pub mod rules;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::model::{Job, ValidationError};

pub use rules::StatusRules;

/// The built-in templates, embedded in the binary.
const BUILTIN: &[(&str, &str)] = &[
    ("pytorchjob.yaml", include_str!("../../templates/pytorchjob.yaml")),
    ("tfjob.yaml", include_str!("../../templates/tfjob.yaml")),
    ("mpijob.yaml", include_str!("../../templates/mpijob.yaml")),
    ("trainjob.yaml", include_str!("../../templates/trainjob.yaml")),
    (
        "argo-workflow.yaml",
        include_str!("../../templates/argo-workflow.yaml"),
    ),
    (
        "tekton-pipelinerun.yaml",
        include_str!("../../templates/tekton-pipelinerun.yaml"),
    ),
    ("rayjob.yaml", include_str!("../../templates/rayjob.yaml")),
    (
        "sparkapplication.yaml",
        include_str!("../../templates/sparkapplication.yaml"),
    ),
];

/// The `SubmitJobInput` fields a template may use (name, namespace, template, parameters
/// and idempotencyKey are always accepted).
pub const TEMPLATE_FIELDS: &[&str] = &[
    "image",
    "command",
    "args",
    "env",
    "parallelism",
    "completions",
    "backoffLimit",
    "activeDeadlineSeconds",
    "resources",
    "serviceAccountName",
    "ttlSecondsAfterFinished",
];

/// The name of the template built into the executors.
pub const CONTAINER: &str = "container";

/// Where a run writes its result: the termination message file, so that `$JOBGATE_RESULT_FILE`
/// means the same on every executor. A template's `resultFile` defaults to it, and the
/// Kubernetes executor's own Jobs use it.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// A template that cannot be used: which file and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("template {file}: {problem}")]
pub struct TemplateError {
    pub file: String,
    pub problem: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TemplateFile {
    name: String,
    description: String,
    api_version: String,
    kind: String,
    #[serde(default)]
    fields: Vec<FieldUse>,
    #[serde(default)]
    required: Vec<String>,
    #[serde(default)]
    result_file: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    manifest: Value,
    #[serde(default)]
    children: Vec<Value>,
    status: StatusRules,
    #[serde(default)]
    cancel: CancelRule,
    #[serde(default)]
    retention_seconds: Option<Retention>,
    #[serde(default)]
    takes_retry_policy: bool,
}

/// A `SubmitJobInput` field a template uses: its name, or its name with the label and
/// description a form shows for it in this template.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum FieldUse {
    Name(String),
    Described {
        name: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        description: Option<String>,
    },
}

/// How long a finished object is kept before jobgate deletes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retention {
    Seconds(u64),
    /// The job's `ttlSecondsAfterFinished` (or the server's default for it).
    JobTtl,
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Seconds(s) => Ok(Self::Seconds(s)),
            Raw::Text(t) if t.replace(' ', "") == "${job.ttlSecondsAfterFinished}" => Ok(Self::JobTtl),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "retentionSeconds must be a number of seconds or ${{job.ttlSecondsAfterFinished}}, got {t:?}"
            ))),
        }
    }
}

/// How a form shows a field in one template, when it differs from the field's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldText {
    pub label: Option<String>,
    pub description: Option<String>,
}

/// How a job of the template is cancelled.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRule {
    /// A JSON merge patch that stops the workload and keeps the object (e.g. Argo's
    /// `spec.shutdown: Terminate`); without one the object is deleted, its dependents with it.
    #[serde(default)]
    pub patch: Option<Value>,
}

/// A loaded, checked template.
#[derive(Debug)]
pub struct WorkloadTemplate {
    pub name: String,
    pub description: String,
    pub api_version: String,
    pub kind: String,
    /// The `SubmitJobInput` fields it uses, in order, with how a form shows each here.
    pub fields: Vec<(String, FieldText)>,
    pub required: Vec<String>,
    /// Where a run writes its result (`$JOBGATE_RESULT_FILE`).
    pub result_file: String,
    pub parameters: Option<Value>,
    validator: Option<jsonschema::Validator>,
    pub manifest: Value,
    /// Objects created with the main one and owned by it (ownerReferences): deleted with it.
    pub children: Vec<Value>,
    pub status: StatusRules,
    pub cancel: CancelRule,
    /// How long a finished object is kept before jobgate deletes it, for kinds without a
    /// native TTL; `None` keeps it (a native TTL in the manifest, or the operator's choice).
    pub retention: Option<Retention>,
    /// A job's `retryPolicy` sets the rendered batch/v1 Job's `podFailurePolicy`,
    /// `backoffLimitPerIndex` and `maxFailedIndexes`.
    pub takes_retry_policy: bool,
    /// Where it was loaded from, for messages.
    pub source: String,
}

/// The label that puts an object in a Kueue LocalQueue.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The JSON pointer of the suspend field of a kind Kueue queues natively (its built-in
/// integrations), or why Kueue cannot queue the kind. Kueue admits a workload by flipping
/// that field; kinds without one, or without an integration, are never held by it.
pub fn kueue_suspend_field(group: &str, kind: &str) -> Result<&'static str, String> {
    match (group, kind) {
        ("batch", "Job")
        | ("jobset.x-k8s.io", "JobSet")
        | ("ray.io", "RayJob" | "RayCluster")
        | ("trainer.kubeflow.org", "TrainJob") => Ok("/spec/suspend"),
        ("kubeflow.org", "PyTorchJob" | "TFJob" | "MPIJob" | "XGBoostJob" | "PaddleJob" | "JAXJob") => {
            Ok("/spec/runPolicy/suspend")
        }
        ("argoproj.io", "Workflow") => Err(
            "Kueue has no Argo Workflows integration (it can only hold a Workflow's pods one by one, which jobgate does not set up)".into(),
        ),
        ("tekton.dev", "PipelineRun") => Err("Kueue has no Tekton integration".into()),
        ("sparkoperator.k8s.io", "SparkApplication") => {
            Err("Kueue has no SparkApplication integration".into())
        }
        _ => Err(format!("Kueue has no integration for {kind} ({group})")),
    }
}

/// The value at JSON pointer `pointer` of `object`, created (with objects on the way) when
/// missing; `None` when a value on the way is not an object.
fn set_path<'a>(object: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
    let mut at = object;
    for key in pointer.split('/').skip(1) {
        at = at.as_object_mut()?.entry(key.to_owned()).or_insert(Value::Null);
        if at.is_null() {
            *at = json!({});
        }
    }
    Some(at)
}

/// What every rendered object carries besides the template's own spec.
pub struct Stamp {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Environment jobgate sets for every run (after the job's own).
    pub env: Vec<(String, String)>,
    /// `ttlSecondsAfterFinished` for jobs that set none.
    pub default_ttl_seconds: Option<i32>,
}

fn problem(file: &str, problem: impl Into<String>) -> TemplateError {
    TemplateError {
        file: file.to_owned(),
        problem: problem.into(),
    }
}

impl WorkloadTemplate {
    /// Parses and checks one template file's text.
    pub fn parse(file: &str, text: &str) -> Result<Self, TemplateError> {
        let raw: TemplateFile = serde_yaml_ng::from_str(text).map_err(|e| problem(file, e.to_string()))?;
        let bad = |p: String| problem(file, p);
        let valid_name = !raw.name.is_empty()
            && raw.name.len() <= 63
            && raw
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err(bad(format!(
                "name {:?} must be 1-63 lowercase letters, digits or '-'",
                raw.name
            )));
        }
        if raw.name == CONTAINER {
            return Err(bad(format!(
                "name {CONTAINER:?} is reserved for the built-in batch/v1 Job"
            )));
        }
        if raw.kind.is_empty() || raw.api_version.is_empty() || raw.api_version.split('/').count() > 2 {
            return Err(bad("apiVersion (group/version) and kind are required".into()));
        }
        let fields: Vec<(String, FieldText)> = raw
            .fields
            .iter()
            .map(|f| match f {
                FieldUse::Name(name) => (name.clone(), FieldText::default()),
                FieldUse::Described {
                    name,
                    label,
                    description,
                } => (
                    name.clone(),
                    FieldText {
                        label: label.clone(),
                        description: description.clone(),
                    },
                ),
            })
            .collect();
        for (i, (f, _)) in fields.iter().enumerate() {
            if !TEMPLATE_FIELDS.contains(&f.as_str()) {
                return Err(bad(format!(
                    "fields: unknown field {f:?}; one of {}",
                    TEMPLATE_FIELDS.join(", ")
                )));
            }
            if fields[..i].iter().any(|(g, _)| g == f) {
                return Err(bad(format!("fields: {f:?} is listed twice")));
            }
        }
        for f in &raw.required {
            if !fields.iter().any(|(g, _)| g == f) {
                return Err(bad(format!("required: {f:?} is not in fields")));
            }
        }
        let validator = match &raw.parameters {
            None => None,
            Some(schema) => {
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(bad(
                        "parameters: the schema must describe an object (type: object)".into(),
                    ));
                }
                Some(
                    jsonschema::validator_for(schema)
                        .map_err(|e| bad(format!("parameters: not a valid JSON Schema: {e}")))?,
                )
            }
        };
        if !raw.manifest.is_object() {
            return Err(bad(
                "manifest must be an object (the workload's spec and metadata)".into(),
            ));
        }
        let params: HashSet<&str> = raw
            .parameters
            .as_ref()
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut expressions = render::expressions(&raw.manifest).map_err(|e| bad(e.to_string()))?;
        for (i, child) in raw.children.iter().enumerate() {
            let text = |k: &str| child.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
            if text("apiVersion").is_none() || text("kind").is_none() {
                return Err(bad(format!("children[{i}]: apiVersion and kind are required")));
            }
            let found = render::expressions(child).map_err(|e| bad(format!("children[{i}]: {e}")))?;
            expressions.extend(
                found
                    .into_iter()
                    .map(|(at, path)| (format!("children[{i}].{at}"), path)),
            );
        }
        for (at, path) in expressions {
            let mut parts = path.split('.');
            let root = parts.next().unwrap_or_default();
            let second = parts.next();
            let known = match (root, second) {
                ("job", Some(field)) => JOB_VALUES.contains(&field),
                ("params", Some(p)) => params.contains(p),
                ("params", None) | ("labels", None) | ("annotations", None) => true,
                ("workload", Some("name")) => true,
                _ => false,
            };
            if !known {
                return Err(bad(format!(
                    "manifest {at}: unknown value ${{{path}}}; use job.<{}>, params.<a property of parameters>, workload.name, labels or annotations",
                    JOB_VALUES.join("|")
                )));
            }
            if root == "job"
                && let Some(field) = second
                && let Some(input) = input_field(field)
                && !fields.iter().any(|(f, _)| f == input)
            {
                return Err(bad(format!(
                    "manifest {at}: ${{{path}}} uses {input}, which is not in fields"
                )));
            }
        }
        raw.status.check().map_err(bad)?;
        if raw.takes_retry_policy {
            if (raw.api_version.as_str(), raw.kind.as_str()) != ("batch/v1", "Job") {
                return Err(bad(format!(
                    "takesRetryPolicy: a {} ({}) has no podFailurePolicy; only batch/v1 Jobs do",
                    raw.kind, raw.api_version
                )));
            }
            if raw.manifest.pointer("/spec/template/spec/restartPolicy") != Some(&json!("Never")) {
                return Err(bad(
                    "takesRetryPolicy: podFailurePolicy needs spec.template.spec.restartPolicy: Never".into(),
                ));
            }
        }
        if let Some(patch) = &raw.cancel.patch
            && !patch.is_object()
        {
            return Err(bad("cancel.patch must be an object (a JSON merge patch)".into()));
        }
        Ok(Self {
            name: raw.name,
            description: raw.description,
            api_version: raw.api_version,
            kind: raw.kind,
            fields,
            required: raw.required,
            result_file: raw
                .result_file
                .unwrap_or_else(|| TERMINATION_MESSAGE_PATH.to_owned()),
            parameters: raw.parameters,
            validator,
            manifest: raw.manifest,
            children: raw.children,
            status: raw.status,
            cancel: raw.cancel,
            retention: raw.retention_seconds,
            takes_retry_policy: raw.takes_retry_policy,
            source: file.to_owned(),
        })
    }

    /// `group/version` split, the group empty for the core API.
    pub fn group_version(&self) -> (&str, &str) {
        match self.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", self.api_version.as_str()),
        }
    }

    /// Checks a job's `parameters`; the error names the first wrong one.
    pub fn validate_parameters(&self, parameters: Option<&Value>) -> Result<(), ValidationError> {
        let empty = json!({});
        let given = parameters.unwrap_or(&empty);
        match &self.validator {
            None if parameters.is_some_and(|p| p.as_object().is_some_and(|m| !m.is_empty())) => {
                Err(ValidationError {
                    field: "input.parameters".into(),
                    message: format!("template {} takes no parameters", self.name),
                })
            }
            None => Ok(()),
            Some(v) => match v.iter_errors(given).next() {
                None => Ok(()),
                Some(e) => {
                    let at = e.instance_path().to_string();
                    let field = if at.is_empty() {
                        "input.parameters".to_owned()
                    } else {
                        format!("input.parameters{}", at.replace('/', "."))
                    };
                    Err(ValidationError {
                        field,
                        message: e.to_string(),
                    })
                }
            },
        }
    }

    /// The job's parameters with the schema's top-level defaults filled in.
    fn parameters_with_defaults(&self, given: Option<&Value>) -> Value {
        let mut out = given.and_then(Value::as_object).cloned().unwrap_or_default();
        let defaults = self
            .parameters
            .as_ref()
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object);
        for (k, prop) in defaults.into_iter().flatten() {
            if let Some(d) = prop.get("default")
                && !out.contains_key(k)
            {
                out.insert(k.clone(), d.clone());
            }
        }
        Value::Object(out)
    }

    /// The object for `job`: the manifest rendered with the job's values, then jobgate's
    /// name, namespace, labels and annotations (which a template cannot override).
    pub fn render(&self, job: &Job, stamp: &Stamp) -> Value {
        let context = self.context(job, stamp);
        let mut object = render::render(&self.manifest, &context).unwrap_or_else(|| json!({}));
        object["apiVersion"] = json!(self.api_version);
        object["kind"] = json!(self.kind);
        stamp_metadata(&mut object, &stamp.name, &job.spec.namespace, stamp);
        if self.takes_retry_policy
            && let Some(policy) = &job.spec.retry_policy
            && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
        {
            if let Some(rules) = policy.pod_failure_policy() {
                spec.insert("podFailurePolicy".into(), rules);
            }
            if let Some(limit) = policy.backoff_limit_per_index {
                spec.insert("backoffLimitPerIndex".into(), json!(limit));
                spec.insert("completionMode".into(), json!("Indexed"));
            }
            if let Some(max) = policy.max_failed_indexes {
                spec.insert("maxFailedIndexes".into(), json!(max));
            }
        }
        // A queued job's object is created suspended and labelled with its LocalQueue:
        // Kueue creates its Workload and unsuspends it once admitted.
        if let (Some(queue), Ok(suspend)) = (&job.spec.queue_name, self.kueue_suspend_field()) {
            object["metadata"]["labels"][KUEUE_QUEUE_LABEL] = json!(queue);
            if let Some(field) = set_path(&mut object, suspend) {
                *field = json!(true);
            }
        }
        object
    }

    /// Why the template takes no `retryPolicy`; `None` when it does.
    pub fn retry_refusal(&self) -> Option<String> {
        if self.takes_retry_policy {
            return None;
        }
        Some(
            if (self.api_version.as_str(), self.kind.as_str()) == ("batch/v1", "Job") {
                "it does not set takesRetryPolicy".to_owned()
            } else {
                format!(
                    "it creates a {} ({}), which has no podFailurePolicy or per-index back-off (only batch/v1 Jobs do); submit with the container template to use retry rules",
                    self.kind, self.api_version
                )
            },
        )
    }

    /// Where the template's kind says it is suspended, when Kueue can queue it; otherwise
    /// why it cannot.
    pub fn kueue_suspend_field(&self) -> Result<&'static str, String> {
        let (group, _) = self.group_version();
        kueue_suspend_field(group, &self.kind)
    }

    /// The template's child objects for `job`, each named as it says (default
    /// `<workload name>-<kind>-<i>`, lowercase) and stamped like the main object; the executor
    /// adds the ownerReference once the main object exists.
    pub fn render_children(&self, job: &Job, stamp: &Stamp) -> Vec<Value> {
        let context = self.context(job, stamp);
        self.children
            .iter()
            .enumerate()
            .map(|(i, child)| {
                let mut object = render::render(child, &context).unwrap_or_else(|| json!({}));
                let kind = child.get("kind").and_then(Value::as_str).unwrap_or("object");
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{}-{}-{i}", stamp.name, kind.to_lowercase()));
                stamp_metadata(&mut object, &name, &job.spec.namespace, stamp);
                object
            })
            .collect()
    }

    /// What `${…}` can name for `job`.
    fn context(&self, job: &Job, stamp: &Stamp) -> Value {
        let spec = &job.spec;
        let mut env: Vec<Value> = spec
            .env
            .iter()
            .map(|e| json!({"name": e.name, "value": e.value}))
            .collect();
        env.extend(
            stamp
                .env
                .iter()
                .map(|(name, value)| json!({"name": name, "value": value})),
        );
        env.push(json!({"name": "JOBGATE_RESULT_FILE", "value": self.result_file}));
        let command_line: Vec<String> = spec.command.iter().chain(&spec.args).cloned().collect();
        let labels: Map<String, Value> = stamp
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let annotations: Map<String, Value> = stamp
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "job": {
                "id": job.id,
                "name": spec.name.clone().unwrap_or_else(|| stamp.name.clone()),
                "namespace": spec.namespace,
                "image": spec.image,
                "command": spec.command,
                "args": spec.args,
                "commandLine": render::shell_join(&command_line),
                "env": env,
                "parallelism": spec.parallelism,
                "completions": spec.completions,
                "backoffLimit": spec.backoff_limit,
                "activeDeadlineSeconds": spec.active_deadline_seconds,
                "resources": spec.resources,
                "serviceAccountName": spec.service_account_name,
                "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished.or(stamp.default_ttl_seconds),
            },
            "params": self.parameters_with_defaults(spec.parameters.as_ref()),
            "workload": {"name": stamp.name},
            "labels": labels,
            "annotations": annotations,
        })
    }
}

/// Sets jobgate's name, namespace, labels and annotations on a rendered object (the
/// template's own labels and annotations stay, ours win).
fn stamp_metadata(object: &mut Value, name: &str, namespace: &str, stamp: &Stamp) {
    // Indexing a JSON object (or null) by key inserts the key when it is missing; each level
    // is made an object first, so that no index below can meet a string or a number.
    if !object.is_object() {
        *object = json!({});
    }
    let meta = &mut object["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["name"] = json!(name);
    meta["namespace"] = json!(namespace);
    for (key, ours) in [("labels", &stamp.labels), ("annotations", &stamp.annotations)] {
        let mut merged = meta
            .get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        merged.extend(ours.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))));
        meta[key] = Value::Object(merged);
    }
}

/// The job values a manifest may use, as `${job.<value>}`.
const JOB_VALUES: &[&str] = &[
    "id",
    "name",
    "namespace",
    "image",
    "command",
    "args",
    "commandLine",
    "env",
    "parallelism",
    "completions",
    "backoffLimit",
    "activeDeadlineSeconds",
    "resources",
    "serviceAccountName",
    "ttlSecondsAfterFinished",
];

/// The `SubmitJobInput` field a job value comes from, when it comes from one.
fn input_field(value: &str) -> Option<&'static str> {
    match value {
        "commandLine" => Some("command"),
        "id" | "name" | "namespace" | "env" => None,
        other => TEMPLATE_FIELDS.iter().copied().find(|f| *f == other),
    }
}

/// Every template this server knows, by name.
#[derive(Debug, Default)]
pub struct TemplateSet {
    templates: BTreeMap<String, Arc<WorkloadTemplate>>,
}

impl TemplateSet {
    /// The built-in templates, then every `*.yaml`/`*.yml` file of `dir` (a file whose
    /// template has a built-in's name replaces it).
    pub fn load(dir: Option<&Path>) -> Result<Self, TemplateError> {
        let mut set = Self::default();
        for (file, text) in BUILTIN {
            set.add(
                WorkloadTemplate::parse(&format!("(built in) {file}"), text)?,
                false,
            )?;
        }
        let Some(dir) = dir else { return Ok(set) };
        let entries =
            std::fs::read_dir(dir).map_err(|e| problem(&dir.display().to_string(), e.to_string()))?;
        let mut files: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
            .collect();
        files.sort();
        let mut from_dir = HashSet::new();
        for path in files {
            let file = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| problem(&file, e.to_string()))?;
            let template = WorkloadTemplate::parse(&file, &text)?;
            if !from_dir.insert(template.name.clone()) {
                return Err(problem(
                    &file,
                    format!(
                        "another file of {} also defines template {:?}",
                        dir.display(),
                        template.name
                    ),
                ));
            }
            set.add(template, true)?;
        }
        Ok(set)
    }

    fn add(&mut self, template: WorkloadTemplate, replace: bool) -> Result<(), TemplateError> {
        if !replace && self.templates.contains_key(&template.name) {
            return Err(problem(
                &template.source,
                format!("template {:?} is defined twice", template.name),
            ));
        }
        self.templates.insert(template.name.clone(), Arc::new(template));
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<WorkloadTemplate>> {
        self.templates.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<WorkloadTemplate>> {
        self.templates.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.templates.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests;
