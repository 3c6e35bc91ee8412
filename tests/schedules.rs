//! Schedules over the real server (local executor, SQLite): create, list, get, update,
//! delete, pause and resume, trigger, backfill; ticks firing through the ordinary submission
//! path with one job per tick; FORBID and REPLACE with long-running jobs; daylight-saving
//! days as the API shows them; limits and tenancy; kill -9 around a tick.
//!
//! Waits look at the API again and again (`Polling`) until what the test waits for is there;
//! nothing asserts that something did not happen after a fixed sleep.

mod common;

use std::collections::HashMap;

use common::{GqlWs, Polling, Server, token_entry};
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

/// Schedule events from the start of the log, pushed by the `scheduleEvents` subscription
/// over WebSocket, until `until` holds of those received.
async fn events_until(server: &Server, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe(
        "1",
        "subscription { scheduleEvents(after: \"0\") { cursor kind scheduleId tick jobId message } }",
        json!({}),
    )
    .await;
    let mut events = Vec::new();
    while !until(&events) {
        let message = ws.recv().await;
        assert_eq!(message["type"], "next", "{message}");
        events.push(message["payload"]["data"]["scheduleEvents"].clone());
    }
    events
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
    let s = create(
        &server,
        json!({ "name": "forbid", "cron": "* * * * * *", "concurrencyPolicy": "FORBID", "job": sleeper(600) }),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let events = events_until(&server, |e| {
        e.iter()
            .filter(|e| e["kind"] == "SKIPPED" && e["scheduleId"] == id.as_str())
            .count()
            >= 2
    })
    .await;
    let skipped = events.iter().find(|e| e["kind"] == "SKIPPED").unwrap();
    assert!(
        skipped["message"].as_str().unwrap().contains("FORBID"),
        "{skipped}"
    );
    let fired: Vec<&Value> = events.iter().filter(|e| e["kind"] == "FIRED").collect();
    assert_eq!(fired.len(), 1, "FORBID started a second run: {events:?}");
    let job = fired[0]["jobId"].as_str().unwrap().to_owned();
    assert_eq!(server.job(&job).await["phase"], "RUNNING");
    server.cancel(&job).await;
}

#[tokio::test]
async fn replace_cancels_the_running_job_then_starts_the_next() {
    let server = Server::start(FAST).await;
    let s = create(
        &server,
        json!({ "name": "replace", "cron": "*/2 * * * * *", "concurrencyPolicy": "REPLACE", "job": sleeper(600) }),
    )
    .await;
    let id = s["id"].as_str().unwrap();
    let s = wait_runs(&server, id, 2).await;
    let runs = s["recentRuns"].as_array().unwrap();
    let older = runs[runs.len() - 1]["job"]["id"].as_str().unwrap().to_owned();
    server.wait_phase(&older, "CANCELLED").await;
    server
        .gql_ok(
            "mutation($id: ID!) { deleteSchedule(id: $id) { schedule { id } } }",
            json!({ "id": id }),
        )
        .await;
    for run in wait_runs(&server, id, 0).await["recentRuns"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let job = run["job"]["id"].as_str().unwrap();
        if run["job"]["phase"] == "RUNNING" || run["job"]["phase"] == "PENDING" {
            server.cancel(job).await;
        }
    }
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
