//! The queries the dashboard is built on, through the real server over HTTP and WebSocket:
//! `jobStats` (counts, activity and the cursor they are consistent with), `templates`,
//! `namespaces` and `Job.lastEventCursor`.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor.

mod common;

use chrono::{DateTime, Utc};
use common::{GqlWs, Server};
use serde_json::{Value, json};

const STATS: &str = "query($w: Int!, $b: Int!) { jobStats(windowMinutes: $w, bucketSeconds: $b) { \
    cursor counts { pending running succeeded failed cancelled total } \
    activity { start submitted succeeded failed cancelled } } }";

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

async fn stats(server: &Server, window: i64, bucket: i64) -> Value {
    server.gql_ok(STATS, json!({"w": window, "b": bucket})).await["jobStats"].clone()
}

fn sum(activity: &Value, key: &str) -> i64 {
    activity
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[key].as_i64().unwrap())
        .sum()
}

#[tokio::test]
async fn job_stats_count_phases_and_bucket_the_last_hour() {
    let server = Server::start(&[]).await;
    let before = Utc::now();
    let succeeded = server.submit(json!({"command": ["true"]})).await;
    let failed = server
        .submit(json!({"command": sh("exit 3"), "backoffLimit": 0}))
        .await;
    let running = server.submit(json!({"command": ["sleep", "60"]})).await;
    let cancelled = server.submit(json!({"command": ["sleep", "60"]})).await;
    server.wait_phase(&succeeded, "SUCCEEDED").await;
    server.wait_phase(&failed, "FAILED").await;
    server.wait_phase(&running, "RUNNING").await;
    server.wait_phase(&cancelled, "RUNNING").await;
    server.cancel(&cancelled).await;
    server.wait_phase(&cancelled, "CANCELLED").await;

    let s = stats(&server, 10, 60).await;
    let after = Utc::now();
    assert_eq!(
        s["counts"],
        json!({"pending": 0, "running": 1, "succeeded": 1, "failed": 1, "cancelled": 1, "total": 4})
    );
    let activity = s["activity"].as_array().unwrap();
    assert_eq!(activity.len(), 10);
    let starts: Vec<i64> = activity
        .iter()
        .map(|b| {
            b["start"]
                .as_str()
                .unwrap()
                .parse::<DateTime<Utc>>()
                .unwrap()
                .timestamp()
        })
        .collect();
    // Aligned to the minute, consecutive, the last one holding now.
    assert!(starts.iter().all(|t| t % 60 == 0), "{starts:?}");
    assert!(starts.windows(2).all(|w| w[1] - w[0] == 60), "{starts:?}");
    let last = *starts.last().unwrap();
    assert!(
        last <= after.timestamp() && before.timestamp() < last + 60,
        "{starts:?}"
    );
    assert_eq!(sum(&s["activity"], "submitted"), 4);
    assert_eq!(sum(&s["activity"], "succeeded"), 1);
    assert_eq!(sum(&s["activity"], "failed"), 1);
    assert_eq!(sum(&s["activity"], "cancelled"), 1);

    // Other widths: ceil(window / bucket) buckets.
    let wide = stats(&server, 60, 3600).await;
    assert_eq!(wide["activity"].as_array().unwrap().len(), 1);
    assert_eq!(sum(&wide["activity"], "submitted"), 4);
    let odd = stats(&server, 1, 45).await;
    assert_eq!(odd["activity"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn job_stats_refuse_bad_windows_with_the_field_at_fault() {
    let server = Server::start(&[]).await;
    for (window, bucket, field) in [
        (0, 60, "windowMinutes"),
        (1441, 60, "windowMinutes"),
        (60, 5, "bucketSeconds"),
        (60, 3601, "bucketSeconds"),
        // 8,640 buckets of 10 s in a day: too many.
        (1440, 10, "bucketSeconds"),
    ] {
        let body = server.gql(STATS, json!({"w": window, "b": bucket})).await;
        let error = &body["errors"][0];
        assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{body}");
        assert_eq!(error["extensions"]["field"], field, "{body}");
    }
}

#[tokio::test]
async fn job_events_after_the_stats_cursor_bring_exactly_what_came_after() {
    let server = Server::start(&[]).await;
    let earlier = server.submit(json!({"command": ["true"]})).await;
    server.wait_phase(&earlier, "SUCCEEDED").await;
    let snapshot = stats(&server, 60, 60).await;
    assert_eq!(snapshot["counts"]["succeeded"], 1);
    // The cursor is the newest event's: the job's SUCCEEDED event and everything before it
    // are in the snapshot.
    let job = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { lastEventCursor } }",
            json!({"id": earlier}),
        )
        .await;
    assert_eq!(job["job"]["lastEventCursor"], snapshot["cursor"]);

    let later = server.submit(json!({"command": ["true"]})).await;
    server.wait_phase(&later, "SUCCEEDED").await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "events",
        "subscription($after: String) { jobEvents(after: $after) { cursor phase previousPhase job { id } } }",
        json!({"after": snapshot["cursor"]}),
    )
    .await;
    // Applying these to the snapshot's counts gives the counts now, with nothing missed and
    // nothing counted twice.
    let mut counts = snapshot["counts"].clone();
    let mut seen = Vec::new();
    loop {
        let msg = ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        assert_eq!(
            e["job"]["id"],
            later.as_str(),
            "only the later job's events: {msg}"
        );
        let phase = e["phase"].as_str().unwrap().to_lowercase();
        if let Some(previous) = e["previousPhase"].as_str() {
            let previous = previous.to_lowercase();
            if previous != phase {
                counts[&previous] = json!(counts[&previous].as_i64().unwrap() - 1);
                counts[&phase] = json!(counts[&phase].as_i64().unwrap() + 1);
            }
        } else {
            counts[&phase] = json!(counts[&phase].as_i64().unwrap() + 1);
            counts["total"] = json!(counts["total"].as_i64().unwrap() + 1);
        }
        seen.push(e["cursor"].as_str().unwrap().to_owned());
        if phase == "succeeded" {
            break;
        }
    }
    assert_eq!(counts, stats(&server, 60, 60).await["counts"]);
    // lastEventCursor is the cursor of the job's latest event.
    let job = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { lastEventCursor } }",
            json!({"id": later}),
        )
        .await;
    assert_eq!(job["job"]["lastEventCursor"], seen.last().unwrap().as_str());
}

