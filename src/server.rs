//! The HTTP server: routes, the wiring of store, executor and service, and graceful
//! shutdown.
//!
//! Routes: `/graphql` (POST and GET over HTTP, WebSocket upgrade on GET), `/graphiql`,
//! `/healthz`, `/readyz`, and `/`, the dashboard (see `web`). Every request must first name
//! a Host jobgate answers to (`hosts`, 421 otherwise), on every route. Connections are
//! accepted, capped and timed by `listener`. WebSocket sessions run on the `delivery` runtime.
//! Shutdown, on SIGTERM or SIGINT: stop accepting, close every WebSocket with 1001 so clients
//! reconnect and resume (then stop the delivery runtime), let HTTP requests finish, stop
//! webhook deliveries, stop local work, drain store writes, exit.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_graphql::Data;
use axum::body::Bytes;
use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{Auth, AuthError, Identity, Method, Standing};
use crate::config::{Config, ExecutorKind};
use crate::executor::Executor;
use crate::executor::kube::KubeExecutor;
use crate::executor::local::LocalExecutor;
use crate::graphql::error::Code;
use crate::graphql::http::{self as gql_http, HttpOptions, ResponseType};
use crate::graphql::schema::{self, JobgateSchema};
use crate::graphql::ws::{self, InitError, InitHook, WsConfig};
use crate::hosts::AllowedHosts;
use crate::jobs::log_archive::LogArchiver;
use crate::jobs::retention::RetentionSweeper;
use crate::jobs::schedules::{OwnerRights, OwnerStanding, Schedules};
use crate::jobs::service::{JobService, ServiceConfig};
use crate::metrics::Metrics;
use crate::model::TraceParent;
use crate::rate_limits::{Limited, RateLimits};
use crate::store::{PostgresStore, SqliteStore, Store};
use crate::traces::Traces;
use crate::webhooks::{Owners, Rights, Webhooks};

mod delivery_runtime;

/// Everything a request handler needs; cloning is cheap.
#[derive(Clone)]
pub struct AppState {
    pub schema: JobgateSchema,
    pub service: JobService,
    pub auth: Arc<Auth>,
    pub rates: Arc<RateLimits>,
    pub metrics: Arc<Metrics>,
    /// Told of each JWT caller, whose endpoints narrow to its token's scope.
    pub webhooks: Webhooks,
    /// Told of each JWT caller, whose schedules narrow to its token's scope.
    pub schedules: Schedules,
    /// Origins (`scheme://host[:port]`) a browser may call from besides jobgate's own;
    /// `*` for any.
    pub allowed_origins: Arc<Vec<String>>,
    /// Host names requests may address besides IP literals and `localhost` (see `hosts`).
    pub allowed_hosts: Arc<AllowedHosts>,
    /// Time a request has to deliver its body once its head has arrived; `None`: no limit.
    pub body_timeout: Option<Duration>,
    pub http: HttpOptions,
    pub ws: WsConfig,
    /// Cancelled when jobgate begins to shut down.
    pub shutdown: CancellationToken,
    /// Every WebSocket connection, so that shutdown waits for their close frames.
    pub connections: TaskTracker,
    /// Exporting jobs' traces (`--otlp-endpoint`); resolvers queue request spans to it.
    pub traces: Option<Arc<Traces>>,
}

/// The router over a built state; `serve` builds it, for `run` and for the integration tests,
/// which run `serve` in their own process (tests/common/in_process.rs).
pub fn app(state: AppState, max_body_bytes: usize) -> Router {
    let cors = cors_layer(&state.allowed_origins);
    let hosts = (state.allowed_hosts.clone(), state.metrics.clone());
    let router = Router::new()
        .route("/graphql", get(graphql_get).post(graphql_post))
        .route("/graphiql", get(graphiql))
        .route("/healthz", get(healthz))
        // Browsers ask for it on every page; answer without a 404 in their console.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(crate::web::dashboard_page))
        .merge(crate::web::routes())
        .layer(DefaultBodyLimit::max(max_body_bytes))
        // A bug must cost one request a generic 500, never the connection or the process.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(internal_error))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state);
    let router = match cors {
        Some(cors) => router.layer(cors),
        None => router,
    };
    // Outermost: a request for a foreign Host gets nothing else, not even CORS headers.
    router.layer(axum::middleware::from_fn_with_state(hosts, check_host))
}

