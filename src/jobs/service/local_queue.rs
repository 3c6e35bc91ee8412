//! jobgate's own queue for the local executor: which accepted job starts next, under the
//! operator's caps (`--max-running`, per-tenant caps), by priority within a tenant and by
//! fair share between tenants; where each waiting job stands; and why it waits.
//!
//! The rule: a job holds one slot from the moment it is admitted until it ends (retries and
//! the back-off between runs included). When a slot is free, the tenants that have a waiting
//! job and are below their own cap compete: the one with the lowest running slots divided by
//! its weight wins (ties: the tenant whose next job has the higher priority, then the older
//! one, then the tenant's name); it starts its waiting job of highest priority, oldest first.
//!
//! The queue is memory only, rebuilt from the store at start (waiting jobs are the unlaunched
//! ones not held by dependencies; launched unfinished ones hold slots), fed by the writer with
//! what it committed, and drained by the launcher. The order of the waiting jobs (positions)
//! and their reasons are recomputed by the keeper at most every [`REFRESH`]; a reason that
//! changed goes to the writer, at most [`MAX_REASON_CHANGES`] a round, to be recorded as an
//! event. It must not write the store nor call the executor itself.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::iter::Peekable;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, oneshot};

use super::{ServiceState, WriterCommand};
use crate::model::{Job, QueuePlace, QueuePolicy, TENANT_LIMIT, WAITING_FOR_CAPACITY};

/// The most often the order of the waiting jobs and their reasons are recomputed: a
/// position read may be this old, and a job's reason changes at most this often.
pub(super) const REFRESH: Duration = Duration::from_millis(500);

/// The most reason changes one recomputation sends to the writer (one transaction): a
/// backlog whose reasons all change is recorded over several rounds, nearest to start first.
pub(super) const MAX_REASON_CHANGES: usize = 1_000;

/// How many of the latest slot releases the estimate looks at, and how many it needs.
const FREES_KEPT: usize = 64;
const FREES_NEEDED: usize = 8;
/// Releases older than this say nothing of the pace now.
const FREES_WINDOW: Duration = Duration::from_secs(3600);

/// A waiting job's key within its tenant: higher priority first, then older, then by id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    priority: Reverse<i32>,
    submitted_at: DateTime<Utc>,
    id: String,
}

impl Entry {
    fn of(job: &Job) -> Self {
        Self {
            priority: Reverse(job.spec.priority),
            submitted_at: job.submitted_at,
            id: job.id.clone(),
        }
    }
}

/// What the queue holds now.
#[derive(Default)]
struct Book {
    /// Waiting jobs per tenant, in the order the tenant starts them.
    waiting: HashMap<String, BTreeSet<Entry>>,
    /// Each waiting job's tenant and key.
    waiting_ids: HashMap<String, (String, Entry)>,
    /// Jobs holding a slot, with their tenant.
    holding: HashMap<String, String>,
    /// Admitted jobs whose workload is not created yet, with when its next try is (after a
    /// failed one).
    launching: HashMap<String, Option<DateTime<Utc>>>,
    /// Slots held per tenant.
    running: HashMap<String, u32>,
    /// When the latest slots were freed, oldest first.
    frees: VecDeque<Instant>,
}

/// Where the waiting jobs stand, as last computed.
#[derive(Default)]
pub(super) struct Placement {
    /// Waiting jobs in the order the queue would start them, each with why it waits (`None`:
    /// it starts as soon as the launcher takes it).
    order: Vec<(String, Option<Wait>)>,
    /// Per job: 1-based position, 1-based place among its tenant's, and its place among the
    /// jobs that wait for a slot to free (for the estimate).
    places: HashMap<String, (u32, u32, Option<u32>)>,
}

/// Why a waiting job waits, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Wait {
    pub(super) reason: &'static str,
    pub(super) message: String,
}

