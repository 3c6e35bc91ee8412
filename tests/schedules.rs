//! Schedules over the real server (local executor, SQLite): create, list, get, update,
//! delete, pause and resume, trigger, backfill; ticks firing through the ordinary submission
//! path with one job per tick; FORBID and REPLACE with long-running jobs (the scenarios of
//! `scenarios/schedule_concurrency.rs`, which `tests/kube` runs on Kubernetes); daylight-saving
//! days as the API shows them; limits and tenancy; kill -9 around a tick.
//!
//! Waits look at the API again and again (`Polling`) until what the test waits for is there;
//! nothing asserts that something did not happen after a fixed sleep.

mod common;
#[path = "scenarios/schedule_concurrency.rs"]
mod schedule_concurrency;

use std::collections::HashMap;

use common::{Polling, Server, token_entry};
use schedule_concurrency::{events_until, events_until_as};
use serde_json::{Value, json};

const CREATE: &str = "mutation($input: CreateScheduleInput!) { createSchedule(input: $input) { schedule { id name namespace cron timeZone concurrencyPolicy startingDeadlineSeconds suspended createdAt updatedAt nextFireTimes(count: 3) } } }";

const SCHEDULE: &str = "query($id: ID!) { schedule(id: $id) { id name suspended lastFireTime blockedReason recentRuns(last: 100) { tick startedAt job { id phase spec { idempotencyKey } schedule { id } } } } }";

/// Flags that let a test's rules fire every second.
const FAST: &[&str] = &["--schedule-min-interval-secs", "1"];

fn sleeper(seconds: u32) -> Value {
    json!({ "command": ["sleep", seconds.to_string()] })
}

async fn create(server: &Server, input: Value) -> Value {
    server.gql_ok(CREATE, json!({ "input": input })).await["createSchedule"]["schedule"].clone()
}

