//! Job lifecycle over the real server: phases, retries, deadlines, cancellation, parallel
//! completions, results and logs, pagination, idempotency, restarts and crash recovery.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor; the crash, signal
//! and restart tests spawn the binary (`Server::spawn`, `CARGO_BIN_EXE_jobgate`).

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::{GqlWs, Polling, Server};
use serde_json::{Value, json};

/// One status event as a subscriber sees it.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    cursor: i64,
    job: String,
    previous: Option<String>,
    phase: String,
    reason: Option<String>,
    message: Option<String>,
}

const EVENT_FIELDS: &str = "cursor phase previousPhase reason message job { id }";

fn event_of(msg: &Value) -> Event {
    let e = &msg["payload"]["data"]["jobEvents"];
    assert!(e.is_object(), "not an event: {msg}");
    Event {
        cursor: e["cursor"].as_str().unwrap().parse().unwrap(),
        job: e["job"]["id"].as_str().unwrap().to_owned(),
        previous: e["previousPhase"].as_str().map(str::to_owned),
        phase: e["phase"].as_str().unwrap().to_owned(),
        reason: e["reason"].as_str().map(str::to_owned),
        message: e["message"].as_str().map(str::to_owned),
    }
}

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "SUCCEEDED" | "FAILED" | "CANCELLED")
}

async fn events_socket(server: &Server, after: Option<&str>) -> GqlWs {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe(
        "events",
        &format!("subscription($after: String) {{ jobEvents(after: $after) {{ {EVENT_FIELDS} }} }}"),
        json!({ "after": after }),
    )
    .await;
    ws
}

/// Every event of job `id` from the beginning, replayed from the store and then live,
/// until its terminal phase.
async fn history(server: &Server, id: &str) -> Vec<Event> {
    let mut ws = events_socket(server, Some("0")).await;
    let mut seen = Vec::new();
    loop {
        let e = event_of(&ws.recv().await);
        if e.job == id {
            let done = is_terminal(&e.phase);
            seen.push(e);
            if done {
                return seen;
            }
        }
    }
}

/// The phase changes in a history, as "PREVIOUS>PHASE" strings.
fn phases(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.previous.as_deref() != Some(e.phase.as_str()))
        .map(|e| e.phase.clone())
        .collect()
}

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

#[tokio::test]
async fn a_succeeding_job_goes_pending_running_succeeded_with_result_and_logs() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({
            "name": "hello",
            "command": sh("echo line one; echo line two >&2; printf '{\"answer\":42}' > \"$JOBGATE_RESULT_FILE\""),
        }))
        .await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "SUCCEEDED"]);
    assert_eq!(events[0].previous, None);
    let last = events.last().unwrap();
    assert_eq!(last.previous.as_deref(), Some("RUNNING"));
    assert_eq!(last.reason.as_deref(), Some("CompletionsReached"));
    // Cursors only grow.
    assert!(events.windows(2).all(|w| w[0].cursor < w[1].cursor));

    let job = server.job(&id).await;
    assert_eq!(job["phase"], "SUCCEEDED");
    assert_eq!(job["result"], r#"{"answer":42}"#);
    assert_eq!(
        job["progress"],
        json!({"succeeded": 1, "failed": 0, "active": 0, "total": 1})
    );
    assert!(job["startedAt"].is_string() && job["finishedAt"].is_string());
    let types: Vec<&str> = job["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    for t in ["Accepted", "Running", "Complete", "SuccessCriteriaMet"] {
        assert!(types.contains(&t), "condition {t} missing from {types:?}");
    }
    let logs = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { all: logs last: logs(tailLines: 1) } }",
            json!({"id": id}),
        )
        .await;
    let all = logs["job"]["all"].as_str().unwrap();
    assert!(
        all.contains("line one") && all.contains("line two"),
        "logs: {all:?}"
    );
    assert_eq!(logs["job"]["last"].as_str().unwrap().lines().count(), 1);

    // The job's recorded history is the events jobEvents delivered, in order; `last` keeps
    // the newest.
    let recorded = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { \
               all: events { cursor phase previousPhase reason } \
               newest: events(last: 2) { cursor } } }",
            json!({"id": id}),
        )
        .await;
    let all: Vec<(i64, String, Option<String>)> = recorded["job"]["all"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["cursor"].as_str().unwrap().parse().unwrap(),
                e["phase"].as_str().unwrap().to_owned(),
                e["previousPhase"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let delivered: Vec<(i64, String, Option<String>)> = events
        .iter()
        .map(|e| (e.cursor, e.phase.clone(), e.previous.clone()))
        .collect();
    assert_eq!(all, delivered);
    let newest: Vec<i64> = recorded["job"]["newest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["cursor"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        newest,
        delivered[delivered.len() - 2..]
            .iter()
            .map(|e| e.0)
            .collect::<Vec<_>>()
    );
    let too_many = server
        .gql(
            "query($id: ID!) { job(id: $id) { events(last: 1001) { cursor } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(
        too_many["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{too_many}"
    );
}

#[tokio::test]
async fn a_failing_job_reports_its_exit_code_and_output() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({"command": sh("echo boom >&2; exit 3"), "backoffLimit": 0}))
        .await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "FAILED"]);
    assert_eq!(
        events.last().unwrap().reason.as_deref(),
        Some("BackoffLimitExceeded")
    );
    let job = server.job(&id).await;
    let message = job["message"].as_str().unwrap();
    assert!(
        message.contains("exited with code 3") && message.contains("boom"),
        "message: {message}"
    );
    assert_eq!(job["progress"]["failed"], 1);
    assert_eq!(job["progress"]["succeeded"], 0);
}

