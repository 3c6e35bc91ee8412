//! The emulated Kubernetes API server: HTTP in, store operations out.
//!
//! Owns the URL layout (`/api/v1/…`, `/apis/{group}/{version}/…`, namespaced and cluster-wide
//! paths, `/status` and `/log` subresources, the legacy `/watch/` prefix), query parsing, request
//! accounting and injected failures (through [`crate::faults`]), and the HTTP shape of every
//! answer. Each verb lives in its own module; `kinds` holds per-kind defaulting and validation.
//!
//! It must not keep object state of its own (everything is in the [`Store`]; the only extra state
//! is the list snapshots behind `continue` tokens) and must not do controllers' work.
//!
//! # Layout
//! - [`server`]: the accept loop (one hyper connection task per client, all cut at once when the
//!   emulator goes down).
//! - [`discovery`]: `/version`, `/api`, `/apis`, resource lists, declined OpenAPI.
//! - [`resources`]: get, list (+ pagination), create, update, patch, delete, deletecollection.
//! - [`watch`]: watch streams (initial events, resume from a resourceVersion, bookmarks, expiry).
//! - [`logs`]: the `pods/{name}/log` subresource.
//! - [`table`]: server-side printing (`as=Table`) for kubectl's human output.
//! - [`kinds`], [`patch`], [`selector`], [`status`]: the rules those apply.
//! - [`authn`], [`rbac`]: who a request comes from and whether it may (only with a policy
//!   loaded; without one every request is allowed).
//! - [`kueue_visibility`]: Kueue's aggregated pending-workloads API, while Kueue is installed.
//! - [`admission`]: validating admission webhooks, called by create, update and patch before
//!   they store anything.
//!

pub mod admission;
pub mod authn;
pub mod discovery;
pub mod kinds;
pub mod kueue_visibility;
pub mod logs;
pub mod patch;
pub mod rbac;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod status;
pub mod table;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::faults::Faults;
use crate::store::{ResourceType, Store};
use status::ApiError;

/// Largest request body accepted (the real server's limit is 3 MiB per object; be generous).
const MAX_BODY: usize = 16 * 1024 * 1024;
/// List snapshots kept for `continue` tokens; older tokens answer `410 Expired`.
const MAX_SNAPSHOTS: usize = 256;

/// Tunables of the API layer.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// How often a watch with `allowWatchBookmarks=true` reports progress while its kind is idle.
    pub bookmark_interval: Duration,
    /// The RBAC policy every request is authenticated and authorized against; `None` allows
    /// every request, with or without credentials.
    pub rbac: Option<Arc<rbac::Policy>>,
    /// Up to this much is added at random to each watch's bookmark period, as the watch cache's
    /// jittered bookmark timer does.
    pub bookmark_jitter: Duration,
    /// 429s are written as kube-apiserver's API Priority and Fairness filter writes them: plain
    /// text, not a `Status`. Otherwise they are a `TooManyRequests` Status.
    pub flow_control_429: bool,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            bookmark_interval: Duration::from_secs(5),
            rbac: None,
            bookmark_jitter: Duration::ZERO,
            flow_control_429: false,
        }
    }
}

/// A consistent list result being paged through with `continue` tokens.
pub(crate) struct Snapshot {
    pub rv: u64,
    /// The stored objects themselves, shared (they are replaced, never changed, on write).
    pub items: Arc<Vec<Arc<Value>>>,
}

#[derive(Default)]
pub(crate) struct Snapshots {
    next: u64,
    map: BTreeMap<u64, Snapshot>,
}

/// Shared state of every request handler. Written by: handlers (`snapshots`), the `Emulator`
/// (`faults`, via its methods). Read by: handlers.
pub struct ApiState {
    pub store: Store,
    pub faults: Arc<Faults>,
    pub config: ApiConfig,
    /// `host:port` clients reach us at (for `/api`'s `serverAddressByClientCIDRs`).
    pub advertise: Mutex<String>,
    /// The bearer tokens of the users the emulator knows.
    pub tokens: authn::Tokens,
    /// HTTP clients for admission webhook calls.
    pub webhook_clients: admission::WebhookClients,
    pub(crate) snapshots: Mutex<Snapshots>,
}

impl ApiState {
    pub fn new(store: Store, faults: Arc<Faults>, config: ApiConfig) -> Arc<Self> {
        Arc::new(ApiState {
            store,
            faults,
            config,
            advertise: Mutex::new("127.0.0.1:6443".to_owned()),
            tokens: authn::Tokens::default(),
            webhook_clients: admission::WebhookClients::default(),
            snapshots: Mutex::new(Snapshots::default()),
        })
    }