/// Refuses (421) a request whose Host (or absolute-form target) jobgate does not answer to,
/// before authentication, body or upgrade: a browser pointed at jobgate by a rebound DNS
/// name sends that name (see `hosts`).
async fn check_host(
    State((hosts, metrics)): State<(Arc<AllowedHosts>, Arc<crate::metrics::Metrics>)>,
    request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().ok().filter(|h| hosts.allows(h)).is_some());
    let target = request.uri().authority().map(|a| hosts.allows(a.as_str()));
    if header == Some(false) || target == Some(false) {
        metrics.misdirected_requests.inc();
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "jobgate does not answer to this Host: use its IP address, localhost, or a name of --allowed-hosts\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// CORS for the allowed origins; none when only jobgate's own pages may call it (a
/// same-origin request needs no CORS).
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION, header::ACCEPT])
            .max_age(Duration::from_secs(600)),
    )
}

/// Whether a WebSocket upgrade's `Origin` may open a socket: absent (not a browser), jobgate's
/// own (same host), or allowed. Browsers send any page's WebSocket upgrades with the user's
/// network position and cookies, and CORS does not cover WebSocket, so this is the check.
/// "Same host" trusts the `Host` header only because `check_host` has already refused every
/// Host but IP literals, `localhost` and `--allowed-hosts`: a page whose origin equals such a
/// Host is jobgate's own (or served from the same origin), never a rebound attacker's name.
fn origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    if allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(&origin))
    {
        return true;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    let own = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((own, host), (Some(o), Some(h)) if o == h)
}

fn internal_error(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    let body = serde_json::json!({
        "errors": [{ "message": "internal error", "extensions": { "code": Code::Unavailable.as_str() } }]
    });
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body.to_string(),
    )
        .into_response()
}

fn unauthenticated(kind: ResponseType, e: &AuthError) -> Response {
    let body = serde_json::json!({
        "errors": [{ "message": e.to_string(), "extensions": { "code": Code::Unauthenticated.as_str() } }]
    });
    let content_type = match kind {
        ResponseType::GraphqlResponse => gql_http::GRAPHQL_RESPONSE_JSON,
        ResponseType::Json => "application/json",
    };
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")),
        ],
        body.to_string(),
    )
        .into_response()
}

/// What webhook owners may read now, from the current credentials (the tokens file read
/// again when it changes, anonymous access as configured; a JWT's claims are unknown).
struct CurrentCredentials(Arc<Auth>);

impl Owners for CurrentCredentials {
    fn rights(&self, owner: &str) -> Rights {
        match self.0.standing(owner) {
            Standing::Scope(scope) => Rights::Scope(scope),
            Standing::Gone(reason) => Rights::Gone(reason),
            Standing::Unknown => Rights::Unknown,
        }
    }
}

impl OwnerRights for CurrentCredentials {
    fn standing(&self, owner: &str) -> OwnerStanding {
        match self.0.standing(owner) {
            Standing::Scope(scope) => OwnerStanding::Scope(scope),
            Standing::Gone(reason) => OwnerStanding::Gone(reason),
            Standing::Unknown => OwnerStanding::Unknown,
        }
    }
}

/// An authenticated caller: a JWT holder's webhook endpoints and schedules narrow to its
/// token's scope.
fn authenticated(webhooks: &Webhooks, schedules: &Schedules, identity: &Identity) {
    if identity.method == Method::Jwt {
        webhooks.saw_jwt_caller(&identity.principal, &identity.scope);
        schedules.saw_jwt_caller(&identity.principal, &identity.scope);
    }
}

/// Authenticates the request's caller, then executes it as them (401 otherwise).
async fn execute_as_caller(
    state: &AppState,
    headers: &HeaderMap,
    incoming: gql_http::IncomingHttp,
) -> Response {
    let identity = match state.auth.check_headers(headers) {
        Ok(identity) => identity,
        Err(e) => {
            state.metrics.auth_failure(e.reason());
            return unauthenticated(incoming.response_type, &e);
        }
    };
    authenticated(&state.webhooks, &state.schedules, &identity);
    let trace_parent = traceparent_header(headers);
    let traces = state.traces.clone();
    gql_http::execute(
        &state.schema,
        incoming,
        state.http.request_timeout,
        &state.metrics,
        |r| {
            let mut r = r.data(identity.clone());
            if let Some(parent) = &trace_parent {
                r = r.data(parent.clone());
            }
            if let Some(traces) = &traces {
                r = r.data(traces.clone());
            }
            r
        },
    )
    .await
}