#[tokio::test]
async fn a_failed_run_is_retried_within_the_backoff_limit() {
    let server = Server::start(&[]).await;
    // Fails on its first run, succeeds on the second (the working directory persists).
    let id = server
        .submit(json!({
            "command": sh("if [ -e attempted ]; then echo second; else touch attempted; echo first; exit 1; fi"),
            "backoffLimit": 2,
        }))
        .await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "SUCCEEDED"]);
    let job = server.job(&id).await;
    assert_eq!(job["progress"]["failed"], 1);
    assert_eq!(job["progress"]["succeeded"], 1);
    // Progress events were recorded between the phase changes.
    assert!(
        events
            .iter()
            .any(|e| e.previous.as_deref() == Some("RUNNING") && e.phase == "RUNNING")
    );
}

#[tokio::test]
async fn retries_stop_at_the_backoff_limit() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({"command": ["false"], "backoffLimit": 2}))
        .await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "FAILED"]);
    let job = server.job(&id).await;
    // backoffLimit 2: the third failure fails the job.
    assert_eq!(job["progress"]["failed"], 3);
}

#[tokio::test]
async fn a_job_past_its_deadline_fails_with_deadline_exceeded() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({"command": sh("echo leader $$; sleep 300"), "activeDeadlineSeconds": 1}))
        .await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "FAILED"]);
    assert_eq!(events.last().unwrap().reason.as_deref(), Some("DeadlineExceeded"));
    // Its working directory is gone with the job; its log stays.
    let logs = server.job_with(&id, "logs(tailLines: 10)").await;
    let pid = logs["logs"]
        .as_str()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("leader ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {logs}"));
    wait_gone(pid).await;
}

