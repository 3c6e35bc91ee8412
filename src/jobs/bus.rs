//! Fan-out of recorded status events, with replay from the store.
//!
//! The bus owns the `tokio::broadcast` channel that carries every committed [`JobEvent`] and
//! turns it into per-subscriber streams that never skip one: a stream first replays from the
//! store what came after its cursor, up to the last event published (never ahead of the
//! service's cache), then follows the channel, dropping what it already
//! yielded (events carry a strictly increasing `seq`). A subscriber that lags the channel is
//! caught up from the store. The bus does not write events; only the job service does, after
//! they are committed, in `seq` order. With [`EventBus::relay_from_own_thread`] (the server
//! uses it) a thread of the bus sends them on the channel, so publishing does not wait for
//! the subscribers' wake-ups.
//!
//! Every stream belongs to a subscriber's `Scope`: the store's replay reads only events of
//! jobs in it, and live events of other namespaces are dropped here, so nothing of another
//! tenant reaches the service's callers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use futures::Stream;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::mpsc;

use crate::model::{JobEvent, Scope};
use crate::store::{Store, StoreError};

/// How many events one catch-up read takes from the store.
const REPLAY_PAGE: i64 = 512;

#[derive(Debug)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<JobEvent>>,
    store: Arc<dyn Store>,
    /// The cursor of the last event published; written by the service's writer only.
    head: AtomicI64,
    /// Counts each time a subscriber lagged the channel and was caught up from the store
    /// (the metric `broadcast_lag_recoveries`).
    lag_recoveries: Counter,
    /// The head, as the metric `events_published_cursor`.
    published_cursor: Gauge,
    /// With [`EventBus::relay_from_own_thread`]: the queue to the `bus-relay` thread, which
    /// sends published events on the channel.
    relay: OnceLock<mpsc::UnboundedSender<Arc<JobEvent>>>,
}

impl EventBus {
    pub fn new(
        store: Arc<dyn Store>,
        capacity: usize,
        head: i64,
        lag_recoveries: Counter,
        published_cursor: Gauge,
    ) -> Self {
        let (tx, _) = broadcast::channel(capacity);
        published_cursor.set(head);
        Self {
            tx,
            store,
            head: AtomicI64::new(head),
            lag_recoveries,
            published_cursor,
            relay: OnceLock::new(),
        }
    }

    /// Sends published events on the channel from a thread of the bus's own (`bus-relay`)
    /// instead of from the publisher. Why: a send wakes every waiting subscriber, and waking
    /// 1,000 tasks of the WebSocket runtime took about 0.3 ms per event from the job
    /// service's writer, between a commit and the answers and commits after it; now the
    /// writer only queues the event. The head still moves at `publish`, so a stream that
    /// starts "now" starts after every event committed, and what the channel brings later at
    /// or below it is dropped as already seen.
    pub fn relay_from_own_thread(&self) -> std::io::Result<()> {
        let (relay, mut published) = mpsc::unbounded_channel::<Arc<JobEvent>>();
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name("bus-relay".to_owned())
            .spawn(move || {
                while let Some(event) = published.blocking_recv() {
                    let _ = tx.send(event);
                }
            })?;
        let _ = self.relay.set(relay);
        Ok(())
    }

    /// Publishes a committed event. Callers publish in `seq` order.
    pub fn publish(&self, event: Arc<JobEvent>) {
        self.head.store(event.seq, Ordering::Release);
        self.published_cursor.set(event.seq);
        let event = match self.relay.get() {
            None => event,
            Some(relay) => match relay.send(event) {
                Ok(()) => return,
                // The relay thread is gone (it cannot have panicked: it only sends).
                Err(mpsc::error::SendError(event)) => event,
            },
        };
        // No receiver is not an error: nobody is listening right now.
        let _ = self.tx.send(event);
    }

    pub fn head(&self) -> i64 {
        self.head.load(Ordering::Acquire)
    }

    pub fn subscriber_count(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Every event of jobs in `scope` after `after` (or after the present, when `None`), then
    /// live events, in `seq` order with no gap and no duplicate. With `job_id`, only that
    /// job's events.
    pub fn events(
        self: &Arc<Self>,
        after: Option<i64>,
        job_id: Option<String>,
        scope: Scope,
    ) -> impl Stream<Item = Result<Arc<JobEvent>, StoreError>> + Send + 'static {
        // Subscribe before reading the head, so nothing falls between the two.
        let rx = self.subscribe();
        let after = after.unwrap_or_else(|| self.head());
        self.events_from(rx, after, job_id, scope)
    }

