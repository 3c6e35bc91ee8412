//! Fault injection and request accounting for the emulated API server.
//!
//! Owns: the "fail the next N requests" budget, the signal that ends every open watch stream, and
//! the counters of answered requests (by verb, by resource, discovery apart) and of open watches.
//! The API layer consults and feeds it on every request; tests drive it through
//! [`crate::Emulator`]. It must not know HTTP routing or the store: whole-server faults (going
//! down, compaction) are carried out by `Emulator`, which owns the listener and the store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// What the API answered so far (since start or the last [`crate::Emulator::reset_requests`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Every answered request, discovery included.
    pub total: u64,
    /// Discovery and other non-resource requests (`/version`, `/api`, `/apis/…`, `/openapi/…`).
    pub discovery: u64,
    /// Resource requests by verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, `log`.
    pub by_verb: BTreeMap<String, u64>,
    /// Resource requests by resource (`"jobs.batch"`, `"pods"`, `"jobs.batch/status"`,
    /// `"pods/log"`), then by verb.
    pub by_resource: BTreeMap<String, BTreeMap<String, u64>>,
    /// Requests answered with an injected failure (counted in the maps above as well).
    pub injected_failures: u64,
    /// Watch streams open right now.
    pub open_watches: u64,
}

impl RequestCounts {
    /// Requests of `verb` over all resources.
    pub fn verb(&self, verb: &str) -> u64 {
        self.by_verb.get(verb).copied().unwrap_or(0)
    }

    /// Requests of `verb` on `resource` (a store key, optionally with `/subresource`).
    pub fn of(&self, resource: &str, verb: &str) -> u64 {
        self.by_resource
            .get(resource)
            .and_then(|m| m.get(verb))
            .copied()
            .unwrap_or(0)
    }
}

#[derive(Default)]
struct Counters {
    total: u64,
    discovery: u64,
    injected: u64,
    by_verb: BTreeMap<String, u64>,
    by_resource: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Shared by the API layer (reads and counts) and the `Emulator` handle (injects).
pub struct Faults {
    /// `(remaining, status)`: the next `remaining` resource requests answer `status`.
    fail_next: Mutex<(usize, u16)>,
    /// `(resource, verb, seconds)`: every such request answers 429 with `Retry-After:
    /// seconds`, until lifted.
    throttled: Mutex<Option<(String, String, u64)>>,
    /// Bumped to end every open watch; each watch holds a receiver.
    drop_watches: watch::Sender<u64>,
    /// Bumped to end every open pod log stream.
    drop_logs: watch::Sender<u64>,
    /// `(answers, lines)`: the next `answers` pod log answers each end after `lines` lines.
    log_cuts: Mutex<(usize, usize)>,
    counters: Mutex<Counters>,
    open_watches: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            fail_next: Mutex::new((0, 500)),
            throttled: Mutex::new(None),
            drop_watches: watch::Sender::new(0),
            drop_logs: watch::Sender::new(0),
            log_cuts: Mutex::new((0, 0)),
            counters: Mutex::new(Counters::default()),
            open_watches: AtomicU64::new(0),
        }
    }
}

