//! Shared rendering of subscription events: each event is resolved and serialised once per
//! *group* of identical subscriptions, and every subscriber of the group gets the same bytes
//! with only its own subscription id spliced in front.
//!
//! A group is keyed by the operation's document, operation name and the variables its
//! selection uses below the root field (not the root field's arguments: those only choose
//! which events a subscriber's own source yields), and by the caller's *sharing key* (in
//! practice its scope: what it may see). Two subscriptions with different keys never share
//! anything; so two callers with different scopes never share a rendering, whatever else they
//! have in common. Groups appear with their first subscriber and vanish with their last.
//!
//! Only the rendering is shared. Each subscriber keeps its own source of events (its own
//! cursor on the event bus, its own `after`, its own catch-up from the store), driven by a
//! task of its own ([`FanoutDelivery`]'s `run`), so which events it gets, in which order and from where
//! it starts are exactly what they would be alone; group changes cannot make it miss or
//! repeat one. A render is keyed by the event's cursor
//! (and a variant, to tell a synthesised "current state" from the recorded event with the
//! same cursor), so the first subscriber to need an event has it rendered and the others wait
//! for that rendering and reuse it.
//!
//! How a schema takes part is the seam of `graphql::shared_rendering`: the session puts a
//! [`Tap`] over a [`GroupTap`] into the data of every subscription it starts, a resolver that
//! shares joins its group through it and hands its events to the returned [`FanoutDelivery`],
//! and a group's rendering execution holds a [`RenderFeed`] instead.
//!
//! This module must not know the schema or any business rule (the resolvers choose what
//! shares and under which key), and must not wait on a subscriber while rendering for the
//! others: a slow subscriber waits for room in its own connection's queue only.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicI64, Ordering},
    },
};

use async_graphql::{Data, Request, Response, Variables};
use axum::extract::ws::Utf8Bytes;
use futures::{
    FutureExt, StreamExt,
    future::{BoxFuture, Shared},
    stream::BoxStream,
};
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;
use tracing::error;

use super::socket_writer::{DataQueue, Out, Payload};
use crate::graphql::shared_rendering::{
    Item, RenderFeed, RenderKey, RenderSharing, SharedDelivery, SharedEvents, Tap,
};

/// Renders most recent events kept per group. A subscriber further behind than this has
/// its events rendered again (correct, only slower).
const CACHE_ENTRIES: usize = 1024;

/// Starts an execution of a request with the given session data: the schema, type-erased.
pub(super) type Execute = Arc<dyn Fn(Request, Arc<Data>) -> BoxStream<'static, Response> + Send + Sync>;

/// Every live group of a server.
pub struct Groups {
    live: Mutex<HashMap<GroupKey, Weak<Group>>>,
    /// Live groups, as the metric `subscription_groups`.
    gauge: Gauge,
    /// Renders done, as the metric `subscription_renders`.
    renders: Counter,
    /// Joined subscriptions, as the metric `subscription_group_members`.
    members: Gauge,
}

impl std::fmt::Debug for Groups {
    /// How many are live is the `subscription_groups` metric.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups").finish_non_exhaustive()
    }
}

impl Groups {
    pub fn new(metrics: &crate::metrics::Metrics) -> Self {
        Self {
            live: Mutex::default(),
            gauge: metrics.subscription_groups.clone(),
            renders: metrics.subscription_renders.clone(),
            members: metrics.subscription_group_members.clone(),
        }
    }

