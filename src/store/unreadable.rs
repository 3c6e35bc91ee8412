//! Rows the store holds but cannot decode: a job, an event's job snapshot or a webhook whose
//! stored text no longer reads as what jobgate wrote (edited by hand, written by another
//! version, damaged on disk).
//!
//! One such row must never stop the service. Reads of many rows skip it and serve the rest;
//! a read of that one row answers [`StoreError::Unreadable`](super::StoreError::Unreadable).
//! Either way the row is reported here once, with why, and logged once: the service shows
//! the list to administrators and counts it in its metrics. A row that reads again (repaired,
//! or deleted) is forgotten the next time it is read whole.
//!
//! This module decides nothing about what the service does with such a job; it only keeps
//! the list, bounded.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use crate::model::Job;

/// The most rows kept in the list; beyond it, rows are counted but not listed.
pub const MAX_LISTED: usize = 1000;

/// Which kind of row could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowKind {
    /// A job's row (`jobs.body`).
    Job,
    /// The job snapshot of one status event (`events.job`).
    Event,
    /// A webhook endpoint's filter or scope.
    Webhook,
    /// A schedule's definition (`schedules.body`).
    Schedule,
    /// A schedule event's kind or snapshot.
    ScheduleEvent,
}

impl RowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::Event => "event",
            Self::Webhook => "webhook",
            Self::Schedule => "schedule",
            Self::ScheduleEvent => "schedule_event",
        }
    }
}

/// One row that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableRow {
    pub kind: RowKind,
    /// The row's key: a job's or webhook's id, an event's cursor.
    pub key: String,
    /// The job it belongs to (a job's own id, an event's job).
    pub job_id: Option<String>,
    /// Why it could not be read.
    pub error: String,
    pub first_seen: DateTime<Utc>,
}

/// The rows found unreadable so far by this process.
#[derive(Debug, Default)]
pub struct Unreadable {
    rows: Mutex<BTreeMap<(RowKind, String), UnreadableRow>>,
    /// Rows currently known unreadable, listed or not; read without the lock on every
    /// successful read, which then has nothing to forget while it is zero.
    known: AtomicUsize,
}

impl Unreadable {
    /// Decodes `text` as `T`, or reports the row and returns `None`.
    pub fn decode<T: DeserializeOwned>(
        &self,
        kind: RowKind,
        key: &str,
        job_id: Option<&str>,
        text: &str,
    ) -> Option<T> {
        self.outcome(kind, key, job_id, serde_json::from_str(text))
    }

    /// The value a row decoded to, or `None` after reporting why it did not.
    pub fn outcome<T, E: std::fmt::Display>(
        &self,
        kind: RowKind,
        key: &str,
        job_id: Option<&str>,
        decoded: Result<T, E>,
    ) -> Option<T> {
        match decoded {
            Ok(value) => {
                self.readable(kind, key);
                Some(value)
            }
            Err(e) => {
                self.report(kind, key, job_id, e.to_string());
                None
            }
        }
    }

    /// Records that a row could not be read; logs it the first time.
    pub fn report(&self, kind: RowKind, key: &str, job_id: Option<&str>, error: String) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let entry = (kind, key.to_owned());
        if rows.contains_key(&entry) {
            return;
        }
        tracing::error!(
            row = kind.as_str(),
            key,
            job = job_id.unwrap_or_default(),
            %error,
            "a stored row cannot be read: it is left out of every answer (reads of it alone answer DATA_LOSS) until it is repaired or deleted; the rest is served"
        );
        self.known.fetch_add(1, Ordering::Relaxed);
        if rows.len() < MAX_LISTED {
            rows.insert(
                entry,
                UnreadableRow {
                    kind,
                    key: key.to_owned(),
                    job_id: job_id.map(str::to_owned),
                    error,
                    first_seen: Utc::now(),
                },
            );
        }
    }

    /// Forgets a row that was read whole.
    fn readable(&self, kind: RowKind, key: &str) {
        if self.known.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if rows.remove(&(kind, key.to_owned())).is_some() {
            self.known.fetch_sub(1, Ordering::Relaxed);
            tracing::info!(
                row = kind.as_str(),
                key,
                "a stored row that could not be read reads again"
            );
        }
    }

    /// The rows listed, oldest report first.
    pub fn list(&self) -> Vec<UnreadableRow> {
        let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<UnreadableRow> = rows.values().cloned().collect();
        list.sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then_with(|| a.key.cmp(&b.key)));
        list
    }

    /// How many rows are known unreadable, listed or not.
    pub fn count(&self) -> usize {
        self.known.load(Ordering::Relaxed)
    }
}

/// A job as every backend stores it: its JSON text, with its id from its own column. `None`
/// (reported to `unreadable`) when the text does not decode.
pub(super) fn decode_job(unreadable: &Unreadable, id: &str, body: &str) -> Option<Job> {
    unreadable.decode(RowKind::Job, id, Some(id), body)
}