fn read_pid(server: &Server, id: &str, file: &str) -> i32 {
    let path = server.work_dir(id).join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    // A zombie is dead for our purposes: it runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

/// Waits until a process is gone; fails the test if it outlives the wait limit.
async fn wait_gone(pid: i32) {
    let polling = Polling::every(Duration::from_millis(50));
    while alive(pid) {
        polling.pause(|| format!("process {pid} is still running")).await;
    }
}

/// Waits until a file exists (written by a job once it has started its children).
async fn wait_file(path: &std::path::Path) {
    let polling = Polling::start();
    while std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(true) {
        polling
            .pause(|| format!("{} never appeared", path.display()))
            .await;
    }
}

#[tokio::test]
async fn cancel_stops_the_whole_process_group() {
    let server = Server::start(&[]).await;
    // A job whose child ignores SIGTERM: only the group kill after the grace period stops it.
    let id = server
        .submit(json!({
            "command": sh("sh -c 'trap \"\" TERM; sleep 300' & echo $! > child.pid; echo $$ > leader.pid; wait"),
        }))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    wait_file(&server.work_dir(&id).join("child.pid")).await;
    let (leader, child) = (
        read_pid(&server, &id, "leader.pid"),
        read_pid(&server, &id, "child.pid"),
    );
    assert!(alive(leader) && alive(child));

    assert_eq!(server.cancel(&id).await, "CANCELLED");
    wait_gone(leader).await;
    wait_gone(child).await;

    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "CANCELLED"]);
    assert_eq!(events.last().unwrap().reason.as_deref(), Some("CancelledByUser"));
    // Cancelling again: the job has finished.
    let again = server
        .gql(
            "mutation($id: ID!) { cancelJob(id: $id) { job { id } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(again["errors"][0]["extensions"]["code"], "FAILED_PRECONDITION");
    // The job stays CANCELLED; the killed runs do not turn it into FAILED. Runners report through
    // one queue applied in order: a job started once this one's runner stopped ends after it.
    server
        .wait_log("local job cancelled; its processes are stopped")
        .await;
    let later = server.submit(json!({"command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&later).await, "SUCCEEDED");
    assert_eq!(server.job(&id).await["phase"], "CANCELLED");
}

#[tokio::test]
async fn a_pending_job_can_be_cancelled() {
    // parallelism 1 and a long first job keep nothing pending here; instead, cancel at once:
    // the answer is CANCELLED whether or not the launcher has started it yet.
    let server = Server::start(&[]).await;
    let id = server.submit(json!({"command": ["sleep", "300"]})).await;
    assert_eq!(server.cancel(&id).await, "CANCELLED");
    let events = history(&server, &id).await;
    assert_eq!(events.last().unwrap().phase, "CANCELLED");
}

#[tokio::test]
async fn completions_run_every_index_at_most_parallelism_at_a_time() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({
            "command": sh("echo start $JOB_COMPLETION_INDEX; sleep 0.4; echo end $JOB_COMPLETION_INDEX"),
            "completions": 5,
            "parallelism": 2,
        }))
        .await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "SUCCEEDED"]);
    let job = server.job(&id).await;
    assert_eq!(
        job["progress"],
        json!({"succeeded": 5, "failed": 0, "active": 0, "total": 5})
    );
    // Concurrency from the log: starts minus ends never exceed parallelism.
    let logs = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { logs(tailLines: 100) } }",
            json!({"id": id}),
        )
        .await;
    let text = logs["job"]["logs"].as_str().unwrap();
    for i in 0..5 {
        assert!(
            text.lines().any(|l| l == format!("end {i}")),
            "index {i} never ran: {text}"
        );
    }
    let mut running = 0;
    let mut most = 0;
    for line in logs["job"]["logs"].as_str().unwrap().lines() {
        if line.starts_with("start") {
            running += 1;
        } else if line.starts_with("end") {
            running -= 1;
        }
        most = most.max(running);
    }
    assert_eq!(most, 2, "runs at once, from the log:\n{}", logs["job"]["logs"]);
    // Live progress was reported along the way.
    let progress_events = events
        .iter()
        .filter(|e| e.previous.as_deref() == Some("RUNNING") && e.phase == "RUNNING");
    assert!(progress_events.count() >= 4);
}

#[tokio::test]
async fn two_hundred_concurrent_submissions_all_succeed_with_distinct_ids() {
    let server = Server::start(&["--max-parallelism", "4"]).await;
    let mut ws = events_socket(&server, None).await;
    let submissions = (0..200).map(|i| {
        let server = &server;
        async move {
            server
                .submit(json!({"name": format!("bulk-{i}"), "command": ["true"]}))
                .await
        }
    });
    let ids: Vec<String> = futures::future::join_all(submissions).await;
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 200, "duplicate ids");

    let mut succeeded = HashSet::new();
    while succeeded.len() < 200 {
        let e = event_of(&ws.recv().await);
        assert!(unique.contains(&e.job));
        assert_ne!(e.phase, "FAILED", "a job failed: {e:?}");
        if e.phase == "SUCCEEDED" {
            assert!(succeeded.insert(e.job), "a job succeeded twice");
        }
    }
    let counts = server
        .gql_ok(
            r#"{ ok: jobs(filter: {phases: [SUCCEEDED]}) { totalCount } all: jobs { totalCount } }"#,
            json!({}),
        )
        .await;
    assert_eq!(counts["ok"]["totalCount"], 200);
    assert_eq!(counts["all"]["totalCount"], 200);
}