    /// The group of `key`, started with `start` when there is none.
    fn join(
        self: &Arc<Self>,
        key: GroupKey,
        start: impl FnOnce() -> mpsc::UnboundedSender<RenderJob>,
    ) -> Arc<Group> {
        let mut live = self.live.lock().expect("groups lock");
        // The upgraded Arc leaves this function: no Group is dropped while the lock is held
        // (a Group's drop takes it).
        if let Some(group) = live.get(&key).and_then(Weak::upgrade) {
            return group;
        }
        self.gauge.inc();
        let group = Arc::new(Group {
            gauge: self.gauge.clone(),
            key: key.clone(),
            renders: start(),
            cache: Mutex::new(BTreeMap::new()),
            groups: Arc::downgrade(self),
        });
        live.insert(key, Arc::downgrade(&group));
        group
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    query: Arc<str>,
    operation: Option<Arc<str>>,
    /// The variables that can change a rendering, as JSON: equal values, equal text. A
    /// subscription's root arguments (filter, cursor, job id) only choose its events, so
    /// subscriptions that differ only there share a group.
    variables: Arc<str>,
    sharing: Arc<str>,
}

type PendingRender = Shared<BoxFuture<'static, Payload>>;

/// One group: the channel to its renderer and the renders it keeps.
struct Group {
    gauge: Gauge,
    key: GroupKey,
    renders: mpsc::UnboundedSender<RenderJob>,
    cache: Mutex<BTreeMap<RenderKey, PendingRender>>,
    groups: Weak<Groups>,
}

impl Drop for Group {
    fn drop(&mut self) {
        self.gauge.dec();
        if let Some(groups) = self.groups.upgrade() {
            let mut live = groups.live.lock().expect("groups lock");
            // A newer group may have taken the key since this one's last Arc went away.
            if live.get(&self.key).is_some_and(|g| g.strong_count() == 0) {
                live.remove(&self.key);
            }
        }
    }
}

impl Group {
    /// The rendering of `item`, from the cache or from the renderer.
    async fn render(&self, key: RenderKey, item: Item) -> Payload {
        let pending = {
            let mut cache = self.cache.lock().expect("render cache lock");
            match cache.get(&key) {
                Some(pending) => pending.clone(),
                None => {
                    let (reply, rendered) = oneshot::channel();
                    // Sent now, not when first polled: the renderer renders it even if this
                    // subscriber goes away before it is done, for the others.
                    let sent = self.renders.send((item, reply)).is_ok();
                    let pending = async move {
                        match rendered.await {
                            Ok(payload) if sent => payload,
                            _ => render_failed(),
                        }
                    }
                    .boxed()
                    .shared();
                    cache.insert(key, pending.clone());
                    if cache.len() > CACHE_ENTRIES {
                        cache.pop_first();
                    }
                    pending
                }
            }
        };
        pending.await
    }
}

/// What a subscriber gets when its group's renderer is gone (a resolver panicked in it).
fn render_failed() -> Payload {
    Utf8Bytes::from_static(
        r#"{"data":null,"errors":[{"message":"Internal server error","extensions":{"code":"INTERNAL"}}]}"#,
    )
}

type RenderJob = (Item, oneshot::Sender<Payload>);

/// The group's renderer: one execution of the operation, fed one event at a time; each
/// response is serialised once.
async fn render_loop(
    renders: Counter,
    mut jobs: mpsc::UnboundedReceiver<RenderJob>,
    feed: mpsc::UnboundedSender<Item>,
    mut responses: BoxStream<'static, Response>,
) {
    while let Some((item, reply)) = jobs.recv().await {
        if feed.send(item).is_err() {
            error!("a shared subscription's renderer stopped taking events");
            return;
        }
        let Some(response) = responses.next().await else {
            error!("a shared subscription's renderer ended");
            return;
        };
        let payload = match serde_json::to_string(&response) {
            Ok(json) => Utf8Bytes::from(json),
            Err(e) => {
                error!(error = %e, "could not serialise a shared subscription's response");
                render_failed()
            }
        };
        renders.inc();
        let _ = reply.send(payload);
    }
}

/// What the session wraps in the [`Tap`] of every subscription it starts: how its resolver
/// joins a group.
pub struct GroupTap {
    pub(super) groups: Arc<Groups>,
    pub(super) execute: Execute,
    pub(super) session: Arc<Data>,
    pub(super) query: Arc<str>,
    pub(super) operation: Option<Arc<str>>,
    pub(super) variables: Variables,
    /// The variables that can change a rendering, as JSON (see `session`): the group key's.
    pub(super) key_variables: Arc<str>,
    /// The connection's data queue.
    pub(super) out: DataQueue,
    /// `{"id":<id>,"type":"next","payload":`, the start of every `next` frame of this
    /// subscription.
    pub(super) prefix: Arc<str>,
    /// Where this subscription's resume cursor is kept, for the connection's slow-consumer
    /// close (see [`SharedDelivery::resumable_after`]).
    pub(super) resume: Arc<AtomicI64>,
}

/// No resume cursor (the subscription is not `jobEvents`-like, or has not said where).
pub(super) const NO_CURSOR: i64 = -1;

impl GroupTap {
    /// In a subscription's data: the [`Tap`] its resolver joins a group through.
    pub fn into_tap(self) -> Tap {
        Tap::new(self)
    }
}

impl RenderSharing for GroupTap {
    /// Joins the group of this operation for callers with `sharing` (what they may see:
    /// callers whose renderings may differ must not give the same key). Call once the
    /// subscriber's place in the event stream is taken: the member count then tells a client
    /// that events recorded from now on reach it.
    fn join(&self, sharing: &str) -> Box<dyn SharedDelivery> {
        let key = GroupKey {
            query: self.query.clone(),
            operation: self.operation.clone(),
            variables: self.key_variables.clone(),
            sharing: sharing.into(),
        };
        let group = self.groups.join(key, || {
            let (jobs_tx, jobs) = mpsc::unbounded_channel();
            let (feed_tx, feed) = mpsc::unbounded_channel();
            let mut request = Request::new(self.query.to_string()).variables(self.variables.clone());
            if let Some(operation) = &self.operation {
                request = request.operation_name(operation.to_string());
            }
            let request = request.data(RenderFeed::new(feed));
            let responses = (self.execute)(request, self.session.clone());
            tokio::spawn(render_loop(self.groups.renders.clone(), jobs, feed_tx, responses));
            jobs_tx
        });
        self.groups.members.inc();
        Box::new(FanoutDelivery {
            members: self.groups.members.clone(),
            group,
            out: self.out.clone(),
            prefix: self.prefix.clone(),
            resume: self.resume.clone(),
        })
    }
}

/// A subscriber's membership of a group: hands its events over for rendering and queues
/// the frames.
pub struct FanoutDelivery {
    members: Gauge,
    group: Arc<Group>,
    out: DataQueue,
    prefix: Arc<str>,
    resume: Arc<AtomicI64>,
}

impl Drop for FanoutDelivery {
    fn drop(&mut self) {
        self.members.dec();
    }
}

/// The connection is gone: stop delivering.
#[derive(Debug)]
struct Gone;

impl SharedDelivery for FanoutDelivery {
    /// Says where this subscription could be resumed from before any event has been
    /// delivered: every event it should get after `cursor` is still to come.
    fn resumable_after(&self, cursor: i64) {
        self.resume.store(cursor, Ordering::Relaxed);
    }

