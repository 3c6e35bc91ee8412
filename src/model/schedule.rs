//! Schedules: a job submitted again and again on a cron rule in a time zone.
//!
//! It owns the [`Schedule`] type, its [`ConcurrencyPolicy`], the cron and time-zone rules
//! ([`CronRule`]: which instants a schedule fires at, daylight-saving days included), which
//! ticks are due after a pause in firing ([`due_tick`]: at most one catch-up run, never a
//! flood), the idempotency key of a tick, and the checks of a schedule's own fields. It does
//! no I/O and must not decide who fires a schedule (the schedules service does).
//!
//! Daylight saving (the rules of the cron crate, `croner`, which follows the Open Cron
//! Pattern Specification):
//! - a rule naming a fixed wall-clock time (no wildcard or step in seconds, minutes or
//!   hours) that a spring-forward day skips fires once, at the first wall-clock time after
//!   the gap (02:30 Europe/Berlin on the last Sunday of March fires at 03:00 CEST);
//! - such a rule on a fall-back day, where the time exists twice, fires once, at its first
//!   occurrence (02:30 CEST, not again at 02:30 CET);
//! - a rule with a wildcard or step in those fields fires once per wall-clock time it
//!   matches: nothing in the skipped hour, and the repeated hour only on its first pass
//!   (every 30 minutes fires at 02:30 CEST, then 03:00 CET: a 90-minute gap).

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

use super::Scope;
use super::spec::SubmitRequest;
use super::validation::ValidationError;

/// The longest cron rule accepted, in bytes.
pub const MAX_CRON_BYTES: usize = 256;
/// The longest time-zone name accepted, in bytes (IANA names are far shorter).
pub const MAX_TIME_ZONE_BYTES: usize = 64;
/// The longest schedule name accepted, in bytes.
pub const MAX_SCHEDULE_NAME_BYTES: usize = 128;
/// The largest `startingDeadlineSeconds` accepted: a week.
pub const MAX_STARTING_DEADLINE_SECONDS: i64 = 7 * 24 * 3600;
/// Ticks counted at most when telling how many were missed (and looked at when checking how
/// often a rule fires): bounded work whatever the downtime.
pub const MAX_TICKS_COUNTED: usize = 1_000;
/// The most ticks one `backfillSchedule` call may start.
pub const MAX_BACKFILL_TICKS: usize = 100;

/// What a tick does while an earlier run of the schedule is still PENDING or RUNNING.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConcurrencyPolicy {
    /// Start the new run beside it.
    #[default]
    Allow,
    /// Skip the tick (recorded as skipped, with why).
    Forbid,
    /// Cancel the running one, then start the new one.
    Replace,
}

/// A schedule as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub cron: String,
    pub time_zone: String,
    pub concurrency_policy: ConcurrencyPolicy,
    /// How late a tick may still start (after downtime, say); `None`: however late.
    pub starting_deadline_seconds: Option<i64>,
    pub suspended: bool,
    /// The submission each tick makes (its `idempotencyKey` is the tick's, never the input's).
    pub job: SubmitRequest,
    /// The creator's principal: its rights now are checked at every tick.
    pub owner: String,
    /// The creator's name, shown as the submitter of the jobs it starts.
    pub owner_name: String,
    /// The creator's scope when it created the schedule, narrowed since, for a JWT subject,
    /// by every narrower token it called with: the most a JWT owner's ticks may use, its
    /// rights being unknown while it does not call. Stored as a list of namespaces, or null
    /// (also in rows written without it) for every namespace.
    #[serde(default = "every_namespace", with = "scope_as_list")]
    pub owner_scope: Scope,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped by every change of the definition (not by ticks).
    pub revision: i64,
    /// The last tick handled (fired or skipped), kept by the store beside the definition.
    #[serde(skip)]
    pub last_tick: Option<DateTime<Utc>>,
    /// The last tick that started a job.
    #[serde(skip)]
    pub last_fired: Option<DateTime<Utc>>,
    /// Why ticks do not fire although the schedule is not suspended (its owner lost the right
    /// to the namespace), as of the last tick.
    #[serde(skip)]
    pub blocked_reason: Option<String>,
}

fn every_namespace() -> Scope {
    Scope::All
}

/// A scope as a list of namespaces, or null for every namespace.
mod scope_as_list {
    use std::collections::BTreeSet;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::model::Scope;

    pub fn serialize<S: Serializer>(scope: &Scope, s: S) -> Result<S::Ok, S::Error> {
        scope.list().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        Ok(Option::<BTreeSet<String>>::deserialize(d)?.map_or(Scope::All, Scope::namespaces))
    }
}

/// The principal a schedule's jobs are submitted as: it scopes their idempotency keys to the
/// schedule (no client's principal has this form), and links each job to its schedule.
pub fn schedule_principal(schedule_id: &str) -> String {
    format!("schedule:{schedule_id}")
}