/// The caller's span from the W3C `traceparent` and `tracestate` headers; a malformed one is
/// ignored (the job starts a trace of its own).
fn traceparent_header(headers: &HeaderMap) -> Option<TraceParent> {
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    let tracestate = headers.get("tracestate").and_then(|v| v.to_str().ok());
    TraceParent::parse(traceparent, tracestate)
}

/// The caller's span a `connection_init` payload names in its `traceparent` (and
/// `tracestate`) members, matched without regard to case as `authorization` is.
fn traceparent_member(payload: &serde_json::Value) -> Option<TraceParent> {
    let member = |name: &str| {
        payload.as_object().and_then(|o| {
            o.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.as_str())
        })
    };
    TraceParent::parse(member("traceparent")?, member("tracestate"))
}

/// 408 for a body that did not arrive in time; the connection is closed after it (what is
/// left of the body could not be told from the next request).
fn body_timed_out() -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONNECTION, HeaderValue::from_static("close"))],
        "the request body did not arrive in time\n",
    )
        .into_response()
}

async fn graphql_post(State(state): State<AppState>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    // Read under the body limit (`DefaultBodyLimit`, 413) and the body timeout (408).
    let read = Bytes::from_request(Request::from_parts(parts, body), &state);
    let read = match state.body_timeout {
        Some(limit) => match tokio::time::timeout(limit, read).await {
            Ok(read) => read,
            Err(_) => {
                state.metrics.http_timeout("body");
                return body_timed_out();
            }
        },
        None => read.await,
    };
    let body = match read {
        Ok(body) => body,
        Err(rejection) => return rejection.into_response(),
    };
    let incoming = match gql_http::read_post(&headers, &body, &state.http) {
        Ok(incoming) => incoming,
        Err(response) => return *response,
    };
    execute_as_caller(&state, &headers, incoming).await
}

async fn graphql_get(
    State(state): State<AppState>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Ok(upgrade) = upgrade {
        if !origin_allowed(&headers, &state.allowed_origins) {
            return (
                StatusCode::FORBIDDEN,
                "this Origin may not open a WebSocket here (see --allowed-origins)",
            )
                .into_response();
        }
        let auth = state.auth.clone();
        let rates = state.rates.clone();
        let metrics = state.metrics.clone();
        let webhooks = state.webhooks.clone();
        let schedules = state.schedules.clone();
        let traces = state.traces.clone();
        let on_init: InitHook = Arc::new(move |payload| {
            let checked = auth.check_init_payload(&payload);
            let trace_parent = traceparent_member(&payload);
            let traces = traces.clone();
            if let Ok(identity) = &checked {
                authenticated(&webhooks, &schedules, identity);
            }
            let rates = rates.clone();
            let metrics = metrics.clone();
            async move {
                let identity = checked.map_err(|e| {
                    metrics.auth_failure(e.reason());
                    InitError::Forbidden(e.to_string())
                })?;
                if let Err(wait) = rates.check(Limited::Connections, &identity.principal) {
                    metrics.rate_limited(Limited::Connections.as_str());
                    return Err(InitError::TryLater(format!(
                        "too many connections: retry in {} s",
                        wait.as_secs_f64().ceil().max(1.0)
                    )));
                }
                let mut data = Data::default();
                data.insert(identity);
                if let Some(parent) = trace_parent {
                    data.insert(parent);
                }
                if let Some(traces) = traces {
                    data.insert(traces);
                }
                Ok(data)
            }
            .boxed()
        });
        return ws::upgrade(
            upgrade,
            state.schema.clone(),
            state.ws.clone(),
            on_init,
            state.shutdown.clone(),
            state.connections.clone(),
        );
    }
    if headers.contains_key(header::UPGRADE) {
        return (StatusCode::BAD_REQUEST, "invalid WebSocket upgrade request").into_response();
    }
    let query = query.unwrap_or_default();
    if query.is_empty() && gql_http::wants_html(&headers) {
        return graphiql().await.into_response();
    }
    let incoming = match gql_http::read_get(&headers, &query) {
        Ok(incoming) => incoming,
        Err(response) => return *response,
    };
    execute_as_caller(&state, &headers, incoming).await
}