/// The local queue (see the module's documentation).
pub(super) struct LocalQueue {
    policy: QueuePolicy,
    book: Mutex<Book>,
    placement: RwLock<Arc<Placement>>,
    /// Wakes the keeper: the queue changed.
    changed: Notify,
}

/// A tenant's turn in the fair-share choice: lower is first.
struct Turn<'a> {
    running: u64,
    weight: u64,
    head: &'a Entry,
    tenant: &'a str,
    slot: usize,
}

impl Turn<'_> {
    fn rank(&self, other: &Self) -> Ordering {
        // running/weight compared without division.
        (self.running * other.weight)
            .cmp(&(other.running * self.weight))
            .then_with(|| self.head.cmp(other.head))
            .then_with(|| self.tenant.cmp(other.tenant))
    }
}

impl PartialEq for Turn<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.rank(other) == Ordering::Equal
    }
}
impl Eq for Turn<'_> {}
impl PartialOrd for Turn<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Turn<'_> {
    // The heap pops its greatest: the best turn is the greatest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank(self)
    }
}

impl LocalQueue {
    pub(super) fn new(policy: QueuePolicy) -> Self {
        Self {
            policy,
            book: Mutex::new(Book::default()),
            placement: RwLock::new(Arc::new(Placement::default())),
            changed: Notify::new(),
        }
    }

    /// Slots held now.
    pub(super) fn running_slots(&self) -> usize {
        self.book().holding.len()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // Plain data: a panic elsewhere leaves it consistent enough to go on.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// At start: a job launched before the restart holds its slot.
    pub(super) fn hold(&self, job: &Job) {
        let mut book = self.book();
        if book
            .holding
            .insert(job.id.clone(), job.spec.namespace.clone())
            .is_none()
        {
            *book.running.entry(job.spec.namespace.clone()).or_default() += 1;
        }
    }

    /// Follows what the writer committed: a finished job leaves the queue (freeing its slot),
    /// a PENDING job free to start that the queue does not know joins it. Returns whether the
    /// launcher may have work (a job joined, or a slot freed).
    pub(super) fn observe<'a>(&self, jobs: impl IntoIterator<Item = &'a Job>) -> bool {
        let mut book = self.book();
        let mut wake = false;
        for job in jobs {
            if job.phase.is_terminal() {
                wake |= book.remove(&job.id);
            } else if !job.is_waiting_for_dependencies()
                && !book.holding.contains_key(&job.id)
                && !book.waiting_ids.contains_key(&job.id)
            {
                book.enqueue(job);
                wake = true;
            }
        }
        drop(book);
        if wake {
            self.changed.notify_one();
        }
        wake
    }

    /// At start: a job not launched yet, free to start, waits.
    pub(super) fn enqueue(&self, job: &Job) {
        self.book().enqueue(job);
    }

    /// Has the keeper recompute the order and reasons.
    pub(super) fn touch(&self) {
        self.changed.notify_one();
    }

    /// Forgets a job the launcher found finished or gone.
    pub(super) fn forget(&self, id: &str) {
        self.book().remove(id);
        self.changed.notify_one();
    }

