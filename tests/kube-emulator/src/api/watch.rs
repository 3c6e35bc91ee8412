//! Watch streams: `GET <collection>?watch=true` (and the legacy `/watch/` prefix).
//!
//! A stream is HTTP 200 with one compact JSON event per line, flushed one by one. It starts
//! - with no resourceVersion, `0`, or `sendInitialEvents=true`: a synthetic `ADDED` per matching
//!   object (and, for `sendInitialEvents`, the `k8s.io/initial-events-end` BOOKMARK), then every
//!   later change;
//! - from resourceVersion `N`: exactly the matching changes after `N`, from the store's history
//!   then live; `N` older than the history → one `ERROR` event with a 410 `Expired` Status, then
//!   the end of the stream (kube-rs relists on it; an HTTP 410 would make it retry forever).
//!
//! - with `sendInitialEvents=true` and a resourceVersion the store has not reached: after waiting
//!   up to 3 s for it (the watch cache's `blockTimeout`), the state as above, or one `ERROR` event
//!   with the `504` "Too large resource version" Status, then the end of the stream.
//!
//! Selector transitions follow the watch cache: an update into the selector is `ADDED`, out of it
//! `DELETED` (old content, new resourceVersion). With `allowWatchBookmarks=true` a BOOKMARK
//! reports progress every `bookmark_interval` when changes that did not match moved the
//! resourceVersion, and once more when `timeoutSeconds` ends the stream. A receiver that lags
//! behind the store, [`crate::faults::Faults::drop_watches`], or the client going away end it.
//!
//! Owns the stream state machine only; objects come from the store, matching from `selector`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::resources::{selectors, too_large_rv, wait_for_rv};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, Cause};
use super::{ApiState, Form, Query, Target, kinds, table};
use crate::faults::WatchGuard;
use crate::store::{Change, ChangeKind, StoreError};

struct WatchStream {
    api: Arc<ApiState>,
    target: Target,
    labels: LabelSelector,
    fields: FieldSelector,
    form: Form,
    bookmarks: bool,
    pending: VecDeque<Bytes>,
    rx: Option<broadcast::Receiver<Arc<Change>>>,
    /// Changes up to this resourceVersion are already reflected (initial state or start point).
    after: u64,
    /// The newest resourceVersion this watch has looked at (matching or not).
    seen: u64,
    /// The newest resourceVersion the client has been told about (event or bookmark).
    reported: u64,
    deadline: Option<Instant>,
    /// A `sendInitialEvents` start from a resourceVersion the store has not reached yet: the
    /// stream waits for it before it lists.
    wait_for: Option<u64>,
    ticker: Interval,
    dropper: watch::Receiver<u64>,
    done: bool,
    _guard: WatchGuard,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut out = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// A number in [0, 1), from a v4 uuid's random bits (no RNG dependency for one jitter).
fn random_fraction() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

fn forbidden_option(field: &str, message: &str) -> ApiError {
    ApiError::invalid_kind(
        "ListOptions.meta.k8s.io",
        "meta.k8s.io",
        "ListOptions",
        "",
        vec![Cause {
            reason: "FieldValueForbidden",
            message: message.to_owned(),
            field: field.to_owned(),
        }],
    )
}

/// Starts a watch and answers with its stream.
pub fn start(api: &Arc<ApiState>, t: &Target, q: &Query, form: Form) -> Result<Response, ApiError> {
    let (labels, mut fields) = selectors(t, q)?;
    if let Some(name) = &t.name {
        // Legacy `/watch/…/{name}`: a watch of one object.
        fields = FieldSelector::parse(&format!("metadata.name={name}"), &t.storage)
            .map_err(ApiError::bad_request)?;
    }
    let send_initial = match q.get("sendInitialEvents") {
        Some(v) if !v.is_empty() => Some(q.flag("sendInitialEvents")),
        _ => None,
    };
    let rv_match = q.value("resourceVersionMatch");
    match (send_initial, rv_match) {
        (Some(_), m) if m != Some("NotOlderThan") => {
            return Err(forbidden_option(
                "sendInitialEvents",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        (None, Some(_)) => {
            return Err(forbidden_option(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        _ => {}
    }
    let rv = q.value("resourceVersion");
    let from: Option<u64> = match rv {
        None | Some("0") => None,
        Some(s) => Some(
            s.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))?,
        ),
    };
    let bookmarks = q.flag("allowWatchBookmarks");
    let timeout = q
        .int("timeoutSeconds")?
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s as u64));
    let interval = api.config.bookmark_interval.max(Duration::from_millis(10));
    let jitter = api.config.bookmark_jitter.mul_f64(random_fraction());
    let mut ticker = tokio::time::interval_at(Instant::now() + interval + jitter, interval + jitter);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);

    let mut stream = WatchStream {
        api: api.clone(),
        target: t.clone(),
        labels,
        fields,
        form,
        bookmarks,
        pending: VecDeque::new(),
        rx: None,
        after: 0,
        seen: 0,
        reported: 0,
        deadline: timeout.map(|d| Instant::now() + d),
        wait_for: None,
        ticker,
        dropper: api.faults.watch_dropper(),
        done: false,
        _guard: api.faults.watch_opened(),
    };
    // Subscribe (and take the initial state) now, before the answer is sent, so that a change
    // made right after the client sees the headers is part of this stream.
    let initial_events = send_initial == Some(true) || (send_initial.is_none() && from.is_none());
    if initial_events {
        match from {
            Some(rv) if send_initial == Some(true) && rv > api.store.current_rv() => {
                stream.wait_for = Some(rv);
            }
            _ => stream.begin_with_state(send_initial == Some(true)),
        }
    } else {
        stream.begin_from(from.unwrap_or_else(|| api.store.current_rv()));
    }
    let body = Body::from_stream(futures::stream::unfold(stream, |mut s| async move {
        s.next().await.map(|chunk| (Ok::<_, Infallible>(chunk), s))
    }));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

impl WatchStream {
    fn matches(&self, object: &Value) -> bool {
        if let Some(ns) = self.target.ns()
            && object.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns)
        {
            return false;
        }
        self.labels.matches(object) && self.fields.matches(&self.target.storage, object)
    }

    fn present(&self, object: &Value) -> Value {
        let wire = kinds::to_wire(&self.target.rt, object);
        match &self.form {
            Form::Full => wire,
            Form::Metadata => kinds::partial_metadata(&wire),
            // kubectl `get -w`: every event carries a one-row Table.
            Form::Table(include) => {
                table::table(&self.target.rt, std::slice::from_ref(object), include, json!({}))
            }
        }
    }

    fn bookmark(&mut self, rv: u64, initial_end: bool) {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.target.rt.kind, "apiVersion": self.target.rt.api_version(), "metadata": metadata});
        self.pending.push_back(line("BOOKMARK", &object));
        self.reported = self.reported.max(rv);
    }

