//! Retention over the real server: finished jobs go with their events once their retention
//! has passed (`--retention-days`, per-namespace overrides), unfinished ones never do, and a
//! resume cursor older than what was deleted answers CURSOR_EXPIRED (with where to resume),
//! to `jobEvents` subscribers and to webhook endpoints alike, across a restart too.
//!
//! Retention here is 0.0001 days (8.64 s: long enough that a test has always seen a job
//! finish before it can go) and sweeps every 100 ms; each wait polls for what a user would
//! see, with a limit.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor.

mod common;

use std::path::Path;

use serde_json::{Value, json};
use sqlx::Connection as _;

use common::{GqlWs, Polling, Server, scrape};

const RETENTION_DAYS: &str = "0.0001";

fn args() -> Vec<&'static str> {
    vec![
        "--retention-days",
        RETENTION_DAYS,
        "--retention-interval-ms",
        "100",
        "--retention-namespace",
        "keep=forever",
        "--webhook-allow-private-targets",
        "--webhook-backoff-min-ms",
        "50",
        "--webhook-backoff-max-ms",
        "200",
    ]
}

const EVENTS: &str = "subscription($after: String) { jobEvents(after: $after) { cursor phase job { id } } }";

/// Waits until `job(id)` answers null: retention took the job.
async fn wait_gone(server: &Server, id: &str) {
    let polling = Polling::start();
    loop {
        let data = server
            .gql_ok(
                "query($id: ID!) { job(id: $id) { id phase } }",
                json!({ "id": id }),
            )
            .await;
        if data["job"].is_null() {
            return;
        }
        polling
            .pause(|| format!("job {id} was never deleted: {data}; log:\n{}", server.log_text()))
            .await;
    }
}

/// Subscribes to `jobEvents(after:)` on a fresh socket; returns the socket and its first
/// message.
async fn events_after(server: &Server, after: &str) -> (GqlWs, Value) {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe("e", EVENTS, json!({ "after": after })).await;
    let first = ws.recv().await;
    (ws, first)
}