    /// The jobs the launcher is to hand to the executor now, at most `max`: those admitted
    /// whose workload is still to be created (a retry), then those the rule admits while
    /// slots are free. Each admitted job holds its slot from here.
    pub(super) fn admit(&self, max: usize) -> Vec<String> {
        let mut book = self.book();
        let mut out: Vec<String> = book.launching.keys().take(max).cloned().collect();
        let mut free = self.free(&book);
        let mut picked: Vec<(String, String)> = Vec::new();
        {
            let (waiting, running) = (&book.waiting, &book.running);
            let mut heads: Vec<(&str, Peekable<std::collections::btree_set::Iter<'_, Entry>>)> = waiting
                .iter()
                .map(|(tenant, set)| (tenant.as_str(), set.iter().peekable()))
                .collect();
            let mut counts: Vec<u32> = heads
                .iter()
                .map(|(t, _)| running.get(*t).copied().unwrap_or(0))
                .collect();
            let mut heap = BinaryHeap::new();
            for slot in 0..heads.len() {
                self.push_turn(&mut heap, &mut heads, &counts, slot, true);
            }
            while free > 0 && out.len() + picked.len() < max {
                let Some(turn) = heap.pop() else { break };
                let slot = turn.slot;
                let (tenant, iter) = &mut heads[slot];
                let Some(entry) = iter.next() else { continue };
                picked.push((tenant.to_string(), entry.id.clone()));
                counts[slot] += 1;
                free -= 1;
                self.push_turn(&mut heap, &mut heads, &counts, slot, true);
            }
        }
        for (tenant, id) in picked {
            book.remove(&id);
            book.holding.insert(id.clone(), tenant.clone());
            *book.running.entry(tenant).or_default() += 1;
            book.launching.insert(id.clone(), None);
            out.push(id);
        }
        drop(book);
        if !out.is_empty() {
            self.changed.notify_one();
        }
        out
    }

    /// Whether the job waits in the queue (not admitted yet).
    pub(super) fn is_waiting(&self, id: &str) -> bool {
        self.book().waiting_ids.contains_key(id)
    }

    /// The executor has the job's workload.
    pub(super) fn launched(&self, id: &str) {
        self.book().launching.remove(id);
    }

    /// Creating the job's workload failed; the launcher tries again at `next`. It keeps its
    /// slot meanwhile.
    pub(super) fn backing_off(&self, id: &str, next: DateTime<Utc>) {
        if let Some(at) = self.book().launching.get_mut(id) {
            *at = Some(next);
        }
    }

    /// When the launcher next tries to create the workload of an admitted job it failed to.
    pub(super) fn next_try(&self, id: &str) -> Option<DateTime<Utc>> {
        self.book().launching.get(id).copied().flatten()
    }

    /// Free slots now (`usize::MAX` without a cap).
    fn free(&self, book: &Book) -> usize {
        match self.policy.max_running {
            Some(max) => (max as usize).saturating_sub(book.holding.len()),
            None => usize::MAX,
        }
    }

    /// Puts `slot`'s tenant in the running for the next pick, if it has a waiting job (and,
    /// `capped`, is below its cap).
    fn push_turn<'a>(
        &self,
        heap: &mut BinaryHeap<Turn<'a>>,
        heads: &mut [(&'a str, Peekable<std::collections::btree_set::Iter<'a, Entry>>)],
        counts: &[u32],
        slot: usize,
        capped: bool,
    ) {
        let (tenant, iter) = &mut heads[slot];
        let tenant: &'a str = tenant;
        if capped
            && let Some(cap) = self.policy.tenant_cap(tenant)
            && counts[slot] >= cap
        {
            return;
        }
        if let Some(head) = iter.peek().copied() {
            heap.push(Turn {
                running: u64::from(counts[slot]),
                weight: u64::from(self.policy.weight(tenant)),
                head,
                tenant,
                slot,
            });
        }
    }

