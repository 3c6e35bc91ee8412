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
//! cursor on the event bus, its own `after`, its own catch-up from the store), so which events
//! it gets, in which order and from where it starts are exactly what they would be alone;
//! group changes cannot make it miss or repeat one. A render is keyed by the event's cursor
//! (and a variant, to tell a synthesised "current state" from the recorded event with the
//! same cursor), so the first subscriber to need an event has it rendered and the others wait
//! for that rendering and reuse it.
//!
//! How a schema takes part: the session puts a [`Tap`] into the data of every subscription it
//! starts. A resolver that can share calls [`Tap::join`] with its caller's sharing key and
//! hands each event to the returned [`Delivery`] instead of yielding it to async-graphql
//! (its stream then yields only errors). A group renders with one long-lived execution of the
//! same operation whose data holds a [`RenderFeed`] instead: the resolver, seeing it, yields
//! the events fed to it and nothing else (no rate limit, no lookup: the subscriber's own
//! execution did those).
//!
//! This module must not know the schema or any business rule (the resolvers choose what
//! shares and under which key), and must not wait on a subscriber while rendering for the
//! others: a slow subscriber waits for room in its own connection's queue only.

use std::{
    any::Any,
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicI64, Ordering},
    },
};

use async_graphql::{Data, Request, Response, Variables};
use axum::extract::ws::Utf8Bytes;
use futures::{StreamExt, stream::BoxStream};
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use tokio::sync::{Notify, mpsc, mpsc::error::TrySendError, oneshot};
use tracing::error;

use super::writer::{DataQueue, Out, Payload};

/// An event as the schema hands it over; only the schema's resolvers look inside.
pub type Item = Arc<dyn Any + Send + Sync>;