/// The error code and field of a refused request.
fn refusal(body: &Value) -> (String, String) {
    let error = &body["errors"][0];
    (
        error["extensions"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        error["extensions"]["field"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

async fn schedule(server: &Server, id: &str) -> Value {
    server.gql_ok(SCHEDULE, json!({ "id": id })).await["schedule"].clone()
}

/// Waits until the schedule has started at least `n` runs; returns it.
async fn wait_runs(server: &Server, id: &str, n: usize) -> Value {
    let polling = Polling::start();
    loop {
        let s = schedule(server, id).await;
        if s["recentRuns"].as_array().map_or(0, Vec::len) >= n {
            return s;
        }
        polling
            .pause(|| format!("schedule {id} never started {n} runs: {s}"))
            .await;
    }
}

#[tokio::test]
async fn a_schedule_is_created_listed_read_updated_and_deleted() {
    let server = Server::start(&[]).await;
    let s = create(
        &server,
        json!({ "name": "nightly", "cron": "30 2 * * *", "timeZone": "Europe/Berlin", "concurrencyPolicy": "FORBID", "startingDeadlineSeconds": 300, "job": sleeper(0) }),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    assert_eq!(s["namespace"], "default");
    assert_eq!(s["concurrencyPolicy"], "FORBID");
    assert_eq!(s["startingDeadlineSeconds"], 300);
    assert_eq!(s["nextFireTimes"].as_array().unwrap().len(), 3);

    let list = server
        .gql_ok(
            "{ schedules(first: 10) { edges { cursor node { id name } } pageInfo { hasNextPage } } }",
            json!({}),
        )
        .await;
    assert_eq!(list["schedules"]["edges"][0]["node"]["id"], id.as_str());

    let updated = server
        .gql_ok(
            "mutation($id: ID!) { updateSchedule(id: $id, input: { cron: \"0 3 * * *\", concurrencyPolicy: REPLACE }) { schedule { cron concurrencyPolicy timeZone } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(updated["updateSchedule"]["schedule"]["cron"], "0 3 * * *");
    assert_eq!(
        updated["updateSchedule"]["schedule"]["concurrencyPolicy"],
        "REPLACE"
    );
    assert_eq!(updated["updateSchedule"]["schedule"]["timeZone"], "Europe/Berlin");

    // A name taken in the namespace.
    let body = server
        .gql(
            CREATE,
            json!({ "input": { "name": "nightly", "cron": "0 * * * *", "job": sleeper(0) } }),
        )
        .await;
    assert_eq!(refusal(&body), ("BAD_USER_INPUT".into(), "input.name".into()));

    let deleted = server
        .gql_ok(
            "mutation($id: ID!) { deleteSchedule(id: $id) { schedule { id } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(deleted["deleteSchedule"]["schedule"]["id"], id.as_str());
    assert!(schedule(&server, &id).await.is_null());
    let body = server
        .gql(
            "mutation($id: ID!) { pauseSchedule(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(refusal(&body).0, "NOT_FOUND");
}

#[tokio::test]
async fn bad_inputs_are_refused_with_the_field_at_fault() {
    let server = Server::start(&["--max-schedules-per-namespace", "1"]).await;
    let long_name = "n".repeat(200);
    for (input, field) in [
        (
            json!({ "name": "a", "cron": "* * *", "job": sleeper(0) }),
            "input.cron",
        ),
        (
            json!({ "name": "a", "cron": "0 0 * * *", "timeZone": "Mars/Olympus", "job": sleeper(0) }),
            "input.timeZone",
        ),
        (
            json!({ "name": long_name, "cron": "0 0 * * *", "job": sleeper(0) }),
            "input.name",
        ),
        // Every 10 seconds is more often than the default limit of one tick a minute.
        (
            json!({ "name": "a", "cron": "*/10 * * * * *", "job": sleeper(0) }),
            "input.cron",
        ),
        (
            json!({ "name": "a", "cron": "0 0 * * *", "startingDeadlineSeconds": 0, "job": sleeper(0) }),
            "input.startingDeadlineSeconds",
        ),
        // The job is checked as a submission.
        (
            json!({ "name": "a", "cron": "0 0 * * *", "job": {} }),
            "input.job.command",
        ),
        (
            json!({ "name": "a", "cron": "0 0 * * *", "job": { "command": ["true"], "idempotencyKey": "k" } }),
            "input.job.idempotencyKey",
        ),
    ] {
        let body = server.gql(CREATE, json!({ "input": input })).await;
        assert_eq!(
            refusal(&body),
            ("BAD_USER_INPUT".into(), field.into()),
            "{input}: {body}"
        );
    }
    create(
        &server,
        json!({ "name": "one", "cron": "0 0 * * *", "job": sleeper(0) }),
    )
    .await;
    let body = server
        .gql(
            CREATE,
            json!({ "input": { "name": "two", "cron": "0 0 * * *", "job": sleeper(0) } }),
        )
        .await;
    assert_eq!(refusal(&body).0, "QUOTA_EXCEEDED", "{body}");
}

#[tokio::test]
async fn the_api_shows_the_daylight_saving_days_of_europe_berlin() {
    let server = Server::start(&[]).await;
    let s = create(
        &server,
        json!({ "name": "dst", "cron": "30 2 * * *", "timeZone": "Europe/Berlin", "job": sleeper(0) }),
    )
    .await;
    let query =
        "query($id: ID!, $after: DateTime) { schedule(id: $id) { nextFireTimes(count: 3, after: $after) } }";
    let spring = server
        .gql_ok(query, json!({ "id": s["id"], "after": "2026-03-27T12:00:00Z" }))
        .await;
    // 02:30 does not exist on 29 March: it fires once, at 03:00 CEST.
    assert_eq!(
        spring["schedule"]["nextFireTimes"],
        json!([
            "2026-03-28T01:30:00+00:00",
            "2026-03-29T01:00:00+00:00",
            "2026-03-30T00:30:00+00:00"
        ])
    );
    let fall = server
        .gql_ok(query, json!({ "id": s["id"], "after": "2026-10-23T12:00:00Z" }))
        .await;
    // 02:30 exists twice on 25 October: it fires once, at the first (CEST).
    assert_eq!(
        fall["schedule"]["nextFireTimes"],
        json!([
            "2026-10-24T00:30:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-26T01:30:00+00:00"
        ])
    );
}

#[tokio::test]
async fn each_tick_submits_one_job_linked_to_its_schedule() {
    let server = Server::start(FAST).await;
    let s = create(
        &server,
        json!({ "name": "every-second", "cron": "* * * * * *", "job": sleeper(0) }),
    )
    .await;
    let id = s["id"].as_str().unwrap();
    let s = wait_runs(&server, id, 3).await;
    let runs = s["recentRuns"].as_array().unwrap();
    let mut keys = HashMap::new();
    for run in runs {
        let job = &run["job"];
        assert_eq!(job["schedule"]["id"], id, "{job}");
        let key = job["spec"]["idempotencyKey"].as_str().unwrap().to_owned();
        assert!(key.starts_with("tick:"), "{key}");
        *keys.entry(key).or_insert(0) += 1;
    }
    assert!(keys.values().all(|n| *n == 1), "a tick fired twice: {keys:?}");
    assert!(s["lastFireTime"].is_string());
    // The jobs ran through the ordinary path, to their end.
    let first = runs.last().unwrap()["job"]["id"].as_str().unwrap().to_owned();
    server.wait_phase(&first, "SUCCEEDED").await;
    // The ticks were pushed to subscribers, with their jobs.
    let events = events_until(&server, |e| {
        e.iter().filter(|e| e["kind"] == "FIRED").count() >= 3
    })
    .await;
    assert_eq!(events[0]["kind"], "CREATED");
    assert!(events.iter().any(|e| e["jobId"] == first.as_str()));
}

#[tokio::test]
async fn forbid_skips_ticks_while_a_run_is_active_and_says_so() {
    let server = Server::start(FAST).await;
    schedule_concurrency::forbid_skips_ticks_while_a_run_is_active(&server, sleeper(600)).await;
}

#[tokio::test]
async fn replace_cancels_the_running_job_then_starts_the_next() {
    let server = Server::start(FAST).await;
    schedule_concurrency::replace_cancels_the_active_run_then_starts_the_next(&server, sleeper(600)).await;
}

#[tokio::test]
async fn a_paused_schedule_does_not_fire_until_resumed() {
    let server = Server::start(FAST).await;
    let paused = create(
        &server,
        json!({ "name": "paused", "cron": "* * * * * *", "job": sleeper(0) }),
    )
    .await;
    let paused_id = paused["id"].as_str().unwrap().to_owned();
    let p = server
        .gql_ok(
            "mutation($id: ID!) { pauseSchedule(id: $id) { suspended } }",
            json!({ "id": paused_id }),
        )
        .await;
    assert_eq!(p["pauseSchedule"]["suspended"], true);
    let before = schedule(&server, &paused_id).await["recentRuns"]
        .as_array()
        .unwrap()
        .len();
    // A twin that keeps firing: once it has fired three times after the pause, the paused
    // one has had three ticks to fire and must not have.
    let twin = create(
        &server,
        json!({ "name": "twin", "cron": "* * * * * *", "job": sleeper(0) }),
    )
    .await;
    wait_runs(&server, twin["id"].as_str().unwrap(), 3).await;
    assert_eq!(
        schedule(&server, &paused_id).await["recentRuns"]
            .as_array()
            .unwrap()
            .len(),
        before
    );
    let r = server
        .gql_ok(
            "mutation($id: ID!) { resumeSchedule(id: $id) { suspended } }",
            json!({ "id": paused_id }),
        )
        .await;
    assert_eq!(r["resumeSchedule"]["suspended"], false);
    wait_runs(&server, &paused_id, before + 1).await;
}

#[tokio::test]
async fn trigger_runs_now_outside_the_ticks_and_backfill_is_bounded_and_idempotent() {
    let server = Server::start(&[]).await;
    let s = create(
        &server,
        json!({ "name": "hourly", "cron": "0 * * * *", "job": sleeper(0) }),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let t = server
        .gql_ok(
            "mutation($id: ID!) { triggerSchedule(id: $id) { created job { id spec { idempotencyKey } schedule { id } } } }",
            json!({ "id": id }),
        )
        .await;
    let job = &t["triggerSchedule"]["job"];
    assert_eq!(t["triggerSchedule"]["created"], true);
    assert!(
        job["spec"]["idempotencyKey"]
            .as_str()
            .unwrap()
            .starts_with("trigger:"),
        "{job}"
    );
    assert_eq!(job["schedule"]["id"], id.as_str());

    let now = chrono::Utc::now();
    let from = (now - chrono::Duration::hours(5)).to_rfc3339();
    let to = now.to_rfc3339();
    let backfill = "mutation($id: ID!, $from: DateTime!, $to: DateTime!) { backfillSchedule(id: $id, from: $from, to: $to) { ticks created jobs { id spec { idempotencyKey } } } }";
    let first = server
        .gql_ok(backfill, json!({ "id": id, "from": from, "to": to }))
        .await;
    let ticks = first["backfillSchedule"]["ticks"].as_array().unwrap().clone();
    assert_eq!(ticks.len(), 5, "{first}");
    assert!(
        first["backfillSchedule"]["created"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c == true)
    );
    // The same range again starts nothing: each tick has its run.
    let again = server
        .gql_ok(backfill, json!({ "id": id, "from": from, "to": to }))
        .await;
    assert!(
        again["backfillSchedule"]["created"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c == false)
    );
    assert_eq!(
        again["backfillSchedule"]["jobs"],
        first["backfillSchedule"]["jobs"]
    );
    // More than 100 ticks in one call: refused, nothing started.
    let wide = (now - chrono::Duration::hours(200)).to_rfc3339();
    let body = server
        .gql(backfill, json!({ "id": id, "from": wide, "to": to }))
        .await;
    assert_eq!(refusal(&body), ("BAD_USER_INPUT".into(), "to".into()), "{body}");
    assert_eq!(
        schedule(&server, &id).await["recentRuns"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
}

#[tokio::test]
async fn tenants_see_only_their_schedules_and_a_revoked_owner_stops_firing() {
    let admin = token_entry("root", "root-token", "admin = true");
    let alice = token_entry("alice", "alice-token", "namespaces = [\"team-a\"]");
    let bob = token_entry("bob", "bob-token", "namespaces = [\"team-b\"]");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, [admin.clone(), alice, bob.clone()].concat()).unwrap();
    let server = Server::start(&[
        "--api-tokens-file",
        tokens.to_str().unwrap(),
        "--allowed-namespaces",
        "team-a,team-b",
        "--schedule-min-interval-secs",
        "1",
    ])
    .await;
    let input =
        json!({ "name": "a", "cron": "* * * * * *", "job": { "namespace": "team-a", "command": ["true"] } });
    let (_, body) = server
        .gql_as(Some("alice-token"), CREATE, json!({ "input": input }))
        .await;
    let id = body["data"]["createSchedule"]["schedule"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned();
    // Bob may not create in team-a, nor see, trigger or list alice's schedule.
    let (_, body) = server
        .gql_as(Some("bob-token"), CREATE, json!({ "input": input }))
        .await;
    assert_eq!(refusal(&body).0, "FORBIDDEN", "{body}");
    let (_, body) = server
        .gql_as(Some("bob-token"), SCHEDULE, json!({ "id": id }))
        .await;
    assert!(body["data"]["schedule"].is_null(), "{body}");
    let (_, body) = server
        .gql_as(
            Some("bob-token"),
            "mutation($id: ID!) { triggerSchedule(id: $id) { created } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(refusal(&body).0, "NOT_FOUND", "{body}");
    let (_, body) = server
        .gql_as(
            Some("bob-token"),
            "{ schedules { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(body["data"]["schedules"]["edges"], json!([]));

    // Alice's token is removed: her schedule stops firing and says why.
    std::fs::write(&tokens, [admin, bob].concat()).unwrap();
    let polling = Polling::start();
    let reason = loop {
        let (_, body) = server
            .gql_as(Some("root-token"), SCHEDULE, json!({ "id": id }))
            .await;
        if let Some(reason) = body["data"]["schedule"]["blockedReason"].as_str() {
            break reason.to_owned();
        }
        polling
            .pause(|| format!("schedule {id} never said its owner is gone: {body}"))
            .await;
    };
    assert!(reason.contains("owner"), "{reason}");
}

/// An HS256 JWT of subject `sub` allowing `namespaces`, signed with `secret`.
fn jwt(secret: &str, sub: &str, namespaces: &[&str]) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let now = chrono::Utc::now().timestamp();
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({ "sub": sub, "exp": now + 3600, "iat": now, "namespaces": namespaces }),
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// Schedule `id` as the admin reads it once it says why it is blocked.
async fn blocked(server: &Server, id: &str) -> String {
    let polling = Polling::start();
    loop {
        let (_, body) = server
            .gql_as(Some("root-token"), SCHEDULE, json!({ "id": id }))
            .await;
        if let Some(reason) = body["data"]["schedule"]["blockedReason"].as_str() {
            return reason.to_owned();
        }
        polling
            .pause(|| format!("schedule {id} never said it is blocked: {body}"))
            .await;
    }
}

/// How many runs schedule `id` has started, as the admin reads it.
async fn runs_as_admin(server: &Server, id: &str) -> usize {
    let (_, body) = server
        .gql_as(Some("root-token"), SCHEDULE, json!({ "id": id }))
        .await;
    body["data"]["schedule"]["recentRuns"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .len()
}

/// Waits until schedule `id` has started at least `n` runs, as the admin reads it.
async fn runs_as_admin_at_least(server: &Server, id: &str, n: usize) {
    let polling = Polling::start();
    loop {
        let runs = runs_as_admin(server, id).await;
        if runs >= n {
            return;
        }
        polling
            .pause(|| format!("schedule {id} started {runs} runs, never {n}"))
            .await;
    }
}

#[tokio::test]
async fn a_jwt_owners_schedules_narrow_for_good_to_a_narrower_token_it_calls_with() {
    const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, token_entry("root", "root-token", "admin = true")).unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let args = [
        "--api-tokens-file",
        tokens.to_str().unwrap(),
        "--jwt-hs256-secret-file",
        secret.to_str().unwrap(),
        "--allowed-namespaces",
        "team-a,team-b",
        "--schedule-min-interval-secs",
        "1",
    ];
    let mut server = Server::start(&args).await;
    let wide = jwt(SECRET, "carol", &["team-a", "team-b"]);
    let mut ids = Vec::new();
    for namespace in ["team-a", "team-b"] {
        let input = json!({ "name": namespace, "cron": "* * * * * *", "job": { "namespace": namespace, "command": ["true"] } });
        let (_, body) = server
            .gql_as(Some(wide.as_str()), CREATE, json!({ "input": input }))
            .await;
        ids.push(
            body["data"]["createSchedule"]["schedule"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{body}"))
                .to_owned(),
        );
    }
    let (in_a, in_b) = (ids[0].clone(), ids[1].clone());
    runs_as_admin_at_least(&server, &in_a, 1).await;

    // Carol calls with a token of team-b only: her team-a schedule stops firing and says why;
    // her team-b one goes on.
    let narrow = jwt(SECRET, "carol", &["team-b"]);
    let (status, _) = server
        .gql_as(
            Some(narrow.as_str()),
            "{ schedules { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(status, 200);
    let reason = blocked(&server, &in_a).await;
    assert!(
        reason.contains("team-a") && reason.contains("narrowest"),
        "{reason}"
    );
    let b_runs = runs_as_admin(&server, &in_b).await;
    runs_as_admin_at_least(&server, &in_b, b_runs + 2).await;
    let events = events_until_as(&server, Some("root-token"), |e| {
        e.iter()
            .any(|e| e["scheduleId"] == in_a.as_str() && e["kind"] == "SKIPPED")
    })
    .await;
    let skipped = events
        .iter()
        .find(|e| e["scheduleId"] == in_a.as_str() && e["kind"] == "SKIPPED")
        .unwrap();
    assert!(
        skipped["message"].as_str().unwrap().contains("team-a"),
        "{skipped}"
    );

    // A wider token again does not widen it, nor does a restart: its ticks after the restart
    // are skipped, none fired.
    server
        .gql_as(
            Some(wide.as_str()),
            "{ schedules { edges { node { id } } } }",
            json!({}),
        )
        .await;
    server.stop().await;
    let restarted_at = chrono::Utc::now();
    let server = server.start_again(&args).await;
    server
        .gql_as(
            Some(wide.as_str()),
            "{ schedules { edges { node { id } } } }",
            json!({}),
        )
        .await;
    let after_restart = |e: &Value| {
        e["scheduleId"] == in_a.as_str()
            && e["tick"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t > restarted_at)
    };
    // A tick fired ends the wait too: the narrowing was then undone, and the test says so.
    let events = events_until_as(&server, Some("root-token"), |e| {
        e.iter()
            .filter(|e| after_restart(e) && e["kind"] == "SKIPPED")
            .count()
            >= 2
            || e.iter().any(|e| after_restart(e) && e["kind"] == "FIRED")
    })
    .await;
    let fired: Vec<&Value> = events
        .iter()
        .filter(|e| after_restart(e) && e["kind"] == "FIRED")
        .collect();
    assert!(
        fired.is_empty(),
        "a tick fired in team-a after the narrowing: {fired:?}"
    );
}

#[tokio::test]
async fn a_tick_cut_by_kill_9_runs_exactly_once_after_the_restart() {
    let mut server = Server::spawn(FAST).await;
    let s = create(
        &server,
        json!({ "name": "crash", "cron": "*/10 * * * * *", "startingDeadlineSeconds": 60, "job": sleeper(0) }),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    wait_runs(&server, &id, 1).await;
    // Killed at the moment of the next tick: it may have fired it, committed its job but not
    // recorded the tick, or not begun.
    let next = server
        .gql_ok(
            "query($id: ID!) { schedule(id: $id) { nextFireTimes(count: 1) } }",
            json!({ "id": id }),
        )
        .await;
    let tick = next["schedule"]["nextFireTimes"][0].as_str().unwrap().to_owned();
    let at = chrono::DateTime::parse_from_rfc3339(&tick).unwrap();
    let wait = (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
    server.kill9();
    let server = server.start_again(FAST).await;
    // The tick has its run once: fired before the kill and found, or fired after the
    // restart (within its starting deadline).
    let polling = Polling::start();
    let runs = loop {
        let s = schedule(&server, &id).await;
        let runs: Vec<Value> = s["recentRuns"].as_array().unwrap().clone();
        if runs.iter().any(|r| r["tick"].as_str() == Some(tick.as_str())) {
            break runs;
        }
        polling
            .pause(|| format!("tick {tick} never ran after the restart: {s}"))
            .await;
    };
    let of_tick = runs
        .iter()
        .filter(|r| r["tick"].as_str() == Some(tick.as_str()))
        .count();
    assert_eq!(of_tick, 1, "tick {tick} ran {of_tick} times: {runs:?}");
    let mut keys: Vec<&str> = runs
        .iter()
        .map(|r| r["job"]["spec"]["idempotencyKey"].as_str().unwrap())
        .collect();
    let all = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), all, "a tick ran twice: {runs:?}");
}

/// The jobs schedule `id` started, as `jobs` lists them: (job id, idempotency key).
async fn jobs_of(server: &Server, id: &str) -> Vec<(String, String)> {
    let page = server
        .gql_ok(
            "{ jobs(first: 100) { edges { node { id schedule { id } spec { idempotencyKey } } } } }",
            json!({}),
        )
        .await;
    page["jobs"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["node"])
        .filter(|job| job["schedule"]["id"] == id)
        .map(|job| {
            (
                job["id"].as_str().unwrap().to_owned(),
                job["spec"]["idempotencyKey"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_tick_whose_job_committed_but_not_its_record_finds_that_job_after_a_restart() {
    use chrono::{Datelike as _, Timelike as _};
    use sqlx::Connection as _;
    let mut server = Server::start(&[]).await;
    // A rule that fires a few seconds from now, then not for a year: after the restart, its
    // latest tick is still this one.
    let at = chrono::Utc::now() + chrono::Duration::seconds(5);
    let cron = format!(
        "{} {} {} {} {} *",
        at.second(),
        at.minute(),
        at.hour(),
        at.day(),
        at.month()
    );
    let s = create(
        &server,
        json!({ "name": "once", "cron": cron, "startingDeadlineSeconds": 3600, "job": sleeper(0) }),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let fired = wait_runs(&server, &id, 1).await;
    let tick = fired["recentRuns"][0]["tick"].as_str().unwrap().to_owned();
    let before = jobs_of(&server, &id).await;
    assert_eq!(before.len(), 1, "{before:?}");
    server.stop().await;

    // What a crash between the commit of the tick's job and the record of the tick leaves:
    // the job, but neither the tick's progress nor its event.
    let url = format!("sqlite://{}", server.database_file().display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE schedules SET last_tick = NULL, last_fired = NULL WHERE id = ?")
        .bind(&id)
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM schedule_events WHERE schedule_id = ? AND kind = 'FIRED'")
        .bind(&id)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    // The tick is fired again at the start, and finds the job its first firing made.
    let server = server.start_again(&[]).await;
    let again = wait_runs(&server, &id, 1).await;
    assert_eq!(again["recentRuns"][0]["tick"], tick.as_str(), "{again}");
    assert_eq!(
        again["recentRuns"][0]["job"]["id"],
        before[0].0.as_str(),
        "{again}"
    );
    assert_eq!(jobs_of(&server, &id).await, before);
}

#[tokio::test]
async fn an_unreadable_schedule_row_is_reported_and_every_other_schedule_keeps_firing() {
    use sqlx::Connection as _;
    let mut server = Server::start(FAST).await;
    let good = create(
        &server,
        json!({ "name": "good", "cron": "* * * * * *", "job": sleeper(0) }),
    )
    .await;
    let bad = create(
        &server,
        json!({ "name": "bad", "cron": "0 * * * *", "job": sleeper(0) }),
    )
    .await;
    let (good, bad) = (
        good["id"].as_str().unwrap().to_owned(),
        bad["id"].as_str().unwrap().to_owned(),
    );
    server.stop().await;
    let url = format!("sqlite://{}", server.database_file().display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE schedules SET body = '{\"not\": \"a schedule\"}' WHERE id = ?")
        .bind(&bad)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let server = server.start_again(FAST).await;
    let runs = schedule(&server, &good).await["recentRuns"]
        .as_array()
        .unwrap()
        .len();
    wait_runs(&server, &good, runs + 2).await;
    let body = server.gql(SCHEDULE, json!({ "id": bad })).await;
    assert_eq!(refusal(&body).0, "DATA_LOSS", "{body}");
    let list = server
        .gql_ok("{ schedules { edges { node { id } } } }", json!({}))
        .await;
    assert_eq!(list["schedules"]["edges"], json!([{ "node": { "id": good } }]));
    let records = server
        .gql_ok("{ unreadableRecords { kind key } }", json!({}))
        .await;
    assert!(
        records["unreadableRecords"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "schedule" && r["key"] == bad.as_str()),
        "{records}"
    );
}