    /// A receiver of live events; take it before reading the state a stream starts from.
    pub fn subscribe(&self) -> Subscription {
        Subscription(self.tx.subscribe())
    }

    /// The stream of [`EventBus::events`] over a receiver taken earlier.
    pub fn events_from(
        self: &Arc<Self>,
        Subscription(rx): Subscription,
        last: i64,
        job_id: Option<String>,
        scope: Scope,
    ) -> impl Stream<Item = Result<Arc<JobEvent>, StoreError>> + Send + 'static {
        let cursor = Cursor {
            bus: self.clone(),
            rx,
            last,
            job_id,
            scope,
            backlog: VecDeque::new(),
            catching_up: true,
        };
        futures::stream::unfold(cursor, |mut c| async move {
            let item = c.next().await?;
            Some((item, c))
        })
    }
}

/// A place in the live event stream, taken before reading a starting state.
pub struct Subscription(broadcast::Receiver<Arc<JobEvent>>);

impl Subscription {
    /// Waits until an event is published after the last one this subscription saw (or the
    /// channel lagged past it), then forgets every other one already queued: one wake-up for
    /// a burst. `false` once the bus is gone. For readers that use the bus only as a wake-up
    /// and read the events themselves from the store.
    pub async fn published(&mut self) -> bool {
        if matches!(self.0.recv().await, Err(RecvError::Closed)) {
            return false;
        }
        while !matches!(
            self.0.try_recv(),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
        ) {}
        true
    }
}

struct Cursor {
    bus: Arc<EventBus>,
    rx: broadcast::Receiver<Arc<JobEvent>>,
    /// The seq of the last event this stream yielded. Events of other jobs are skipped
    /// without moving it: a catch-up reads the store after it with the same job filter, so it
    /// finds nothing of theirs, and what the channel still holds is de-duplicated against it.
    last: i64,
    job_id: Option<String>,
    /// The subscriber's namespaces: events of other jobs are never read nor yielded.
    scope: Scope,
    backlog: VecDeque<Arc<JobEvent>>,
    catching_up: bool,
}

impl Cursor {
    fn wants(&self, event: &JobEvent) -> bool {
        self.scope.sees(&event.job) && self.job_id.as_ref().is_none_or(|id| *id == event.job_id)
    }

