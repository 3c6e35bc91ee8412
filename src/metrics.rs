//! `/metrics` in the OpenMetrics text format (Prometheus).
//!
//! It owns every metric name and its help text. [`Metrics`] holds the live counters, gauges
//! and histograms: cheap atomic handles that their owners (the service, the event bus,
//! executors, transports) update where things happen. A value that lives with its owner and
//! changes without an event (template availability) is read when scraped through a reader
//! the owner registers ([`Metrics::read_template_availability_with`]). It imports nothing of
//! jobgate's but the model's level: everything else pushes to it, it reads no one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TemplateLabels {
    pub template: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub from: &'static str,
    pub to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatcherLabels {
    pub watcher: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    pub shard: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimeoutLabels {
    pub timeout: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 100 µs to about 52 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

/// The live metrics. Cloning a handle shares its value.
pub struct Metrics {
    pub jobs_submitted: Counter,
    pub jobs_accepted: Counter,
    pub jobs_rejected: Family<ReasonLabels, Counter>,
    pub phase_transitions: Family<TransitionLabels, Counter>,
    pub launch_retries: Counter,
    pub watcher_restarts: Family<WatcherLabels, Counter>,
    pub watcher_relists: Family<WatcherLabels, Counter>,
    /// Each watcher's clock: Unix milliseconds of its last event (or its start), for
    /// "seconds since".
    watcher_last_event: Arc<dashmap::DashMap<String, Arc<AtomicU64>>>,
    pub kube_requests: Family<RequestLabels, Counter>,
    pub auth_failures: Family<ReasonLabels, Counter>,
    pub rate_limited: Family<LimitLabels, Counter>,
    pub ws_connections: Gauge,
    /// Sockets closed because their outgoing queue stayed full (`WsConfig::slow_consumer_timeout`).
    pub ws_slow_consumers_closed: Counter,
    /// Live groups of identical subscriptions sharing their renderings (`graphql::ws` fanout).
    pub subscription_groups: Gauge,
    /// Subscriptions that joined a group and follow the live events (`graphql::ws` fanout).
    pub subscription_group_members: Gauge,
    /// Events rendered (resolved and serialised) for a group, each shared by its subscribers.
    pub subscription_renders: Counter,
    pub active_subscriptions: Gauge,
    /// Open TCP connections (HTTP and WebSocket), set by the accept loop.
    pub http_connections: Gauge,
    /// Connections closed at once because `--max-connections` were open.
    pub http_connections_refused: Counter,
    /// Connections closed (or requests answered 408) by a timeout: `header`, `idle`, `body`.
    pub http_timeouts: Family<TimeoutLabels, Counter>,
    /// Requests refused (421) for naming a Host jobgate does not answer to.
    pub misdirected_requests: Counter,
    pub graphql_duration: Histograms<OperationLabels>,
    pub store_latency: Histograms<StoreLabels>,
    /// 1 while the store takes writes, 0 while it cannot; set by the service's writer.
    pub store_writable: Gauge,
    /// Stored rows found that cannot be decoded (left out of every answer and listed to
    /// administrators); set by the service's writer from the store's list.
    pub store_unreadable_rows: Gauge,
    /// Jobs waiting in the local queue, and slots its jobs hold; set by the queue's keeper
    /// at each recomputation.
    pub local_queue_waiting: Gauge,
    pub local_queue_running: Gauge,
    /// Kubernetes watchers whose first list is not done yet (jobs they follow may still
    /// show a state older than the cluster's); set by the Kubernetes executor.
    pub kube_first_lists_pending: Gauge,
    /// Subscribers caught up from the store after lagging the broadcast; counted by the bus.
    pub broadcast_lag_recoveries: Counter,
    /// The cursor of the newest event published to this process's subscribers; set by the bus.
    pub events_published_cursor: Gauge,
    /// Failed reads of a shared store's event log by the follower (replicas on PostgreSQL).
    pub event_log_read_failures: Counter,
    /// Shards this replica acts for (replicas on PostgreSQL with the Kubernetes executor).
    pub shards_owned: Gauge,
    /// 1 for each shard this replica acts for, 0 for the others (once it has any).
    pub shard_acted_for: Family<ShardLabels, Gauge>,
    /// Replicas this one sees alive through their Leases, itself included.
    pub replicas_live: Gauge,
    /// Renewals of this replica's Lease that failed.
    pub lease_renew_failures: Counter,
    /// Actions on a job skipped because this replica did not, or no longer, act for its shard.
    pub shard_actions_fenced: Counter,
    /// Webhook delivery attempts, by outcome: `delivered` (2xx), `rejected` (another status),
    /// `unreachable` (connection, timeout, DNS), `refused_target` (the address policy).
    pub webhook_deliveries: Family<OutcomeLabels, Counter>,
    /// Webhook endpoints parked after their retry window, counted when it happens.
    pub webhook_parked: Counter,
    /// Finished jobs (and their events) deleted by retention.
    pub retention_deleted_jobs: Counter,
    pub retention_deleted_events: Counter,
    /// Spans of jobs handed to the OTLP exporter, and those let go (queue full, export
    /// failed).
    pub trace_spans_exported: Counter,
    pub trace_spans_dropped: Counter,
    /// Retention sweeps that failed (the store could not write); the next one retries.
    pub retention_failures: Counter,
    /// Per endpoint this process delivers: events matching it that wait for delivery (at most
    /// one page), and the age of the oldest of them.
    pub webhook_lag_events: Family<WebhookLabels, Gauge>,
    pub webhook_lag_seconds: Family<WebhookLabels, Gauge>,
    /// Lines of jobs' output committed to the archive.
    pub log_archive_lines: Counter,
    /// Failed writes of the archive (each retried); lines wait in memory meanwhile.
    pub log_archive_write_failures: Counter,
    /// Lines dropped because the archive's buffer was full while the store refused writes
    /// (their job's archive is closed as truncated).
    pub log_archive_lost_lines: Counter,
    /// Bytes of output waiting in memory for the archive.
    pub log_archive_buffered_bytes: Gauge,
    /// Pod log streams this process follows now (Kubernetes).
    pub log_follows: Gauge,
    /// Pod log streams opened again after one was cut before its pod ended.
    pub log_follow_resumes: Counter,
    /// Reads each template's availability at scrape time; registered by the service.
    template_availability: Arc<std::sync::RwLock<Option<TemplateAvailabilityReader>>>,
    /// Every metric above, registered once when the handles are made; a scrape only encodes.
    registry: std::sync::Mutex<Registry>,
}

/// One template's availability, as `template_available` reports it.
#[derive(Clone, Debug)]
pub struct TemplateAvailability {
    pub template: String,
    pub kind: String,
    pub available: bool,
}

type TemplateAvailabilityReader = Box<dyn Fn() -> Vec<TemplateAvailability> + Send + Sync>;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The metrics, every one registered: the one registry of the process, made by `serve`
    /// and handed to every part (there is no `Default`, so no part can make one of its own
    /// that nobody scrapes).
    pub fn new() -> Arc<Self> {
        let mut metrics = Self {
            jobs_submitted: Counter::default(),
            jobs_accepted: Counter::default(),
            jobs_rejected: Family::default(),
            phase_transitions: Family::default(),
            launch_retries: Counter::default(),
            watcher_restarts: Family::default(),
            watcher_relists: Family::default(),
            watcher_last_event: Arc::new(dashmap::DashMap::new()),
            kube_requests: Family::default(),
            auth_failures: Family::default(),
            rate_limited: Family::default(),
            ws_connections: Gauge::default(),
            ws_slow_consumers_closed: Counter::default(),
            subscription_groups: Gauge::default(),
            subscription_group_members: Gauge::default(),
            subscription_renders: Counter::default(),
            active_subscriptions: Gauge::default(),
            http_connections: Gauge::default(),
            http_connections_refused: Counter::default(),
            http_timeouts: Family::default(),
            misdirected_requests: Counter::default(),
            graphql_duration: Family::new_with_constructor(seconds_histogram),
            store_latency: Family::new_with_constructor(seconds_histogram),
            store_writable: Gauge::default(),
            store_unreadable_rows: Gauge::default(),
            local_queue_waiting: Gauge::default(),
            local_queue_running: Gauge::default(),
            kube_first_lists_pending: Gauge::default(),
            broadcast_lag_recoveries: Counter::default(),
            events_published_cursor: Gauge::default(),
            event_log_read_failures: Counter::default(),
            shards_owned: Gauge::default(),
            replicas_live: Gauge::default(),
            shard_acted_for: Family::default(),
            lease_renew_failures: Counter::default(),
            shard_actions_fenced: Counter::default(),
            webhook_deliveries: Family::default(),
            webhook_parked: Counter::default(),
            retention_deleted_jobs: Counter::default(),
            retention_deleted_events: Counter::default(),
            trace_spans_exported: Counter::default(),
            trace_spans_dropped: Counter::default(),
            retention_failures: Counter::default(),
            webhook_lag_events: Family::default(),
            webhook_lag_seconds: Family::default(),
            log_archive_lines: Counter::default(),
            log_archive_write_failures: Counter::default(),
            log_archive_lost_lines: Counter::default(),
            log_archive_buffered_bytes: Gauge::default(),
            log_follows: Gauge::default(),
            log_follow_resumes: Counter::default(),
            template_availability: Arc::new(std::sync::RwLock::new(None)),
            registry: std::sync::Mutex::new(Registry::with_prefix("jobgate")),
        };
        let registry = register_all(&metrics);
        metrics.registry = std::sync::Mutex::new(registry);
        Arc::new(metrics)
    }
}

pub fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

impl Metrics {
    pub fn rejected(&self, reason: &str) {
        self.jobs_rejected
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    // Label sets of fixed names: counting on a hot path (every event, request and batch)
    // allocates nothing.
    pub fn transition(&self, from: Option<&'static str>, to: &'static str) {
        self.phase_transitions
            .get_or_create(&TransitionLabels {
                from: from.unwrap_or("NONE"),
                to,
            })
            .inc();
    }

    fn watcher(name: &str) -> WatcherLabels {
        WatcherLabels {
            watcher: name.to_owned(),
        }
    }

    /// The clock a watcher sets on each event (a relaxed store, no allocation); started now.
    pub fn watcher_clock(&self, watcher: &str) -> Arc<AtomicU64> {
        let clock = Arc::new(AtomicU64::new(unix_millis()));
        self.watcher_last_event.insert(watcher.to_owned(), clock.clone());
        clock
    }

    pub fn watcher_restart(&self, watcher: &str) {
        self.watcher_restarts.get_or_create(&Self::watcher(watcher)).inc();
    }

    pub fn watcher_relist(&self, watcher: &str) {
        self.watcher_relists.get_or_create(&Self::watcher(watcher)).inc();
    }

    pub fn kube_request(&self, verb: &str, code: &str) {
        self.kube_requests
            .get_or_create(&RequestLabels {
                verb: verb.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// A caller refused for its credentials: `missing`, `invalid` or `jwt`.
    pub fn auth_failure(&self, reason: &str) {
        self.auth_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// A request refused by a per-identity rate limit.
    pub fn rate_limited(&self, limit: &str) {
        self.rate_limited
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
            })
            .inc();
    }

    /// A connection closed, or a request answered 408, by the `header`, `idle` or `body`
    /// timeout.
    pub fn http_timeout(&self, timeout: &'static str) {
        self.http_timeouts.get_or_create(&TimeoutLabels { timeout }).inc();
    }

    pub fn graphql_request(&self, operation: &'static str, took: Duration) {
        self.graphql_duration
            .get_or_create(&OperationLabels { operation })
            .observe(took.as_secs_f64());
    }

    /// Registers how to read template availability at scrape time (the service does, once
    /// it has its templates and executor); a later call replaces the earlier reader.
    pub fn read_template_availability_with(
        &self,
        read: impl Fn() -> Vec<TemplateAvailability> + Send + Sync + 'static,
    ) {
        // A poisoned lock holds a plain value; replacing it is always sound.
        *self
            .template_availability
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(Box::new(read));
    }

    pub fn webhook_delivery(&self, outcome: &'static str) {
        self.webhook_deliveries
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Sets an endpoint's lag, or forgets it (`None`: this process no longer delivers it).
    pub fn webhook_lag(&self, webhook: &str, lag: Option<(i64, i64)>) {
        let labels = WebhookLabels {
            webhook: webhook.to_owned(),
        };
        match lag {
            Some((events, seconds)) => {
                self.webhook_lag_events.get_or_create(&labels).set(events);
                self.webhook_lag_seconds.get_or_create(&labels).set(seconds);
            }
            None => {
                self.webhook_lag_events.remove(&labels);
                self.webhook_lag_seconds.remove(&labels);
            }
        }
    }

    pub fn store_op(&self, op: &'static str, took: Duration) {
        self.store_latency
            .get_or_create(&StoreLabels { op })
            .observe(took.as_secs_f64());
    }
}

/// Every metric, as text.
pub fn render(metrics: &Metrics) -> String {
    let registry = metrics.registry.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    // Writing into a String cannot fail, and every metric encodes.
    let _ = encode(&mut out, &registry);
    out
}

/// The registry of every metric, made once: handles are shared with it (a handle and its
/// registered clone are one value), and the values read at scrape time are collectors.
fn register_all(m: &Metrics) -> Registry {
    let mut registry = Registry::with_prefix("jobgate");
    registry.register(
        "jobs_submitted",
        "submitJob calls that reached validation",
        m.jobs_submitted.clone(),
    );
    registry.register(
        "jobs_accepted",
        "Jobs accepted and stored (idempotent repeats excluded)",
        m.jobs_accepted.clone(),
    );
    registry.register(
        "jobs_rejected",
        "Submissions refused, by reason",
        m.jobs_rejected.clone(),
    );
    registry.register(
        "job_phase_transitions",
        "Jobs entering a phase, by previous and new phase",
        m.phase_transitions.clone(),
    );
    registry.register(
        "launch_retries",
        "Launches that failed for a passing reason and will be retried",
        m.launch_retries.clone(),
    );
    registry.register(
        "watcher_restarts",
        "Kubernetes watch streams that failed and were restarted, by watcher",
        m.watcher_restarts.clone(),
    );
    registry.register(
        "watcher_relists",
        "Full lists (initial, after 410 Gone or a restart), by watcher",
        m.watcher_relists.clone(),
    );
    registry.register_collector(Box::new(WatcherSilence(m.watcher_last_event.clone())));
    registry.register(
        "kube_requests",
        "Requests to the Kubernetes API, by verb and HTTP status code",
        m.kube_requests.clone(),
    );
    registry.register(
        "auth_failures",
        "Requests and WebSocket connections refused for their credentials, by reason (missing, invalid, jwt)",
        m.auth_failures.clone(),
    );
    registry.register(
        "rate_limited",
        "Requests refused by a per-identity rate limit, by limit (mutations, subscriptions, connections)",
        m.rate_limited.clone(),
    );
    registry.register(
        "websocket_connections",
        "Open WebSocket connections",
        m.ws_connections.clone(),
    );
    registry.register(
        "websocket_slow_consumers_closed",
        "WebSocket connections closed because their outgoing queue stayed full for --ws-slow-consumer-secs",
        m.ws_slow_consumers_closed.clone(),
    );
    registry.register(
        "subscription_groups",
        "Live groups of identical subscriptions (same document, variables and scope) sharing one rendering of each event",
        m.subscription_groups.clone(),
    );
    registry.register(
        "subscription_group_members",
        "Subscriptions that joined a group: each has taken its place in the event stream, so an event recorded from now on reaches it",
        m.subscription_group_members.clone(),
    );
    registry.register(
        "subscription_renders",
        "Events resolved and serialised for a group of subscriptions; every subscriber of the group gets the same bytes",
        m.subscription_renders.clone(),
    );
    registry.register(
        "active_subscriptions",
        "Running GraphQL subscriptions over all WebSocket connections",
        m.active_subscriptions.clone(),
    );
    registry.register(
        "http_connections",
        "Open TCP connections, HTTP and WebSocket",
        m.http_connections.clone(),
    );
    registry.register(
        "http_connections_refused",
        "Connections closed at once because --max-connections were already open",
        m.http_connections_refused.clone(),
    );
    registry.register(
        "http_timeouts",
        "Connections closed, or requests answered 408, by a timeout: header, idle, body",
        m.http_timeouts.clone(),
    );
    registry.register(
        "misdirected_requests",
        "Requests answered 421 for a Host that is not an IP address, localhost or in --allowed-hosts",
        m.misdirected_requests.clone(),
    );
    registry.register(
        "store_writable",
        "1 while the store takes writes; 0 after a failed write (a full disk) until a probe write succeeds, or while the database file is deleted, replaced or truncated (the log says which)",
        m.store_writable.clone(),
    );
    registry.register(
        "store_unreadable_rows",
        "Stored rows (jobs, events' job snapshots, webhooks) this process found it cannot decode: each is left out of every answer, and listed by the unreadableRecords query, while everything else is served",
        m.store_unreadable_rows.clone(),
    );
    registry.register(
        "local_queue_waiting",
        "Jobs waiting in the local executor's queue (--max-running and the namespaces' caps), as of its last recomputation (at most 500 ms after a change)",
        m.local_queue_waiting.clone(),
    );
    registry.register(
        "local_queue_running",
        "Slots held in the local executor's queue: jobs admitted and not yet finished, as of its last recomputation",
        m.local_queue_running.clone(),
    );
    registry.register(
        "kube_first_lists_pending",
        "Kubernetes watchers whose first list is not done: after a restart, the jobs they follow are reconciled with the cluster while this is above 0 (jobgate is ready meanwhile)",
        m.kube_first_lists_pending.clone(),
    );
    registry.register(
        "broadcast_lag_recoveries",
        "Subscribers that fell behind the event broadcast and were caught up from the store",
        m.broadcast_lag_recoveries.clone(),
    );
    registry.register(
        "events_published_cursor",
        "The cursor of the newest status event published to this process's subscribers (replicas on one database converge on the same value)",
        m.events_published_cursor.clone(),
    );
    registry.register(
        "event_log_read_failures",
        "Failed reads of the shared event log (replicas on PostgreSQL); events are delivered once a read succeeds",
        m.event_log_read_failures.clone(),
    );
    registry.register(
        "shards_owned",
        "Shards of the job space this replica acts for: watches, launches, cancels, retention (replicas on PostgreSQL with the Kubernetes executor)",
        m.shards_owned.clone(),
    );
    registry.register(
        "shard_acted_for",
        "1 for each shard (of 32) this replica acts for, 0 for the others",
        m.shard_acted_for.clone(),
    );
    registry.register(
        "replicas_live",
        "Replicas this one sees alive through their member Leases, itself included",
        m.replicas_live.clone(),
    );
    registry.register(
        "lease_renew_failures",
        "Failed renewals of this replica's member Lease; past 2/3 of the lease duration without one it stops acting",
        m.lease_renew_failures.clone(),
    );
    registry.register(
        "shard_actions_fenced",
        "Actions on a job skipped because this replica did not, or no longer, act for the job's shard",
        m.shard_actions_fenced.clone(),
    );
    registry.register(
        "webhook_deliveries",
        "Webhook delivery attempts, by outcome: delivered (2xx), rejected (another HTTP status), unreachable (DNS, connection, timeout), refused_target (the address is not allowed)",
        m.webhook_deliveries.clone(),
    );
    registry.register(
        "webhook_parked",
        "Webhook endpoints parked because deliveries kept failing for the whole retry window (replayWebhook resumes them)",
        m.webhook_parked.clone(),
    );
    registry.register(
        "retention_deleted_jobs",
        "Finished jobs deleted by retention (--retention-days), with their events",
        m.retention_deleted_jobs.clone(),
    );
    registry.register(
        "retention_deleted_events",
        "Status events deleted by retention with their jobs",
        m.retention_deleted_events.clone(),
    );
    registry.register(
        "trace_spans_exported",
        "Spans of jobs sent to the OTLP collector (--otlp-endpoint)",
        m.trace_spans_exported.clone(),
    );
    registry.register(
        "trace_spans_dropped",
        "Spans of jobs let go: the export queue was full or the collector did not take them",
        m.trace_spans_dropped.clone(),
    );
    registry.register(
        "retention_failures",
        "Retention batches that failed (the store could not write); the next sweep retries",
        m.retention_failures.clone(),
    );
    registry.register(
        "webhook_lag_events",
        "Per webhook endpoint this process delivers: events waiting for delivery (counted up to one page, 256)",
        m.webhook_lag_events.clone(),
    );
    registry.register(
        "webhook_lag_seconds",
        "Per webhook endpoint this process delivers: age of the oldest event waiting for delivery, 0 when caught up",
        m.webhook_lag_seconds.clone(),
    );
    registry.register(
        "log_archive_lines",
        "Lines of jobs' output committed to the archive in the store",
        m.log_archive_lines.clone(),
    );
    registry.register(
        "log_archive_write_failures",
        "Failed writes of jobs' output to the archive (retried; lines wait in a bounded buffer meanwhile)",
        m.log_archive_write_failures.clone(),
    );
    registry.register(
        "log_archive_lost_lines",
        "Lines of output dropped because the archive's buffer was full while the store refused writes (the job's archive ends truncated)",
        m.log_archive_lost_lines.clone(),
    );
    registry.register(
        "log_archive_buffered_bytes",
        "Bytes of jobs' output waiting in memory to be written to the archive",
        m.log_archive_buffered_bytes.clone(),
    );
    registry.register(
        "log_follows",
        "Pod log streams this process follows now, to archive them",
        m.log_follows.clone(),
    );
    registry.register(
        "log_follow_resumes",
        "Pod log streams opened again after one ended before its pod did (cut, API server away)",
        m.log_follow_resumes.clone(),
    );
    registry.register(
        "graphql_request_duration_seconds",
        "Time to execute a GraphQL query or mutation, by operation type",
        m.graphql_duration.clone(),
    );
    registry.register(
        "store_operation_duration_seconds",
        "Time of store operations: write (one committed batch), read",
        m.store_latency.clone(),
    );
    registry.register_collector(Box::new(TemplatesAvailable(m.template_availability.clone())));
    registry
}

/// `watcher_seconds_since_last_event`: each watcher's clock, read at scrape time.
#[derive(Debug)]
struct WatcherSilence(Arc<dashmap::DashMap<String, Arc<AtomicU64>>>);

impl Collector for WatcherSilence {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let since = Family::<WatcherLabels, Gauge<f64, AtomicU64>>::default();
        let now = unix_millis();
        for entry in self.0.iter() {
            let last = entry.value().load(Ordering::Relaxed);
            since
                .get_or_create(&Metrics::watcher(entry.key()))
                .set(now.saturating_sub(last) as f64 / 1000.0);
        }
        let metric = encoder.encode_descriptor(
            "watcher_seconds_since_last_event",
            "Seconds since each watcher's last event (or start); bookmarks count",
            None,
            since.metric_type(),
        )?;
        since.encode(metric)
    }
}

/// `template_available`: read at scrape time through the reader the service registered.
struct TemplatesAvailable(Arc<std::sync::RwLock<Option<TemplateAvailabilityReader>>>);

impl std::fmt::Debug for TemplatesAvailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TemplatesAvailable")
    }
}

impl Collector for TemplatesAvailable {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let available = Family::<TemplateLabels, Gauge>::default();
        let read = self.0.read().unwrap_or_else(|p| p.into_inner());
        for t in read.as_ref().map(|read| read()).unwrap_or_default() {
            let labels = TemplateLabels {
                template: t.template,
                kind: t.kind,
            };
            available.get_or_create(&labels).set(i64::from(t.available));
        }
        drop(read);
        let metric = encoder.encode_descriptor(
            "template_available",
            "Whether jobs of a template can run now: 1, or 0 when its kind is not installed or not watchable",
            None,
            available.metric_type(),
        )?;
        available.encode(metric)
    }
}
