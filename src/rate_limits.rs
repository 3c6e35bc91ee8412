//! Per-identity rate limits: mutations, WebSocket connections and subscriptions, each a
//! token bucket per identity name (governor's GCRA), refilled evenly over a minute.
//!
//! It owns the buckets and says how long to wait; the GraphQL layer turns that into
//! `RATE_LIMITED` (HTTP 429 with Retry-After when nothing else was asked), the WebSocket
//! layer into close 1013. It must not know about jobs.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

/// std's monotonic `Instant`, not governor's default TSC clock (quanta): on a VM whose cores'
/// counters disagree, a TSC reading can go backwards between threads, which made a fresh
/// bucket refuse its second cell.
type Limiter =
    RateLimiter<String, DashMapStateStore<String>, MonotonicClock, NoOpMiddleware<std::time::Instant>>;

/// Allowed per identity per minute; 0 means no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitSettings {
    pub mutations_per_minute: u32,
    pub connections_per_minute: u32,
    pub subscriptions_per_minute: u32,
}

/// What is being limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limited {
    Mutations,
    Connections,
    Subscriptions,
}

impl Limited {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutations => "mutations",
            Self::Connections => "connections",
            Self::Subscriptions => "subscriptions",
        }
    }
}

/// Buckets kept before the idle ones are dropped: identities come and go (JWT subjects),
/// and a full bucket holds nothing worth keeping.
const PRUNE_ABOVE: usize = 10_000;

pub struct RateLimits {
    mutations: Option<Limiter>,
    connections: Option<Limiter>,
    subscriptions: Option<Limiter>,
    clock: MonotonicClock,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits").finish_non_exhaustive()
    }
}

fn limiter(per_minute: u32) -> Option<Limiter> {
    NonZeroU32::new(per_minute).map(|n| RateLimiter::dashmap_with_clock(Quota::per_minute(n), MonotonicClock))
}

impl RateLimits {
    pub fn new(settings: RateLimitSettings) -> Self {
        Self {
            mutations: limiter(settings.mutations_per_minute),
            connections: limiter(settings.connections_per_minute),
            subscriptions: limiter(settings.subscriptions_per_minute),
            clock: MonotonicClock,
        }
    }

    fn limiter(&self, what: Limited) -> Option<&Limiter> {
        let limiter = match what {
            Limited::Mutations => &self.mutations,
            Limited::Connections => &self.connections,
            Limited::Subscriptions => &self.subscriptions,
        };
        let limiter = limiter.as_ref()?;
        if limiter.len() > PRUNE_ABOVE {
            limiter.retain_recent();
        }
        Some(limiter)
    }

    /// Takes one from `identity`'s bucket for `what`, or says how long until one is there.
    pub fn check(&self, what: Limited, identity: &str) -> Result<(), Duration> {
        let Some(limiter) = self.limiter(what) else {
            return Ok(());
        };
        // Allocates only for a key it has not seen; identity names are short.
        limiter
            .check_key(&identity.to_owned())
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Takes `n` from `identity`'s bucket for `what` at once (a bulk submission counts as
    /// many mutations as it holds jobs), or takes nothing and says how long until they are
    /// there, or that they never will be: `n` is more than the bucket holds.
    pub fn check_n(&self, what: Limited, identity: &str, n: u32) -> Result<(), Refused> {
        let (Some(limiter), Some(n)) = (self.limiter(what), NonZeroU32::new(n)) else {
            return Ok(());
        };
        match limiter.check_key_n(&identity.to_owned(), n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(Refused::Wait(not_until.wait_time_from(self.clock.now()))),
            Err(governor::InsufficientCapacity(most)) => Err(Refused::TooMany { most }),
        }
    }
}

/// Why [`RateLimits::check_n`] took nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Try again after this long.
    Wait(Duration),
    /// More than the bucket ever holds: no more than `most` at once.
    TooMany { most: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identity_has_its_own_bucket_and_unset_limits_allow_all() {
        let limits = RateLimits::new(RateLimitSettings {
            mutations_per_minute: 2,
            ..RateLimitSettings::default()
        });
        assert!(limits.check(Limited::Mutations, "a").is_ok());
        assert!(limits.check(Limited::Mutations, "a").is_ok());
        let wait = limits.check(Limited::Mutations, "a").unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert!(limits.check(Limited::Mutations, "b").is_ok());
        for _ in 0..100 {
            assert!(limits.check(Limited::Subscriptions, "a").is_ok());
        }
    }

    #[test]
    fn a_bulk_takes_as_many_as_it_holds_or_nothing() {
        let limits = RateLimits::new(RateLimitSettings {
            mutations_per_minute: 10,
            ..RateLimitSettings::default()
        });
        assert_eq!(
            limits.check_n(Limited::Mutations, "a", 11),
            Err(Refused::TooMany { most: 10 }),
            "more than the bucket holds"
        );
        assert!(limits.check_n(Limited::Mutations, "a", 7).is_ok());
        assert!(matches!(
            limits.check_n(Limited::Mutations, "a", 4),
            Err(Refused::Wait(_))
        ));
        // The refused bulk took nothing: three are left.
        assert!(limits.check_n(Limited::Mutations, "a", 3).is_ok());
        assert!(limits.check(Limited::Mutations, "a").is_err());
        assert!(limits.check_n(Limited::Mutations, "b", 10).is_ok());
        assert!(
            RateLimits::new(RateLimitSettings::default())
                .check_n(Limited::Mutations, "a", 1_000)
                .is_ok()
        );
    }
}