    /// Forgets every list snapshot: outstanding `continue` tokens expire (a restarted server).
    pub fn forget_snapshots(&self) {
        self.snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .clear();
    }

    pub(crate) fn save_snapshot(&self, snapshot: Snapshot) -> u64 {
        let mut s = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        s.next += 1;
        let id = s.next;
        s.map.insert(id, snapshot);
        while s.map.len() > MAX_SNAPSHOTS {
            s.map.pop_first();
        }
        id
    }

    pub(crate) fn snapshot(&self, id: u64) -> Option<(u64, Arc<Vec<Arc<Value>>>)> {
        let s = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        s.map.get(&id).map(|snap| (snap.rv, snap.items.clone()))
    }
}

/// The router: every path goes through one dispatcher, which parses the Kubernetes URL layout
/// itself (it is too irregular for route patterns: `namespaces/{ns}/…` vs `namespaces/{name}`).
pub fn app(state: Arc<ApiState>) -> Router {
    Router::new()
        .fallback(dispatch)
        .with_state(state)
        // Defence in depth: a bug that panics answers a 500 Status instead of cutting the
        // connection (handlers validate input shapes so that no request can reach one).
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                tracing::error!("an API handler panicked");
                ApiError::internal("the emulator failed to handle the request").into_response()
            },
        ))
}

/// Query parameters, decoded (`+` as space), empty pairs from a leading `?&` skipped.
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Result<Query, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
        Ok(Query(pairs.into_iter().filter(|(k, _)| !k.is_empty()).collect()))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A non-empty value.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// Booleans as the server reads them (`true`, `1`, `t`, `True`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "t" | "T" | "True" | "TRUE"))
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value for {key}: {v:?}: must be an integer"))
            }),
        }
    }

    pub fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }
}

/// What a resource request addresses.
#[derive(Clone, Debug)]
pub struct Target {
    pub rt: ResourceType,
    /// Store key of the objects (differs from `rt.key()` for events.k8s.io Events).
    pub storage: String,
    /// The namespace in the URL, if any.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    /// Reached through the legacy `/watch/` prefix.
    pub legacy_watch: bool,
}

impl Target {
    /// Label for request counters: the resource key plus `/subresource`.
    pub fn counter_key(&self) -> String {
        match &self.sub {
            Some(sub) => format!("{}/{sub}", self.rt.key()),
            None => self.rt.key(),
        }
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    pub fn ns(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    Log,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Log => "log",
        }
    }
}

/// Resolves the resource part of a path (`segs` after `/api/v1` or `/apis/{g}/{v}`).
fn resolve(store: &Store, group: &str, version: &str, segs: &[&str]) -> Result<Target, ApiError> {
    let (legacy_watch, segs) = match segs.split_first() {
        Some((&"watch", rest)) => (true, rest),
        _ => (false, segs),
    };
    let types: Vec<ResourceType> = store
        .resources()
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if types.is_empty() {
        return Err(ApiError::no_route());
    }
    let find = |plural: &str| types.iter().find(|r| r.plural == plural).cloned();
    // `namespaces/{ns}/{resource}…` when {resource} is a namespaced kind of this group version;
    // otherwise the path addresses a cluster-level collection or a namespace itself.
    let (namespace, rest) = match segs {
        ["namespaces", ns, res, rest @ ..] if find(res).is_some_and(|r| r.namespaced) => (
            Some((*ns).to_owned()),
            std::iter::once(*res)
                .chain(rest.iter().copied())
                .collect::<Vec<_>>(),
        ),
        _ => (None, segs.to_vec()),
    };
    let Some((plural, item)) = rest.split_first() else {
        return Err(ApiError::no_route());
    };
    let rt = find(plural).ok_or_else(ApiError::no_route)?;
    let (name, sub) = match item {
        [] => (None, None),
        [name] => (Some((*name).to_owned()), None),
        [name, sub] => (Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return Err(ApiError::no_route()),
    };
    // A namespaced kind's items need a namespace; a cluster-scoped kind has none.
    if (rt.namespaced && namespace.is_none() && name.is_some()) || (!rt.namespaced && namespace.is_some()) {
        return Err(ApiError::no_route());
    }
    match sub.as_deref() {
        None => {}
        Some("status") if rt.status_subresource => {}
        Some("log") if rt.key() == "pods" => {}
        Some(_) => return Err(ApiError::no_route()),
    }
    Ok(Target {
        storage: kinds::storage_key(&rt),
        rt,
        namespace,
        name,
        sub,
        legacy_watch,
    })
}

fn verb_of(method: &Method, target: &Target, query: &Query) -> Result<Verb, ApiError> {
    let watch = target.legacy_watch || query.flag("watch");
    let verb = match (target.name.is_some(), target.sub.as_deref(), method) {
        (false, None, &Method::GET) if watch => Verb::Watch,
        (false, None, &Method::GET) => Verb::List,
        (false, None, &Method::POST) if target.rt.namespaced == target.namespace.is_some() => Verb::Create,
        (false, None, &Method::DELETE) => Verb::DeleteCollection,
        (true, None, &Method::GET) if watch => Verb::Watch,
        (true, None | Some("status"), &Method::GET) => Verb::Get,
        (true, None | Some("status"), &Method::PUT) => Verb::Update,
        (true, None | Some("status"), &Method::PATCH) => Verb::Patch,
        (true, None, &Method::DELETE) => Verb::Delete,
        (true, Some("log"), &Method::GET) => Verb::Log,
        _ => return Err(ApiError::method_not_allowed()),
    };
    Ok(verb)
}

/// The shape a client asked objects to come back in (the `Accept` header's first choice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// The objects themselves.
    Full,
    /// `PartialObjectMetadata` (kube-rs `list_metadata`/`watch_metadata`).
    Metadata,
    /// A `Table` (kubectl's human output); the value is `includeObject`.
    Table(String),
}