/// What a subscription after `after` answers: CURSOR_EXPIRED, with the oldest cursor to
/// resume after (returned) and how to recover, then nothing more.
async fn expired(server: &Server, after: &str) -> String {
    let (mut ws, message) = events_after(server, after).await;
    assert_eq!(message["type"], "next", "expected CURSOR_EXPIRED, got {message}");
    let error = &message["payload"]["errors"][0];
    assert_eq!(error["extensions"]["code"], "CURSOR_EXPIRED", "{message}");
    let recovery = error["extensions"]["recovery"].as_str().unwrap_or_default();
    assert!(recovery.contains("jobStats"), "says how to recover: {message}");
    assert_eq!(ws.recv().await["type"], "complete", "the subscription ends there");
    error["extensions"]["oldestCursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no oldestCursor in {message}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finished_jobs_go_after_their_retention_and_older_cursors_expire() {
    let mut server = Server::start(&args()).await;
    let start = server.gql_ok("{ jobStats { cursor } }", json!({})).await["jobStats"]["cursor"]
        .as_str()
        .unwrap()
        .to_owned();

    let running = server
        .submit(json!({ "name": "running", "command": ["sleep", "600"] }))
        .await;
    server.wait_phase(&running, "RUNNING").await;
    let kept = server
        .submit(json!({ "name": "kept", "namespace": "keep", "command": ["sh", "-c", "echo kept"] }))
        .await;
    let gone = server
        .submit(json!({ "name": "gone", "command": ["sh", "-c", "echo gone"] }))
        .await;
    let failed = server
        .submit(json!({ "name": "failed", "command": ["false"], "backoffLimit": 0 }))
        .await;
    for id in [&kept, &gone, &failed] {
        server.wait_terminal(id).await;
    }
    const EVENTS_OF: &str = "query($id: ID!) { job(id: $id) { events { cursor phase } } }";
    let running_events = server.gql_ok(EVENTS_OF, json!({ "id": running })).await;

    let log_of = |id: &str| server.data_dir.join("logs").join(format!("{id}.log"));
    // The output is written to the log as it comes, not necessarily before the job's end is
    // recorded: wait for it, as a user reading `logs` would.
    for id in [&gone, &kept] {
        let polling = Polling::start();
        while server.job_with(id, "logs").await["logs"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            polling.pause(|| format!("job {id} never had a log")).await;
        }
        // The file beside the archive, written from the same lines.
        while !log_of(id).exists() {
            polling
                .pause(|| format!("{} never appeared", log_of(id).display()))
                .await;
        }
    }
    wait_gone(&server, &gone).await;
    wait_gone(&server, &failed).await;
    // Its log file goes with it (the local executor's); the kept job's stays.
    let polling = Polling::start();
    while log_of(&gone).exists() {
        polling
            .pause(|| format!("{} was never removed", log_of(&gone).display()))
            .await;
    }
    assert!(log_of(&kept).exists());
    // `keep` is kept forever; an unfinished job is never deleted, however old its events.
    assert_eq!(server.job(&kept).await["phase"], "SUCCEEDED");
    assert_eq!(server.job(&running).await["phase"], "RUNNING");
    assert_eq!(server.job_names().await, ["kept", "running"]);
    // The name search forgets them too.
    assert!(
        names_containing(&server, "one").await.is_empty(),
        "`gone` was deleted"
    );
    assert_eq!(names_containing(&server, "ept").await, ["kept"]);
    // Every one of them (a progress event may have come since, not gone).
    let now = server.gql_ok(EVENTS_OF, json!({ "id": running })).await;
    let now = now["job"]["events"].as_array().unwrap();
    let before = running_events["job"]["events"].as_array().unwrap();
    assert!(!before.is_empty());
    assert_eq!(
        &now[..before.len()],
        &before[..],
        "the running job's own events stay"
    );
    let metrics = scrape(&server).await;
    assert!(
        metrics["jobgate_retention_deleted_jobs_total"] >= 2.0,
        "{:?}",
        metrics.get("jobgate_retention_deleted_jobs_total")
    );

    // A subscriber resuming from before the deletions would miss them: refused, with the
    // oldest cursor it can resume after.
    let oldest = expired(&server, &start).await;
    let oldest_n: i64 = oldest.parse().unwrap();
    assert!(oldest_n > start.parse::<i64>().unwrap());

    // Resuming after that cursor works, with nothing older, and goes on. (Whatever `later`
    // records comes after `oldest`, so the subscription gets it however the two race.)
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("e", EVENTS, json!({ "after": oldest })).await;
    let later = server
        .submit(json!({ "name": "later", "command": ["true"] }))
        .await;
    loop {
        let message = ws.recv().await;
        assert_eq!(message["type"], "next", "{message}");
        let event = &message["payload"]["data"]["jobEvents"];
        let cursor: i64 = event["cursor"].as_str().unwrap().parse().unwrap();
        assert!(cursor > oldest_n, "{event} is not after {oldest}");
        if event["job"]["id"] == later.as_str() {
            break;
        }
    }

    assert_eq!(names_containing(&server, "ate").await, ["later"]);

    // The horizon is durable: after a restart the same cursor is still refused.
    server.stop().await;
    assert_name_index_matches_jobs(&server.data_dir).await;
    let server = server.start_again(&args()).await;
    let after_restart: i64 = expired(&server, &start).await.parse().unwrap();
    // Not lower; higher only if `later` has gone meanwhile too.
    assert!(after_restart >= oldest_n, "{after_restart} < {oldest}");
    assert_eq!(server.job(&kept).await["phase"], "SUCCEEDED");
    assert!(
        server
            .gql_ok("query($id: ID!) { job(id: $id) { id } }", json!({ "id": gone }))
            .await["job"]
            .is_null()
    );
}

/// The names of the jobs `jobs(filter: { nameContains })` lists (served by the name index for
/// three characters or more).
async fn names_containing(server: &Server, text: &str) -> Vec<String> {
    let data = server
        .gql_ok(
            "query($text: String!) { jobs(first: 100, filter: { nameContains: $text }) { edges { node { name } } } }",
            json!({ "text": text }),
        )
        .await;
    data["jobs"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// FTS5's own check of the name index of a stopped server's store: with rank 1 it also
/// checks that the index holds exactly the names in `jobs`, so a deletion that left an entry
/// behind, or removed the wrong one, fails here.
async fn assert_name_index_matches_jobs(data_dir: &Path) {
    let url = format!("sqlite://{}", data_dir.join("jobgate.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("the stopped server's store opens");
    sqlx::query("INSERT INTO job_names (job_names, rank) VALUES ('integrity-check', 1)")
        .execute(&mut db)
        .await
        .expect("the name index matches the jobs table");
    db.close().await.expect("closing the store");
}

const CREATE: &str =
    "mutation($input: CreateWebhookInput!) { createWebhook(input: $input) { webhook { id } secret } }";
const REPLAY: &str =
    "mutation($id: ID!, $after: String!) { replayWebhook(id: $id, after: $after) { webhook { state } } }";

/// An endpoint that never answers (nothing listens on its port) falls behind; when retention
/// deletes events it was never sent, it is parked saying so, and a replay from before them
/// is refused while one from the oldest cursor is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_behind_retention_is_parked_and_replays_from_the_oldest_cursor() {
    let server = Server::start(&args()).await;
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let created = server
        .gql_ok(
            CREATE,
            json!({ "input": { "url": format!("http://127.0.0.1:{port}/hook") } }),
        )
        .await;
    let id = created["createWebhook"]["webhook"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let created_at = server.webhook(&id).await["cursor"].as_str().unwrap().to_owned();
    let job = server
        .submit(json!({ "name": "undelivered", "command": ["true"] }))
        .await;
    server.wait_terminal(&job).await;
    wait_gone(&server, &job).await;

    let polling = Polling::start();
    let parked = loop {
        let w = server.webhook(&id).await;
        if w["state"] == "PARKED" {
            break w;
        }
        polling
            .pause(|| format!("never parked: {w}; log:\n{}", server.log_text()))
            .await;
    };
    let error = parked["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("deleted by retention"), "{parked}");

    let refused = server.gql(REPLAY, json!({ "id": id, "after": created_at })).await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "CURSOR_EXPIRED",
        "{refused}"
    );
    let oldest = refused["errors"][0]["extensions"]["oldestCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        server.webhook(&id).await["state"],
        "PARKED",
        "a refused replay changes nothing"
    );
    let replayed = server.gql_ok(REPLAY, json!({ "id": id, "after": oldest })).await;
    assert_ne!(
        replayed["replayWebhook"]["webhook"]["state"], "PARKED",
        "{replayed}"
    );
}

/// Bad retention flags are refused at start, saying why.
#[test]
fn retention_flags_are_checked() {
    for (flags, says) in [
        (vec!["--retention-days", "0"], "above 0"),
        (vec!["--retention-days", "soon"], "above 0"),
        (vec!["--retention-namespace", "keep"], "NAMESPACE=DAYS"),
        (
            vec!["--retention-namespace", "Not_A_Namespace=3"],
            "namespace name",
        ),
        (vec!["--retention-namespace", "ci=-1"], "above 0"),
    ] {
        let mut args = vec!["jobgate"];
        args.extend(&flags);
        let error = jobgate::config::Config::load_from(args.iter().map(std::ffi::OsString::from))
            .expect_err("refused")
            .to_string();
        assert!(error.contains(says), "{flags:?}: {error}");
    }
}
