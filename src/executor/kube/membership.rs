//! Membership: how replicas sharing one database divide the shards of the job space, through
//! Kubernetes Leases (coordination.k8s.io/v1).
//!
//! Each replica holds one Lease of its own, `jobgate-member-<replica id>`, renewed every fifth
//! of the lease duration, and watches the others' (one label-selected watch). The replicas it
//! sees alive, itself included, divide the [`SHARD_COUNT`] shards by rendezvous hashing: each
//! shard goes to the live replica whose hash with it is highest, so a replica joining takes
//! shards only for itself and a replica leaving hands out only its own. Every replica computes
//! the same assignment from the same Leases; nothing else is written.
//!
//! When another replica's Lease has not changed for its lease duration (by this process's
//! monotonic clock, never by comparing wall clocks), its Lease is read at that moment: still
//! unchanged, the replica is dead and its shards are taken over at once; changed, the watch
//! had only lagged. Until that read confirms it, a silent member counts as alive.
//!
//! **Fencing.** A replica acts for its shards only while both hold:
//! - its last successful renewal *started* less than 2/3 of the lease duration ago, so that it
//!   stops well before the others can count it dead (a replica paused by SIGSTOP, or cut off
//!   from the API server, finds on resuming that it may not act and acts on nothing);
//! - it has been a member for a whole lease duration since it (re)joined, so that every
//!   replica still acting for a shard that moves to it has seen it and let the shard go
//!   (a fresh replica's shards wait up to one lease duration: a gap, never an overlap).
//!
//! The result is kept in the `Fence` (`fence.rs`): every action on a job asks it at the
//! moment it acts, every write to the cluster made for a job is checked by it, and the shards
//! it publishes drive what is watched and adopted.
//!
//! **Refusals.** A replica whose Lease cannot be written (RBAC without `leases` in
//! `coordination.k8s.io`, an API server away) is not ready, and `/readyz` says why in the API
//! server's words; the failure is logged when it starts or changes, not at every attempt, and
//! counted (`jobgate_lease_renew_failures_total`). While it is not a member it tries again with
//! back-off, from a renewal interval up to one lease duration, and becomes ready by itself once
//! a renewal succeeds (a right granted meanwhile); a member keeps renewing at its usual pace.
//!
//! No crate does this for kube 5: kube-lease-manager and kube-coordinate elect one holder of
//! one Lease (leader election, and for kube 4), while dividing work among every live replica
//! needs each one's liveness; the Lease API itself is all it takes.
//!
//! It owns the Lease of this replica, the view of the others' and the assignment. It must not
//! act on jobs itself: the executor and the job service do, asking it first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fence::Fence;
use super::manifest::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use super::watch::{WatcherHealth, watch_stream};
use crate::model::{SHARD_COUNT, ShardSet};

/// The label that marks member Leases, and its value.
pub const LEASE_ROLE_LABEL: &str = "jobgate.io/lease";
const MEMBER: &str = "member";

/// The prefix of every member Lease's name.
pub const MEMBER_LEASE_PREFIX: &str = "jobgate-member-";

/// Dead members' Leases are deleted once expired for this many lease durations (a replica
/// that ends cleanly deletes its own; one killed leaves it behind).
const FORGET_AFTER_DURATIONS: u32 = 4;

/// How replicas coordinate: set when jobgate shares its database (PostgreSQL).
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// This replica's name; the host name and a random suffix when not given.
    pub replica_id: Option<String>,
    /// Where the Leases live; the client's default namespace when not given.
    pub namespace: Option<String>,
    /// How long a replica that stopped renewing counts as alive.
    pub lease_duration: Duration,
}

/// This replica's membership, shared by the executor's tasks and the job service.
pub struct Membership {
    identity: String,
    lease_name: String,
    api: Api<Lease>,
    duration: Duration,
    /// The shards this replica acts for, and until when: its last renewal's start plus 2/3
    /// of the duration, once it has been a member for a whole duration.
    fence: Arc<Fence>,
    /// When the last successful renewal started, for readiness.
    last_renewal: Mutex<Option<Instant>>,
    /// Why the last renewal failed (the API server's message), until one succeeds: for
    /// `/readyz`, and so that a failure is logged once, not at every attempt.
    renew_problem: Mutex<Option<String>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The watch of the members' Leases, for `/readyz` and `/metrics`.
    health: Arc<WatcherHealth>,
}

