//! The GraphQL input types: what `submitJob`, `submitJobs` and the job filters take, and
//! their conversion into the domain's requests. It must not validate (the domain does).

use async_graphql::{ID, InputObject, Json};

use super::{JobPhaseView, RetryPolicyInput};
use crate::model;

#[derive(InputObject, Clone, Debug)]
pub struct EnvVarInput {
    pub name: String,
    pub value: String,
}

/// What to run. Omitted counts default as in a batch/v1 Job: parallelism 1, completions 1,
/// backoffLimit 6.
#[derive(InputObject, Clone, Debug)]
pub struct SubmitJobInput {
    /// A DNS-1123 label naming the job (not unique).
    pub name: Option<String>,
    /// Defaults to the server's default namespace.
    pub namespace: Option<String>,
    /// The workload template; `container` (the default) runs `command` + `args`.
    pub template: Option<String>,
    /// The container image (used by the Kubernetes executor; the local executor ignores it).
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<Vec<EnvVarInput>>,
    /// How many runs at once.
    pub parallelism: Option<i32>,
    /// How many successful runs complete the job; each run gets `JOB_COMPLETION_INDEX`.
    pub completions: Option<i32>,
    /// How many failed runs are retried before the job fails.
    pub backoff_limit: Option<i32>,
    /// Seconds from start after which the job fails with `DeadlineExceeded`.
    pub active_deadline_seconds: Option<i32>,
    pub parameters: Option<Json<serde_json::Value>>,
    /// Retrying with the same key and the same input returns the same job.
    pub idempotency_key: Option<String>,
    /// CPU and memory for each run's container (Kubernetes executor).
    pub resources: Option<ResourcesInput>,
    /// The Kubernetes service account the job's pods run as; one of those the server allows.
    pub service_account_name: Option<String>,
    /// Seconds after the job finishes before Kubernetes deletes its Job; jobgate keeps the
    /// history, the result and the log tail it captured as each pod ended (with 0 the pods may
    /// be gone before their logs can be read). The server's default when omitted.
    pub ttl_seconds_after_finished: Option<i32>,
    /// Jobs that must succeed first (at most 100). The job stays PENDING with reason
    /// `WaitingForDependencies` until they all have, and fails with `DependencyFailed` if one
    /// of them fails or is cancelled.
    pub depends_on: Option<Vec<ID>>,
    /// The Kueue LocalQueue the job waits in for admission (servers with Kueue integration;
    /// the server's default queue when omitted). Refused for templates whose kind Kueue
    /// cannot queue. The job stays PENDING, its `queue` saying why, until Kueue admits it.
    pub queue_name: Option<String>,
    /// Which failed runs fail the job at once, are retried without counting, count, or fail
    /// their index; the back-off between runs; limits per index. The `container` template
    /// and templates of batch/v1 Jobs that list it take one; other templates refuse it.
    pub retry_policy: Option<RetryPolicyInput>,
    /// Where the job goes in its queue: a tenant's jobs of higher priority start first
    /// (0 when omitted). The server may cap it per tenant.
    pub priority: Option<i32>,
}

/// Kubernetes quantities, e.g. cpu `500m` or `2`, memory `256Mi` or `1G`.
#[derive(InputObject, Clone, Debug, Default)]
pub struct ResourceListInput {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

/// What each run requests (for scheduling) and may use at most.
#[derive(InputObject, Clone, Debug, Default)]
pub struct ResourcesInput {
    pub requests: Option<ResourceListInput>,
    pub limits: Option<ResourceListInput>,
}

impl From<ResourceListInput> for model::ResourceList {
    fn from(r: ResourceListInput) -> Self {
        Self {
            cpu: r.cpu,
            memory: r.memory,
        }
    }
}

impl From<SubmitJobInput> for model::SubmitRequest {
    fn from(i: SubmitJobInput) -> Self {
        Self {
            name: i.name,
            namespace: i.namespace,
            template: i.template,
            image: i.image,
            command: i.command,
            args: i.args,
            env: i.env.map(|env| {
                env.into_iter()
                    .map(|v| model::EnvVar {
                        name: v.name,
                        value: v.value,
                    })
                    .collect()
            }),
            parallelism: i.parallelism,
            completions: i.completions,
            backoff_limit: i.backoff_limit,
            active_deadline_seconds: i.active_deadline_seconds,
            parameters: i.parameters.map(|j| j.0),
            depends_on: i.depends_on.map(|ids| ids.into_iter().map(|id| id.0).collect()),
            idempotency_key: i.idempotency_key,
            resources: i.resources.map(|r| model::ResourceRequirements {
                requests: r.requests.map(Into::into).unwrap_or_default(),
                limits: r.limits.map(Into::into).unwrap_or_default(),
            }),
            service_account_name: i.service_account_name,
            ttl_seconds_after_finished: i.ttl_seconds_after_finished,
            queue_name: i.queue_name,
            retry_policy: i.retry_policy.map(Into::into),
            priority: i.priority,
            // Set by the resolver from the request's `traceparent`, not by the input.
            trace_parent: None,
        }
    }
}

#[derive(InputObject, Clone, Debug, Default)]
#[graphql(name = "JobFilter")]
pub struct JobFilterInput {
    /// Only jobs in one of these phases.
    pub phases: Option<Vec<JobPhaseView>>,
    pub namespace: Option<String>,
    /// Only jobs whose name contains this text (case-sensitive).
    pub name_contains: Option<String>,
}

impl From<JobFilterInput> for model::JobFilter {
    fn from(f: JobFilterInput) -> Self {
        Self {
            phases: f.phases.map(|p| p.into_iter().map(Into::into).collect()),
            namespace: f.namespace,
            name_contains: f.name_contains,
        }
    }
}