#[tokio::test]
async fn pagination_walks_every_job_exactly_once_newest_first() {
    let server = Server::start(&[]).await;
    let mut submitted = Vec::new();
    for i in 0..23 {
        let ns = if i % 3 == 0 { "team-a" } else { "team-b" };
        submitted.push(
            server
                .submit(json!({"name": format!("walk-{i}"), "namespace": ns, "command": ["true"]}))
                .await,
        );
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = server
            .gql_ok(
                "query($after: String) { jobs(first: 5, after: $after) { totalCount \
                 edges { cursor node { id } } pageInfo { hasNextPage endCursor } } }",
                json!({"after": after}),
            )
            .await;
        let jobs = &page["jobs"];
        assert_eq!(jobs["totalCount"], 23);
        for edge in jobs["edges"].as_array().unwrap() {
            seen.push(edge["node"]["id"].as_str().unwrap().to_owned());
        }
        if !jobs["pageInfo"]["hasNextPage"].as_bool().unwrap() {
            break;
        }
        after = jobs["pageInfo"]["endCursor"].as_str().map(str::to_owned);
    }
    let mut newest_first = submitted.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    let filtered = server
        .gql_ok(
            r#"{ a: jobs(filter: {namespace: "team-a"}) { totalCount }
                 named: jobs(filter: {nameContains: "walk-1"}) { totalCount edges { node { name } } }
                 none: jobs(filter: {phases: [FAILED]}) { totalCount } }"#,
            json!({}),
        )
        .await;
    assert_eq!(filtered["a"]["totalCount"], 8);
    // walk-1 and walk-10 .. walk-19
    assert_eq!(filtered["named"]["totalCount"], 11);
    assert_eq!(filtered["none"]["totalCount"], 0);
}

#[tokio::test]
async fn job_status_sends_current_state_then_changes_and_completes() {
    let server = Server::start(&[]).await;
    let id = server.submit(json!({"command": ["true"]})).await;
    let seen = server.wait_terminal(&id).await;
    assert_eq!(seen.last().map(String::as_str), Some("SUCCEEDED"));
    // Subscribing to a finished job: its state at once, then complete.
    assert_eq!(server.wait_terminal(&id).await, ["SUCCEEDED"]);
    // An unknown id: NOT_FOUND.
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "x",
        "subscription { jobStatus(id: \"nope\") { phase } }",
        json!({}),
    )
    .await;
    let msg = ws.recv().await;
    assert_eq!(msg["type"], "next");
    assert_eq!(msg["payload"]["errors"][0]["extensions"]["code"], "NOT_FOUND");
    assert_eq!(ws.recv().await["type"], "complete");
}

#[tokio::test]
async fn job_events_filter_by_namespace() {
    let server = Server::start(&[]).await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "f",
        r#"subscription { jobEvents(filter: {namespace: "blue"}) { phase job { id namespace } } }"#,
        json!({}),
    )
    .await;
    server.wait_subscriptions_live(1).await;
    let red = server
        .submit(json!({"namespace": "red", "command": ["true"]}))
        .await;
    let blue = server
        .submit(json!({"namespace": "blue", "command": ["true"]}))
        .await;
    loop {
        let msg = ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        assert_eq!(e["job"]["namespace"], "blue", "{msg}");
        assert_ne!(e["job"]["id"], red.as_str());
        if e["phase"] == "SUCCEEDED" {
            assert_eq!(e["job"]["id"], blue.as_str());
            break;
        }
    }
}

/// Every event in the store, by replaying from the start until `count` have arrived.
async fn replay_all(server: &Server, count: usize) -> Vec<Event> {
    let mut ws = events_socket(server, Some("0")).await;
    let mut all = Vec::new();
    while all.len() < count {
        all.push(event_of(&ws.recv().await));
    }
    all
}

