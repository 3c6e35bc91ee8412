//! A job's attempts over the real server on the local executor: each run with its index,
//! number, times, exit code, cause and process, its own log lines (`JobAttempt.logLines`),
//! and each attempt's end as a status event (`jobEvents`, resumable after a cursor), through
//! retries, a deadline, a cancel and a kill -9 of jobgate, and where each attempt's output is
//! in the job's log (`logStart`, `logEnd`); the retried job's attempts, their places in the
//! log and their events read back after a kill -9 on SQLite and on PostgreSQL alike. The Kubernetes
//! executor's attempts are tested on the emulator in `tests/kube/attempts.rs`.

mod common;

use common::postgres::Postgres;
use common::{GqlWs, Server};
use serde_json::{Value, json};
use sqlx::Connection as _;

const ATTEMPTS: &str = "phase attemptsOmitted attempts { name index number state startedAt finishedAt \
    exitCode signal cause reason message pod processId logStart logEnd \
    logLines(first: 100) { edges { cursor node { text source } } pageInfo { hasNextPage } } }";

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

/// The text of an attempt's own log lines.
fn log_of(attempt: &Value) -> Vec<String> {
    attempt["logLines"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// The line of job `id`'s log (`Job.logLines`) at `cursor`, as `(text, source)`.
async fn job_line_at(server: &Server, id: &str, cursor: &Value) -> (String, String) {
    let at: i64 = cursor
        .as_str()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not a cursor: {cursor}"));
    let after = (at > 0).then(|| (at - 1).to_string());
    let data = server
        .gql_ok(
            "query($id: ID!, $after: String) { job(id: $id) { logLines(first: 1, after: $after) { edges { cursor node { text source } } } } }",
            json!({ "id": id, "after": after }),
        )
        .await;
    let edge = &data["job"]["logLines"]["edges"][0];
    assert_eq!(edge["cursor"], *cursor, "{data}");
    (
        edge["node"]["text"].as_str().unwrap().to_owned(),
        edge["node"]["source"].as_str().unwrap_or_default().to_owned(),
    )
}

/// One `jobEvents` event of a job.
#[derive(Debug, PartialEq)]
struct Event {
    cursor: String,
    phase: String,
    reason: String,
    message: String,
}

/// Every `jobEvents` event of job `id` after `after`, until its terminal phase.
async fn events_after(server: &Server, id: &str, after: &str) -> Vec<Event> {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe(
        "events",
        "subscription($after: String) { jobEvents(after: $after) { cursor phase reason message job { id } } }",
        json!({ "after": after }),
    )
    .await;
    let mut seen = Vec::new();
    loop {
        let msg = ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        assert!(e.is_object(), "not an event: {msg}");
        if e["job"]["id"] != id {
            continue;
        }
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let event = Event {
            cursor: text(&e["cursor"]),
            phase: text(&e["phase"]),
            reason: text(&e["reason"]),
            message: text(&e["message"]),
        };
        let terminal = matches!(event.phase.as_str(), "SUCCEEDED" | "FAILED" | "CANCELLED");
        seen.push(event);
        if terminal {
            return seen;
        }
    }
}

/// The job once it is terminal, with its attempts.
async fn finished(server: &Server, id: &str) -> Value {
    server
        .job_until(id, ATTEMPTS, "the job finished", |job| {
            matches!(job["phase"].as_str(), Some("SUCCEEDED" | "FAILED" | "CANCELLED"))
        })
        .await
}

#[tokio::test]
async fn a_job_failing_twice_then_succeeding_has_three_attempts_each_with_its_own_log() {
    three_attempts_read_back_after_a_kill_9(&[]).await;
}

#[tokio::test]
async fn a_job_failing_twice_then_succeeding_has_three_attempts_on_postgresql() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let url = pg.url();
    three_attempts_read_back_after_a_kill_9(&["--database-url", &url]).await;
}

/// On a jobgate whose store `args` choose: a job failing twice then succeeding has three
/// attempts, each with its own log lines and its end's event, the last before the job's own;
/// after a kill -9 of jobgate, the restarted one reads the same attempts back, and a
/// subscriber resuming `jobEvents` after an attempt's end gets the same events that followed.
async fn three_attempts_read_back_after_a_kill_9(args: &[&str]) {
    let mut server = Server::spawn(args).await;
    // Run n writes two lines and exits with 6 + n until its third run, which succeeds.
    let script = "n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count; \
                  echo \"run $n starts\"; echo \"run $n ends\" >&2; [ $n -ge 3 ] || exit $((6 + n))";
    let id = server
        .submit(json!({"command": sh(script), "backoffLimit": 2}))
        .await;
    let events = events_after(&server, &id, "0").await;
    let job = finished(&server, &id).await;
    assert_eq!(job["phase"], "SUCCEEDED", "{job}");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{job}");
    assert_eq!(job["attemptsOmitted"], 0);
    for (n, attempt) in attempts.iter().enumerate() {
        let n = n as i64 + 1;
        assert_eq!(attempt["index"], 0, "{attempt}");
        assert_eq!(attempt["number"], n, "{attempt}");
        assert_eq!(attempt["name"], format!("index-0-run-{n}"), "{attempt}");
        assert!(attempt["processId"].as_i64().is_some_and(|p| p > 0), "{attempt}");
        assert!(attempt["pod"].is_null());
        assert!(attempt["signal"].is_null());
        let started = attempt["startedAt"].as_str().expect("a start");
        let ended = attempt["finishedAt"].as_str().expect("an end");
        assert!(started <= ended, "{attempt}");
        // Each attempt's own lines, and nothing of the others'.
        assert_eq!(
            log_of(attempt),
            [format!("run {n} starts"), format!("run {n} ends")],
            "{attempt}"
        );
        assert!(!attempt["logLines"]["pageInfo"]["hasNextPage"].as_bool().unwrap());
        let sources: Vec<&Value> = attempt["logLines"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["node"]["source"])
            .collect();
        assert!(sources.iter().all(|s| **s == attempt["name"]), "{attempt}");
        // Its range in the job's log: from its first line to its last, the lines its own
        // `logLines` gave.
        let edges = attempt["logLines"]["edges"].as_array().unwrap();
        assert_eq!(attempt["logStart"], edges[0]["cursor"], "{attempt}");
        assert_eq!(attempt["logEnd"], edges[1]["cursor"], "{attempt}");
        let name = attempt["name"].as_str().unwrap().to_owned();
        assert_eq!(
            job_line_at(&server, &id, &attempt["logStart"]).await,
            (format!("run {n} starts"), name.clone())
        );
        assert_eq!(
            job_line_at(&server, &id, &attempt["logEnd"]).await,
            (format!("run {n} ends"), name)
        );
    }
    let outcome = |a: &Value| {
        (
            a["state"].as_str().unwrap().to_owned(),
            a["exitCode"].as_i64(),
            a["cause"].as_str().map(str::to_owned),
        )
    };
    assert_eq!(
        attempts.iter().map(outcome).collect::<Vec<_>>(),
        [
            ("FAILED".to_owned(), Some(7), Some("ERROR".to_owned())),
            ("FAILED".to_owned(), Some(8), Some("ERROR".to_owned())),
            ("SUCCEEDED".to_owned(), Some(0), None),
        ]
    );
    assert!(
        attempts[0]["message"]
            .as_str()
            .unwrap()
            .contains("exited with code 7")
    );
    // Each end is an event, the last before the job's own.
    let ends: Vec<&Event> = events
        .iter()
        .filter(|e| e.reason.starts_with("Attempt"))
        .collect();
    assert_eq!(ends.len(), 3, "{events:?}");
    assert_eq!(ends[0].reason, "AttemptFailed");
    assert!(
        ends[0]
            .message
            .starts_with("attempt 1 of index 0 (index-0-run-1) failed: exit code 7 (ERROR)"),
        "{events:?}"
    );
    assert!(
        ends[1]
            .message
            .starts_with("attempt 2 of index 0 (index-0-run-2) failed: exit code 8 (ERROR)"),
        "{events:?}"
    );
    assert_eq!(ends[2].reason, "AttemptSucceeded");
    assert_eq!(ends[2].message, "attempt 3 of index 0 (index-0-run-3) succeeded");
    assert_eq!(
        ends[2].phase, "RUNNING",
        "the attempt's event comes before the job's: {events:?}"
    );
    assert_eq!(events.last().unwrap().phase, "SUCCEEDED");

    // A kill -9, and a restart over the same store.
    server.kill9();
    let server = server.start_again(args).await;
    let again = server.job_with(&id, ATTEMPTS).await;
    assert_eq!(
        again["attempts"], job["attempts"],
        "the same attempts, logs included"
    );
    let first_end = events.iter().position(|e| e.reason == "AttemptFailed").unwrap();
    let resumed = events_after(&server, &id, &events[first_end].cursor).await;
    assert_eq!(
        resumed,
        events[first_end + 1..],
        "the events after that cursor, as they were"
    );
}

#[tokio::test]
async fn a_run_past_the_deadline_is_an_attempt_ended_by_it() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({"command": sh("echo waiting; sleep 300"), "activeDeadlineSeconds": 1}))
        .await;
    let events = events_after(&server, &id, "0").await;
    let job = finished(&server, &id).await;
    assert_eq!(job["phase"], "FAILED");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{job}");
    let attempt = &attempts[0];
    assert_eq!(attempt["state"], "FAILED");
    assert_eq!(attempt["cause"], "DEADLINE_EXCEEDED");
    assert_eq!(attempt["reason"], "DeadlineExceeded");
    assert!(attempt["finishedAt"].is_string());
    assert_eq!(log_of(attempt), ["waiting"]);
    let end = events
        .iter()
        .find(|e| e.reason == "AttemptFailed")
        .unwrap_or_else(|| panic!("no attempt's end in {events:?}"));
    assert!(end.message.contains("(DEADLINE_EXCEEDED)"), "{events:?}");
}