    async fn next(&mut self) -> Option<Result<Arc<JobEvent>, StoreError>> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.last = event.seq;
                return Some(Ok(event));
            }
            if self.catching_up {
                // Only as far as the head: an event committed but not yet published is not
                // yet in the service's cache either, and a subscriber that heard of it first
                // would then read the job as it was before it. It comes on the channel, which
                // this stream was subscribed to before the head was read.
                let head = self.bus.head();
                match self
                    .bus
                    .store
                    .events_after(self.last, REPLAY_PAGE, self.job_id.as_deref(), &self.scope)
                    .await
                {
                    Ok(page) => {
                        let full = page.len() as i64 == REPLAY_PAGE;
                        let before = page.len();
                        self.backlog
                            .extend(page.into_iter().filter(|e| e.seq <= head).map(Arc::new));
                        if !full || self.backlog.len() < before {
                            self.catching_up = false;
                        }
                    }
                    Err(e) => return Some(Err(e)),
                }
                continue;
            }
            match self.rx.recv().await {
                Ok(event) if event.seq <= self.last => {}
                Ok(event) if self.wants(&event) => {
                    self.last = event.seq;
                    return Some(Ok(event));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    // The channel overwrote events we had not read: read them from the store
                    // instead; what the channel still holds is de-duplicated by seq.
                    tracing::debug!(
                        missed,
                        after = self.last,
                        "subscriber lagged; catching up from the store"
                    );
                    self.bus.lag_recoveries.inc();
                    self.catching_up = true;
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use futures::StreamExt;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;

    use super::EventBus;
    use crate::model::{Job, JobEvent, JobPhase, Scope, SubmitRequest, ValidationLimits};
    use crate::store::{Durability, SqliteStore};

    /// A PENDING event of a job of `namespace` that no store holds: one only the live channel
    /// can carry.
    pub(crate) fn event(seq: i64, namespace: &str) -> std::sync::Arc<JobEvent> {
        let spec = SubmitRequest {
            namespace: Some(namespace.into()),
            command: Some(vec!["true".into()]),
            ..SubmitRequest::default()
        }
        .validate(&ValidationLimits::default())
        .expect("a valid job");
        let job = Job::accepted(format!("job-{seq}"), spec, None, Utc::now());
        std::sync::Arc::new(JobEvent {
            seq,
            job_id: job.id.clone(),
            phase: JobPhase::Pending,
            previous_phase: None,
            at: Utc::now(),
            reason: None,
            message: None,
            job: std::sync::Arc::new(job),
        })
    }

    async fn next_seq(
        events: &mut (
                 impl futures::Stream<Item = Result<std::sync::Arc<JobEvent>, crate::store::StoreError>> + Unpin
             ),
    ) -> i64 {
        tokio::time::timeout(Duration::from_secs(60), events.next())
            .await
            .expect("an event comes")
            .expect("the stream goes on")
            .expect("no error")
            .seq
    }

    /// A bus over an empty store (in the returned directory) with a channel of `capacity`.
    async fn empty_bus(capacity: usize) -> (tempfile::TempDir, std::sync::Arc<EventBus>) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::open(dir.path(), Durability::Normal)
            .await
            .expect("the store opens");
        let bus = EventBus::new(
            std::sync::Arc::new(store),
            capacity,
            0,
            Counter::default(),
            Gauge::default(),
        );
        (dir, std::sync::Arc::new(bus))
    }

    /// Live events (published, not in the store, so only the channel carries them) of
    /// another namespace never reach a scoped subscriber.
    #[tokio::test]
    async fn live_events_outside_the_subscribers_scope_are_dropped() {
        let (_dir, bus) = empty_bus(16).await;
        let mut team_a = bus.events(Some(0), None, Scope::namespaces(["team-a"])).boxed();
        let mut everyone = bus.events(Some(0), None, Scope::All).boxed();
        bus.publish(event(1, "team-b"));
        bus.publish(event(2, "team-a"));
        assert_eq!(next_seq(&mut team_a).await, 2);
        assert_eq!(next_seq(&mut everyone).await, 1);
    }

    /// A catch-up from the store stops at the head: an event committed but not yet published
    /// (the service's cache does not hold it yet) is left to the channel.
    #[tokio::test]
    async fn a_catch_up_reads_the_store_only_as_far_as_the_head() {
        let (_dir, bus) = empty_bus(16).await;
        let mut tx = bus.store.begin().await.expect("a write transaction");
        for name in ["job-a", "job-b"] {
            let spec = SubmitRequest {
                namespace: Some("team-a".into()),
                command: Some(vec!["true".into()]),
                ..SubmitRequest::default()
            }
            .validate(&ValidationLimits::default())
            .expect("a valid job");
            let fingerprint = spec.fingerprint();
            let job = Job::accepted(name.into(), spec, None, Utc::now());
            let pending = crate::model::Transition {
                previous_phase: None,
                phase: JobPhase::Pending,
                reason: None,
                message: None,
            };
            tx.accept_job(&job, &fingerprint, &pending, Utc::now())
                .await
                .expect("the job is stored");
        }
        tx.commit().await.expect("committed");
        let stored = bus
            .store
            .events_after(0, 10, None, &Scope::All)
            .await
            .expect("the event log reads");
        let [published, unpublished] = <[JobEvent; 2]>::try_from(stored).expect("two events");
        let (first, second) = (published.seq, unpublished.seq);
        // Both committed; only the first published (the second stands for one the service
        // has committed and not yet published).
        bus.publish(std::sync::Arc::new(published));

        let mut events = bus.events(Some(0), None, Scope::All).boxed();
        assert_eq!(next_seq(&mut events).await, first);
        // What comes next is what the channel brings, not the unpublished event.
        bus.publish(event(second + 1, "team-a"));
        assert_eq!(next_seq(&mut events).await, second + 1);
    }

    /// Through the relay thread every published event arrives, in order; the head moves at
    /// `publish`, so a stream started "now" afterwards gets none of them, only what follows.
    #[tokio::test]
    async fn the_relay_thread_delivers_every_event_in_order_and_the_head_moves_at_once() {
        let (_dir, bus) = empty_bus(4096).await;
        bus.relay_from_own_thread().expect("the relay thread starts");
        let mut early = bus.events(Some(0), None, Scope::All).boxed();
        for seq in 1..=1000 {
            bus.publish(event(seq, "team-a"));
        }
        assert_eq!(bus.head(), 1000);
        let mut late = bus.events(None, None, Scope::All).boxed();
        bus.publish(event(1001, "team-a"));
        for seq in 1..=1001 {
            assert_eq!(next_seq(&mut early).await, seq);
        }
        assert_eq!(next_seq(&mut late).await, 1001);
    }
}