/// Which rendering of an event: its cursor, and a variant the schema chooses (for example to
/// tell a synthesised current state from the recorded event with the same cursor).
pub type RenderKey = (i64, u8);

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
    /// As the metrics `subscription_live_members` and `subscription_handbacks`.
    live_members: Gauge,
    handbacks: Counter,
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
            live_members: metrics.subscription_live_members.clone(),
            handbacks: metrics.subscription_handbacks.clone(),
        }
    }

    /// The group of `key`, started with `start` when there is none.
    fn join(
        self: &Arc<Self>,
        key: GroupKey,
        start: impl FnOnce(Arc<GroupState>) -> mpsc::UnboundedSender<Job>,
    ) -> Arc<Group> {
        let mut live = self.live.lock().expect("groups lock");
        // The upgraded Arc leaves this function: no Group is dropped while the lock is held
        // (a Group's drop takes it).
        if let Some(group) = live.get(&key).and_then(Weak::upgrade) {
            return group;
        }
        self.gauge.inc();
        let state = Arc::new(GroupState {
            cache: Mutex::new(BTreeMap::new()),
            live: Mutex::new(LiveSet {
                handbacks: self.handbacks.clone(),
                position: i64::MAX,
                following: false,
                closed: false,
                next_id: 0,
                members: HashMap::new(),
            }),
        });
        let group = Arc::new(Group {
            gauge: self.gauge.clone(),
            key: key.clone(),
            jobs: start(state.clone()),
            state,
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

/// One group: the channel to its task and what it shares with it.
struct Group {
    gauge: Gauge,
    key: GroupKey,
    jobs: mpsc::UnboundedSender<Job>,
    state: Arc<GroupState>,
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

/// What a group and its task share: the renders it keeps and its live subscribers.
struct GroupState {
    cache: Mutex<BTreeMap<RenderKey, Render>>,
    live: Mutex<LiveSet>,
}

/// A render, done or under way.
enum Render {
    Ready(Payload),
    /// Asked for; these subscribers wait for it.
    Pending(Vec<oneshot::Sender<Payload>>),
}

/// What the group's task is asked to do.
enum Job {
    /// Render this event for the subscribers waiting on its cache entry.
    Render(RenderKey, Item),
    /// Follow this source and deliver its events to the live subscribers.
    Follow(BoxStream<'static, LiveEvent>),
}

impl Group {
    /// The rendering of `item`, from the cache or from the group's task.
    async fn render(&self, key: RenderKey, item: Item) -> Payload {
        let rendered = {
            let mut cache = self.state.cache.lock().expect("render cache lock");
            let (reply, rendered) = oneshot::channel();
            match cache.get_mut(&key) {
                Some(Render::Ready(payload)) => return payload.clone(),
                Some(Render::Pending(waiting)) => waiting.push(reply),
                None => {
                    // Asked now, not when first polled: it is rendered even if this
                    // subscriber goes away before it is done, for the others.
                    if self.jobs.send(Job::Render(key, item)).is_err() {
                        return render_failed();
                    }
                    cache.insert(key, Render::Pending(vec![reply]));
                    trim(&mut cache);
                }
            }
            rendered
        };
        rendered.await.unwrap_or_else(|_| render_failed())
    }
}

/// Drops the oldest finished renders beyond [`CACHE_ENTRIES`]; renders under way stay (their
/// subscribers wait for them, and there are at most as many as the group's subscribers).
fn trim(cache: &mut BTreeMap<RenderKey, Render>) {
    while cache.len() > CACHE_ENTRIES {
        let Some(oldest) = cache
            .iter()
            .find_map(|(key, render)| matches!(render, Render::Ready(_)).then_some(*key))
        else {
            return;
        };
        cache.remove(&oldest);
    }
}

/// What a subscriber gets when its group's renderer is gone (a resolver panicked in it).
fn render_failed() -> Payload {
    Utf8Bytes::from_static(
        r#"{"data":null,"errors":[{"message":"Internal server error","extensions":{"code":"INTERNAL"}}]}"#,
    )
}

/// The group's execution of the operation, fed one event at a time.
struct Renderer {
    counter: Counter,
    feed: mpsc::UnboundedSender<Item>,
    responses: BoxStream<'static, Response>,
}

impl Renderer {
    /// Resolves and serialises `item` once; `None` once the execution has ended (a resolver
    /// panicked in it), after which the group renders nothing.
    async fn render(&mut self, item: Item) -> Option<Payload> {
        if self.feed.send(item).is_err() {
            error!("a shared subscription's renderer stopped taking events");
            return None;
        }
        let Some(response) = self.responses.next().await else {
            error!("a shared subscription's renderer ended");
            return None;
        };
        self.counter.inc();
        Some(match serde_json::to_string(&response) {
            Ok(json) => Utf8Bytes::from(json),
            Err(e) => {
                error!(error = %e, "could not serialise a shared subscription's response");
                render_failed()
            }
        })
    }
}

/// The group's task: renders what subscribers ask for and, once one has gone live, follows
/// the group's live source and queues each event's frame for every live subscriber that
/// wants it. Ends when the group does (its last subscriber left).
async fn group_task(state: Arc<GroupState>, mut jobs: mpsc::UnboundedReceiver<Job>, mut renderer: Renderer) {
    let mut source: Option<BoxStream<'static, LiveEvent>> = None;
    loop {
        let next_live = async {
            match source.as_mut() {
                Some(events) => events.next().await,
                None => std::future::pending().await,
            }
        };
        let ok = tokio::select! {
            biased;
            job = jobs.recv() => match job {
                None => break,
                Some(Job::Render(key, item)) => state.render_asked(key, item, &mut renderer).await,
                Some(Job::Follow(events)) => {
                    source = Some(events);
                    true
                }
            },
            event = next_live => match event {
                Some(LiveEvent::Item { cursor, item }) => state.deliver_live(cursor, item, &mut renderer).await,
                Some(LiveEvent::Lagged) | None => {
                    // Events were missed (or the source ended): every live subscriber goes
                    // back to its own source, from what it was given; the next one to go
                    // live takes a fresh place.
                    source = None;
                    state.live.lock().expect("live lock").stop_following();
                    true
                }
            },
        };
        if !ok {
            break;
        }
    }
    // The renderer is gone or the group is: nobody is delivered live any more, and whoever
    // waits on a render gets the failure.
    let mut live = state.live.lock().expect("live lock");
    live.stop_following();
    live.closed = true;
    drop(live);
    state.cache.lock().expect("render cache lock").clear();
}

impl GroupState {
    /// Renders what a subscriber asked for, unless the live path already did; `false` once
    /// the renderer is gone.
    async fn render_asked(&self, key: RenderKey, item: Item, renderer: &mut Renderer) -> bool {
        let done = matches!(
            self.cache.lock().expect("render cache lock").get(&key),
            Some(Render::Ready(_))
        );
        if done {
            return true;
        }
        let Some(payload) = renderer.render(item).await else {
            return false;
        };
        self.rendered(key, payload);
        true
    }

    /// Keeps a finished render and answers whoever waits for it.
    fn rendered(&self, key: RenderKey, payload: Payload) {
        let mut cache = self.cache.lock().expect("render cache lock");
        if let Some(Render::Pending(waiting)) = cache.insert(key, Render::Ready(payload.clone())) {
            for reply in waiting {
                let _ = reply.send(payload.clone());
            }
        }
        trim(&mut cache);
    }

    /// One event of the live source: rendered once if a live subscriber wants it, then
    /// queued for each; `false` once the renderer is gone.
    async fn deliver_live(&self, cursor: i64, item: Item, renderer: &mut Renderer) -> bool {
        let wanted = self.live.lock().expect("live lock").wanted(cursor, &item);
        if !wanted {
            self.live.lock().expect("live lock").passed(cursor);
            return true;
        }
        let key = (cursor, 0);
        let cached = match self.cache.lock().expect("render cache lock").get(&key) {
            Some(Render::Ready(payload)) => Some(payload.clone()),
            _ => None,
        };
        let payload = match cached {
            Some(payload) => payload,
            None => {
                let Some(payload) = renderer.render(item.clone()).await else {
                    return false;
                };
                self.rendered(key, payload.clone());
                payload
            }
        };
        self.live
            .lock()
            .expect("live lock")
            .queue(cursor, &item, &payload);
        true
    }
}

/// Frames a live subscriber may have waiting for room in its connection's queue before it is
/// handed back to its own source (see [`LiveSet::queue`]): about 64 bytes each (the payload
/// is shared), so at most about 64 KiB per subscriber.
const BACKLOG: usize = 1024;

/// The group's live subscribers, and how far the group's source has come.
struct LiveSet {
    handbacks: Counter,
    /// Every event of the source with a cursor up to this one has been delivered; whatever
    /// the group delivers from now on has a greater one. A subscriber may go live only if it
    /// has seen every event up to here itself (see [`Delivery::go_live`]).
    position: i64,
    /// Whether the group follows a source (its task was given one).
    following: bool,
    /// The group renders nothing any more.
    closed: bool,
    next_id: u64,
    members: HashMap<u64, LiveMember>,
}

struct LiveMember {
    wants: Wants,
    /// Every event it wants with a cursor up to here is queued (or in `backlog`); the group
    /// skips events up to here (the subscriber saw them itself before it went live).
    upto: i64,
    out: DataQueue,
    prefix: Arc<str>,
    resume: Arc<AtomicI64>,
    /// Frames waiting for room in the queue, in order; the subscriber's own task moves them
    /// (waiting for room: its backpressure). While it does, new frames go here too.
    backlog: VecDeque<Out>,
    draining: bool,
    /// Set when the group stops delivering to it: the cursor its own source resumes after.
    handed_back: Option<i64>,
    wake: Arc<Notify>,
}

impl LiveSet {
    fn wanted(&self, cursor: i64, item: &Item) -> bool {
        self.members
            .values()
            .any(|m| m.handed_back.is_none() && cursor > m.upto && (m.wants)(item))
    }

    /// The source moved past `cursor` with nothing to deliver.
    fn passed(&mut self, cursor: i64) {
        for member in self.members.values_mut() {
            if member.handed_back.is_none() && cursor > member.upto {
                member.upto = cursor;
            }
        }
        self.position = self.position.max(cursor);
    }

    /// Queues the frame of the event at `cursor` for every live subscriber that wants it:
    /// straight into its connection's queue when there is room (no task of its own wakes), in
    /// its backlog when not (its task then waits for room). A subscriber whose backlog is full
    /// is handed back to its own source, which resumes after its last queued event.
    fn queue(&mut self, cursor: i64, item: &Item, payload: &Payload) {
        let mut gone = Vec::new();
        for (id, member) in &mut self.members {
            if member.handed_back.is_some() || cursor <= member.upto {
                continue;
            }
            if !(member.wants)(item) {
                member.upto = cursor;
                continue;
            }
            let frame = Out::Shared {
                prefix: member.prefix.clone(),
                payload: payload.clone(),
                cursor: Some((member.resume.clone(), cursor)),
            };
            if member.draining || !member.backlog.is_empty() {
                if member.backlog.len() >= BACKLOG {
                    member.handed_back = Some(member.upto);
                    self.handbacks.inc();
                } else {
                    member.backlog.push_back(frame);
                    member.upto = cursor;
                }
                member.wake.notify_one();
                continue;
            }
            match member.out.try_send(frame) {
                Ok(()) => member.upto = cursor,
                Err(TrySendError::Full(frame)) => {
                    member.backlog.push_back(frame);
                    member.upto = cursor;
                    member.wake.notify_one();
                }
                // The connection is closing; its operations are being stopped.
                Err(TrySendError::Closed(_)) => {
                    gone.push(*id);
                    member.wake.notify_one();
                }
            }
        }
        for id in gone {
            self.members.remove(&id);
        }
        self.position = self.position.max(cursor);
    }

    /// Hands every live subscriber back to its own source.
    fn stop_following(&mut self) {
        self.following = false;
        for member in self.members.values_mut() {
            if member.handed_back.is_none() {
                member.handed_back = Some(member.upto);
                self.handbacks.inc();
                member.wake.notify_one();
            }
        }
    }
}

/// What a group's live source yields, in cursor order.
pub enum LiveEvent {
    Item {
        cursor: i64,
        item: Item,
    },
    /// The source missed events since its last item.
    Lagged,
}

/// A group's own place in the live event stream (see [`Delivery::go_live`]): every event
/// with a cursor after `after` that is published from now on, in order.
pub struct LiveSource {
    pub after: i64,
    pub events: BoxStream<'static, LiveEvent>,
}

/// Whether a subscriber wants an event (its filter, its scope).
pub type Wants = Arc<dyn Fn(&Item) -> bool + Send + Sync>;

/// In the data of a group's rendering execution: the events to render, in order.
pub struct RenderFeed(Mutex<Option<mpsc::UnboundedReceiver<Item>>>);

impl RenderFeed {
    /// The events to render, as the resolver must yield them; the first call takes them (a
    /// document has one root field, so there is only one).
    pub fn events<T: Send + Sync + 'static>(&self) -> BoxStream<'static, Arc<T>> {
        let Some(feed) = self.0.lock().expect("render feed lock").take() else {
            return futures::stream::empty().boxed();
        };
        futures::stream::unfold(feed, |mut feed| async move {
            loop {
                let item = feed.recv().await?;
                match item.downcast::<T>() {
                    Ok(event) => return Some((event, feed)),
                    // Cannot happen with one resolver per group; skipping keeps the order.
                    Err(_) => error!("a shared subscription was fed an item of another type"),
                }
            }
        })
        .boxed()
    }
}

/// In the data of every subscription the session starts: how its resolver joins a group.
pub struct Tap {
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
    /// close (see [`Delivery::resumable_after`]).
    pub(super) resume: Arc<AtomicI64>,
}

/// No resume cursor (the subscription is not `jobEvents`-like, or has not said where).
pub(super) const NO_CURSOR: i64 = -1;

impl Tap {
    /// Joins the group of this operation for callers with `sharing` (what they may see:
    /// callers whose renderings may differ must not give the same key). Call once the
    /// subscriber's place in the event stream is taken: the member count then tells a client
    /// that events recorded from now on reach it.
    pub fn join(&self, sharing: &str) -> Delivery {
        let key = GroupKey {
            query: self.query.clone(),
            operation: self.operation.clone(),
            variables: self.key_variables.clone(),
            sharing: sharing.into(),
        };
        let group = self.groups.join(key, |state| {
            let (jobs_tx, jobs) = mpsc::unbounded_channel();
            let (feed_tx, feed) = mpsc::unbounded_channel();
            let mut request = Request::new(self.query.to_string()).variables(self.variables.clone());
            if let Some(operation) = &self.operation {
                request = request.operation_name(operation.to_string());
            }
            let request = request.data(RenderFeed(Mutex::new(Some(feed))));
            let renderer = Renderer {
                counter: self.groups.renders.clone(),
                feed: feed_tx,
                responses: (self.execute)(request, self.session.clone()),
            };
            tokio::spawn(group_task(state, jobs, renderer));
            jobs_tx
        });
        self.groups.members.inc();
        Delivery {
            members: self.groups.members.clone(),
            live_members: self.groups.live_members.clone(),
            group,
            out: self.out.clone(),
            prefix: self.prefix.clone(),
            resume: self.resume.clone(),
        }
    }
}

/// A subscriber's membership of a group: hands its events over for rendering and queues
/// the frames.
pub struct Delivery {
    members: Gauge,
    live_members: Gauge,
    group: Arc<Group>,
    out: DataQueue,
    prefix: Arc<str>,
    resume: Arc<AtomicI64>,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.members.dec();
    }
}

/// The connection is gone: stop delivering.
#[derive(Debug)]
pub struct Gone;

impl Delivery {
    /// Says where this subscription could be resumed from before any event has been
    /// delivered: every event it should get after `cursor` is still to come.
    pub fn resumable_after(&self, cursor: i64) {
        self.resume.store(cursor, Ordering::Relaxed);
    }

    /// Renders `item` (once for the group) and queues its `next` frame, waiting for room:
    /// the backpressure on this subscriber alone. With `cursor`, the frame moves the
    /// subscription's resume cursor once it is written.
    pub async fn deliver(&self, key: RenderKey, item: Item, cursor: Option<i64>) -> Result<(), Gone> {
        let payload = self.group.render(key, item).await;
        let frame = Out::Shared {
            prefix: self.prefix.clone(),
            payload,
            cursor: cursor.map(|c| (self.resume.clone(), c)),
        };
        self.out.send(frame).await.map_err(|_| Gone)
    }

    /// Offers to hand this subscriber's delivery to the group: from then on the group's task
    /// queues the frames of the events it `wants` (variant 0 of their cursor) straight into
    /// the connection's queue, and the subscriber's own task sleeps, instead of every
    /// subscriber's task waking for every event.
    ///
    /// `seen`: the subscriber's own source has given it every event up to this cursor and
    /// has nothing more for now (it waits on the live channel). Taken only if the group has
    /// delivered nothing past `seen`, so the group then delivers exactly the events after
    /// it: nothing missed, nothing twice. `source` gives the group its own place in the live
    /// stream when it has none. `None`: not now (try again after the next event).
    pub fn go_live(&self, seen: i64, wants: Wants, source: impl FnOnce() -> LiveSource) -> Option<Live<'_>> {
        let mut live = self.group.state.live.lock().expect("live lock");
        if live.closed {
            return None;
        }
        if !live.following {
            let LiveSource { after, events } = source();
            if self.group.jobs.send(Job::Follow(events)).is_err() {
                return None;
            }
            live.following = true;
            live.position = after;
        }
        if live.position > seen {
            return None;
        }
        let id = live.next_id;
        live.next_id += 1;
        let wake = Arc::new(Notify::new());
        live.members.insert(
            id,
            LiveMember {
                wants,
                upto: seen,
                out: self.out.clone(),
                prefix: self.prefix.clone(),
                resume: self.resume.clone(),
                backlog: VecDeque::new(),
                draining: false,
                handed_back: None,
                wake: wake.clone(),
            },
        );
        self.live_members.inc();
        Some(Live {
            delivery: self,
            id,
            wake,
        })
    }
}

/// A subscriber the group delivers to (see [`Delivery::go_live`]).
pub struct Live<'a> {
    delivery: &'a Delivery,
    id: u64,
    wake: Arc<Notify>,
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        let state = &self.delivery.group.state;
        state.live.lock().expect("live lock").members.remove(&self.id);
        self.delivery.live_members.dec();
    }
}

impl Live<'_> {
    /// Moves the frames the group could not queue at once into the connection's queue
    /// (waiting for room), until the group hands the subscriber back: then returns the
    /// cursor its own source must resume after. `Err` when the connection is gone.
    pub async fn run(self) -> Result<i64, Gone> {
        enum Step {
            Send(Out),
            Resume(i64),
            Wait,
        }
        loop {
            self.wake.notified().await;
            loop {
                let step = {
                    let mut live = self.delivery.group.state.live.lock().expect("live lock");
                    let Some(member) = live.members.get_mut(&self.id) else {
                        return Err(Gone);
                    };
                    match member.backlog.pop_front() {
                        Some(frame) => {
                            member.draining = true;
                            Step::Send(frame)
                        }
                        None => {
                            member.draining = false;
                            match member.handed_back {
                                Some(resume) => Step::Resume(resume),
                                None => Step::Wait,
                            }
                        }
                    }
                };
                match step {
                    Step::Send(frame) => self.delivery.out.send(frame).await.map_err(|_| Gone)?,
                    Step::Resume(resume) => return Ok(resume),
                    Step::Wait => break,
                }
            }
        }
    }
}