#[tokio::test]
async fn templates_describe_the_fields_validation_enforces() {
    let server = Server::start(&["--max-parallelism", "4", "--max-completions", "50"]).await;
    let data = server
        .gql_ok(
            "{ templates { name kind available parameterSchema \
               fields { name label type required default minimum maximum choices } } }",
            json!({}),
        )
        .await;
    let templates = data["templates"].as_array().unwrap();
    let container = &templates[0];
    // The workload templates are listed too, unavailable on the local executor.
    assert!(templates.len() > 1, "{templates:?}");
    assert!(
        templates[1..].iter().all(|t| t["available"] == false),
        "{templates:?}"
    );
    assert_eq!(container["name"], "container");
    assert_eq!(container["kind"], "local process");
    assert_eq!(container["available"], true);
    assert_eq!(container["parameterSchema"], Value::Null);
    let fields = container["fields"].as_array().unwrap();
    let names: Vec<&str> = fields.iter().map(|f| f["name"].as_str().unwrap()).collect();
    // The local executor runs no images and has no Kubernetes fields.
    assert_eq!(
        names,
        [
            "name",
            "namespace",
            "command",
            "args",
            "env",
            "parallelism",
            "completions",
            "backoffLimit",
            "dependsOn",
            "priority",
            "activeDeadlineSeconds"
        ]
    );
    let field = |name: &str| fields.iter().find(|f| f["name"] == name).unwrap();
    assert_eq!(field("command")["required"], true);
    assert_eq!(field("command")["type"], "STRING_LIST");
    assert_eq!(field("namespace")["default"], "default");

    // Each advertised maximum is accepted and one more is refused, naming the field; the
    // advertised minimum likewise.
    for name in ["parallelism", "completions", "backoffLimit", "priority"] {
        let f = field(name);
        let max = f["maximum"].as_i64().unwrap();
        let min = f["minimum"].as_i64().unwrap();
        // `priority` has no default in the form (0 when omitted).
        assert!(f["default"].as_i64().unwrap_or(0) >= min);
        let submit = |value: i64| {
            let mut input = json!({"command": ["true"]});
            input[name] = json!(value);
            server.submit_answer(input)
        };
        let ok = submit(max).await;
        assert!(ok.get("errors").is_none(), "{name} = {max}: {ok}");
        for bad in [max + 1, min - 1] {
            let body = submit(bad).await;
            assert_eq!(
                body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
                "{body}"
            );
            assert_eq!(
                body["errors"][0]["extensions"]["field"],
                format!("input.{name}"),
                "{body}"
            );
        }
    }
    assert_eq!(field("parallelism")["maximum"], 4);
    assert_eq!(field("completions")["maximum"], 50);
}

#[tokio::test]
async fn namespaces_are_those_in_use_or_the_allowed_ones() {
    let server = Server::start(&[]).await;
    let data = server.gql_ok("{ namespaces }", json!({})).await;
    assert_eq!(data["namespaces"], json!(["default"]));
    for ns in ["team-b", "team-a", "team-b"] {
        server.submit(json!({"command": ["true"], "namespace": ns})).await;
    }
    let data = server.gql_ok("{ namespaces }", json!({})).await;
    assert_eq!(data["namespaces"], json!(["default", "team-a", "team-b"]));

    let limited = Server::start(&["--allowed-namespaces", "ml,etl"]).await;
    let data = limited.gql_ok("{ namespaces }", json!({})).await;
    assert_eq!(data["namespaces"], json!(["default", "etl", "ml"]));
}