#[tokio::test]
async fn job_events_resume_after_a_cursor_across_a_restart_with_no_gap_or_duplicate() {
    let mut server = Server::start(&[]).await;
    let mut ws = events_socket(&server, None).await;
    let first = server.submit(json!({"command": ["true"]})).await;
    // Read until the first job finished; remember the last cursor seen.
    let mut before = Vec::new();
    loop {
        let e = event_of(&ws.recv().await);
        let done = e.job == first && is_terminal(&e.phase);
        before.push(e);
        if done {
            break;
        }
    }
    let cursor = before.last().unwrap().cursor;
    drop(ws);
    // More happens while the client is away, then jobgate restarts.
    let second = server.submit(json!({"command": ["true"]})).await;
    server.wait_terminal(&second).await;
    server.stop().await;
    server = server.start_again(&[]).await;
    let third = server.submit(json!({"command": ["true"]})).await;
    server.wait_terminal(&third).await;

    let mut ws = events_socket(&server, Some(&cursor.to_string())).await;
    let mut after = Vec::new();
    while !after
        .iter()
        .any(|e: &Event| e.job == third && is_terminal(&e.phase))
    {
        after.push(event_of(&ws.recv().await));
    }
    let all = replay_all(&server, before.len() + after.len()).await;
    let expected: Vec<Event> = all.into_iter().filter(|e| e.cursor > cursor).collect();
    assert_eq!(after, expected, "resumed stream differs from the store's history");
    assert!(
        after.windows(2).all(|w| w[1].cursor == w[0].cursor + 1),
        "a gap in {after:?}"
    );
    assert_eq!(after.first().unwrap().cursor, cursor + 1);
}

#[tokio::test]
async fn a_subscriber_that_lags_the_broadcast_is_caught_up_from_the_store() {
    // A tiny broadcast buffer: a subscriber that reads nothing for a while must lag it.
    let server = Server::start(&["--broadcast-capacity", "2"]).await;
    let mut ws = events_socket(&server, None).await;
    // Make sure the subscription is live before the burst.
    let warm = server.submit(json!({"command": ["true"]})).await;
    loop {
        let e = event_of(&ws.recv().await);
        if e.job == warm && is_terminal(&e.phase) {
            break;
        }
    }
    let ids: Vec<String> =
        futures::future::join_all((0..40).map(|_| server.submit(json!({"command": ["true"]})))).await;
    for id in &ids {
        server.wait_terminal(id).await;
    }
    // Now read the backlog: it must hold every event, in order, without gaps.
    let mut got: Vec<Event> = Vec::new();
    let mut finished = HashSet::new();
    while finished.len() < ids.len() {
        let e = event_of(&ws.recv().await);
        if is_terminal(&e.phase) {
            finished.insert(e.job.clone());
        }
        got.push(e);
    }
    assert!(
        got.windows(2).all(|w| w[1].cursor == w[0].cursor + 1),
        "a gap or duplicate in the lagged stream"
    );
    let mut per_job: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in &got {
        if e.previous.as_deref() != Some(&e.phase) {
            per_job.entry(&e.job).or_default().push(&e.phase);
        }
    }
    for id in &ids {
        assert_eq!(
            per_job[id.as_str()],
            ["PENDING", "RUNNING", "SUCCEEDED"],
            "job {id}"
        );
    }
}

#[tokio::test]
async fn a_run_in_progress_at_a_crash_counts_as_failed_with_gateway_restarted() {
    let mut server = Server::spawn(&[]).await;
    let id = server
        .submit(json!({"command": sh("echo $$ > leader.pid; sleep 300"), "backoffLimit": 0}))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    wait_file(&server.work_dir(&id).join("leader.pid")).await;
    let orphan = read_pid(&server, &id, "leader.pid");
    server.kill9();
    assert!(alive(orphan), "the run outlives a kill -9 of jobgate");

    let server = server.start_again(&[]).await;
    let events = history(&server, &id).await;
    let last = events.last().unwrap();
    assert_eq!(
        (last.phase.as_str(), last.reason.as_deref()),
        ("FAILED", Some("GatewayRestarted"))
    );
    // The orphaned run is stopped, not left behind.
    wait_gone(orphan).await;
    assert_eq!(server.job(&id).await["progress"]["failed"], 1);
}