    /// Delivers a subscriber's own `events` on a task of its own until they end, the first
    /// error, or the connection goes; the returned stream yields that error and then ends,
    /// and stopping it (dropping it) stops the task.
    ///
    /// Why a task of its own rather than a loop inside the stream async-graphql polls: an
    /// event then wakes one small future per subscriber, not the chain of streams that
    /// async-graphql's subscription execution, its instrumentation and the resolver's
    /// adapters make (at 1,000 subscribers that chain cost a tenth of the server's CPU per
    /// frame, see BENCHMARKS.md). The operation's own task waits on the returned stream and
    /// wakes only at the end. An error ends the delivery, so it cannot overtake a frame: every
    /// frame before it is queued before the error is handed over.
    fn run(self: Box<Self>, events: SharedEvents) -> BoxStream<'static, async_graphql::Error> {
        let (error_tx, error_rx) = oneshot::channel();
        let delivering = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(next) = events.next().await {
                match next {
                    Ok((key, item, cursor)) => {
                        // The connection is closing; its operations are being stopped.
                        if self.deliver(key, item, cursor).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = error_tx.send(e);
                        return;
                    }
                }
            }
        });
        let delivering = AbortOnDropHandle::new(delivering);
        futures::stream::once(async move {
            // Held until the end: dropping the stream before then aborts the task.
            let _delivering = delivering;
            error_rx.await.ok()
        })
        .filter_map(std::future::ready)
        .boxed()
    }
}

impl FanoutDelivery {
    /// Renders `item` (once for the group) and queues its `next` frame, waiting for room:
    /// the backpressure on this subscriber alone. With `cursor`, the frame moves the
    /// subscription's resume cursor once it is written.
    async fn deliver(&self, key: RenderKey, item: Item, cursor: Option<i64>) -> Result<(), Gone> {
        let payload = self.group.render(key, item).await;
        let frame = Out::Shared {
            prefix: self.prefix.clone(),
            payload,
            cursor: cursor.map(|c| (self.resume.clone(), c)),
        };
        self.out.send(frame).await.map_err(|_| Gone)
    }
}
