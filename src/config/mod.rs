//! Configuration: one [`Config`] from flags, `JOBGATE_*` environment variables and an
//! optional TOML file.
//!
//! Precedence, highest first: command-line flags, environment variables, the file named by
//! `--config` (or `JOBGATE_CONFIG`), built-in defaults. The file's keys are the flags' long
//! names (`max-query-depth` or `max_query_depth`); lists are TOML arrays. This is the only
//! place that reads the environment or the file (the client subcommands' flags and variables,
//! `JOBGATE_SERVER` and `JOBGATE_TOKEN`, are declared in `cli` and read here with the rest).
//! Values are typed and validated once, here, before anything starts; the rest of jobgate
//! receives plain settings.
//!
//! - this file: the flags ([`Config`]), the subcommands and [`ConfigError`];
//! - `load`: flags, variables and the config file merged into one [`Config`];
//! - `validation`: what single values cannot check (combinations, authentication, the
//!   local executor's isolation);
//! - `settings`: each part of jobgate's settings, built from the flags;
//! - `database`: the PostgreSQL URL, from wherever it was given;
//! - `retention`: the `--retention-*` values.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::cli::ClientCommand;
use crate::executor::kube::priority_classes::PriorityClassRule;
use crate::store::Durability;

pub use self::otlp_flags::OtlpFlags;
pub use self::queue_flags::TenantValue;
use self::queue_flags::{parse_tenant_priority, parse_tenant_slots, parse_tenant_weight};
pub use self::retention_flags::NamespaceRetention;
use self::retention_flags::{parse_namespace_retention, parse_retention_days};

mod cross_checks;
mod database;
mod load;
mod otlp_flags;
mod queue_flags;
mod retention_flags;
mod settings;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// Run jobs as processes on this machine.
    Local,
    /// Run jobs as batch/v1 Jobs in a Kubernetes cluster.
    Kubernetes,
}

