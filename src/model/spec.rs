//! What a client asks to run (`SubmitRequest`, as sent) and what will run once it is valid
//! (`JobSpec`, with its fingerprint for idempotent retries), plus Kubernetes quantities.
//! Validation lives in `validation`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::retry::{RetryPolicy, RetryPolicyRequest};

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
    /// The Kueue LocalQueue to queue the job in (Kubernetes executor with Kueue).
    pub queue_name: Option<String>,
    /// Retry rules, back-off and per-index limits (see `retry`).
    pub retry_policy: Option<RetryPolicyRequest>,
    /// Where the job goes in its queue: higher first (0 when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The caller's span, when its request carried a `traceparent`: the job joins its trace.
    #[serde(skip)]
    pub trace_parent: Option<super::trace::TraceParent>,
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
    pub fn is_empty(&self) -> bool {
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
    /// The Kueue LocalQueue the job waits in for admission (the submitted one or the
    /// server's default queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    /// Which failed runs fail the job, are retried uncounted, or fail their index; the
    /// back-off; per-index limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// Where the job goes in its queue: higher first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl JobSpec {
    /// A stable fingerprint of the spec, used to tell an idempotent retry (same key, same
    /// input) from a conflicting reuse of a key.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_vec(self).expect(
            "a JobSpec always serialises: strings, numbers and JSON values, no map with non-string keys",
        );
        let digest = Sha256::digest(canonical);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}