/// What this replica saw of one member's Lease.
struct Seen {
    holder: String,
    resource_version: String,
    duration: Duration,
    /// When its resourceVersion last changed, by this process's clock.
    changed_at: Instant,
    /// A read of its Lease, once it had not changed for its duration, found it unchanged
    /// still: it is dead. Until then it counts as alive, however long the watch is silent.
    dead: bool,
}

/// This replica's own Lease, as last written.
struct Own {
    resource_version: String,
    /// When the current membership began (the first renewal after a lapse).
    joined_at: Instant,
    /// When the last successful renewal started.
    renewed_at: Instant,
}

impl Membership {
    pub(super) fn new(
        client: kube::Client,
        config: &MembershipConfig,
        fence: Arc<Fence>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<Self> {
        let identity = config.replica_id.clone().unwrap_or_else(default_identity);
        let namespace = config
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let health = WatcherHealth::new(format!("leases in {namespace}"), &metrics);
        Arc::new(Self {
            lease_name: lease_name(&identity),
            identity,
            api: Api::namespaced(client, &namespace),
            duration: config.lease_duration,
            fence,
            last_renewal: Mutex::new(None),
            renew_problem: Mutex::new(None),
            metrics,
            health,
        })
    }

    /// This replica's name in the Leases.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The shards this replica acts for, as they change.
    pub fn shards(&self) -> watch::Receiver<ShardSet> {
        self.fence.shards()
    }

    /// Why this replica is not ready, in words for `/readyz`; `None` while its Lease is
    /// renewed (whether or not it owns shards yet) and the watch of the others' works.
    pub(super) fn unready_reason(&self) -> Option<String> {
        if !self.renewed_recently() {
            let problem = self
                .renew_problem
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            return Some(match problem {
                Some(problem) => format!(
                    "this replica cannot renew its Lease {}/{}: {problem}",
                    self.namespace(),
                    self.lease_name
                ),
                None => format!(
                    "this replica has not renewed its Lease {}/{} yet",
                    self.namespace(),
                    self.lease_name
                ),
            });
        }
        self.health.unready_reason()
    }

    fn namespace(&self) -> &str {
        self.api.namespace().unwrap_or_default()
    }

    fn renewed_recently(&self) -> bool {
        // While joining it may not act though renewals succeed: readiness looks at the
        // renewal alone.
        self.last_renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < self.renew_deadline())
    }

    fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    fn renew_every(&self) -> Duration {
        self.duration / 5
    }