    /// Synthetic ADDED events for the current state, then changes after it.
    fn begin_with_state(&mut self, initial_end_bookmark: bool) {
        let store = &self.api.store;
        // Subscribing first: a change racing with the list is either in the list (rv ≤ list rv,
        // skipped from the receiver) or after it (rv > list rv, delivered).
        let rx = match store.watch(None) {
            Ok((_, rx)) => rx,
            Err(e) => return self.fail(&e),
        };
        let (items, rv) = store.list(&self.target.storage, self.target.ns(), &|o| self.matches(o));
        for item in &items {
            self.pending.push_back(line("ADDED", &self.present(item)));
        }
        self.rx = Some(rx);
        self.after = rv;
        self.seen = rv;
        self.reported = rv;
        if initial_end_bookmark && self.bookmarks {
            self.bookmark(rv, true);
        }
    }

    /// Changes after `from`: the retained history, then live ones.
    fn begin_from(&mut self, from: u64) {
        match self.api.store.watch(Some(from)) {
            Ok((history, rx)) => {
                self.after = from;
                self.seen = from;
                self.reported = from;
                self.rx = Some(rx);
                for change in history {
                    self.process(&change);
                }
            }
            Err(e) => self.fail(&e),
        }
    }

    /// Reports an error inside the stream (200 + ERROR event), then ends it.
    fn fail(&mut self, e: &StoreError) {
        let status = match e {
            StoreError::Expired { .. } => ApiError::expired(e.to_string()),
            other => ApiError::internal(&other.to_string()),
        };
        self.pending.push_back(line("ERROR", &status.body()));
        self.done = true;
    }