    /// Recomputes the order of the waiting jobs and why each waits; kept for reads.
    pub(super) fn refresh(&self) -> Arc<Placement> {
        let book = self.book();
        let mut free = self.free(&book);
        let mut heads: Vec<(&str, Peekable<std::collections::btree_set::Iter<'_, Entry>>)> = book
            .waiting
            .iter()
            .map(|(tenant, set)| (tenant.as_str(), set.iter().peekable()))
            .collect();
        let mut counts: Vec<u32> = heads
            .iter()
            .map(|(t, _)| book.running.get(*t).copied().unwrap_or(0))
            .collect();
        let mut order = Vec::with_capacity(book.waiting_ids.len());
        let mut places = HashMap::with_capacity(book.waiting_ids.len());
        let mut local: Vec<u32> = vec![0; heads.len()];
        // First what starts as soon as the launcher comes (slots free, tenant below its cap),
        // then the rest in the order they would start if slots kept freeing and no job came.
        let mut heap = BinaryHeap::new();
        for slot in 0..heads.len() {
            self.push_turn(&mut heap, &mut heads, &counts, slot, true);
        }
        while free > 0 {
            let Some(turn) = heap.pop() else { break };
            let slot = turn.slot;
            let Some(entry) = heads[slot].1.next() else {
                continue;
            };
            counts[slot] += 1;
            local[slot] += 1;
            free -= 1;
            places.insert(entry.id.clone(), (order.len() as u32 + 1, local[slot], None));
            order.push((entry.id.clone(), None));
            self.push_turn(&mut heap, &mut heads, &counts, slot, true);
        }
        let waits: Vec<Wait> = heads
            .iter()
            .zip(&counts)
            .map(|((tenant, _), count)| match self.policy.tenant_cap(tenant) {
                Some(cap) if *count >= cap => Wait {
                    reason: TENANT_LIMIT,
                    message: format!("namespace {tenant} runs at most {cap} jobs at once, its cap"),
                },
                _ => Wait {
                    reason: WAITING_FOR_CAPACITY,
                    message: match self.policy.max_running {
                        Some(max) => format!(
                            "waiting for one of the server's {max} slots (--max-running); jobs ahead take the next ones"
                        ),
                        None => "waiting for a free slot".to_owned(),
                    },
                },
            })
            .collect();
        let mut heap = BinaryHeap::new();
        for slot in 0..heads.len() {
            self.push_turn(&mut heap, &mut heads, &counts, slot, false);
        }
        let mut behind_slot = 0u32;
        while let Some(turn) = heap.pop() {
            let slot = turn.slot;
            let Some(entry) = heads[slot].1.next() else {
                continue;
            };
            counts[slot] += 1;
            local[slot] += 1;
            let wait = waits[slot].clone();
            let for_slot = (wait.reason == WAITING_FOR_CAPACITY).then(|| {
                behind_slot += 1;
                behind_slot
            });
            places.insert(entry.id.clone(), (order.len() as u32 + 1, local[slot], for_slot));
            order.push((entry.id.clone(), Some(wait)));
            self.push_turn(&mut heap, &mut heads, &counts, slot, false);
        }
        drop(heap);
        drop(heads);
        drop(book);
        let placement = Arc::new(Placement { order, places });
        *self.placement.write().unwrap_or_else(|p| p.into_inner()) = placement.clone();
        placement
    }

    /// Where a waiting job stands, as last computed; `None` for a job the queue does not
    /// hold waiting (or not yet computed).
    pub(super) fn place(&self, id: &str) -> Option<QueuePlace> {
        let placement = self.placement.read().unwrap_or_else(|p| p.into_inner()).clone();
        let (position, local, for_slot) = *placement.places.get(id)?;
        let (estimated_start_at, estimate) = self.estimate(for_slot, position);
        Some(QueuePlace {
            position: Some(position),
            local_queue_position: Some(local),
            estimated_start_at,
            estimate: Some(estimate),
        })
    }

    /// When a job may start: only for jobs that wait for the server's slots, from the pace at
    /// which slots freed lately.
    fn estimate(&self, for_slot: Option<u32>, position: u32) -> (Option<DateTime<Utc>>, String) {
        let Some(ahead) = for_slot else {
            let placement = self.placement.read().unwrap_or_else(|p| p.into_inner()).clone();
            let starting = placement
                .order
                .get(position as usize - 1)
                .is_some_and(|(_, wait)| wait.is_none());
            return if starting {
                (
                    Some(Utc::now()),
                    "a slot is free: it starts as soon as the launcher takes it".to_owned(),
                )
            } else {
                (
                    None,
                    "no estimate: it waits for its own namespace's jobs to end, and jobgate does not time them per namespace"
                        .to_owned(),
                )
            };
        };
        let book = self.book();
        let now = Instant::now();
        let recent: Vec<Instant> = book
            .frees
            .iter()
            .copied()
            .filter(|t| now.duration_since(*t) <= FREES_WINDOW)
            .collect();
        drop(book);
        if recent.len() < FREES_NEEDED {
            return (
                None,
                format!(
                    "no estimate: fewer than {FREES_NEEDED} slots freed in the last hour, too few to tell the pace"
                ),
            );
        }
        let span = recent[recent.len() - 1].duration_since(recent[0]);
        let mean = span / (recent.len() as u32 - 1);
        let wait = mean * ahead;
        let at = Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
        (
            Some(at),
            format!(
                "{ahead} jobs to start before it (itself included), one per {:.1}s: the mean time between the last {} slots freed",
                mean.as_secs_f64(),
                recent.len()
            ),
        )
    }
}

impl Book {
    fn enqueue(&mut self, job: &Job) {
        if self.holding.contains_key(&job.id) || self.waiting_ids.contains_key(&job.id) {
            return;
        }
        let entry = Entry::of(job);
        let tenant = job.spec.namespace.clone();
        self.waiting
            .entry(tenant.clone())
            .or_default()
            .insert(entry.clone());
        self.waiting_ids.insert(job.id.clone(), (tenant, entry));
    }

