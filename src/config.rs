//! Configuration: one [`Config`] from flags and `JOBGATE_*` environment variables.
//!
//! This is the only place that reads the environment. Values are typed and validated once,
//! here; the rest of jobgate receives plain settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::executor::kube::KubeConfig;
use crate::executor::kube::manifest::ManifestDefaults;
use crate::executor::local::LocalConfig;
use crate::graphql::http::HttpOptions;
use crate::graphql::schema::QueryLimits;
use crate::graphql::ws::WsConfig;
use crate::jobs::model::{TemplateInputs, ValidationLimits};
use crate::jobs::service::ServiceConfig;
use crate::jobs::template::{self, Runtime};
use crate::store::Durability;
use crate::templates::{TemplateError, TemplateSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// Run jobs as processes on this machine.
    Local,
    /// Run jobs as batch/v1 Jobs in a Kubernetes cluster.
    Kubernetes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// jobgate: submit long batch jobs over GraphQL, get pushed every status change.
#[derive(Clone, Debug, Parser)]
#[command(version, about, long_about = None)]
pub struct Config {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address to serve HTTP and WebSocket on.
    #[arg(long, env = "JOBGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the SQLite database, job logs and job working directories.
    #[arg(long, env = "JOBGATE_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,

    /// Where jobs run.
    #[arg(long, env = "JOBGATE_EXECUTOR", value_enum, default_value_t = ExecutorKind::Local)]
    pub executor: ExecutorKind,

    /// How hard each commit waits for the disk: `full` survives power loss, `normal`
    /// survives a crash of jobgate (kill -9 included) and commits faster.
    #[arg(long, env = "JOBGATE_DURABILITY", value_enum, default_value_t = Durability::Full)]
    pub durability: Durability,

    /// Namespace of jobs submitted without one.
    #[arg(
        long,
        visible_alias = "namespace",
        env = "JOBGATE_NAMESPACE",
        default_value = "default"
    )]
    pub default_namespace: String,

    /// Namespaces jobs may use, comma-separated (the default namespace is always allowed).
    /// Empty allows any; the Kubernetes executor then watches the whole cluster, which needs
    /// cluster-wide RBAC, instead of one watcher per kind in each allowed namespace.
    #[arg(long, env = "JOBGATE_ALLOWED_NAMESPACES", value_delimiter = ',')]
    pub allowed_namespaces: Vec<String>,

    /// Kubernetes executor: the kubeconfig file to use; otherwise $KUBECONFIG,
    /// ~/.kube/config or the in-cluster service account.
    #[arg(long, env = "JOBGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubernetes executor: the kubeconfig context to use; its current one otherwise.
    #[arg(long, env = "JOBGATE_KUBE_CONTEXT")]
    pub kube_context: Option<String>,

    /// Kubernetes executor: serviceAccountName values jobs may ask for, comma-separated.
    #[arg(long, env = "JOBGATE_SERVICE_ACCOUNTS", value_delimiter = ',')]
    pub service_accounts: Vec<String>,

    /// Kubernetes executor: seconds after a job finishes before Kubernetes deletes its Job
    /// (jobgate keeps its history, result and log tail), for jobs that set none.
    #[arg(long, env = "JOBGATE_TTL_SECONDS_AFTER_FINISHED", default_value_t = 3600, value_parser = clap::value_parser!(i32).range(0..))]
    pub ttl_seconds_after_finished: i32,

    /// A directory of workload template files (`*.yaml`) to load besides the built-in ones;
    /// a template with a built-in's name replaces it. A bad file stops jobgate at start.
    #[arg(long, env = "JOBGATE_TEMPLATE_DIR")]
    pub template_dir: Option<PathBuf>,

    /// Kubernetes executor: lines of a finished job's output kept in jobgate.
    #[arg(long, env = "JOBGATE_CAPTURED_LOG_LINES", default_value_t = 200)]
    pub captured_log_lines: usize,

    /// Largest `parallelism` a job may ask for.
    #[arg(long, env = "JOBGATE_MAX_PARALLELISM", default_value_t = 64, value_parser = clap::value_parser!(i32).range(1..))]
    pub max_parallelism: i32,

    /// Largest `completions` a job may ask for.
    #[arg(long, env = "JOBGATE_MAX_COMPLETIONS", default_value_t = 10_000, value_parser = clap::value_parser!(i32).range(1..))]
    pub max_completions: i32,

    /// Largest HTTP request body, in bytes; larger ones get 413.
    #[arg(long, env = "JOBGATE_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// Deepest selection a query may make.
    #[arg(long, env = "JOBGATE_MAX_QUERY_DEPTH", default_value_t = 16)]
    pub max_query_depth: usize,

    /// Highest complexity (fields selected, weighted) a query may have.
    #[arg(long, env = "JOBGATE_MAX_QUERY_COMPLEXITY", default_value_t = 2_000)]
    pub max_query_complexity: usize,

    /// Most aliases a query may use.
    #[arg(long, env = "JOBGATE_MAX_ALIASES", default_value_t = 30)]
    pub max_aliases: usize,

    /// Accept batched HTTP requests (a JSON array of requests).
    #[arg(long, env = "JOBGATE_ALLOW_BATCH")]
    pub allow_batch: bool,

    /// Most requests in one batch, when batching is allowed.
    #[arg(long, env = "JOBGATE_MAX_BATCH", default_value_t = 10)]
    pub max_batch: usize,

    /// Turn off schema introspection (and so GraphiQL's documentation explorer).
    #[arg(long, env = "JOBGATE_DISABLE_INTROSPECTION")]
    pub disable_introspection: bool,

    /// A static API token; when set, every request needs `Authorization: Bearer <token>`
    /// (WebSocket: `{"authorization": "Bearer <token>"}` in connection_init).
    #[arg(long, env = "JOBGATE_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// How long a WebSocket client has to send connection_init, in milliseconds.
    #[arg(long, env = "JOBGATE_WS_INIT_TIMEOUT_MS", default_value_t = 3_000)]
    pub ws_init_timeout_ms: u64,

    /// Interval of WebSocket keepalive pings, in milliseconds; a peer that misses one is
    /// dropped. 0 turns keepalive off.
    #[arg(long, env = "JOBGATE_WS_KEEPALIVE_MS", default_value_t = 12_000)]
    pub ws_keepalive_ms: u64,

    /// Largest WebSocket message, in bytes.
    #[arg(long, env = "JOBGATE_WS_MAX_MESSAGE_BYTES", default_value_t = 64 << 10)]
    pub ws_max_message_bytes: usize,

    /// Delay before the first retry of a failed local run, in milliseconds; doubled per
    /// failure.
    #[arg(long, env = "JOBGATE_LOCAL_RETRY_DELAY_MS", default_value_t = 1_000)]
    pub local_retry_delay_ms: u64,

    /// Longest delay between retries of a local run, in milliseconds.
    #[arg(long, env = "JOBGATE_LOCAL_RETRY_DELAY_CAP_MS", default_value_t = 60_000)]
    pub local_retry_delay_cap_ms: u64,

    /// How long a local run has to exit after SIGTERM before SIGKILL, in milliseconds.
    #[arg(long, env = "JOBGATE_LOCAL_KILL_GRACE_MS", default_value_t = 5_000)]
    pub local_kill_grace_ms: u64,

    /// Output kept per local job, in bytes (twice this, with the rotated file).
    #[arg(long, env = "JOBGATE_LOCAL_MAX_LOG_BYTES", default_value_t = 8 << 20)]
    pub local_max_log_bytes: u64,

    /// Events held for live subscribers; one further behind is caught up from the store.
    #[arg(long, env = "JOBGATE_BROADCAST_CAPACITY", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub broadcast_capacity: u64,

    /// Log format.
    #[arg(long, env = "JOBGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, e.g. `info` or `jobgate=debug` (tracing-subscriber EnvFilter syntax).
    #[arg(long, env = "JOBGATE_LOG", default_value = "info")]
    pub log: String,

    /// How long shutdown may take before jobgate exits anyway, in seconds.
    #[arg(long, env = "JOBGATE_SHUTDOWN_TIMEOUT_SECS", default_value_t = 30)]
    pub shutdown_timeout_secs: u64,

    /// PATH given to local jobs (jobgate's own environment is not passed on).
    #[arg(
        long,
        env = "PATH",
        default_value = "/usr/local/bin:/usr/bin:/bin",
        hide = true
    )]
    pub job_path: String,
}