    fn process(&mut self, change: &Change) {
        self.seen = self.seen.max(change.rv);
        if change.rv <= self.after || change.resource != self.target.storage {
            return;
        }
        let now = self.matches(&change.object);
        let before = change.previous.as_deref().is_some_and(|p| self.matches(p));
        let event = match change.kind {
            ChangeKind::Added if now => Some(("ADDED", (*change.object).clone())),
            ChangeKind::Modified if now && before => Some(("MODIFIED", (*change.object).clone())),
            ChangeKind::Modified if now => Some(("ADDED", (*change.object).clone())),
            ChangeKind::Modified if before => {
                // Leaving the selector: the old content with the new resourceVersion.
                let mut old = change.previous.as_deref().cloned().unwrap_or(Value::Null);
                old["metadata"]["resourceVersion"] = json!(change.rv.to_string());
                Some(("DELETED", old))
            }
            ChangeKind::Deleted if now || before => Some(("DELETED", (*change.object).clone())),
            _ => None,
        };
        if let Some((kind, object)) = event {
            self.pending.push_back(line(kind, &self.present(&object)));
            self.reported = change.rv;
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        if let Some(rv) = self.wait_for.take() {
            if wait_for_rv(&self.api.store, rv).await {
                self.begin_with_state(true);
            } else {
                let status = too_large_rv(rv, self.api.store.current_rv());
                self.pending.push_back(line("ERROR", &status.body()));
                self.done = true;
            }
        }
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Some(chunk);
            }
            if self.done {
                return None;
            }
            let rx = self.rx.as_mut()?;
            let deadline = self.deadline;
            tokio::select! {
                biased;
                changed = self.dropper.changed() => {
                    // Dropped by a fault (or the emulator is gone): end the stream like a server would.
                    let _ = changed;
                    self.done = true;
                }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    if self.bookmarks {
                        let rv = self.seen.max(self.reported);
                        self.bookmark(rv, false);
                    }
                    self.done = true;
                }
                received = rx.recv() => match received {
                    Ok(change) => self.process(&change),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, resource = %self.target.storage, "watch fell behind; ending it");
                        self.done = true;
                    }
                    Err(broadcast::error::RecvError::Closed) => self.done = true,
                },
                _ = self.ticker.tick(), if self.bookmarks => {
                    if self.seen > self.reported {
                        let rv = self.seen;
                        self.bookmark(rv, false);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiConfig;
    use crate::faults::Faults;
    use crate::store::{Store, StoreOptions};

    fn pods_target(store: &Store) -> Target {
        Target {
            rt: store.resource("pods").expect("pods"),
            storage: "pods".into(),
            namespace: Some("default".into()),
            name: None,
            sub: None,
            legacy_watch: false,
        }
    }

    async fn body_lines(response: Response) -> Vec<Value> {
        let body = tokio::time::timeout(
            Duration::from_secs(30),
            axum::body::to_bytes(response.into_body(), usize::MAX),
        )
        .await
        .expect("the stream ends")
        .expect("a body");
        body.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("one JSON event per line"))
            .collect()
    }

    #[tokio::test]
    async fn a_watch_that_falls_behind_the_store_ends() {
        let store = Store::with_options(StoreOptions {
            history: 100,
            broadcast_capacity: 4,
            ..StoreOptions::default()
        });
        let api = ApiState::new(store.clone(), Arc::new(Faults::default()), ApiConfig::default());
        let from = store.current_rv();
        let q = Query::parse(Some(&format!("watch=true&resourceVersion={from}"))).expect("query");
        let response = start(&api, &pods_target(&store), &q, Form::Full).expect("watch");
        for i in 0..20 {
            store
                .create(
                    "pods",
                    Some("default"),
                    json!({"metadata": {"name": format!("p{i}")}}),
                )
                .expect("pod");
        }
        let events = body_lines(response).await;
        assert!(
            events.len() < 20,
            "a lagging watch ends instead of skipping changes: {}",
            events.len()
        );
        assert_eq!(api.faults.counts().open_watches, 0);
    }

    #[tokio::test]
    async fn an_expired_start_is_one_error_event() {
        let store = Store::new();
        let api = ApiState::new(store.clone(), Arc::new(Faults::default()), ApiConfig::default());
        let old = store.current_rv();
        store
            .create("pods", Some("default"), json!({"metadata": {"name": "p"}}))
            .expect("pod");
        store.compact();
        let q = Query::parse(Some(&format!("watch=true&resourceVersion={old}"))).expect("query");
        let events = body_lines(start(&api, &pods_target(&store), &q, Form::Full).expect("watch")).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["type"], "ERROR");
        assert_eq!(events[0]["object"]["code"], 410);
        assert_eq!(events[0]["object"]["reason"], "Expired");
    }

    #[tokio::test]
    async fn streaming_lists_end_their_initial_events_with_a_bookmark() {
        let store = Store::new();
        let api = ApiState::new(store.clone(), Arc::new(Faults::default()), ApiConfig::default());
        store
            .create("pods", Some("default"), json!({"metadata": {"name": "p"}}))
            .expect("pod");
        let q = Query::parse(Some(
            "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
        ))
        .expect("query");
        let events = body_lines(start(&api, &pods_target(&store), &q, Form::Full).expect("watch")).await;
        assert_eq!(events[0]["type"], "ADDED");
        assert_eq!(events[1]["type"], "BOOKMARK");
        assert_eq!(
            events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        let bad = Query::parse(Some("watch=true&sendInitialEvents=true")).expect("query");
        assert_eq!(
            start(&api, &pods_target(&store), &bad, Form::Full)
                .map(|_| ())
                .map_err(|e| e.code),
            Err(422)
        );
    }
}