/// [`decode_job`] for a read of that one job: its failure is the answer.
pub(super) fn read_job(unreadable: &Unreadable, id: &str, body: &str) -> super::Result<Job> {
    decode_job(unreadable, id, body).ok_or_else(|| unreadable_error(unreadable, RowKind::Job, id))
}

/// The error answered for a row [`Unreadable`] has just reported.
pub(super) fn unreadable_error(unreadable: &Unreadable, kind: RowKind, key: &str) -> super::StoreError {
    let reason = unreadable
        .list()
        .into_iter()
        .find(|row| row.kind == kind && row.key == key)
        .map_or_else(|| "its stored text does not decode".to_owned(), |row| row.error);
    super::StoreError::Unreadable {
        kind,
        key: key.to_owned(),
        reason,
    }
}

/// A read of up to `limit` rows in cursor order that leaves unreadable rows out (the decoder
/// reports them) and reads on past them, so that it still returns `limit` items whenever the
/// store holds that many readable ones: a short answer keeps meaning "nothing more now" to
/// every caller (subscribers, followers, webhooks, the launcher).
///
/// Each round reads [`ReadPast::wanted`] rows after [`ReadPast::after`] and hands them to
/// [`ReadPast::take`], until it says the read is done.
pub(super) struct ReadPast<T> {
    limit: i64,
    after: i64,
    items: Vec<T>,
}

impl<T> ReadPast<T> {
    pub(super) fn new(limit: i64, after: i64) -> Self {
        Self {
            limit,
            after,
            items: Vec::new(),
        }
    }

    /// The cursor the next round reads after.
    pub(super) fn after(&self) -> i64 {
        self.after
    }

    /// How many rows the next round reads.
    pub(super) fn wanted(&self) -> i64 {
        self.limit - self.items.len() as i64
    }

    /// Takes one round: `read` rows were read, the highest cursor among them `last`, and
    /// `decoded` are those that decoded. Whether the read is done.
    pub(super) fn take(
        &mut self,
        read: usize,
        last: Option<i64>,
        decoded: impl IntoIterator<Item = T>,
    ) -> bool {
        let wanted = self.wanted();
        if let Some(last) = last {
            self.after = self.after.max(last);
        }
        self.items.extend(decoded);
        (read as i64) < wanted || self.wanted() <= 0
    }

    pub(super) fn into_items(self) -> Vec<T> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_reported_once_and_forgotten_when_it_reads_again() {
        let unreadable = Unreadable::default();
        assert_eq!(
            unreadable.decode::<Vec<u8>>(RowKind::Job, "j1", Some("j1"), "[1, 2]"),
            Some(vec![1, 2])
        );
        assert_eq!(unreadable.count(), 0);
        for _ in 0..3 {
            assert_eq!(
                unreadable.decode::<Vec<u8>>(RowKind::Job, "j1", Some("j1"), "[1,"),
                None
            );
        }
        assert_eq!(unreadable.count(), 1);
        let listed = unreadable.list();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].kind, listed[0].key.as_str()), (RowKind::Job, "j1"));
        assert!(listed[0].error.contains("EOF"), "{}", listed[0].error);
        // The same key of another kind is another row.
        unreadable.decode::<Vec<u8>>(RowKind::Event, "j1", Some("j1"), "x");
        assert_eq!(unreadable.count(), 2);
        unreadable.decode::<Vec<u8>>(RowKind::Job, "j1", Some("j1"), "[]");
        assert_eq!(unreadable.count(), 1);
        assert_eq!(unreadable.list()[0].kind, RowKind::Event);
    }

    #[test]
    fn a_read_past_goes_on_until_it_has_its_limit_or_the_rows_run_out() {
        // Rows 1..=6; 2 and 3 do not decode.
        let rows: Vec<(i64, bool)> = (1..=6).map(|seq| (seq, !(2..=3).contains(&seq))).collect();
        let mut read = ReadPast::new(3, 0);
        let mut rounds = 0;
        loop {
            rounds += 1;
            let round: Vec<_> = rows
                .iter()
                .filter(|(seq, _)| *seq > read.after())
                .take(read.wanted() as usize)
                .collect();
            let last = round.last().map(|(seq, _)| *seq);
            let decoded: Vec<i64> = round.iter().filter(|(_, ok)| *ok).map(|(seq, _)| *seq).collect();
            if read.take(round.len(), last, decoded) {
                break;
            }
        }
        assert_eq!((read.into_items(), rounds), (vec![1, 4, 5], 2));
        // Fewer readable rows than asked: it stops where the rows end.
        let mut read = ReadPast::<i64>::new(3, 0);
        assert!(!read.take(3, Some(3), [1]));
        assert!(read.take(1, Some(4), []));
        assert_eq!(read.into_items(), vec![1]);
    }

    #[test]
    fn the_list_is_bounded_and_the_count_is_not() {
        let unreadable = Unreadable::default();
        for i in 0..MAX_LISTED + 5 {
            unreadable.report(RowKind::Event, &i.to_string(), None, "bad".into());
        }
        assert_eq!(unreadable.list().len(), MAX_LISTED);
        assert_eq!(unreadable.count(), MAX_LISTED + 5);
    }
}