#[tokio::test]
async fn an_interrupted_run_is_retried_after_a_restart_when_the_backoff_limit_allows() {
    let mut server = Server::spawn(&[]).await;
    // The first run hangs; the retry finishes at once.
    let id = server
        .submit(json!({
            "command": sh("if [ -e attempted ]; then exit 0; fi; touch attempted; echo $$ > leader.pid; sleep 300"),
            "backoffLimit": 1,
        }))
        .await;
    wait_file(&server.work_dir(&id).join("leader.pid")).await;
    // The run must be on record (RUNNING is committed with it) before the crash; a kill
    // before that loses no attempt to count.
    server.wait_phase(&id, "RUNNING").await;
    server.kill9();
    let server = server.start_again(&[]).await;
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "SUCCEEDED"]);
    let job = server.job(&id).await;
    assert_eq!(job["progress"]["failed"], 1);
    assert_eq!(job["progress"]["succeeded"], 1);
    // The lost run is explained in the event that counted it.
    assert!(
        events.iter().any(|e| e
            .message
            .as_deref()
            .is_some_and(|m| m.contains("GatewayRestarted"))),
        "{events:?}"
    );
}

#[tokio::test]
async fn kill_9_during_submissions_loses_no_accepted_job() {
    let mut server = Server::spawn(&[]).await;
    let client = reqwest::Client::new();
    let url = server.url("/graphql");
    let body = json!({"query": "mutation { submitJob(input: {command: [\"true\"]}) { job { id } } }"});
    // Submit continuously from 8 clients; kill -9 the server while they are at it.
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let submitters: Vec<_> = (0..8)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            let answered = answered.clone();
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                loop {
                    let Ok(response) = client.post(&url).json(&body).send().await else {
                        break;
                    };
                    let Ok(value) = response.json::<Value>().await else {
                        break;
                    };
                    match value["data"]["submitJob"]["job"]["id"].as_str() {
                        Some(id) => {
                            accepted.push(id.to_owned());
                            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        None => break,
                    }
                }
                accepted
            })
        })
        .collect();
    // Let some submissions be answered, then crash. (Counting answers, not events: events
    // can run ahead of the answers the clients have read.)
    let polling = Polling::every(Duration::from_millis(5));
    while answered.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        polling
            .pause(|| "submissions are not being answered".to_owned())
            .await;
    }
    server.kill9();
    let mut accepted = Vec::new();
    for s in submitters {
        accepted.extend(s.await.unwrap());
    }
    assert!(
        accepted.len() >= 10,
        "too few submissions before the crash to test anything"
    );

    let server = server.start_again(&[]).await;
    for id in &accepted {
        let job = server.job(id).await;
        assert_eq!(job["id"], id.as_str(), "accepted job {id} was lost");
    }
    // And every one of them reaches a terminal phase: nothing stays PENDING or RUNNING.
    for id in &accepted {
        let phases = server.wait_terminal(id).await;
        let last = phases.last().unwrap();
        assert!(last == "SUCCEEDED" || last == "FAILED", "{id} ended {last}");
    }
}

#[tokio::test]
async fn a_second_jobgate_on_the_same_data_directory_refuses_to_start() {
    let server = Server::start(&[]).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_jobgate"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&server.data_dir)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("in use by another jobgate"), "{stderr}");
    // The first one is unharmed.
    server.submit(json!({"command": ["true"]})).await;
}

#[tokio::test]
async fn sigterm_drains_and_exits_cleanly_and_jobs_resume_after_restart() {
    let mut server = Server::spawn(&[]).await;
    let id = server
        .submit(json!({"command": sh("if [ -e attempted ]; then exit 0; fi; echo 1 > attempted; sleep 300"), "backoffLimit": 1}))
        .await;
    // RUNNING is reported once the process is spawned, which may be before the shell has
    // written its marker: stopped before that, the retry would take the hanging branch.
    wait_file(&server.work_dir(&id).join("attempted")).await;
    server.wait_phase(&id, "RUNNING").await;
    let status = server.terminate().await;
    assert!(status.success(), "jobgate exited with {status}");
    let server = server.start_again(&[]).await;
    let events = history(&server, &id).await;
    assert_eq!(events.last().unwrap().phase, "SUCCEEDED");
}