#[derive(Clone, Debug, Subcommand)]
pub enum Command {
    /// Print the GraphQL schema (SDL) and exit.
    Schema,
}

impl Config {
    /// The allowed namespaces, the default one included; empty means any.
    pub fn allowed_namespaces(&self) -> Vec<String> {
        let mut namespaces = self.allowed_namespaces.clone();
        namespaces.retain(|ns| !ns.trim().is_empty());
        if !namespaces.is_empty() && !namespaces.contains(&self.default_namespace) {
            namespaces.insert(0, self.default_namespace.clone());
        }
        namespaces
    }

    /// The workload templates: the built-ins, then those of `--template-dir`.
    pub fn workload_templates(&self) -> Result<TemplateSet, TemplateError> {
        TemplateSet::load(self.template_dir.as_deref())
    }

    pub fn validation_limits(&self, workloads: &TemplateSet) -> ValidationLimits {
        let mut templates = vec![crate::templates::CONTAINER.to_owned()];
        templates.extend(workloads.names().map(str::to_owned));
        let template_inputs = workloads
            .iter()
            .map(|t| {
                let inputs = TemplateInputs {
                    fields: t.fields.iter().map(|(f, _)| f.clone()).collect(),
                    required: t.required.clone(),
                };
                (t.name.clone(), inputs)
            })
            .collect();
        ValidationLimits {
            templates,
            template_inputs,
            max_parallelism: self.max_parallelism,
            max_completions: self.max_completions,
            default_namespace: self.default_namespace.clone(),
            allowed_namespaces: self.allowed_namespaces(),
            service_accounts: self.service_accounts.clone(),
            require_image: self.executor == ExecutorKind::Kubernetes,
            ..ValidationLimits::default()
        }
    }

