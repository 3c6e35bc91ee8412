//! Shards: how replicas sharing one database divide the work on jobs.
//!
//! Every job belongs to one of [`SHARD_COUNT`] shards, a pure function of its id
//! ([`shard_of`]): the low bits of the id's last byte, which in a UUIDv7 is random. The
//! shard is stamped on the job's workloads as a label, so that a replica's watches select
//! only the shards it owns, and the PostgreSQL store computes the same value in SQL to hand
//! the outbox to its owner. The number is fixed, not configured: replicas disagreeing on it
//! would each act on jobs the others own, and the labels already stamped would lie.
//!
//! It owns the mapping and the [`ShardSet`] value only; who owns which shard is decided by
//! the executor's membership (Kubernetes Leases) and must not be decided here.

/// How many shards jobs are divided into: the most replicas that can share watch work.
pub const SHARD_COUNT: u32 = 32;

/// The label carrying a workload's shard, for label-selected watches.
pub const SHARD_LABEL: &str = "jobgate.io/shard";

/// The shard of the job with this id: its last two hexadecimal digits modulo
/// [`SHARD_COUNT`] (the store's SQL computes exactly this); an id that does not end in hex
/// digits (none jobgate makes) hashes its bytes instead.
pub fn shard_of(job_id: &str) -> u32 {
    let tail = job_id.get(job_id.len().saturating_sub(2)..).unwrap_or("");
    match u8::from_str_radix(tail, 16) {
        Ok(byte) if tail.len() == 2 => u32::from(byte) % SHARD_COUNT,
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        _ => {
            let hash = job_id.bytes().fold(0x811c_9dc5_u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
            });
            hash % SHARD_COUNT
        }
    }
}

/// A set of shards, as a bit mask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShardSet(u32);

impl ShardSet {
    /// No shard.
    pub const NONE: ShardSet = ShardSet(0);
    /// Every shard: a process that shares its database with nobody.
    pub const ALL: ShardSet = ShardSet(u32::MAX >> (32 - SHARD_COUNT));

    pub fn contains(self, shard: u32) -> bool {
        shard < SHARD_COUNT && self.0 & (1 << shard) != 0
    }

    /// Whether the job with this id is in the set.
    pub fn holds(self, job_id: &str) -> bool {
        self.contains(shard_of(job_id))
    }

    pub fn with(self, shard: u32) -> ShardSet {
        debug_assert!(shard < SHARD_COUNT);
        ShardSet(self.0 | (1 << (shard % SHARD_COUNT)))
    }

    /// The set as a bit mask: shard `s` is bit `s` (how the store's SQL reads it).
    pub fn mask(self) -> u32 {
        self.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The shards in `self` and not in `other`.
    pub fn minus(self, other: ShardSet) -> ShardSet {
        ShardSet(self.0 & !other.0)
    }

    /// The shards, in ascending order.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..SHARD_COUNT).filter(move |s| self.contains(*s))
    }

    /// The shards as a comma-separated list, e.g. `0,5,17` (for a label selector's `in`).
    pub fn to_list(self) -> String {
        self.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")
    }
}

impl FromIterator<u32> for ShardSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        iter.into_iter().fold(ShardSet::NONE, ShardSet::with)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_maps_by_its_last_byte() {
        assert_eq!(
            shard_of("019a5e8c-1b2c-7d3e-8f40-1234567890ab"),
            0xab % SHARD_COUNT
        );
        assert_eq!(shard_of("019a5e8c-1b2c-7d3e-8f40-12345678901f"), 0x1f);
        assert_eq!(shard_of("019a5e8c-1b2c-7d3e-8f40-123456789020"), 0);
    }

    #[test]
    fn ids_of_a_burst_spread_over_every_shard() {
        let shards: ShardSet = (0..2000)
            .map(|_| shard_of(&uuid::Uuid::now_v7().to_string()))
            .collect();
        assert_eq!(shards, ShardSet::ALL);
    }

    #[test]
    fn other_ids_hash_stably_into_range() {
        assert_eq!(shard_of("not-hex!"), shard_of("not-hex!"));
        assert!(shard_of("x").lt(&SHARD_COUNT));
        assert!(shard_of("").lt(&SHARD_COUNT));
    }

    #[test]
    fn sets_say_what_they_hold() {
        let set: ShardSet = [0, 5, 31].into_iter().collect();
        assert!(set.contains(5) && !set.contains(6) && !set.contains(32));
        assert_eq!(set.to_list(), "0,5,31");
        assert_eq!(set.len(), 3);
        assert_eq!(set.minus([5].into_iter().collect()).to_list(), "0,31");
        assert_eq!(ShardSet::ALL.len(), SHARD_COUNT as usize);
        assert!(ShardSet::NONE.is_empty());
    }
}