    /// Keeps this replica's Lease and the assignment until `stop`; then lets its shards go
    /// and deletes its Lease, so that the others take them over at once.
    pub(super) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut members: HashMap<String, Seen> = HashMap::new();
        let mut listing: Option<HashMap<String, Seen>> = None;
        let mut own: Option<Own> = None;
        let config = watcher::Config::default().labels(&format!("{LEASE_ROLE_LABEL}={MEMBER}"));
        let mut events = std::pin::pin!(watch_stream(self.api.clone(), config));
        let mut next_renewal = Instant::now();
        // Failed renewals in a row, for the back-off of a replica that is not a member.
        let mut failures = 0;
        loop {
            let deadline = self.next_deadline(&members, own.as_ref());
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(next_renewal) => {
                    let started = Instant::now();
                    failures = if self.renew(&mut own).await { 0 } else { failures + 1 };
                    let member = own
                        .as_ref()
                        .is_some_and(|o| started.duration_since(o.renewed_at) < self.renew_deadline());
                    next_renewal = started + self.renewal_delay(member, failures);
                    self.confirm_expired(&mut members).await;
                }
                // A member's Lease expires, this replica's join wait ends, or its fence
                // lapses: looked at when it happens, not at the next tick.
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.confirm_expired(&mut members).await;
                }
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        let list_done = matches!(event, watcher::Event::InitDone);
                        self.health.seen(matches!(event, watcher::Event::Init));
                        self.observe(event, &mut members, &mut listing);
                        if list_done {
                            self.health.list_done();
                        }
                    }
                    Some(Err(e)) => self.health.failed(&e),
                    None => break,
                },
            }
            self.assign(&members, own.as_ref());
        }
        self.leave(own).await;
    }

    /// How long after an attempt to renew again: the renewal interval while a member (or
    /// after a success), else doubling with each failure in a row up to one lease duration.
    fn renewal_delay(&self, member: bool, failures: u32) -> Duration {
        if member || failures == 0 {
            return self.renew_every();
        }
        let doubled = self.renew_every().saturating_mul(1 << (failures - 1).min(16));
        doubled.min(self.duration.max(self.renew_every()))
    }

    /// Records a failed attempt on this replica's Lease: counted, logged when the failure
    /// starts or its message changes (not at every attempt), and kept for `/readyz`.
    fn renewal_failed(&self, e: &kube::Error) {
        self.metrics.lease_renew_failures.inc();
        let message = super::api_error_text(e);
        let mut problem = self.renew_problem.lock().unwrap_or_else(PoisonError::into_inner);
        if problem.as_deref() == Some(message.as_str()) {
            tracing::debug!(replica = %self.identity, error = %message, "renewing this replica's Lease failed again");
        } else {
            tracing::warn!(replica = %self.identity, lease = %self.lease_name, error = %message, "cannot renew this replica's Lease; retrying (without a renewal for 2/3 of the lease duration it is not ready and acts for no shard)");
        }
        *problem = Some(message);
    }

    /// Creates or renews this replica's Lease; true if it did.
    async fn renew(&self, own: &mut Option<Own>) -> bool {
        let started = Instant::now();
        let lapsed = own
            .as_ref()
            .is_none_or(|o| started.duration_since(o.renewed_at) >= self.renew_deadline());
        let result = match own.as_ref() {
            Some(o) => {
                let lease = self.lease(Some(o.resource_version.clone()));
                self.bounded(self.api.replace(&self.lease_name, &PostParams::default(), &lease))
                    .await
            }
            None => self.take_own_lease().await,
        };
        match result {
            Ok(lease) => {
                let resource_version = lease.metadata.resource_version.unwrap_or_default();
                let joined_at = match own.as_ref() {
                    Some(o) if !lapsed => o.joined_at,
                    _ => {
                        tracing::info!(replica = %self.identity, lease = %self.lease_name, "joined; acting for shards after one lease duration");
                        started
                    }
                };
                *own = Some(Own {
                    resource_version,
                    joined_at,
                    renewed_at: started,
                });
                *self.last_renewal.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
                let problem = self
                    .renew_problem
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if problem.is_some() {
                    tracing::info!(replica = %self.identity, lease = %self.lease_name, "this replica's Lease is renewed again");
                }
                true
            }
            Err(e) => {
                if matches!(&e, kube::Error::Api(s) if s.is_conflict() || s.is_not_found()) {
                    // Changed or deleted by someone else (a survivor forgetting this replica
                    // while it was paused): join again, and wait as any newcomer.
                    self.metrics.lease_renew_failures.inc();
                    tracing::warn!(replica = %self.identity, error = %e, "this replica's Lease was taken from it; joining again");
                    *own = None;
                } else {
                    self.renewal_failed(&e);
                }
                false
            }
        }
    }

    /// Creates this replica's Lease, or takes it back if one of its name is left over (a
    /// restarted pod keeps its name).
    async fn take_own_lease(&self) -> Result<Lease, kube::Error> {
        match self
            .bounded(self.api.create(&PostParams::default(), &self.lease(None)))
            .await
        {
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                let existing = self.bounded(self.api.get(&self.lease_name)).await?;
                let lease = self.lease(existing.metadata.resource_version);
                self.bounded(self.api.replace(&self.lease_name, &PostParams::default(), &lease))
                    .await
            }
            other => other,
        }
    }

    /// This replica's Lease as it writes it now.
    fn lease(&self, resource_version: Option<String>) -> Lease {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                resource_version,
                labels: Some(
                    [
                        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
                        (LEASE_ROLE_LABEL.to_owned(), MEMBER.to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
                renew_time: Some(now),
                ..LeaseSpec::default()
            }),
        }
    }

    /// One request of the Lease API, bounded: a hung request must not hold renewals up.
    async fn bounded<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        match tokio::time::timeout(self.renew_every(), request).await {
            Ok(result) => result,
            Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the Lease request took longer than the renewal interval",
            )))),
        }
    }

    /// Takes in one event of the members' watch.
    fn observe(
        &self,
        event: watcher::Event<Lease>,
        members: &mut HashMap<String, Seen>,
        listing: &mut Option<HashMap<String, Seen>>,
    ) {
        match event {
            watcher::Event::Init => *listing = Some(HashMap::new()),
            watcher::Event::InitApply(lease) => {
                if let Some(listing) = listing.as_mut() {
                    seen(listing, members, &lease);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = listing.take() {
                    *members = listed;
                }
            }
            watcher::Event::Apply(lease) => seen(members, &HashMap::new(), &lease),
            watcher::Event::Delete(lease) => {
                if let Some(name) = lease.metadata.name {
                    members.remove(&name);
                }
            }
        }
    }

    /// The next moment the assignment may change without an event: a live member's Lease
    /// expiring, this replica's join wait ending, or its fence lapsing.
    fn next_deadline(&self, members: &HashMap<String, Seen>, own: Option<&Own>) -> Option<Instant> {
        let now = Instant::now();
        let expiries = members
            .iter()
            .filter(|(name, s)| **name != self.lease_name && !s.dead)
            .map(|(_, s)| s.changed_at + s.duration);
        let own = own
            .into_iter()
            .flat_map(|o| [o.joined_at + self.duration, o.renewed_at + self.renew_deadline()]);
        expiries.chain(own).filter(|at| *at > now).min()
    }

    /// Reads the Lease of each member silent for its lease duration: unchanged, it is dead
    /// (its shards move); changed, the watch had lagged and it lives on. A member dead for
    /// several lease durations has its Lease deleted.
    async fn confirm_expired(&self, members: &mut HashMap<String, Seen>) {
        let now = Instant::now();
        let silent: Vec<String> = members
            .iter()
            .filter(|(name, s)| **name != self.lease_name && now.duration_since(s.changed_at) >= s.duration)
            .map(|(name, _)| name.clone())
            .collect();
        for name in silent {
            let Some(s) = members.get(&name) else { continue };
            if s.dead {
                if now.duration_since(s.changed_at) >= s.duration * FORGET_AFTER_DURATIONS {
                    // The precondition makes the delete the confirmation.
                    let resource_version = s.resource_version.clone();
                    self.forget(&name, &resource_version).await;
                }
                continue;
            }
            match self.bounded(self.api.get_opt(&name)).await {
                Ok(Some(lease)) => {
                    let Some(s) = members.get_mut(&name) else { continue };
                    if lease.metadata.resource_version.as_deref() != Some(s.resource_version.as_str()) {
                        s.resource_version = lease.metadata.resource_version.unwrap_or_default();
                        s.changed_at = Instant::now();
                    } else {
                        tracing::info!(lease = %name, replica = %s.holder, "a replica's Lease expired; taking its shards over");
                        s.dead = true;
                    }
                }
                Ok(None) => {
                    members.remove(&name);
                }
                // Unconfirmed: the member still counts as alive; read again at the next tick.
                // (This replica cannot renew its own Lease either when the API server is away,
                // and then acts for nothing.)
                Err(e) => {
                    tracing::debug!(lease = %name, error = %e, "reading an expired member's Lease failed")
                }
            }
        }
    }

    /// Deletes a long-dead member's Lease, unless it changed meanwhile.
    async fn forget(&self, name: &str, resource_version: &str) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.bounded(self.api.delete(name, &params)).await {
            Ok(_) => tracing::info!(lease = %name, "forgot a replica dead for several lease durations"),
            Err(e) => tracing::debug!(lease = %name, error = %e, "deleting a dead member's Lease failed"),
        }
    }

    /// Recomputes the live members and this replica's shards, and publishes them.
    fn assign(&self, members: &HashMap<String, Seen>, own: Option<&Own>) {
        let now = Instant::now();
        let mut live: Vec<&str> = members
            .iter()
            .filter(|(name, s)| **name != self.lease_name && !s.dead)
            .map(|(_, s)| s.holder.as_str())
            .collect();
        live.push(&self.identity);
        live.sort_unstable();
        live.dedup();
        self.metrics.replicas_live.set(live.len() as i64);
        let acting_until = own.and_then(|o| {
            let member_long_enough = now.duration_since(o.joined_at) >= self.duration;
            let until = o.renewed_at + self.renew_deadline();
            (member_long_enough && now < until).then_some(until)
        });
        let shards = assignment(&live, &self.identity);
        if self.fence.set(shards, acting_until) {
            let acting = if acting_until.is_some() {
                shards
            } else {
                ShardSet::NONE
            };
            tracing::info!(replica = %self.identity, shards = %acting.to_list(), replicas = live.len(), "shards assigned");
        }
    }

    /// Stops acting, then deletes this replica's Lease so that its shards move at once.
    async fn leave(&self, own: Option<Own>) {
        self.fence.set(ShardSet::NONE, None);
        let Some(own) = own else { return };
        self.forget(&self.lease_name, &own.resource_version).await;
    }
}