/// Reads `jobLogs` lines until the subscription completes; panics on an error.
async fn log_lines_until_complete(ws: &mut GqlWs, id: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let msg = ws.recv().await;
        match msg["type"].as_str() {
            Some("next") => {
                assert_eq!(msg["id"], id);
                let line = &msg["payload"]["data"]["jobLogs"];
                assert!(line.is_object(), "not a log line: {msg}");
                lines.push(line["text"].as_str().unwrap().to_owned());
            }
            Some("complete") => return lines,
            _ => panic!("unexpected message: {msg}"),
        }
    }
}

#[tokio::test]
async fn job_logs_streams_lines_as_they_are_written_then_completes() {
    let server = Server::start(&[]).await;
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let script = format!(
        "echo first; while [ ! -e {go} ]; do sleep 0.02; done; echo second; echo third >&2",
        go = go.display()
    );
    let id = server.submit(json!({"command": sh(&script)})).await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "logs",
        "subscription($id: ID!) { jobLogs(id: $id, follow: true) { text source } }",
        json!({"id": id}),
    )
    .await;
    // The first line arrives while the job is still waiting for the gate.
    let msg = ws.recv().await;
    assert_eq!(msg["payload"]["data"]["jobLogs"]["text"], "first", "{msg}");
    let phase = server.job(&id).await["phase"].clone();
    assert!(phase == "PENDING" || phase == "RUNNING", "{phase}");
    std::fs::write(&go, "").unwrap();
    let rest = log_lines_until_complete(&mut ws, "logs").await;
    assert_eq!(rest, ["second", "third"], "later lines, once each, then complete");
    assert_eq!(server.job(&id).await["phase"], "SUCCEEDED");

    // Without follow, or once finished: the tail, then complete.
    ws.subscribe(
        "tail",
        "subscription($id: ID!) { jobLogs(id: $id, follow: true, tailLines: 2) { text } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        log_lines_until_complete(&mut ws, "tail").await,
        ["second", "third"]
    );

    ws.subscribe(
        "missing",
        r#"subscription { jobLogs(id: "no-such-job") { text } }"#,
        json!({}),
    )
    .await;
    let msg = ws.recv().await;
    assert_eq!(msg["type"], "next", "{msg}");
    assert_eq!(msg["payload"]["errors"][0]["extensions"]["code"], "NOT_FOUND");
}

#[tokio::test]
async fn job_logs_of_a_job_cancelled_before_it_ran_completes() {
    // A job that cannot start for now (parallelism is per job, so block the launcher by
    // cancelling at once): its follower must not hang.
    let server = Server::start(&[]).await;
    let id = server.submit(json!({"command": ["sleep", "300"]})).await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "logs",
        "subscription($id: ID!) { jobLogs(id: $id) { text } }",
        json!({"id": id}),
    )
    .await;
    server.cancel(&id).await;
    assert_eq!(
        log_lines_until_complete(&mut ws, "logs").await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_job_whose_working_directory_cannot_be_made_waits_then_runs_once_it_can() {
    // A work directory of its own, since the default one is shared by every test.
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let work = parent.path().join("work");
    let server = Server::start(&["--local-work-dir", work.to_str().unwrap()]).await;
    std::fs::remove_dir_all(&work).unwrap();
    std::fs::write(&work, "not a directory").unwrap();
    let id = server.submit(json!({ "command": sh("exit 0") })).await;
    // The launch failed and is retried: the job waits PENDING with the reason.
    let mut ws = events_socket(&server, Some("0")).await;
    loop {
        let e = event_of(&ws.recv().await);
        if e.job == id && e.reason.as_deref() == Some("LaunchFailed") {
            assert_eq!(e.phase, "PENDING");
            break;
        }
    }
    std::fs::remove_file(&work).unwrap();
    let events = history(&server, &id).await;
    assert_eq!(phases(&events), ["PENDING", "RUNNING", "SUCCEEDED"]);
}