fn form_of(headers: &HeaderMap, query: &Query) -> Form {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if table::wanted(accept) {
        Form::Table(query.value("includeObject").unwrap_or("Metadata").to_owned())
    } else if accept.contains("as=PartialObjectMetadata") {
        Form::Metadata
    } else {
        Form::Full
    }
}

/// Body formats the emulator reads for create, update and delete.
fn body_media_type_supported(content_type: &str) -> bool {
    matches!(
        content_type.split(';').next().unwrap_or_default().trim(),
        "" | "application/json" | "application/yaml" | "*/*"
    )
}

/// What the authorizer is asked about a resource request: the verb as RBAC names it (a log
/// read is `get` on `pods/log`), and the name a list or watch selects by `metadata.name`.
fn attributes_of(target: &Target, verb: Verb, query: &Query) -> rbac::Attributes {
    let mut name = target.name().to_owned();
    if name.is_empty()
        && let Some(selector) = query.value("fieldSelector")
        && let Some(selected) = selector.strip_prefix("metadata.name=")
        && !selected.contains(',')
    {
        name = selected.to_owned();
    }
    let mut namespace = target.ns().unwrap_or_default().to_owned();
    // A namespace object is addressed in its own namespace.
    if target.rt.key() == "namespaces" {
        namespace = target.name().to_owned();
    }
    rbac::Attributes {
        verb: match verb {
            Verb::Log => "get",
            other => other.as_str(),
        }
        .to_owned(),
        group: target.rt.group.clone(),
        resource: target.rt.plural.clone(),
        subresource: target.sub.clone().unwrap_or_default(),
        namespace,
        name,
    }
}