/// The runtime WebSocket sessions run on (see `server`'s `delivery_runtime` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Worker threads; 0: no runtime of their own.
    pub threads: usize,
    /// Nice steps below jobgate's other threads (0-19).
    pub nice: i32,
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
    pub command: Option<JobgateSubcommand>,

    /// A TOML file of settings, keyed by these flags' long names; flags and environment
    /// variables override it. See docs/CONFIG.md.
    #[arg(long, env = "JOBGATE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address to serve HTTP and WebSocket on.
    #[arg(long, env = "JOBGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the SQLite database and job logs; jobgate makes it mode 0700 (local
    /// jobs never get a path into it).
    #[arg(long, env = "JOBGATE_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,

    /// A PostgreSQL database to keep jobs in instead of SQLite (postgres://USER@HOST:5432/DB),
    /// which several jobgate replicas may share (docs/DEPLOY.md). The data directory then
    /// holds only the local executor's logs. A URL with a password must come from the
    /// variable or --database-url-file: a flag's value is readable by every local user in the
    /// process list, so a password there is refused.
    // After `Config::load`, the URL from whichever source gave it (the file's included).
    #[arg(long, env = "JOBGATE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// A file holding the database URL of --database-url (e.g. a mounted Kubernetes Secret),
    /// the password included; whitespace around it (a trailing newline) is ignored.
    #[arg(long, env = "JOBGATE_DATABASE_URL_FILE")]
    pub database_url_file: Option<PathBuf>,

    /// This replica's name in the Leases through which replicas sharing a PostgreSQL
    /// database divide the work on jobs (Kubernetes executor): unique per process, e.g. the
    /// pod's name. Default: the host name and a random suffix.
    #[arg(long, env = "JOBGATE_REPLICA_ID")]
    pub replica_id: Option<String>,

    /// The namespace of those Leases. Default: the kubeconfig context's namespace (in a pod,
    /// its own).
    #[arg(long, env = "JOBGATE_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Seconds a replica that stopped renewing its Lease (killed, paused, cut off) is still
    /// taken as alive: its shards are taken over by the others within this time, and it
    /// stops acting on them itself before it ends.
    #[arg(long, env = "JOBGATE_LEASE_DURATION_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=300))]
    pub lease_duration_secs: u64,

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

    /// Kubernetes executor: seconds a job's workload create may keep failing with the same
    /// server error (a 5xx: an admission webhook that cannot be called, a failing API server)
    /// before the job fails with the API server's last message. Retries back off from 0.2 s
    /// to 30 s; an unreachable, throttling or unauthenticating API server is waited for
    /// without limit (it concerns every job, not this one).
    #[arg(long, env = "JOBGATE_LAUNCH_RETRY_LIMIT_SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub launch_retry_limit_secs: u64,

    /// Kubernetes executor: queue jobs in Kueue. Jobs may name a LocalQueue (`queueName`);
    /// jobgate creates them suspended with Kueue's queue-name label and watches Kueue's
    /// Workloads (one watcher per watched namespace) to show why each waits and when it is
    /// admitted. Needs Kueue installed and RBAC to get/list/watch `workloads.kueue.x-k8s.io`.
    /// Implied by --default-queue.
    #[arg(long, env = "JOBGATE_KUEUE")]
    pub kueue: bool,

    /// Kubernetes executor: the Kueue LocalQueue of jobs that name none (for templates whose
    /// kind Kueue can queue). Turns Kueue integration on.
    #[arg(long, env = "JOBGATE_DEFAULT_QUEUE")]
    pub default_queue: Option<String>,

    /// Kubernetes executor with Kueue: milliseconds between reads of waiting jobs' places in
    /// Kueue's queues (its visibility API, one request per LocalQueue holding waiting jobs,
    /// only while some wait), shown as `Job.queue.position` and `localQueuePosition`.
    #[arg(long, env = "JOBGATE_KUEUE_POSITIONS_INTERVAL_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..))]
    pub kueue_positions_interval_ms: u64,

    /// Kubernetes executor with Kueue: `PRIORITY=NAME` maps jobs of that priority or higher
    /// (up to the next rule) to Kueue's WorkloadPriorityClass NAME (the
    /// `kueue.x-k8s.io/priority-class` label on a queued job's object). Repeat the flag (or
    /// separate with commas) for several classes.
    #[arg(
        long = "kueue-priority-class",
        env = "JOBGATE_KUEUE_PRIORITY_CLASSES",
        value_delimiter = ','
    )]
    pub kueue_priority_classes: Vec<PriorityClassRule>,

    /// Kubernetes executor: `PRIORITY=NAME` maps jobs of that priority or higher (up to the
    /// next rule) to the PriorityClass NAME (their pods' `priorityClassName`; container
    /// template only). Repeatable, or comma-separated.
    #[arg(
        long = "pod-priority-class",
        env = "JOBGATE_POD_PRIORITY_CLASSES",
        value_delimiter = ','
    )]
    pub pod_priority_classes: Vec<PriorityClassRule>,

    /// A directory of workload template files (`*.yaml`) to load besides the built-in ones;
    /// a template with a built-in's name replaces it. A bad file stops jobgate at start.
    #[arg(long, env = "JOBGATE_TEMPLATE_DIR")]
    pub template_dir: Option<PathBuf>,

    /// Kubernetes executor: lines of a finished job's output kept with its status (its
    /// whole output is in the log archive).
    #[arg(long, env = "JOBGATE_CAPTURED_LOG_LINES", default_value_t = 200)]
    pub captured_log_lines: usize,

    /// Output archived per job, in bytes (uncompressed): past it the job's archive ends with
    /// a line saying it was truncated, and `Job.logArchive.truncated` is true.
    #[arg(long, env = "JOBGATE_LOG_ARCHIVE_MAX_BYTES", default_value_t = 64 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub log_archive_max_bytes: u64,

    /// Output waiting in memory for the archive, over all jobs, in bytes: while the store
    /// refuses writes, lines wait here; a job whose lines no longer fit has its archive
    /// closed as truncated (lines lost are counted in jobgate_log_archive_lost_lines_total).
    #[arg(long, env = "JOBGATE_LOG_ARCHIVE_BUFFER_BYTES", default_value_t = 32 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub log_archive_buffer_bytes: u64,

    /// Kubernetes executor: most pod logs followed at once to archive them (one stream per
    /// running pod of the jobs this replica acts for; others wait for a slot).
    #[arg(long, env = "JOBGATE_LOG_FOLLOW_CONCURRENCY", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub log_follow_concurrency: u64,

    /// Largest `parallelism` a job may ask for.
    #[arg(long, env = "JOBGATE_MAX_PARALLELISM", default_value_t = 64, value_parser = clap::value_parser!(i32).range(1..))]
    pub max_parallelism: i32,

    /// Largest `completions` a job may ask for.
    #[arg(long, env = "JOBGATE_MAX_COMPLETIONS", default_value_t = 10_000, value_parser = clap::value_parser!(i32).range(1..))]
    pub max_completions: i32,

    /// Largest HTTP request body, in bytes; larger ones get 413.
    #[arg(long, env = "JOBGATE_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// Deepest selection a query may make (fragments expanded); 0 for no limit.
    #[arg(long, env = "JOBGATE_MAX_QUERY_DEPTH", default_value_t = 16)]
    pub max_query_depth: usize,

    /// Highest complexity (fields selected, weighted, fragments expanded) a query may have;
    /// 0 for no limit.
    #[arg(long, env = "JOBGATE_MAX_QUERY_COMPLEXITY", default_value_t = 2_000)]
    pub max_query_complexity: usize,

    /// Most aliases a query may use.
    #[arg(long, env = "JOBGATE_MAX_ALIASES", default_value_t = 30)]
    pub max_aliases: usize,

    /// Most selections (fields, fragment spreads, inline fragments) a query may make once
    /// its fragment spreads are expanded, checked before anything else, so a small query
    /// that expands exponentially never runs; 0 for no limit.
    #[arg(long, env = "JOBGATE_MAX_QUERY_SELECTIONS", default_value_t = 2_000)]
    pub max_query_selections: usize,

    /// Longest a query or mutation may execute, over HTTP or as a single-result WebSocket
    /// operation, in milliseconds; it then answers DEADLINE_EXCEEDED. 0 for no limit.
    #[arg(long, env = "JOBGATE_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,

    /// Accept batched HTTP requests (a JSON array of requests).
    #[arg(long, env = "JOBGATE_ALLOW_BATCH")]
    pub allow_batch: bool,

    /// Most requests in one batch, when batching is allowed.
    #[arg(long, env = "JOBGATE_MAX_BATCH", default_value_t = 10)]
    pub max_batch: usize,

    /// Turn off schema introspection (and so GraphiQL's documentation explorer).
    #[arg(long, env = "JOBGATE_DISABLE_INTROSPECTION")]
    pub disable_introspection: bool,

    /// A single static API token, for an admin (every namespace); callers send
    /// `Authorization: Bearer <token>` (WebSocket: `{"authorization": "Bearer <token>"}` in
    /// connection_init). Prefer --api-tokens-file, which stores only digests.
    #[arg(long, env = "JOBGATE_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// A TOML file of API tokens, stored as SHA-256 digests, each with its name, namespaces
    /// and admin flag (see docs/CONFIG.md; `jobgate hash-token` prints a digest).
    #[arg(long, env = "JOBGATE_API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,

    /// A file holding the HS256 secret that signs accepted JWTs (at least 32 bytes).
    #[arg(long, env = "JOBGATE_JWT_HS256_SECRET_FILE")]
    pub jwt_hs256_secret_file: Option<PathBuf>,

    /// A JWKS file (JSON) of the RS256/ES256 public keys that sign accepted JWTs.
    #[arg(long, env = "JOBGATE_JWT_JWKS_FILE")]
    pub jwt_jwks_file: Option<PathBuf>,

    /// The `iss` accepted JWTs must carry.
    #[arg(long, env = "JOBGATE_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// The `aud` accepted JWTs must carry.
    #[arg(long, env = "JOBGATE_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// The JWT claim listing the namespaces its bearer may use.
    #[arg(long, env = "JOBGATE_JWT_NAMESPACES_CLAIM", default_value = "namespaces")]
    pub jwt_namespaces_claim: String,

    /// The JWT claim listing its bearer's roles; `admin` may use every namespace.
    #[arg(long, env = "JOBGATE_JWT_ROLES_CLAIM", default_value = "roles")]
    pub jwt_roles_claim: String,

    /// Let callers without credentials in (true/false). Unset: only when listening on a
    /// loopback address with no credentials configured; jobgate refuses to start on any
    /// other address with no credentials unless this is set.
    #[arg(long, env = "JOBGATE_ANONYMOUS", value_parser = clap::builder::BoolishValueParser::new(), num_args = 1)]
    pub anonymous: Option<bool>,

    /// Namespaces anonymous callers may use, comma-separated; empty for every one.
    #[arg(long, env = "JOBGATE_ANONYMOUS_NAMESPACES", value_delimiter = ',')]
    pub anonymous_namespaces: Vec<String>,

    /// Origins (`https://host[:port]`) whose pages may call jobgate from a browser (CORS)
    /// and open WebSockets, comma-separated; `*` for any. jobgate's own pages always may.
    #[arg(long, env = "JOBGATE_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,

    /// Host names requests may address (the `Host` header, port ignored) besides IP
    /// addresses, `localhost` and `*.localhost`, comma-separated: `jobgate.example.com`,
    /// `.example.com` for it and every name under it, or `*` for any (when a proxy in front
    /// checks Host itself). Other names get 421, which defeats DNS rebinding.
    #[arg(long, env = "JOBGATE_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Milliseconds a connection has to send a complete request head: from its opening for
    /// its first request, from the first byte of each later one; then it is closed. 0 for no
    /// limit.
    #[arg(long, env = "JOBGATE_HTTP_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub http_header_timeout_ms: u64,

    /// Milliseconds a kept-alive HTTP connection may wait for its next request before it is
    /// closed (WebSockets are not affected). 0 for no limit.
    #[arg(long, env = "JOBGATE_HTTP_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    pub http_idle_timeout_ms: u64,

    /// Milliseconds a request has to send its whole body once its head has arrived; then it
    /// is answered 408 and its connection closed. 0 for no limit.
    #[arg(long, env = "JOBGATE_HTTP_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub http_body_timeout_ms: u64,

    /// Most TCP connections (HTTP and WebSocket) open at once; a further one is answered 503
    /// and closed at once. 0: the open-file limit (RLIMIT_NOFILE) less 256 for the store,
    /// logs and jobs.
    #[arg(long, env = "JOBGATE_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,

    /// Mutations (submitJob, cancelJob, …; each job of a submitJobs call counts one) one
    /// identity may make per minute; 0 for no limit.
    #[arg(long, env = "JOBGATE_MUTATIONS_PER_MINUTE", default_value_t = 0)]
    pub mutations_per_minute: u32,

    /// WebSocket connections one identity may open per minute; 0 for no limit.
    #[arg(long, env = "JOBGATE_CONNECTIONS_PER_MINUTE", default_value_t = 0)]
    pub connections_per_minute: u32,

    /// Subscriptions one identity may start per minute; 0 for no limit.
    #[arg(long, env = "JOBGATE_SUBSCRIPTIONS_PER_MINUTE", default_value_t = 0)]
    pub subscriptions_per_minute: u32,

    /// The most candidate jobs one page of `jobs` looks at when its filter is checked job by
    /// job (a name, say): a page stops there, short or empty, with `hasNextPage` and an
    /// `endCursor` to go on from, rather than reading every job to find few matches.
    #[arg(long, env = "JOBGATE_PAGE_SCAN_BUDGET", default_value_t = crate::store::SCAN_BUDGET as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub page_scan_budget: u64,

    /// Most PENDING or RUNNING jobs one namespace may hold; 0 for no limit.
    #[arg(long, env = "JOBGATE_MAX_ACTIVE_JOBS_PER_NAMESPACE", default_value_t = 0)]
    pub max_active_jobs_per_namespace: u64,

    /// Schedules: the most schedules one namespace may hold (0: no limit). Default 100.
    #[arg(long, env = "JOBGATE_MAX_SCHEDULES_PER_NAMESPACE", default_value_t = 100)]
    pub max_schedules_per_namespace: u64,

    /// Schedules: the shortest time a cron rule may leave between two ticks, in seconds; a
    /// rule firing more often is refused. Default 60.
    #[arg(long, env = "JOBGATE_SCHEDULE_MIN_INTERVAL_SECS", default_value_t = 60, value_parser = clap::value_parser!(i64).range(1..))]
    pub schedule_min_interval_secs: i64,

    /// Turn off "did you mean …?" suggestions in validation errors (they reveal the schema).
    #[arg(long, env = "JOBGATE_DISABLE_SUGGESTIONS")]
    pub disable_suggestions: bool,

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

    /// Largest WebSocket frame, in bytes (at most --ws-max-message-bytes).
    #[arg(long, env = "JOBGATE_WS_MAX_FRAME_BYTES", default_value_t = 16 << 10)]
    pub ws_max_frame_bytes: usize,

    /// Initial read buffer of each WebSocket, in bytes: most of what an idle socket costs.
    #[arg(long, env = "JOBGATE_WS_READ_BUFFER_BYTES", default_value_t = 4 << 10, value_parser = clap::value_parser!(u64).range(256..))]
    pub ws_read_buffer_bytes: u64,

    /// Most subscriptions one WebSocket may run at once; 0 for no cap.
    #[arg(long, env = "JOBGATE_WS_MAX_SUBSCRIPTIONS", default_value_t = 100)]
    pub ws_max_subscriptions: usize,

    /// Seconds a WebSocket may stay open with no operation running and nothing received
    /// before it is closed (1000); 0 for never.
    #[arg(long, env = "JOBGATE_WS_IDLE_TIMEOUT_SECS", default_value_t = 0)]
    pub ws_idle_timeout_secs: u64,

    /// Milliseconds a WebSocket's outgoing queue may stay full (the client reads slower than
    /// its subscriptions produce, or not at all) before it is closed with 1013 and the cursor
    /// its `jobEvents` subscriptions can resume after; 0 for never.
    #[arg(long, env = "JOBGATE_WS_SLOW_CONSUMER_MS", default_value_t = 10_000)]
    pub ws_slow_consumer_ms: u64,

    /// Threads of the runtime the WebSocket sessions run on (their subscriptions' fan-out
    /// included), apart from the one serving HTTP requests, commits and jobs. Default: one per
    /// CPU. 0 runs the sessions on the main runtime.
    #[arg(long, env = "JOBGATE_DELIVERY_THREADS")]
    pub delivery_threads: Option<usize>,

    /// How many nice steps (0-19) below jobgate's other threads the delivery threads run: under
    /// a saturated fan-out, requests and commits get the CPU first and subscribers what is
    /// left. 0: same priority.
    #[arg(long, env = "JOBGATE_DELIVERY_NICE", default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub delivery_nice: i32,

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

    /// Local executor: the user every job runs as, `USER`, `UID`, `USER:GROUP` or `UID:GID`
    /// (uid, gid, no supplementary groups). Only root can switch users: when jobgate runs as
    /// root the default is `nobody`; root itself is refused.
    #[arg(long, env = "JOBGATE_RUN_AS_USER")]
    pub run_as_user: Option<String>,

    /// Local executor: where each job gets its own working directory (mode 0700, its HOME and
    /// TMPDIR), outside the data directory; removed when the job ends. Default:
    /// `<temp dir>/jobgate-<uid>`.
    #[arg(long, env = "JOBGATE_LOCAL_WORK_DIR")]
    pub local_work_dir: Option<PathBuf>,

    /// Local executor: the PATH jobs see. Default: jobgate's own PATH, keeping only the
    /// directories every user can reach when jobs run as another user.
    #[arg(long, env = "JOBGATE_LOCAL_PATH")]
    pub local_path: Option<String>,

    /// Local executor: serve callers of different namespaces although every job runs as
    /// jobgate's own user (jobgate is not root), so any job can read jobgate's database, logs
    /// and credentials. Only for tenants that may see everything anyway (tests, demos).
    #[arg(long, env = "JOBGATE_LOCAL_TRUSTED_TENANTS")]
    pub local_trusted_tenants: bool,

    /// Local queue: the most jobs running at once on this server (a job holds one slot from
    /// its launch until it ends, whatever its parallelism). Unset: no cap. See docs/QUEUE.md.
    #[arg(long, env = "JOBGATE_MAX_RUNNING", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_running: Option<u32>,

    /// Local queue: the most jobs one namespace runs at once, `NAMESPACE=N`. Repeat the flag
    /// (or separate with commas) for several namespaces.
    #[arg(long = "tenant-max-running", env = "JOBGATE_TENANT_MAX_RUNNING", value_delimiter = ',', value_parser = parse_tenant_slots)]
    pub tenant_max_running: Vec<TenantValue>,

    /// Local queue: the most jobs a namespace not named by --tenant-max-running runs at once.
    /// Unset: no cap of its own.
    #[arg(long, env = "JOBGATE_DEFAULT_TENANT_MAX_RUNNING", value_parser = clap::value_parser!(u32).range(1..))]
    pub default_tenant_max_running: Option<u32>,

    /// Local queue: a namespace's fair-share weight, `NAMESPACE=W` (1 to 1000000; others
    /// weigh 1): a namespace of weight 2 gets twice the running slots of one of weight 1 when
    /// both have jobs waiting.
    #[arg(long = "tenant-weight", env = "JOBGATE_TENANT_WEIGHTS", value_delimiter = ',', value_parser = parse_tenant_weight)]
    pub tenant_weights: Vec<TenantValue>,

    /// The highest `priority` a job may ask for, in namespaces not named by
    /// --tenant-max-priority. Default 1000.
    #[arg(long, env = "JOBGATE_MAX_PRIORITY", allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-1_000_000..=1_000_000))]
    pub max_priority: Option<i32>,

    /// The highest `priority` one namespace's jobs may ask for, `NAMESPACE=P`.
    #[arg(long = "tenant-max-priority", env = "JOBGATE_TENANT_MAX_PRIORITIES", value_delimiter = ',', value_parser = parse_tenant_priority)]
    pub tenant_max_priorities: Vec<TenantValue>,

    /// Events held for live subscribers; one further behind is caught up from the store.
    #[arg(long, env = "JOBGATE_BROADCAST_CAPACITY", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub broadcast_capacity: u64,

    /// Webhooks: allow targets on loopback, private, link-local (cloud metadata), CGNAT and
    /// other non-public addresses. Off by default, so that a tenant cannot make jobgate call
    /// into its own network; for tests and laptops.
    #[arg(long, env = "JOBGATE_WEBHOOK_ALLOW_PRIVATE_TARGETS")]
    pub webhook_allow_private_targets: bool,

    /// Webhooks: how long deliveries of an event are retried, in seconds, before the endpoint
    /// is parked (shown PARKED with its last error; replayWebhook resumes it). Default 24 h.
    #[arg(long, env = "JOBGATE_WEBHOOK_RETRY_WINDOW_SECS", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_retry_window_secs: u64,

    /// Webhooks: the first retry's delay in milliseconds; each further one doubles it (with
    /// jitter) up to --webhook-backoff-max-ms.
    #[arg(long, env = "JOBGATE_WEBHOOK_BACKOFF_MIN_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_backoff_min_ms: u64,

    /// Webhooks: the longest delay between retries, in milliseconds.
    #[arg(long, env = "JOBGATE_WEBHOOK_BACKOFF_MAX_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_backoff_max_ms: u64,

    /// Webhooks: how long one delivery (connection and response) may take, in milliseconds.
    #[arg(long, env = "JOBGATE_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_timeout_ms: u64,

    /// Retention: finished jobs (SUCCEEDED, FAILED, CANCELLED) are deleted with their events
    /// this many days after they finished (decimals allowed, e.g. 0.5). Unset: kept forever.
    /// A `jobEvents(after:)` cursor older than what was deleted then answers CURSOR_EXPIRED.
    #[arg(long, env = "JOBGATE_RETENTION_DAYS", value_parser = parse_retention_days)]
    pub retention_days: Option<f64>,

    /// Retention of one namespace, overriding --retention-days: `NAMESPACE=DAYS`, or
    /// `NAMESPACE=forever` to keep its jobs. Repeat the flag (or separate with commas) for
    /// several namespaces.
    #[arg(long = "retention-namespace", env = "JOBGATE_RETENTION_NAMESPACES", value_delimiter = ',', value_parser = parse_namespace_retention)]
    pub retention_namespaces: Vec<NamespaceRetention>,

    /// Retention: how often a sweep for expired jobs starts, in milliseconds.
    #[arg(long, env = "JOBGATE_RETENTION_INTERVAL_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub retention_interval_ms: u64,

    /// Retention: the most finished jobs one deletion batch (one short write transaction)
    /// looks at; writers wait behind at most one batch.
    #[arg(long, env = "JOBGATE_RETENTION_BATCH", default_value_t = 200, value_parser = clap::value_parser!(i64).range(1..=10_000))]
    pub retention_batch: i64,

    /// Log format.
    #[arg(long, env = "JOBGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, e.g. `info` or `jobgate=debug` (tracing-subscriber EnvFilter syntax).
    #[arg(long, env = "JOBGATE_LOG", default_value = "info")]
    pub log: String,

    /// Traces of jobs over OTLP (see docs/TRACING.md).
    #[command(flatten)]
    pub otlp: OtlpFlags,

    /// How long shutdown may take before jobgate exits anyway, in seconds.
    #[arg(long, env = "JOBGATE_SHUTDOWN_TIMEOUT_SECS", default_value_t = 30)]
    pub shutdown_timeout_secs: u64,

    /// jobgate's own PATH: what local jobs see unless `--local-path` says otherwise (filtered
    /// for jobs of another user); the rest of jobgate's environment is not passed on.
    #[arg(
        long,
        env = "PATH",
        default_value = "/usr/local/bin:/usr/bin:/bin",
        hide = true
    )]
    pub job_path: String,
}

// Parsed once per process and never moved around in bulk: the client's arguments stay inline.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Subcommand)]
pub enum JobgateSubcommand {
    /// Print the GraphQL schema (SDL) and exit.
    Schema,
    /// Read an API token on standard input and print the SHA-256 digest that a tokens file
    /// stores for it.
    HashToken,
    /// The command-line client's subcommands (see docs/CLI.md).
    #[command(flatten)]
    Client(ClientCommand),
}

/// Configuration that cannot work, found before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A bad flag or variable, or --help/--version: clap prints and exits.
    #[error(transparent)]
    Cli(#[from] clap::Error),
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}