async fn graphiql() -> Html<&'static str> {
    crate::web::graphiql_page()
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

async fn metrics(State(state): State<AppState>) -> Response {
    let body = crate::metrics::render(&state.metrics);
    (
        [(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        body,
    )
        .into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    let reason = state.service.unready_reason().await;
    let ready = reason.is_none();
    let mut body = serde_json::json!({
        "status": if ready { "ready" } else { "not ready" },
        "executor": state.service.executor_kind(),
    });
    if let Some(reason) = reason {
        body["reason"] = reason.into();
    }
    let body = Json(body);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

/// Opens the store `config` names: PostgreSQL with `--database-url`, else SQLite in the data
/// directory. The local executor runs jobs in this process, so it refuses a database another
/// process already runs local jobs from (their runs would be nobody's to stop or adopt).
async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let store: Arc<dyn Store> = match config.database_url.as_deref().filter(|u| !u.trim().is_empty()) {
        // The URL may hold a password: never in a message.
        Some(url) => {
            let store = PostgresStore::connect(url)
                .await
                .context("connecting to the PostgreSQL database of --database-url")?;
            tracing::info!("store: PostgreSQL (--database-url), which other replicas may share");
            Arc::new(store)
        }
        None => Arc::new(
            SqliteStore::open(&config.data_dir, config.durability)
                .await
                .with_context(|| format!("opening the store in {}", config.data_dir.display()))?,
        ),
    };
    if config.executor == ExecutorKind::Local && !store.claim_sole_runner().await? {
        anyhow::bail!(
            "another jobgate already runs local jobs from this database: the local executor runs on one replica only (use --executor kubernetes for several)"
        );
    }
    Ok(store)
}

/// Opens the store, starts the executor and the job service, and serves until `shutdown`
/// is cancelled; then shuts everything down in order.
pub async fn serve(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    // First: a bad template or credentials file stops jobgate before anything else starts.
    let workloads = Arc::new(config.workload_templates()?);
    let auth = Arc::new(Auth::load(&config.auth_settings()?)?);
    let metrics = Metrics::new();
    // Sessions get a runtime of their own, at a lower priority, so that a saturated fan-out
    // cannot starve requests, commits and jobs (see `delivery`). Started before the store, so
    // that a failure to start it leaves nothing running.
    let delivery = delivery_runtime::DeliveryRuntime::start(&config.delivery())?;
    let store = open_store(&config).await?;
    let (observations_tx, observations_rx) = mpsc::channel(1024);
    // The archive of jobs' output: the executor feeds it, the service reads it.
    let logs = LogArchiver::start(store.clone(), config.log_archive(), metrics.clone());
    let executor: Arc<dyn Executor> = match config.executor {
        ExecutorKind::Local => {
            let local = LocalExecutor::new(config.local()?, observations_tx)
                .context("preparing the local executor")?;
            local.archive_to(logs.clone());
            Arc::new(local)
        }
        ExecutorKind::Kubernetes => {
            let kube =
                KubeExecutor::connect(config.kube(workloads.clone(), metrics.clone()), observations_tx)
                    .await
                    .context("connecting to Kubernetes")?;
            kube.archive_to(logs.clone());
            Arc::new(kube)
        }
    };
    // Schedules fire in the shards this replica acts for, as jobs are launched.
    let schedule_shards = executor.shards();
    let service_store = store.clone();
    let traces_store = store.clone();
    // Spans follow every event from here on, those of the service's recovery at start too.
    let trace_settings = config.otlp.trace_settings();
    let trace_head = match trace_settings {
        Some(_) => Some(
            store
                .last_event_seq()
                .await
                .context("reading the event log's head")?,
        ),
        None => None,
    };
    let service = JobService::start(
        store.clone(),
        executor.clone(),
        observations_rx,
        ServiceConfig {
            logs: Some(logs),
            ..config.service(workloads, metrics.clone())
        },
    )
    .await
    .context("starting the job service")?;
    // The subscribers' wake-ups are sent from a thread of their own, not the service's writer.
    service
        .bus()
        .relay_from_own_thread()
        .context("starting the event bus's relay thread")?;
    // Webhook deliveries read the event log the service writes, from the store itself; the
    // service's bus only wakes them up.
    let retention = RetentionSweeper::start(store.clone(), executor, config.retention(), metrics.clone());
    let webhooks = Webhooks::start(
        store,
        service.bus().clone(),
        config.webhooks(),
        metrics.clone(),
        Arc::new(CurrentCredentials(auth.clone())),
    );
    let schedules = Schedules::start(
        service_store,
        service.clone(),
        Arc::new(CurrentCredentials(auth.clone())),
        config.schedules(),
        schedule_shards,
    )
    .await;
    let grace = Duration::from_secs(config.shutdown_timeout_secs);
    let traces = match (&trace_settings, trace_head) {
        (Some(settings), Some(head)) => Some(
            Traces::start(
                settings,
                service.bus().clone(),
                traces_store,
                head,
                &metrics,
                grace,
            )
            .context("starting the trace export (--otlp-endpoint)")?,
        ),
        _ => None,
    };
    let rates = Arc::new(RateLimits::new(config.rate_limits()));
    let schema = schema::build(
        service.clone(),
        schedules.clone(),
        webhooks.clone(),
        &config.query_limits(),
        rates.clone(),
    );
    if auth.allows_anonymous() {
        tracing::warn!(
            namespaces = %config.anonymous_scope_text(),
            "anonymous access is enabled{}: anyone who can reach {} can use these namespaces",
            if config.anonymous.is_none() { " (the default on a loopback address with no credentials configured; --anonymous false turns it off)" } else { "" },
            config.listen
        );
    }
    tracing::info!(
        api_tokens = auth.token_count(),
        jwt = auth.checks_jwts(),
        anonymous = auth.allows_anonymous(),
        "authentication"
    );
    let mut ws = config.ws(metrics.clone());
    ws.delivery = delivery.as_ref().map(delivery_runtime::DeliveryRuntime::handle);
    let state = AppState {
        schema,
        service: service.clone(),
        auth,
        rates,
        metrics: metrics.clone(),
        webhooks: webhooks.clone(),
        schedules: schedules.clone(),
        allowed_origins: Arc::new(config.allowed_origins.clone()),
        allowed_hosts: Arc::new(config.allowed_hosts()),
        body_timeout: config.connection_limits().body_timeout,
        http: config.http(),
        ws,
        shutdown: shutdown.clone(),
        connections: TaskTracker::new(),
        traces: traces.clone(),
    };
    let connections = state.connections.clone();
    let addr = listener.local_addr()?;
    tracing::info!(%addr, executor = service.executor_kind(), data_dir = %config.data_dir.display(), "jobgate listening on http://{addr} (dashboard at http://{addr}/, GraphiQL at http://{addr}/graphiql)");
    let router = app(state, config.max_body_bytes);
    crate::listener::serve(
        listener,
        router,
        config.connection_limits(),
        metrics.clone(),
        shutdown.clone(),
        grace,
    )
    .await;
    // WebSockets were told to close with 1001 when `shutdown` fired; let them finish.
    connections.close();
    if tokio::time::timeout(grace, connections.wait()).await.is_err() {
        tracing::warn!("some WebSocket connections did not close within {grace:?}");
    }
    // The sessions have ended (or were given up on): their runtime can go.
    if let Some(delivery) = delivery {
        delivery.shutdown(grace).await;
    }
    // Before the store closes: deliveries stop, and their claims are given up for the next
    // start (or another replica) to take at once.
    webhooks.shutdown(grace).await;
    schedules.shutdown().await;
    retention.shutdown(grace).await;
    tracing::info!("no longer accepting; stopping jobs and draining writes");
    if tokio::time::timeout(grace, service.shutdown()).await.is_err() {
        tracing::error!("shutdown did not finish within {grace:?}; exiting anyway");
    }
    // After the service: the spans of its last events are sent too (within the grace).
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    tracing::info!("jobgate stopped");
    Ok(())
}

/// Runs jobgate until SIGTERM or SIGINT.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let signal = shutdown_signal()?;
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        signal.await;
        tracing::info!("shutdown requested");
        trigger.cancel();
    });
    serve(config, listener, shutdown).await
}

/// Resolves at the first SIGTERM or SIGINT. The handlers are installed before it returns, so
/// that a failure to install them stops startup with an error instead of leaving a server
/// that a signal could not stop gracefully.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