#[tokio::test]
async fn a_cancelled_job_ends_its_running_attempt_as_cancelled() {
    let server = Server::start(&[]).await;
    let id = server.submit(json!({"command": sh("echo up; sleep 300")})).await;
    server
        .job_until(&id, ATTEMPTS, "the run started and wrote its line", |job| {
            job["attempts"][0]["logLines"]["edges"][0]["node"]["text"] == "up"
        })
        .await;
    server.cancel(&id).await;
    let job = finished(&server, &id).await;
    assert_eq!(job["phase"], "CANCELLED");
    let attempt = &job["attempts"][0];
    assert_eq!(attempt["state"], "FAILED", "{job}");
    assert_eq!(attempt["cause"], "CANCELLED");
    assert!(attempt["finishedAt"].is_string());
}

#[tokio::test]
async fn a_run_lost_to_a_kill_9_of_jobgate_is_an_attempt_ended_by_the_restart() {
    let mut server = Server::spawn(&[]).await;
    // The first run hangs until jobgate dies; the retry after the restart succeeds.
    let id = server
        .submit(json!({
            "command": sh("if [ -e attempted ]; then echo second run; exit 0; fi; touch attempted; echo first run; sleep 300"),
            "backoffLimit": 1,
        }))
        .await;
    let before = server
        .job_until(
            &id,
            &format!("lastEventCursor {ATTEMPTS}"),
            "the first run wrote its line",
            |job| {
                job["phase"] == "RUNNING"
                    && job["attempts"][0]["logLines"]["edges"][0]["node"]["text"] == "first run"
            },
        )
        .await;
    let cursor = before["lastEventCursor"].as_str().unwrap().to_owned();
    assert_eq!(before["attempts"][0]["state"], "RUNNING");
    server.kill9();

    let server = server.start_again(&[]).await;
    // A subscriber resuming after the cursor it had sees the lost attempt's end.
    let events = events_after(&server, &id, &cursor).await;
    let end = events
        .iter()
        .find(|e| e.reason == "AttemptFailed")
        .unwrap_or_else(|| panic!("no attempt's end in {events:?}"));
    assert!(
        end.message.contains("attempt 1 of index 0") && end.message.contains("(GATEWAY_RESTARTED)"),
        "{events:?}"
    );
    let job = finished(&server, &id).await;
    assert_eq!(job["phase"], "SUCCEEDED", "{job}");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{job}");
    assert_eq!(attempts[0]["cause"], "GATEWAY_RESTARTED");
    assert_eq!(attempts[0]["reason"], "GatewayRestarted");
    assert_eq!(attempts[0]["startedAt"], before["attempts"][0]["startedAt"]);
    assert_eq!(log_of(&attempts[0]), ["first run"]);
    assert_eq!(attempts[1]["state"], "SUCCEEDED");
    assert_eq!(attempts[1]["number"], 2);
    assert_eq!(log_of(&attempts[1]), ["second run"]);
    // Where each attempt's output is in the job's log holds across the restart.
    assert_eq!(attempts[0]["logStart"], before["attempts"][0]["logStart"]);
    for (attempt, text) in attempts.iter().zip(["first run", "second run"]) {
        assert_eq!(attempt["logStart"], attempt["logEnd"], "{attempt}");
        assert_eq!(
            job_line_at(&server, &id, &attempt["logStart"]).await,
            (text.to_owned(), attempt["name"].as_str().unwrap().to_owned())
        );
    }
}

#[tokio::test]
async fn an_archive_without_ranges_still_gives_each_attempt_its_own_lines() {
    let mut server = Server::start(&[]).await;
    let id = server
        .submit(json!({
            "command": sh("if [ -e attempted ]; then echo second run; exit 0; fi; touch attempted; echo first run; exit 5"),
            "backoffLimit": 1,
        }))
        .await;
    let job = finished(&server, &id).await;
    assert_eq!(job["phase"], "SUCCEEDED", "{job}");
    server.stop().await;
    // The archive as a store that keeps no ranges holds it: lines, and no range of any run.
    let url = format!("sqlite://{}", server.database_file().display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let removed = sqlx::query("DELETE FROM log_source_ranges WHERE job_id = ?")
        .bind(&id)
        .execute(&mut db)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(removed, 2, "one range a run");
    db.close().await.unwrap();

    let server = server.start_again(&[]).await;
    let job = finished(&server, &id).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{job}");
    for (attempt, text) in attempts.iter().zip(["first run", "second run"]) {
        assert_eq!(attempt["logStart"], Value::Null, "{attempt}");
        assert_eq!(attempt["logEnd"], Value::Null, "{attempt}");
        assert_eq!(log_of(attempt), [text], "{attempt}");
    }
}
