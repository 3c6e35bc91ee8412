//! The flags that describe a job on the command line (`--namespace`, `--image`,
//! `--template`, `--env`, the command after `--`, the counts, limits, resources and retry
//! policy), shared by `jobgate submit` and `jobgate schedule create`, and the one place they
//! become fields of a `SubmitJobInput`. Every field the dashboard's submit form can send has
//! a flag here, so that the command line it shows submits the same job.
//!
//! It must not talk to the server, nor know which subcommand flattened it.

use clap::Args;
use serde_json::{Map, Value, json};

use super::key_value;

/// A job's fields as flags.
#[derive(Clone, Debug, Args)]
pub struct JobFlags {
    /// The job's namespace; the server's default namespace when omitted.
    #[arg(long)]
    pub namespace: Option<String>,
    /// The job's container image (Kubernetes executor).
    #[arg(long)]
    pub image: Option<String>,
    /// The job's workload template; the server's `container` when omitted.
    #[arg(long)]
    pub template: Option<String>,
    /// An environment variable of the job, `NAME=value`; repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = key_value)]
    pub env: Vec<(String, String)>,
    /// One of the job's `args` (run after the command); repeatable, in order.
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// How many runs at once.
    #[arg(long, value_name = "N")]
    pub parallelism: Option<i32>,
    /// How many successful runs complete the job.
    #[arg(long, value_name = "N")]
    pub completions: Option<i32>,
    /// How many failed runs are retried before the job fails.
    #[arg(long, value_name = "N")]
    pub backoff_limit: Option<i32>,
    /// Seconds from its start after which the job fails with `DeadlineExceeded`.
    #[arg(long, value_name = "SECONDS")]
    pub active_deadline_seconds: Option<i32>,
    /// The CPU each run requests, e.g. `500m` (Kubernetes executor).
    #[arg(long, value_name = "QUANTITY")]
    pub cpu_request: Option<String>,
    /// The memory each run requests, e.g. `256Mi` (Kubernetes executor).
    #[arg(long, value_name = "QUANTITY")]
    pub memory_request: Option<String>,
    /// The CPU each run may use at most, e.g. `1` (Kubernetes executor).
    #[arg(long, value_name = "QUANTITY")]
    pub cpu_limit: Option<String>,
    /// The memory each run may use at most, e.g. `512Mi` (Kubernetes executor).
    #[arg(long, value_name = "QUANTITY")]
    pub memory_limit: Option<String>,
    /// The Kubernetes service account the job's pods run as (one the server allows).
    #[arg(long = "service-account", value_name = "NAME")]
    pub service_account_name: Option<String>,
    /// Seconds after the job finishes before Kubernetes deletes its Job.
    #[arg(long, value_name = "SECONDS")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// The id of a job that must succeed before this one starts; repeatable.
    #[arg(long = "depends-on", value_name = "ID")]
    pub depends_on: Vec<String>,
    /// The Kueue LocalQueue the job waits in (servers with Kueue integration).
    #[arg(long = "queue", value_name = "NAME")]
    pub queue_name: Option<String>,
    /// Where the job goes in its queue: a namespace's jobs of higher priority start first
    /// (0 by default; the server caps it per namespace).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// The job's retry policy: a `RetryPolicyInput` as a JSON object, e.g.
    /// `{"rules":[{"action":"FAIL_JOB","exitCodes":{"operator":"IN","values":[42]}}]}`.
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    pub retry_policy: Option<Value>,
    /// The job's command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A JSON object given on the command line.
fn json_object(s: &str) -> Result<Value, String> {
    match serde_json::from_str(s) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("expected a JSON object".to_owned()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// The object under `key` in `map`, made (or replacing a value of another type) when there
/// is none.
fn object_at<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = map.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot.as_object_mut().expect("made an object above")
}

/// Sets the fields `flags` give on `input` (a `SubmitJobInput`), over what it held; leaves
/// the others as they are. A resource flag sets its one quantity in `resources`, keeping the
/// others `input` held (a schedule's file may give some).
pub fn job_input(flags: &JobFlags, input: &mut Map<String, Value>) {
    for (key, value) in [
        ("namespace", &flags.namespace),
        ("image", &flags.image),
        ("template", &flags.template),
        ("serviceAccountName", &flags.service_account_name),
        ("queueName", &flags.queue_name),
    ] {
        if let Some(value) = value {
            input.insert(key.into(), json!(value));
        }
    }
    for (key, value) in [
        ("parallelism", flags.parallelism),
        ("completions", flags.completions),
        ("backoffLimit", flags.backoff_limit),
        ("activeDeadlineSeconds", flags.active_deadline_seconds),
        ("ttlSecondsAfterFinished", flags.ttl_seconds_after_finished),
        ("priority", flags.priority),
    ] {
        if let Some(value) = value {
            input.insert(key.into(), json!(value));
        }
    }
    for (key, list) in [
        ("command", &flags.command),
        ("args", &flags.args),
        ("dependsOn", &flags.depends_on),
    ] {
        if !list.is_empty() {
            input.insert(key.into(), json!(list));
        }
    }
    if !flags.env.is_empty() {
        let env: Vec<Value> = flags
            .env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        input.insert("env".into(), Value::Array(env));
    }
    for (part, resource, quantity) in [
        ("requests", "cpu", &flags.cpu_request),
        ("requests", "memory", &flags.memory_request),
        ("limits", "cpu", &flags.cpu_limit),
        ("limits", "memory", &flags.memory_limit),
    ] {
        if let Some(quantity) = quantity {
            let resources = object_at(input, "resources");
            object_at(resources, part).insert(resource.into(), json!(quantity));
        }
    }
    if let Some(policy) = &flags.retry_policy {
        input.insert("retryPolicy".into(), policy.clone());
    }
}
