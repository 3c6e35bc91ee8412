//! The concurrency policies of a schedule as a user sees them, written once for every
//! executor: `tests/schedules.rs` runs them on the local executor, `tests/kube` on the
//! Kubernetes one. Each scenario takes a running server and the job input of a run that stays
//! RUNNING until cancelled (a long `sleep`, or a pod held by the emulated kubelet), and returns
//! the jobs it saw, for the executor's own checks (its Job deleted, …).
//!
//! A run is made active deterministically: the schedule is created paused, a run is triggered
//! and seen RUNNING, then the schedule is resumed, so that its next tick meets a run the
//! executor really runs. Waits follow the `scheduleEvents` subscription and the API
//! (`Polling`); nothing asserts that something did not happen after a fixed sleep.
// Each test binary reads a part of what the scenarios return; the rest is unused there.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::common::{GqlWs, Server};

const CREATE: &str =
    "mutation($input: CreateScheduleInput!) { createSchedule(input: $input) { schedule { id } } }";

/// Schedule events from the start of the log, pushed by the `scheduleEvents` subscription
/// over WebSocket, until `until` holds of those received.
pub async fn events_until(server: &Server, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    events_until_as(server, None, until).await
}

/// [`events_until`] as the holder of `token` (`None`: anonymous).
pub async fn events_until_as(
    server: &Server,
    token: Option<&str>,
    until: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let payload = token.map_or(json!({}), |t| json!({ "authorization": format!("Bearer {t}") }));
    let mut ws = GqlWs::connect_with(server, payload).await;
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

/// Creates a paused every-second schedule of `policy` running `job`, triggers a run, waits
/// until it is RUNNING, then resumes the schedule: (schedule id, the triggered job's id).
async fn paused_with_a_running_run(
    server: &Server,
    name: &str,
    policy: &str,
    job: Value,
) -> (String, String) {
    let created = server
        .gql_ok(
            CREATE,
            json!({ "input": { "name": name, "cron": "* * * * * *", "concurrencyPolicy": policy, "suspended": true, "job": job } }),
        )
        .await;
    let id = created["createSchedule"]["schedule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let triggered = server
        .gql_ok(
            "mutation($id: ID!) { triggerSchedule(id: $id) { job { id } } }",
            json!({ "id": id }),
        )
        .await;
    let running = triggered["triggerSchedule"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.wait_phase(&running, "RUNNING").await;
    server
        .gql_ok(
            "mutation($id: ID!) { resumeSchedule(id: $id) { suspended } }",
            json!({ "id": id }),
        )
        .await;
    (id, running)
}

/// The events of schedule `id` of `kind`.
fn of_kind<'a>(events: &'a [Value], id: &str, kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["scheduleId"] == id && e["kind"] == kind)
        .collect()
}

/// Deletes schedule `id`, then cancels every run it started that is still active, so that
/// nothing outlives the test.
async fn delete_and_cancel(server: &Server, id: &str) {
    server
        .gql_ok(
            "mutation($id: ID!) { deleteSchedule(id: $id) { schedule { id } } }",
            json!({ "id": id }),
        )
        .await;
    let events = events_until(server, |e| !of_kind(e, id, "DELETED").is_empty()).await;
    for fired in of_kind(&events, id, "FIRED") {
        let job = fired["jobId"].as_str().unwrap();
        let phase = server.job(job).await["phase"].clone();
        if phase == "RUNNING" || phase == "PENDING" {
            server.cancel(job).await;
        }
    }
}

/// The jobs a FORBID scenario saw.
pub struct Forbidden {
    /// The run that was active while ticks were skipped; cancelled by the scenario.
    pub blocking: String,
    /// The run the first tick after it ended started.
    pub next: String,
}

/// FORBID: while a run is RUNNING, each tick is SKIPPED naming it and starts nothing; once the
/// run ends (cancelled), the next tick starts a run again, and the ticks after are skipped
/// naming that one.
pub async fn forbid_skips_ticks_while_a_run_is_active(server: &Server, job: Value) -> Forbidden {
    let (id, blocking) = paused_with_a_running_run(server, "forbid", "FORBID", job).await;
    // A second run ends the wait too: FORBID then failed, and the test says so.
    let events = events_until(server, |e| {
        of_kind(e, &id, "SKIPPED").len() >= 2 || of_kind(e, &id, "FIRED").len() >= 2
    })
    .await;
    for skipped in of_kind(&events, &id, "SKIPPED") {
        let message = skipped["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("FORBID") && message.contains(blocking.as_str()),
            "a skipped tick that does not name FORBID and {blocking}: {skipped}"
        );
    }
    let fired = of_kind(&events, &id, "FIRED");
    assert_eq!(fired.len(), 1, "FORBID started a second run: {events:?}");
    assert_eq!(fired[0]["jobId"], blocking.as_str(), "{events:?}");
    assert_eq!(server.job(&blocking).await["phase"], "RUNNING");

    // Ended: the next tick starts a run, and the ticks after it are skipped naming that one.
    assert_eq!(server.cancel(&blocking).await, "CANCELLED");
    let skipped_after_next = |e: &[Value]| -> Option<String> {
        let at = e.iter().position(|e| {
            e["scheduleId"] == id.as_str() && e["kind"] == "FIRED" && e["jobId"] != blocking.as_str()
        })?;
        let next = e[at]["jobId"].as_str()?;
        e[at..]
            .iter()
            .any(|s| {
                s["scheduleId"] == id.as_str()
                    && s["kind"] == "SKIPPED"
                    && s["message"].as_str().is_some_and(|m| m.contains(next))
            })
            .then(|| next.to_owned())
    };
    let events = events_until(server, |e| {
        skipped_after_next(e).is_some() || of_kind(e, &id, "FIRED").len() >= 3
    })
    .await;
    assert_eq!(
        of_kind(&events, &id, "FIRED").len(),
        2,
        "FORBID started a third run: {events:?}"
    );
    let next = skipped_after_next(&events).unwrap();
    delete_and_cancel(server, &id).await;
    Forbidden { blocking, next }
}

/// The jobs a REPLACE scenario saw, each replaced by the next.
pub struct Replaced {
    /// The triggered run, RUNNING when the first tick came.
    pub running: String,
    /// The first tick's run, replaced by the second tick's.
    pub ticked: String,
}

/// REPLACE: a tick cancels the active run (it ends CANCELLED) and starts its own, its FIRED
/// event naming the run it replaced; the next tick replaces that one in turn.
pub async fn replace_cancels_the_active_run_then_starts_the_next(server: &Server, job: Value) -> Replaced {
    let (id, running) = paused_with_a_running_run(server, "replace", "REPLACE", job).await;
    let events = events_until(server, |e| of_kind(e, &id, "FIRED").len() >= 3).await;
    let fired = of_kind(&events, &id, "FIRED");
    assert_eq!(fired[0]["jobId"], running.as_str(), "{events:?}");
    let ticked = fired[1]["jobId"].as_str().unwrap().to_owned();
    let third = fired[2]["jobId"].as_str().unwrap().to_owned();
    for (event, replaced) in [(fired[1], &running), (fired[2], &ticked)] {
        let message = event["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("replaced {replaced}")),
            "a tick's run that does not say it replaced {replaced}: {event}"
        );
    }
    server.wait_phase(&running, "CANCELLED").await;
    server.wait_phase(&ticked, "CANCELLED").await;
    assert_ne!(third, ticked, "{events:?}");
    delete_and_cancel(server, &id).await;
    Replaced { running, ticked }
}