/// Decrements the open-watch count when a watch stream ends, however it ends.
pub struct WatchGuard(Arc<Faults>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Faults {
    /// The next `n` resource requests are answered with `status` (a Status body; 429 also gets
    /// `Retry-After`). Replaces any budget left from an earlier call.
    pub fn fail_next(&self, n: usize, status: u16) {
        *self.fail_next.lock().unwrap_or_else(|p| p.into_inner()) = (n, status);
    }

    /// Takes one failure from the budget, if any is left.
    pub fn take_failure(&self) -> Option<u16> {
        let mut budget = self.fail_next.lock().unwrap_or_else(|p| p.into_inner());
        if budget.0 == 0 {
            return None;
        }
        budget.0 -= 1;
        self.counters.lock().unwrap_or_else(|p| p.into_inner()).injected += 1;
        Some(budget.1)
    }

    /// Every `verb` request on `resource` (a counter key, e.g. `jobs.batch`) is answered
    /// `429` with `Retry-After: seconds` until [`Faults::unthrottle`].
    pub fn throttle(&self, resource: &str, verb: &str, seconds: u64) {
        *self.throttled.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((resource.to_owned(), verb.to_owned(), seconds));
    }

    pub fn unthrottle(&self) {
        *self.throttled.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The `Retry-After` seconds to answer this request with, if it is throttled (counted as
    /// an injected failure).
    pub fn throttled(&self, resource: &str, verb: &str) -> Option<u64> {
        let throttled = self.throttled.lock().unwrap_or_else(|p| p.into_inner());
        let (r, v, seconds) = throttled.as_ref()?;
        if r != resource || v != verb {
            return None;
        }
        self.counters.lock().unwrap_or_else(|p| p.into_inner()).injected += 1;
        Some(*seconds)
    }

    /// Ends every watch stream open now (they finish cleanly, as when a server drops them).
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|g| *g += 1);
    }

    /// Ends every pod log stream open now (a clean end of body, as when a connection is cut).
    pub fn drop_log_streams(&self) {
        self.drop_logs.send_modify(|g| *g += 1);
    }

    /// A receiver that changes when [`Faults::drop_log_streams`] is called.
    pub fn log_dropper(&self) -> watch::Receiver<u64> {
        self.drop_logs.subscribe()
    }

    /// The next `answers` pod log answers, followed or not, each end after `lines` lines, as
    /// a connection cut mid-stream would (a clean end of body). Replaces any cuts left.
    pub fn cut_log_answers(&self, answers: usize, lines: usize) {
        *self.log_cuts.lock().unwrap_or_else(|p| p.into_inner()) = (answers, lines);
    }

    /// Takes one cut, if any is left: the lines this answer ends after.
    pub fn take_log_cut(&self) -> Option<usize> {
        let mut cuts = self.log_cuts.lock().unwrap_or_else(|p| p.into_inner());
        if cuts.0 == 0 {
            return None;
        }
        cuts.0 -= 1;
        Some(cuts.1)
    }

    /// A receiver that changes when [`Faults::drop_watches`] is called.
    pub fn watch_dropper(&self) -> watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }

    /// Counts a watch as open until the guard is dropped.
    pub fn watch_opened(self: &Arc<Self>) -> WatchGuard {
        self.open_watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard(self.clone())
    }

    pub fn count_discovery(&self) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.total += 1;
        c.discovery += 1;
    }

    pub fn count(&self, resource: &str, verb: &str) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.total += 1;
        *c.by_verb.entry(verb.to_owned()).or_default() += 1;
        *c.by_resource
            .entry(resource.to_owned())
            .or_default()
            .entry(verb.to_owned())
            .or_default() += 1;
    }

    pub fn counts(&self) -> RequestCounts {
        let c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        RequestCounts {
            total: c.total,
            discovery: c.discovery,
            by_verb: c.by_verb.clone(),
            by_resource: c.by_resource.clone(),
            injected_failures: c.injected,
            open_watches: self.open_watches.load(Ordering::Relaxed),
        }
    }

    /// Zeroes the counters (open watches are a gauge and stay).
    pub fn reset_counts(&self) {
        *self.counters.lock().unwrap_or_else(|p| p.into_inner()) = Counters::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_budget_is_used_up() {
        let f = Faults::default();
        assert_eq!(f.take_failure(), None);
        f.fail_next(2, 429);
        assert_eq!(f.take_failure(), Some(429));
        assert_eq!(f.take_failure(), Some(429));
        assert_eq!(f.take_failure(), None);
        assert_eq!(f.counts().injected_failures, 2);
    }

    #[test]
    fn counts_by_verb_and_resource_and_watch_gauge() {
        let f = Arc::new(Faults::default());
        f.count("jobs.batch", "list");
        f.count("jobs.batch", "watch");
        f.count("pods", "list");
        f.count_discovery();
        let guard = f.watch_opened();
        let c = f.counts();
        assert_eq!(
            (c.total, c.discovery, c.verb("list"), c.of("jobs.batch", "watch")),
            (4, 1, 2, 1)
        );
        assert_eq!(c.open_watches, 1);
        drop(guard);
        f.reset_counts();
        assert_eq!(f.counts(), RequestCounts::default());
    }
}