    pub fn kube(&self, workloads: Arc<TemplateSet>) -> KubeConfig {
        KubeConfig {
            templates: workloads,
            kubeconfig: self.kubeconfig.clone(),
            context: self.kube_context.clone(),
            watch_namespaces: self.allowed_namespaces(),
            manifest: ManifestDefaults {
                ttl_seconds_after_finished: Some(self.ttl_seconds_after_finished),
            },
            captured_log_lines: self.captured_log_lines,
            ..KubeConfig::default()
        }
    }

    pub fn service(&self, workloads: Arc<TemplateSet>) -> ServiceConfig {
        let limits = self.validation_limits(&workloads);
        let runtime = match self.executor {
            ExecutorKind::Local => Runtime::Local,
            ExecutorKind::Kubernetes => Runtime::Kubernetes {
                ttl_seconds_after_finished: self.ttl_seconds_after_finished,
            },
        };
        ServiceConfig {
            templates: template::builtin(&limits, runtime, &workloads),
            workload_templates: workloads,
            limits,
            broadcast_capacity: self.broadcast_capacity as usize,
            ..ServiceConfig::default()
        }
    }

    pub fn query_limits(&self) -> QueryLimits {
        QueryLimits {
            max_depth: self.max_query_depth,
            max_complexity: self.max_query_complexity,
            max_aliases: self.max_aliases,
            introspection: !self.disable_introspection,
        }
    }

    pub fn http(&self) -> HttpOptions {
        HttpOptions {
            allow_batch: self.allow_batch,
            max_batch: self.max_batch,
        }
    }

    pub fn ws(&self) -> WsConfig {
        WsConfig {
            init_timeout: Duration::from_millis(self.ws_init_timeout_ms),
            keepalive_interval: Duration::from_millis(self.ws_keepalive_ms),
            max_message_bytes: self.ws_max_message_bytes,
            ..WsConfig::default()
        }
    }

    pub fn local(&self) -> LocalConfig {
        LocalConfig {
            data_dir: self.data_dir.clone(),
            retry_delay: Duration::from_millis(self.local_retry_delay_ms),
            retry_delay_cap: Duration::from_millis(self.local_retry_delay_cap_ms),
            kill_grace: Duration::from_millis(self.local_kill_grace_ms),
            max_log_bytes: self.local_max_log_bytes,
            path: self.job_path.clone(),
        }
    }
}
