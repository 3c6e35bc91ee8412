//! Completion indexes as the Job controller keeps them: sorted, merged intervals, parsed from and
//! printed to the interval syntax of `status.completedIndexes` (`"0-2,5"`; two neighbours print
//! as `"3,4"`, as the real controller prints them).

use std::fmt;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Intervals(Vec<(u64, u64)>);

impl Intervals {
    /// Parses `status.completedIndexes`, ignoring what lies at or beyond `completions` and
    /// malformed parts (the real controller logs and skips them too).
    pub(crate) fn parse(s: &str, completions: u64) -> Intervals {
        let mut indexes = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let (Ok(lo), Ok(hi)) = (lo.trim().parse::<u64>(), hi.trim().parse::<u64>()) else {
                continue;
            };
            if lo >= completions || hi < lo {
                continue;
            }
            indexes.push((lo, hi.min(completions.saturating_sub(1))));
        }
        let mut out = Intervals::default();
        for (lo, hi) in indexes {
            out.insert_range(lo, hi);
        }
        out
    }

    fn insert_range(&mut self, lo: u64, hi: u64) {
        self.0.push((lo, hi));
        self.0.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.0.len());
        for &(lo, hi) in &self.0 {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        self.0 = merged;
    }

    pub(crate) fn insert(&mut self, index: u64) {
        if !self.has(index) {
            self.insert_range(index, index);
        }
    }

    pub(crate) fn has(&self, index: u64) -> bool {
        self.0.iter().any(|&(lo, hi)| lo <= index && index <= hi)
    }

    /// Every index the intervals hold, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().flat_map(|&(lo, hi)| lo..=hi)
    }

    /// How many indexes the intervals hold.
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|&(lo, hi)| hi - lo + 1).sum()
    }

    /// The `count` lowest indexes below `completions` that are in neither `self` nor `taken`.
    pub(crate) fn first_missing(&self, taken: &Intervals, count: usize, completions: u64) -> Vec<u64> {
        let mut out = Vec::with_capacity(count);
        let mut i = 0;
        while i < completions && out.len() < count {
            if !self.has(i) && !taken.has(i) {
                out.push(i);
            }
            i += 1;
        }
        out
    }
}

impl fmt::Display for Intervals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, &(lo, hi)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{lo}")?;
            if hi == lo + 1 {
                write!(f, ",{hi}")?;
            } else if hi > lo {
                write!(f, "-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_the_real_controller() {
        let mut i = Intervals::default();
        for n in [5, 0, 2, 1] {
            i.insert(n);
        }
        assert_eq!(i.to_string(), "0-2,5");
        i.insert(6);
        assert_eq!(i.to_string(), "0-2,5,6");
        assert_eq!(i.total(), 5);
        assert_eq!(Intervals::default().to_string(), "");
    }

    #[test]
    fn parses_merges_and_clips_to_completions() {
        let i = Intervals::parse("0-1,2,7-9,junk,12", 9);
        assert_eq!(i.to_string(), "0-2,7,8");
        assert!(i.has(8) && !i.has(9) && !i.has(3));
        assert_eq!(Intervals::parse("", 4).total(), 0);
    }

    #[test]
    fn first_missing_skips_succeeded_and_active() {
        let done = Intervals::parse("0,2", 6);
        let mut active = Intervals::default();
        active.insert(1);
        assert_eq!(done.first_missing(&active, 2, 6), [3, 4]);
        assert_eq!(done.first_missing(&active, 9, 6), [3, 4, 5]);
    }
}
