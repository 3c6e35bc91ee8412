//! The event loop every simulated controller runs on, in the manner of client-go's informer +
//! work queue: one initial list, then the store's change stream; changes become keys; each key is
//! reconciled at most once per batch of changes; a reconcile may ask to run again later (a
//! per-key timer, never a sweep of everything).
//!
//! It owns the queue, the timers, per-key error back-off, recovery from a lagged change receiver
//! (a full relist, as an informer does after `410 Gone`) and shutdown. It knows nothing of any
//! kind of object: that is the [`Reconciler`]'s business.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::store::{Change, Store};

/// How many keys are reconciled before the loop yields to the runtime and takes in new changes.
const BATCH: usize = 128;
/// First retry delay of a key whose reconcile failed; doubles per consecutive failure.
const ERROR_BACKOFF: Duration = Duration::from_millis(50);
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One controller's logic. Reconciles are synchronous: the store is in memory and never awaited.
pub(crate) trait Reconciler: Send + 'static {
    type Key: Clone + Eq + Hash + Ord + Debug + Send + 'static;
    /// Out-of-band wake-ups (e.g. a gate opened by the test).
    type Nudge: Send + 'static;
    type Error: std::error::Error;
    const NAME: &'static str;

    /// Rebuilds the controller's indexes from the store and returns every key to reconcile.
    /// Called once at start and again after the change receiver lagged.
    fn resync(&mut self, store: &Store) -> Vec<Self::Key>;

    /// Keys concerned by one committed change; also keeps the controller's indexes current.
    fn keys_for(&mut self, change: &Change, keys: &mut Vec<Self::Key>);

    /// How long the keys of `change` wait before they are reconciled (a controller's batching
    /// period; keys already waiting keep their earlier time). Zero: at once.
    fn batch_delay(&self, _change: &Change) -> Duration {
        Duration::ZERO
    }

    /// Keys concerned by a nudge.
    fn nudged(&mut self, _nudge: Self::Nudge, _keys: &mut Vec<Self::Key>) {}

    /// Moves `key` towards its desired state. `Ok(Some(d))`: run again after `d`.
    fn reconcile(&mut self, store: &Store, key: &Self::Key) -> Result<Option<Duration>, Self::Error>;
}

/// Keys ready to run, without duplicates, plus per-key timers (the earliest wins).
struct WorkQueue<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    timers: BTreeMap<(Instant, u64), K>,
    due: HashMap<K, (Instant, u64)>,
    seq: u64,
    failures: HashMap<K, u32>,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    fn new() -> Self {
        WorkQueue {
            ready: VecDeque::new(),
            queued: HashSet::new(),
            timers: BTreeMap::new(),
            due: HashMap::new(),
            seq: 0,
            failures: HashMap::new(),
        }
    }

    fn add(&mut self, key: K) {
        if self.queued.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    fn add_after(&mut self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = Instant::now() + delay;
        if let Some(&(existing, seq)) = self.due.get(&key) {
            if existing <= at {
                return;
            }
            self.timers.remove(&(existing, seq));
        }
        self.seq += 1;
        self.timers.insert((at, self.seq), key.clone());
        self.due.insert(key, (at, self.seq));
    }

    fn pop(&mut self) -> Option<K> {
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.keys().next().map(|(at, _)| *at)
    }

    fn fire_due(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.due.remove(&key);
            self.add(key);
        }
    }
}

/// Subscribes `reconciler` to `store`'s changes now and spawns its loop.
pub(crate) fn spawn<R: Reconciler>(
    reconciler: R,
    store: &Store,
    nudges: Option<mpsc::UnboundedReceiver<R::Nudge>>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    spawn_pausable(reconciler, store, nudges, stop, None)
}

/// [`spawn`], for a controller that reconciles nothing while `paused` holds `true` (as when its
/// process is down or has lost its leader lease): changes are still taken in, and the keys they
/// concern wait in the queue until it is `false` again.
pub(crate) fn spawn_pausable<R: Reconciler>(
    reconciler: R,
    store: &Store,
    nudges: Option<mpsc::UnboundedReceiver<R::Nudge>>,
    stop: watch::Receiver<bool>,
    paused: Option<watch::Receiver<bool>>,
) -> JoinHandle<()> {
    // Subscribing before the task runs means no change committed after `spawn` returns is missed:
    // the task's initial list sees what came before, the receiver what comes after.
    let changes = match store.watch(None) {
        Ok((_, rx)) => rx,
        // `watch(None)` cannot expire; should it ever fail, the loop subscribes itself.
        Err(e) => {
            tracing::warn!(controller = R::NAME, error = %e, "subscribing to the store failed");
            store
                .watch(None)
                .map(|(_, rx)| rx)
                .unwrap_or_else(|_| broadcast::channel(1).1)
        }
    };
    tokio::spawn(run(reconciler, store.clone(), changes, nudges, stop, paused))
}