    /// Takes a job out, waiting or holding; returns whether it freed a slot.
    fn remove(&mut self, id: &str) -> bool {
        if let Some((tenant, entry)) = self.waiting_ids.remove(id) {
            if let Some(set) = self.waiting.get_mut(&tenant) {
                set.remove(&entry);
                if set.is_empty() {
                    self.waiting.remove(&tenant);
                }
            }
            return false;
        }
        self.launching.remove(id);
        let Some(tenant) = self.holding.remove(id) else {
            return false;
        };
        if let Some(n) = self.running.get_mut(&tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running.remove(&tenant);
            }
        }
        if self.frees.len() == FREES_KEPT {
            self.frees.pop_front();
        }
        self.frees.push_back(Instant::now());
        true
    }
}

/// Recomputes the order and reasons when the queue changed, at most every [`REFRESH`], and
/// has the writer record the reasons that changed.
pub(super) async fn queue_keeper(inner: Arc<ServiceState>, queue: Arc<LocalQueue>) {
    loop {
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = queue.changed.notified() => {}
        }
        let placement = queue.refresh();
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        inner
            .metrics
            .local_queue_waiting
            .set(gauge(placement.order.len()));
        inner
            .metrics
            .local_queue_running
            .set(gauge(queue.running_slots()));
        let now_reasons = reasons_to_record(&inner, &placement);
        let more = now_reasons.len() == MAX_REASON_CHANGES;
        if !now_reasons.is_empty() {
            let (reply, committed) = oneshot::channel();
            if inner
                .commands
                .send(WriterCommand::QueueReasons {
                    changes: now_reasons,
                    reply,
                })
                .await
                .is_err()
            {
                return;
            }
            // Not recorded (the store cannot write): the next round tries again.
            if !committed.await.unwrap_or(false) || more {
                queue.changed.notify_one();
            }
        }
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = tokio::time::sleep(REFRESH) => {}
        }
    }
}

/// The waiting jobs whose recorded reason differs from the one computed, nearest to start
/// first, at most [`MAX_REASON_CHANGES`].
fn reasons_to_record(inner: &ServiceState, placement: &Placement) -> Vec<(String, Wait)> {
    let mut changes = Vec::new();
    for (id, wait) in &placement.order {
        let Some(wait) = wait else { continue };
        let Some(job) = inner.active.get(id) else { continue };
        let recorded = job.local_queue_wait();
        let same =
            recorded.is_some_and(|r| r.reason == wait.reason && r.message.as_deref() == Some(&wait.message));
        if !same && !job.is_waiting_for_dependencies() {
            changes.push((id.clone(), wait.clone()));
            if changes.len() == MAX_REASON_CHANGES {
                break;
            }
        }
    }
    changes
}
