//! The flags that describe a job on the command line (`--namespace`, `--image`,
//! `--template`, `--env`, the command after `--`), shared by `jobgate submit` and `jobgate
//! schedule create`, and the one place they become fields of a `SubmitJobInput`.
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
    /// The job's command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Sets the fields `flags` give on `input` (a `SubmitJobInput`), over what it held; leaves
/// the others as they are.
pub fn job_input(flags: &JobFlags, input: &mut Map<String, Value>) {
    for (key, value) in [
        ("namespace", &flags.namespace),
        ("image", &flags.image),
        ("template", &flags.template),
    ] {
        if let Some(value) = value {
            input.insert(key.into(), json!(value));
        }
    }
    if !flags.command.is_empty() {
        input.insert("command".into(), json!(flags.command));
    }
    if !flags.env.is_empty() {
        let env: Vec<Value> = flags
            .env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        input.insert("env".into(), Value::Array(env));
    }
}