fn is_paused(paused: &Option<watch::Receiver<bool>>) -> bool {
    paused.as_ref().is_some_and(|p| *p.borrow())
}

async fn pause_changed(paused: &mut Option<watch::Receiver<bool>>) -> bool {
    match paused {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

async fn recv_nudge<T>(nudges: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match nudges {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn run<R: Reconciler>(
    mut reconciler: R,
    store: Store,
    mut changes: broadcast::Receiver<Arc<Change>>,
    mut nudges: Option<mpsc::UnboundedReceiver<R::Nudge>>,
    mut stop: watch::Receiver<bool>,
    mut paused: Option<watch::Receiver<bool>>,
) {
    let mut queue = WorkQueue::new();
    let mut keys = Vec::new();
    let mut delayed = Vec::new();
    for key in reconciler.resync(&store) {
        queue.add(key);
    }
    tracing::debug!(controller = R::NAME, "started");
    loop {
        if *stop.borrow() {
            break;
        }
        // Take in every change already committed, so a burst of writes to one object costs one
        // reconcile, then work through the ready keys.
        let mut lagged = false;
        loop {
            match changes.try_recv() {
                Ok(change) => {
                    let first = keys.len();
                    reconciler.keys_for(&change, &mut keys);
                    let delay = reconciler.batch_delay(&change);
                    if !delay.is_zero() {
                        delayed.extend(keys.drain(first..).map(|key| (key, delay)));
                    }
                }
                Err(TryRecvError::Lagged(n)) => {
                    tracing::warn!(
                        controller = R::NAME,
                        missed = n,
                        "change stream lagged; relisting"
                    );
                    lagged = true;
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        if lagged {
            changes = changes.resubscribe();
            keys.extend(reconciler.resync(&store));
        }
        for key in keys.drain(..) {
            queue.add(key);
        }
        for (key, delay) in delayed.drain(..) {
            queue.add_after(key, delay);
        }
        // Timers are also fired here, not only when the loop sleeps: under a steady stream of
        // changes the select below may never get to its timer branch.
        queue.fire_due(Instant::now());
        let held = is_paused(&paused);
        let mut budget = if held { 0 } else { BATCH };
        while budget > 0
            && let Some(key) = queue.pop()
        {
            budget -= 1;
            match reconciler.reconcile(&store, &key) {
                Ok(again) => {
                    queue.failures.remove(&key);
                    if let Some(delay) = again {
                        queue.add_after(key, delay);
                    }
                }
                Err(e) => {
                    let failures = queue.failures.entry(key.clone()).or_insert(0);
                    *failures += 1;
                    let delay = super::SimConfig::backoff(ERROR_BACKOFF, ERROR_BACKOFF_MAX, *failures);
                    tracing::warn!(controller = R::NAME, key = ?key, error = %e, retry_in = ?delay, "reconcile failed");
                    queue.add_after(key, delay);
                }
            }
        }
        if !held && !queue.ready.is_empty() {
            // More work: let other tasks run, then continue without waiting.
            tokio::task::yield_now().await;
            continue;
        }
        let deadline = queue.next_deadline();
        tokio::select! {
            biased;
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            received = changes.recv() => match received {
                Ok(change) => {
                    let first = keys.len();
                    reconciler.keys_for(&change, &mut keys);
                    let delay = reconciler.batch_delay(&change);
                    if !delay.is_zero() {
                        delayed.extend(keys.drain(first..).map(|key| (key, delay)));
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(controller = R::NAME, missed = n, "change stream lagged; relisting");
                    changes = changes.resubscribe();
                    keys.extend(reconciler.resync(&store));
                }
                Err(RecvError::Closed) => break,
            },
            nudge = recv_nudge(&mut nudges) => match nudge {
                Some(nudge) => reconciler.nudged(nudge, &mut keys),
                None => nudges = None,
            },
            () = sleep_until(deadline) => queue.fire_due(Instant::now()),
            alive = pause_changed(&mut paused) => {
                if !alive {
                    paused = None;
                }
            }
        }
    }
    tracing::debug!(controller = R::NAME, "stopped");
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_deduplicates_and_keeps_the_earliest_timer() {
        let mut q: WorkQueue<&str> = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.pop(), Some("b"));
        assert_eq!(q.pop(), None);

        q.add_after("t", Duration::from_secs(60));
        let late = q.next_deadline();
        q.add_after("t", Duration::from_secs(1));
        let early = q.next_deadline();
        assert!(early < late);
        q.add_after("t", Duration::from_secs(30));
        assert_eq!(
            q.next_deadline(),
            early,
            "a later timer never replaces an earlier one"
        );
        assert_eq!(q.timers.len(), 1);

        q.fire_due(Instant::now());
        assert_eq!(q.pop(), None, "not due yet");
        q.fire_due(Instant::now() + Duration::from_secs(2));
        assert_eq!(q.pop(), Some("t"));
        assert!(q.next_deadline().is_none());
    }
}
