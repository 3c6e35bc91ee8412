//! Schedules as both backends store them: what the schedules service needs of the store
//! ([`ScheduleStore`], a part of every [`Store`](super::Store)), the row shapes they are read
//! in (the definition as JSON, decoded through the store's [`Unreadable`] list, so that one
//! bad row is reported and skipped, never stopping the service), and the encodings written.
//! It knows no SQL dialect (the statements are in `sql/schedule_store.rs`) and decides
//! nothing about ticks.

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};

use super::Result;
use super::sql::dialect::Columns;
use super::unreadable::{RowKind, Unreadable};
use crate::model::{Schedule, ScheduleEvent, ScheduleEventKind, Scope};

/// Why a schedule was not created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotInserted {
    /// Another schedule of the namespace has the name.
    NameTaken,
    /// The namespace holds as many schedules as it may.
    Full,
}

/// What the schedules service needs of the store. Every write is a small transaction of its
/// own beside the job writer's; a change and its event land together.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Stores a new schedule and its CREATED event, unless the namespace already holds
    /// `max_in_namespace` schedules (0: no limit) or one of the name. Answers the event's cursor.
    async fn insert_schedule(
        &self,
        schedule: &Schedule,
        event: &ScheduleEvent,
        max_in_namespace: u64,
    ) -> Result<Result<i64, NotInserted>>;

    /// A schedule by id (its row unreadable: [`StoreError::Unreadable`](super::StoreError)).
    async fn schedule(&self, id: &str) -> Result<Option<Schedule>>;

    /// At most `first + 1` schedules in `scope`, in id order (creation order), after `after`.
    async fn schedules(&self, scope: &Scope, after: Option<&str>, first: i64) -> Result<Vec<Schedule>>;

    /// Every readable schedule (the ticker's view); unreadable rows are reported and skipped.
    async fn all_schedules(&self) -> Result<Vec<Schedule>>;

    /// Replaces a schedule's definition if its stored revision is `expected_revision`, with
    /// its event. `None`: it changed meanwhile, or is gone.
    async fn update_schedule(
        &self,
        schedule: &Schedule,
        expected_revision: i64,
        event: &ScheduleEvent,
    ) -> Result<Option<i64>>;

    /// The schedules `owner` created (readable ones; the others are reported and skipped).
    async fn owner_schedules(&self, owner: &str) -> Result<Vec<Schedule>>;

    /// Sets a schedule's owner scope to `to` if it is still `from`, bumping its revision (a
    /// change read before it then misses, reads again, and keeps the narrower scope); `false`
    /// when it is not `from` any more, or the schedule is gone.
    async fn narrow_schedule_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool>;

    /// Deletes a schedule, with its DELETED event; `None` when there was none.
    async fn delete_schedule(&self, id: &str, event: &ScheduleEvent) -> Result<Option<i64>>;

    /// Records a handled tick: `last_tick` moves forward to `tick` (never back), `last_fired`
    /// too when `fired`, the blocked reason is set or cleared, and `event` (if any) is
    /// appended, all at once. `false` when the schedule is gone or had handled `tick` already.
    async fn schedule_ticked(
        &self,
        id: &str,
        tick: DateTime<Utc>,
        fired: bool,
        blocked: Option<&str>,
        event: Option<&ScheduleEvent>,
    ) -> Result<bool>;

    /// Appends an event; `None` when it names a job already recorded (a tick fired again
    /// after a crash found its job).
    async fn record_schedule_event(&self, event: &ScheduleEvent) -> Result<Option<i64>>;

    /// Events in `scope` after the cursor `after`, oldest first, at most `limit`.
    async fn schedule_events(&self, scope: &Scope, after: i64, limit: i64) -> Result<Vec<ScheduleEvent>>;

    /// The schedule's events that started a job, newest first, at most `limit`.
    async fn schedule_runs(&self, id: &str, limit: i64) -> Result<Vec<ScheduleEvent>>;

    /// The newest schedule event's cursor; 0 when there is none.
    async fn last_schedule_event_seq(&self) -> Result<i64>;
}

/// The columns schedules are read with.
pub(super) const SCHEDULE_COLUMNS: &str = "id, body, last_tick, last_fired, blocked_reason";

/// The columns schedule events are read with.
pub(super) const SCHEDULE_EVENT_COLUMNS: &str =
    "seq, schedule_id, namespace, kind, at, tick, job_id, message, schedule";

pub(super) fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// The stored definition of a schedule.
pub(super) fn schedule_json(schedule: &Schedule) -> Result<String> {
    Ok(serde_json::to_string(schedule)?)
}

/// A schedule row, or `None` (reported to `unreadable`) when its body does not decode.
pub(super) fn read_schedule(r: &impl Columns, unreadable: &Unreadable) -> Option<Schedule> {
    let id: String = r.col("id");
    let body: String = r.col("body");
    let decoded = serde_json::from_str::<Schedule>(&body);
    let mut schedule = unreadable.outcome(RowKind::Schedule, &id, None, decoded)?;
    let last_tick: Option<i64> = r.col("last_tick");
    let last_fired: Option<i64> = r.col("last_fired");
    schedule.last_tick = last_tick.map(time);
    schedule.last_fired = last_fired.map(time);
    schedule.blocked_reason = r.col("blocked_reason");
    Some(schedule)
}

/// A schedule event row; one whose kind or snapshot does not decode is reported and skipped.
pub(super) fn read_schedule_event(r: &impl Columns, unreadable: &Unreadable) -> Option<ScheduleEvent> {
    let seq: i64 = r.col("seq");
    let kind: String = r.col("kind");
    let snapshot: Option<String> = r.col("schedule");
    let decoded = (|| -> std::result::Result<_, String> {
        let kind = ScheduleEventKind::parse(&kind).ok_or_else(|| format!("unknown kind {kind:?}"))?;
        let schedule = snapshot
            .as_deref()
            .map(serde_json::from_str::<Schedule>)
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok((kind, schedule))
    })();
    let (kind, schedule) = unreadable.outcome(RowKind::ScheduleEvent, &seq.to_string(), None, decoded)?;
    let at: i64 = r.col("at");
    let tick: Option<i64> = r.col("tick");
    Some(ScheduleEvent {
        seq,
        schedule_id: r.col("schedule_id"),
        namespace: r.col("namespace"),
        kind,
        at: time(at),
        tick: tick.map(time),
        job_id: r.col("job_id"),
        message: r.col("message"),
        schedule: schedule.map(Box::new),
    })
}