/// Records `lease` in `into`, keeping the clock of a version `before` (or `into`) already had.
fn seen(into: &mut HashMap<String, Seen>, before: &HashMap<String, Seen>, lease: &Lease) {
    let Some(name) = lease.metadata.name.clone() else {
        return;
    };
    let resource_version = lease.metadata.resource_version.clone().unwrap_or_default();
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_else(|| name.clone());
    let duration =
        Duration::from_secs(spec.and_then(|s| s.lease_duration_seconds).unwrap_or(15).max(1) as u64);
    let previous = into.get(&name).or_else(|| before.get(&name));
    let (changed_at, dead) = match previous {
        Some(p) if p.resource_version == resource_version => (p.changed_at, p.dead),
        _ => (Instant::now(), false),
    };
    into.insert(
        name,
        Seen {
            holder,
            resource_version,
            duration,
            changed_at,
            dead,
        },
    );
}

/// The shards `me` gets among `live` members: each shard goes to the member whose hash
/// with it is highest (rendezvous hashing), so that a member coming or going moves only its
/// own shards.
pub fn assignment(live: &[&str], me: &str) -> ShardSet {
    (0..SHARD_COUNT)
        .filter(|shard| {
            live.iter()
                .max_by_key(|member| (rendezvous(member, *shard), **member))
                .is_some_and(|owner| *owner == me)
        })
        .collect()
}