/// The schedule a job was started by, from its submitter's principal.
pub fn schedule_of(principal: Option<&str>) -> Option<&str> {
    principal?.strip_prefix("schedule:")
}

/// The idempotency key of the tick at `tick` (scoped by [`schedule_principal`]).
pub fn tick_key(tick: DateTime<Utc>) -> String {
    format!("tick:{}", tick.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// The tick a key names, if it is a tick's key.
pub fn tick_of_key(key: &str) -> Option<DateTime<Utc>> {
    let time = key.strip_prefix("tick:")?;
    DateTime::parse_from_rfc3339(time)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A parsed cron rule in its time zone.
#[derive(Clone, Debug)]
pub struct CronRule {
    cron: Cron,
    zone: Tz,
}

/// `t` without its fraction of a second (the rule's search then finds whole seconds only).
fn whole_second(t: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::Timelike as _;
    t.with_nanosecond(0).unwrap_or(t)
}

fn invalid(field: &str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        field: field.to_owned(),
        message: message.into(),
    }
}

impl CronRule {
    /// Parses `cron` (five fields, or six with seconds first) in the IANA zone `time_zone`.
    /// Errors name the GraphQL field (`input.cron`, `input.timeZone`).
    pub fn parse(cron: &str, time_zone: &str) -> Result<Self, ValidationError> {
        if cron.len() > MAX_CRON_BYTES {
            return Err(invalid("input.cron", format!("at most {MAX_CRON_BYTES} bytes")));
        }
        if time_zone.len() > MAX_TIME_ZONE_BYTES {
            return Err(invalid(
                "input.timeZone",
                format!("at most {MAX_TIME_ZONE_BYTES} bytes"),
            ));
        }
        let zone = Tz::from_str(time_zone).map_err(|_| {
            invalid(
                "input.timeZone",
                format!("{time_zone:?} is not a time zone of the IANA database (e.g. Europe/Berlin, UTC)"),
            )
        })?;
        let fields = cron.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(invalid(
                "input.cron",
                format!(
                    "{cron:?} has {fields} fields; give 5 (minute hour day month weekday) or 6 (seconds first)"
                ),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| invalid("input.cron", format!("{cron:?} is not a cron rule: {e}")))?;
        Ok(Self { cron, zone })
    }

    /// The first tick strictly after `after`, if the rule ever fires again. Ticks fall on
    /// whole seconds.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&whole_second(after).with_timezone(&self.zone), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The latest tick at or before `at`.
    pub fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_previous_occurrence(&whole_second(at).with_timezone(&self.zone), true)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The next `count` ticks strictly after `after`.
    pub fn next_ticks(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::with_capacity(count);
        let mut at = after;
        while ticks.len() < count {
            match self.next_after(at) {
                Some(t) => {
                    ticks.push(t);
                    at = t;
                }
                None => break,
            }
        }
        ticks
    }

    /// The shortest time between two consecutive ticks among the next [`MAX_TICKS_COUNTED`]
    /// after `from` (a cron rule's field sets repeat every matching day, so a run of that
    /// many covers its closest pair). `None` when it fires at most once.
    pub fn shortest_interval(&self, from: DateTime<Utc>) -> Option<Duration> {
        let ticks = self.next_ticks(from, MAX_TICKS_COUNTED);
        ticks.windows(2).map(|w| w[1] - w[0]).min()
    }
}

/// What to do about the ticks since the last one handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing is due before `next` (or ever, for `None`).
    Wait { next: Option<DateTime<Utc>> },
    /// Start the run of `tick`, the latest due; `missed` older ticks are passed over.
    Fire { tick: DateTime<Utc>, missed: usize },
    /// The latest due tick, `tick`, is older than the starting deadline: skipped, with the
    /// `missed` older ones.
    TooLate { tick: DateTime<Utc>, missed: usize },
}

/// Which tick is due at `now` for a rule whose last handled tick is `since`, as Kubernetes'
/// CronJob decides it: of the ticks in (`since`, `now`], only the latest may start (so a
/// downtime never releases a flood of runs), and only within `deadline` of its time. The
/// older ones are counted (up to [`MAX_TICKS_COUNTED`]) so that their skipping is recorded.
pub fn due_tick(rule: &CronRule, since: DateTime<Utc>, now: DateTime<Utc>, deadline: Option<i64>) -> Due {
    let Some(first) = rule.next_after(since) else {
        return Due::Wait { next: None };
    };
    if first > now {
        return Due::Wait { next: Some(first) };
    }
    let mut latest = first;
    let mut missed = 0;
    while let Some(t) = rule.next_after(latest).filter(|t| *t <= now) {
        if missed == MAX_TICKS_COUNTED {
            // Not counted further: the latest tick is found backwards from `now`.
            latest = rule.latest_at_or_before(now).filter(|l| *l > t).unwrap_or(t);
            break;
        }
        missed += 1;
        latest = t;
    }
    match deadline {
        Some(seconds) if (now - latest).num_seconds() > seconds => Due::TooLate { tick: latest, missed },
        _ => Due::Fire { tick: latest, missed },
    }
}

/// The server's limits on schedules.
#[derive(Clone, Debug)]
pub struct ScheduleLimits {
    /// The most schedules one namespace may hold; 0 for no limit.
    pub max_per_namespace: u64,
    /// The shortest time a rule may leave between two ticks, in seconds.
    pub min_interval_seconds: i64,
}

impl Default for ScheduleLimits {
    fn default() -> Self {
        Self {
            max_per_namespace: 100,
            min_interval_seconds: 60,
        }
    }
}

/// Checks a schedule's own fields (not its job, which is validated as a submission): name,
/// rule, zone, deadline, how often it fires. Returns the parsed rule.
pub fn check_schedule(
    name: &str,
    cron: &str,
    time_zone: &str,
    starting_deadline_seconds: Option<i64>,
    job: &SubmitRequest,
    limits: &ScheduleLimits,
    now: DateTime<Utc>,
) -> Result<CronRule, ValidationError> {
    if name.is_empty() || name.len() > MAX_SCHEDULE_NAME_BYTES {
        return Err(invalid(
            "input.name",
            format!("must be 1 to {MAX_SCHEDULE_NAME_BYTES} bytes"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("input.name", "must not hold control characters"));
    }
    if let Some(d) = starting_deadline_seconds
        && !(1..=MAX_STARTING_DEADLINE_SECONDS).contains(&d)
    {
        return Err(invalid(
            "input.startingDeadlineSeconds",
            format!("must be between 1 and {MAX_STARTING_DEADLINE_SECONDS}, got {d}"),
        ));
    }
    if job.idempotency_key.is_some() {
        return Err(invalid(
            "input.job.idempotencyKey",
            "a schedule's job takes no idempotencyKey: each tick has its own",
        ));
    }
    let rule = CronRule::parse(cron, time_zone)?;
    if rule.next_after(now).is_none() {
        return Err(invalid("input.cron", format!("{cron:?} never fires")));
    }
    if let Some(shortest) = rule.shortest_interval(now)
        && shortest.num_seconds() < limits.min_interval_seconds
    {
        return Err(invalid(
            "input.cron",
            format!(
                "{cron:?} fires {}s apart at times; this server allows at most one tick every {}s (--schedule-min-interval-secs)",
                shortest.num_seconds(),
                limits.min_interval_seconds
            ),
        ));
    }
    Ok(rule)
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;

/// What happened to a schedule, as its event log records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ScheduleEventKind {
    Created,
    Updated,
    Paused,
    Resumed,
    Deleted,
    /// A tick, a trigger or a backfill started a job (`job_id`).
    Fired,
    /// A tick started nothing (`message` says why: FORBID with a run active, past the
    /// starting deadline, ticks missed during downtime, the owner's rights, a refused
    /// submission).
    Skipped,
}

impl ScheduleEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "CREATED",
            Self::Updated => "UPDATED",
            Self::Paused => "PAUSED",
            Self::Resumed => "RESUMED",
            Self::Deleted => "DELETED",
            Self::Fired => "FIRED",
            Self::Skipped => "SKIPPED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Created,
            Self::Updated,
            Self::Paused,
            Self::Resumed,
            Self::Deleted,
            Self::Fired,
            Self::Skipped,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// How a run was started: by the rule, by `triggerSchedule`, or by `backfillSchedule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunCause {
    Tick,
    Trigger,
    Backfill,
}

/// One entry of a schedule's event log.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleEvent {
    /// Its cursor (0 before it is stored).
    pub seq: i64,
    pub schedule_id: String,
    pub namespace: String,
    pub kind: ScheduleEventKind,
    pub at: DateTime<Utc>,
    /// The tick it is about, for ticks and backfills.
    pub tick: Option<DateTime<Utc>>,
    pub job_id: Option<String>,
    pub message: Option<String>,
    /// The schedule as it was after a change.
    pub schedule: Option<Box<Schedule>>,
}

impl ScheduleEvent {
    /// An event about `schedule` now.
    pub fn of(schedule: &Schedule, kind: ScheduleEventKind, at: DateTime<Utc>) -> Self {
        Self {
            seq: 0,
            schedule_id: schedule.id.clone(),
            namespace: schedule.namespace.clone(),
            kind,
            at,
            tick: None,
            job_id: None,
            message: None,
            schedule: None,
        }
    }
}