async fn dispatch(State(api): State<Arc<ApiState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // With a policy, every request (discovery included) must name a known user; discovery
    // (non-resource paths) is then open to every authenticated user, as `system:discovery`
    // and `system:public-info-viewer` grant on a real cluster.
    let user = match &api.config.rbac {
        Some(_) => match api.tokens.authenticate(&parts.headers) {
            Ok(user) => Some(user),
            Err(e) => return e.into_response(),
        },
        None => None,
    };
    let path = parts.uri.path().to_owned();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (g, v, rest),
        _ => {
            api.faults.count_discovery();
            return discovery::answer(&api, &parts.method, &segs);
        }
    };
    if group == kueue_visibility::GROUP {
        return kueue_visibility::answer(
            &api,
            &parts.method,
            parts.uri.query(),
            user.as_ref(),
            version,
            rest,
        );
    }
    let target = match resolve(&api.store, group, version, rest) {
        Ok(t) => t,
        Err(e) => {
            api.faults.count_discovery();
            return e.into_response();
        }
    };
    let query = match Query::parse(parts.uri.query()) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let verb = match verb_of(&parts.method, &target, &query) {
        Ok(v) => v,
        Err(e) => {
            api.faults.count(&target.counter_key(), parts.method.as_str());
            return e.into_response();
        }
    };
    api.faults.count(&target.counter_key(), verb.as_str());
    if let (Some(policy), Some(user)) = (&api.config.rbac, &user) {
        let attributes = attributes_of(&target, verb, &query);
        if let rbac::Decision::Deny(reason) = policy.authorize(user, &attributes) {
            tracing::debug!(user = %user.name, path = %path, "forbidden");
            return rbac::forbidden(user, &attributes, &reason).into_response();
        }
    }
    if let Some(code) = api.faults.take_failure() {
        tracing::debug!(code, path = %path, "injected failure");
        if code == 429 && api.config.flow_control_429 {
            return status::flow_control_rejection(1);
        }
        return ApiError::injected(code).into_response();
    }
    if let Some(seconds) = api.faults.throttled(&target.counter_key(), verb.as_str()) {
        if api.config.flow_control_429 {
            return status::flow_control_rejection(seconds);
        }
        return ApiError::too_many_requests_after(seconds).into_response();
    }
    let body = match axum::body::to_bytes(Body::new(body), MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("unable to read the request body: {e}")).into_response();
        }
    };
    let form = form_of(&parts.headers, &query);
    // Who admission webhooks are told the request comes from: without a policy, the token's
    // user if it names one, else the anonymous user.
    let requester = user
        .clone()
        .or_else(|| api.tokens.authenticate(&parts.headers).ok())
        .unwrap_or_else(authn::UserInfo::anonymous);
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if matches!(
        verb,
        Verb::Create | Verb::Update | Verb::Delete | Verb::DeleteCollection
    ) && !body.is_empty()
        && !body_media_type_supported(content_type)
    {
        // Protobuf (what kubectl's imperative `create namespace|job …` send) is not decoded: the
        // emulator speaks JSON and YAML only. `kubectl create -f`/`apply` send JSON.
        return ApiError::unsupported_media_type(content_type, &["application/json", "application/yaml"])
            .into_response();
    }
    let result = match verb {
        Verb::Get => resources::get(&api, &target, &query, &form).await,
        Verb::List => resources::list(&api, &target, &query, &form).await,
        Verb::Watch => watch::start(&api, &target, &query, form),
        Verb::Create => resources::create(&api, &target, &query, &requester, &body).await,
        Verb::Update => resources::update(&api, &target, &query, &requester, &body).await,
        Verb::Patch => resources::patch(&api, &target, &query, &requester, content_type, &body).await,
        Verb::Delete => resources::delete(&api, &target, &query, &body),
        Verb::DeleteCollection => resources::delete_collection(&api, &target, &query, &body),
        Verb::Log => logs::get(&api, &target, &query),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_like_the_real_server() {
        let store = Store::new();
        let t = resolve(
            &store,
            "batch",
            "v1",
            &["namespaces", "ns", "jobs", "pi", "status"],
        )
        .expect("job status");
        assert_eq!(
            (t.rt.key().as_str(), t.ns(), t.name(), t.sub.as_deref()),
            ("jobs.batch", Some("ns"), "pi", Some("status"))
        );
        let t = resolve(&store, "", "v1", &["namespaces", "ns"]).expect("namespace item");
        assert_eq!(
            (t.rt.key().as_str(), t.ns(), t.name()),
            ("namespaces", None, "ns")
        );
        let t = resolve(&store, "", "v1", &["namespaces"]).expect("namespace list");
        assert!(t.name.is_none());
        let t = resolve(&store, "", "v1", &["pods"]).expect("all pods");
        assert!(t.ns().is_none() && t.name.is_none());
        let t = resolve(&store, "", "v1", &["watch", "namespaces", "a", "pods"]).expect("legacy watch");
        assert!(t.legacy_watch);
        assert_eq!(
            resolve(&store, "batch", "v1", &["jobs", "x"]).map(|_| ()),
            Err(ApiError::no_route())
        );
        assert!(resolve(&store, "batch", "v2", &["jobs"]).is_err());
        assert!(resolve(&store, "", "v1", &["namespaces", "a", "pods", "p", "exec"]).is_err());
        let t = resolve(&store, "events.k8s.io", "v1", &["namespaces", "a", "events"]).expect("events");
        assert_eq!(t.storage, "events");
    }

    #[test]
    fn query_parsing_accepts_kube_rs_and_kubectl_forms() {
        let q =
            Query::parse(Some("&watch=true&labelSelector=env+in+%28a%2Cb%29&timeout=32s")).expect("parse");
        assert!(q.flag("watch"));
        assert_eq!(q.get("labelSelector"), Some("env in (a,b)"));
        assert!(Query::parse(Some("")).is_ok());
        assert!(Query::parse(None).is_ok());
    }
}