/// FNV-1a of the member's name and the shard, then MurmurHash3's finaliser: stable across
/// builds and processes, and every input bit reaches the high bits that decide the maximum
/// (FNV alone lets names sharing a prefix, as pods' do, win every shard together).
fn rendezvous(member: &str, shard: u32) -> u64 {
    let mut h = member
        .bytes()
        .chain([b'/'])
        .chain(shard.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A name for this process: the host's (a pod's name in a cluster) and a random suffix.
fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "jobgate".to_owned());
    // A UUIDv7's last digits are random.
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!("{host}-{}", &suffix[suffix.len() - 8..])
}

/// The Lease of a replica: its name made a valid object name (lowercase alphanumerics,
/// `-` and `.`, at most 253 characters).
fn lease_name(identity: &str) -> String {
    let cleaned: String = identity
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253 - MEMBER_LEASE_PREFIX.len())
        .collect();
    let cleaned = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    format!(
        "{MEMBER_LEASE_PREFIX}{}",
        if cleaned.is_empty() { "x" } else { cleaned }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_has_exactly_one_owner() {
        let live = ["a", "b", "c"];
        let sets: Vec<ShardSet> = live.iter().map(|m| assignment(&live, m)).collect();
        let total: usize = sets.iter().map(|s| s.len()).sum();
        assert_eq!(total, SHARD_COUNT as usize);
        let union = sets
            .iter()
            .fold(ShardSet::NONE, |u, s| s.iter().fold(u, ShardSet::with));
        assert_eq!(union, ShardSet::ALL);
        assert!(sets.iter().all(|s| !s.is_empty()), "{sets:?}");
    }

    #[test]
    fn members_named_alike_share_the_shards_evenly() {
        // Pods of one Deployment differ only in a suffix.
        for names in [
            ["vm-e9e46532", "vm-b2a46163", "vm-d27c4940"],
            ["jobgate-7d9f-a", "jobgate-7d9f-b", "jobgate-7d9f-c"],
        ] {
            for me in names {
                let n = assignment(&names, me).len();
                assert!((6..=16).contains(&n), "{me} of {names:?} gets {n} of 32 shards");
            }
        }
    }

    #[test]
    fn a_member_leaving_moves_only_its_own_shards() {
        let before = ["a", "b", "c"];
        let after = ["a", "c"];
        for m in after {
            let kept = assignment(&before, m);
            let now = assignment(&after, m);
            assert_eq!(kept.minus(now), ShardSet::NONE, "{m} lost shards it had");
        }
        let moved = assignment(&before, "b");
        let gained = assignment(&after, "a").minus(assignment(&before, "a"));
        let gained_c = assignment(&after, "c").minus(assignment(&before, "c"));
        assert_eq!(gained.len() + gained_c.len(), moved.len());
    }

    #[test]
    fn a_lone_member_owns_everything() {
        assert_eq!(assignment(&["only"], "only"), ShardSet::ALL);
        assert_eq!(assignment(&["only"], "other"), ShardSet::NONE);
    }

    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(
            lease_name("jobgate-7d9f-abc12"),
            "jobgate-member-jobgate-7d9f-abc12"
        );
        assert_eq!(lease_name("Host_Name:1"), "jobgate-member-host-name-1");
        assert_eq!(lease_name("--"), "jobgate-member-x");
        assert!(lease_name(&"a".repeat(400)).len() <= 253);
    }
}
