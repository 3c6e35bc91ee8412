//! The cron rules of schedules: daylight-saving days in Europe/Berlin, the optional seconds
//! field, catch-up after downtime, and the checks of a schedule's fields.

use chrono::{DateTime, TimeZone, Utc};

use super::*;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn berlin(cron: &str) -> CronRule {
    CronRule::parse(cron, "Europe/Berlin").unwrap()
}

#[test]
fn a_time_the_spring_forward_day_skips_fires_once_at_the_end_of_the_gap() {
    // 2026-03-29: Berlin's clocks go from 02:00 CET to 03:00 CEST (01:00 UTC).
    let rule = berlin("30 2 * * *");
    let ticks = rule.next_ticks(utc(2026, 3, 27, 12, 0, 0), 3);
    assert_eq!(
        ticks,
        vec![
            utc(2026, 3, 28, 1, 30, 0), // 02:30 CET
            utc(2026, 3, 29, 1, 0, 0),  // 03:00 CEST: the first time after the gap
            utc(2026, 3, 30, 0, 30, 0), // 02:30 CEST
        ]
    );
}

#[test]
fn a_time_the_fall_back_day_repeats_fires_once_at_its_first_occurrence() {
    // 2026-10-25: Berlin's clocks go from 03:00 CEST back to 02:00 CET (01:00 UTC), so
    // 02:30 happens at 00:30 UTC and again at 01:30 UTC.
    let rule = berlin("30 2 * * *");
    let ticks = rule.next_ticks(utc(2026, 10, 23, 12, 0, 0), 3);
    assert_eq!(
        ticks,
        vec![
            utc(2026, 10, 24, 0, 30, 0), // 02:30 CEST
            utc(2026, 10, 25, 0, 30, 0), // 02:30 CEST, once: not again at 02:30 CET
            utc(2026, 10, 26, 1, 30, 0), // 02:30 CET
        ]
    );
}

#[test]
fn an_interval_rule_fires_at_every_real_instant_across_both_changes() {
    // Every 30 minutes: nothing in the hour spring-forward skips, both halves of the
    // repeated hour on fall-back.
    let rule = berlin("*/30 * * * *");
    let spring = rule.next_ticks(utc(2026, 3, 29, 0, 15, 0), 3);
    assert_eq!(
        spring,
        vec![
            utc(2026, 3, 29, 0, 30, 0),
            utc(2026, 3, 29, 1, 0, 0),
            utc(2026, 3, 29, 1, 30, 0)
        ]
    );
    let fall = rule.next_ticks(utc(2026, 10, 25, 0, 15, 0), 4);
    assert_eq!(
        fall,
        vec![
            utc(2026, 10, 25, 0, 30, 0), // 02:30 CEST
            utc(2026, 10, 25, 1, 0, 0),  // 02:00 CET
            utc(2026, 10, 25, 1, 30, 0), // 02:30 CET
            utc(2026, 10, 25, 2, 0, 0),  // 03:00 CET
        ]
    );
}

#[test]
fn seconds_are_an_optional_first_field() {
    let rule = CronRule::parse("*/10 * * * * *", "UTC").unwrap();
    assert_eq!(
        rule.next_ticks(utc(2026, 1, 1, 0, 0, 1), 2),
        vec![utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 0, 20)]
    );
    let five = CronRule::parse("0 12 * * MON", "UTC").unwrap();
    assert_eq!(
        five.next_after(utc(2026, 11, 27, 0, 0, 0)),
        Some(utc(2026, 11, 30, 12, 0, 0))
    );
}

#[test]
fn bad_rules_and_zones_are_refused_naming_the_field() {
    for (cron, zone, field) in [
        ("* * *", "UTC", "input.cron"),
        ("* * * * * * *", "UTC", "input.cron"),
        ("61 * * * *", "UTC", "input.cron"),
        ("0 0 * * *", "Mars/Olympus", "input.timeZone"),
        ("0 0 * * *", "", "input.timeZone"),
    ] {
        assert_eq!(
            CronRule::parse(cron, zone).unwrap_err().field,
            field,
            "{cron} {zone}"
        );
    }
    let long = "1,".repeat(200) + "1 * * * *";
    assert_eq!(CronRule::parse(&long, "UTC").unwrap_err().field, "input.cron");
}

#[test]
fn after_downtime_only_the_latest_tick_fires_and_only_within_the_deadline() {
    let rule = CronRule::parse("0 * * * *", "UTC").unwrap();
    let since = utc(2026, 1, 1, 0, 0, 0);
    // Down from 00:00 to 05:10: 01:00..05:00 are due; only 05:00 fires, four are missed.
    assert_eq!(
        due_tick(&rule, since, utc(2026, 1, 1, 5, 10, 0), Some(900)),
        Due::Fire {
            tick: utc(2026, 1, 1, 5, 0, 0),
            missed: 4
        }
    );
    // Past the deadline: skipped, and said so.
    assert_eq!(
        due_tick(&rule, since, utc(2026, 1, 1, 5, 20, 0), Some(900)),
        Due::TooLate {
            tick: utc(2026, 1, 1, 5, 0, 0),
            missed: 4
        }
    );
    assert_eq!(
        due_tick(&rule, since, utc(2026, 1, 1, 0, 30, 0), None),
        Due::Wait {
            next: Some(utc(2026, 1, 1, 1, 0, 0))
        }
    );
    // A year of every-second ticks: bounded work, and still the latest tick.
    let every_second = CronRule::parse("* * * * * *", "UTC").unwrap();
    let now = utc(2027, 1, 1, 0, 0, 0);
    match due_tick(&every_second, since, now, None) {
        Due::Fire { tick, missed } => {
            assert_eq!(tick, now);
            assert_eq!(missed, MAX_TICKS_COUNTED);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rule_firing_more_often_than_the_limit_is_refused() {
    let limits = ScheduleLimits {
        max_per_namespace: 10,
        min_interval_seconds: 60,
    };
    let job = SubmitRequest::default();
    let now = utc(2026, 11, 1, 0, 0, 0);
    let check = |cron: &str| check_schedule("n", cron, "UTC", None, &job, &limits, now);
    assert!(check("* * * * *").is_ok());
    assert_eq!(check("*/30 * * * * *").unwrap_err().field, "input.cron");
    // Bursts only on one day of the year are found too.
    assert_eq!(check("* * * 1 1 *").unwrap_err().field, "input.cron");
    assert_eq!(check("0 0 30 2 *").unwrap_err().field, "input.cron");
    let keyed = SubmitRequest {
        idempotency_key: Some("k".into()),
        ..SubmitRequest::default()
    };
    assert_eq!(
        check_schedule("n", "0 * * * *", "UTC", None, &keyed, &limits, now)
            .unwrap_err()
            .field,
        "input.job.idempotencyKey"
    );
    assert_eq!(
        check_schedule("", "0 * * * *", "UTC", None, &job, &limits, now)
            .unwrap_err()
            .field,
        "input.name"
    );
    assert_eq!(
        check_schedule("n", "0 * * * *", "UTC", Some(0), &job, &limits, now)
            .unwrap_err()
            .field,
        "input.startingDeadlineSeconds"
    );
}

#[test]
fn tick_keys_name_their_tick_and_jobs_their_schedule() {
    let tick = utc(2026, 3, 29, 1, 0, 0);
    assert_eq!(tick_key(tick), "tick:2026-03-29T01:00:00Z");
    assert_eq!(tick_of_key(&tick_key(tick)), Some(tick));
    assert_eq!(schedule_of(Some(&schedule_principal("abc"))), Some("abc"));
    assert_eq!(schedule_of(Some("token:x")), None);
}
