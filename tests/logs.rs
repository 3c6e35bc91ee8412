//! Jobs' whole output, as a user reads it: `Job.logLines` pages, `jobLogs` streams (resumed
//! after a cursor), `Job.logArchive`, on the Kubernetes executor (the API emulator, whose
//! pods' logs jobgate follows; a Job's TTL of 0 deletes its pods as soon as they may go) and
//! on the local executor (whose log file rotates), across restarts of jobgate, with log
//! streams cut mid-way, a per-job cap, and another tenant's job.
//!
//! jobgate runs in the test's process (`Server::start`, `Cluster::jobgate`).

mod common;

use common::cluster::Cluster;
use common::{GqlWs, Polling, Server, tenants_server, token_entry};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// Every archived line of the job, read a page at a time with `logLines`: `(cursor, text)`.
async fn all_log_lines(server: &Server, id: &str, first: i32) -> Vec<(i64, String)> {
    let mut lines = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let data = server
            .gql_ok(
                "query($id: ID!, $first: Int!, $after: String) { job(id: $id) { \
                 logLines(first: $first, after: $after) { edges { cursor node { text cursor } } \
                 pageInfo { hasNextPage endCursor } } } }",
                json!({"id": id, "first": first, "after": after}),
            )
            .await;
        let page = &data["job"]["logLines"];
        let edges = page["edges"].as_array().unwrap();
        assert!(
            edges.len() <= first as usize,
            "a page holds at most `first` lines"
        );
        for e in edges {
            assert_eq!(e["cursor"], e["node"]["cursor"]);
            lines.push((
                e["cursor"].as_str().unwrap().parse::<i64>().unwrap(),
                e["node"]["text"].as_str().unwrap().to_owned(),
            ));
        }
        if page["pageInfo"]["hasNextPage"] != true {
            return lines;
        }
        after = page["pageInfo"]["endCursor"].as_str().map(str::to_owned);
    }
}

/// Every line `jobLogs` sends from `after` (or the last `tail` lines) until it completes:
/// `(cursor, text)`. Reads at most `stop_after` lines, then drops the connection.
async fn stream_log_lines(
    server: &Server,
    id: &str,
    tail: i32,
    after: Option<&str>,
    stop_after: Option<usize>,
) -> Vec<(i64, String)> {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe(
        "logs",
        "subscription($id: ID!, $tail: Int!, $after: String) { \
         jobLogs(id: $id, follow: true, tailLines: $tail, after: $after) { text cursor } }",
        json!({"id": id, "tail": tail, "after": after}),
    )
    .await;
    let mut lines = Vec::new();
    loop {
        if stop_after.is_some_and(|n| lines.len() >= n) {
            return lines;
        }
        let msg = ws.recv().await;
        match msg["type"].as_str() {
            Some("next") => {
                let line = &msg["payload"]["data"]["jobLogs"];
                assert!(line.is_object(), "{msg}");
                lines.push((
                    line["cursor"].as_str().unwrap().parse::<i64>().unwrap(),
                    line["text"].as_str().unwrap().to_owned(),
                ));
            }
            Some("complete") => return lines,
            _ => panic!("unexpected {msg}"),
        }
    }
}

fn numbered(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|i| format!("line {i}")).collect()
}

/// Each line once, cursors 0, 1, 2… in order, and the texts as expected.
fn assert_whole(lines: &[(i64, String)], expected: &[String]) {
    for (i, (cursor, _)) in lines.iter().enumerate() {
        assert_eq!(*cursor, i as i64, "cursors follow each other from 0");
    }
    let texts: Vec<&String> = lines.iter().map(|(_, t)| t).collect();
    let expected: Vec<&String> = expected.iter().collect();
    if texts != expected {
        let first_difference = texts.iter().zip(&expected).position(|(a, b)| a != b);
        panic!(
            "{} lines where {} were expected; first difference at {first_difference:?}",
            texts.len(),
            expected.len()
        );
    }
}

/// Reads the job's whole output both ways a user can, a page of 1,000 lines at a time with
/// `logLines` and streamed by `jobLogs` from its first line, and checks each is `expected`,
/// whole ([`assert_whole`]).
async fn assert_read_whole(server: &Server, id: &str, expected: &[String]) {
    assert_whole(&all_log_lines(server, id, 1000).await, expected);
    assert_whole(&stream_log_lines(server, id, 10_000, None, None).await, expected);
}

async fn log_archive(server: &Server, id: &str) -> Value {
    server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { phase logArchive { lines bytes truncated } } }",
            json!({"id": id}),
        )
        .await["job"]
        .clone()
}

fn kube_input(env: &[(&str, &str)], ttl: i32) -> Value {
    json!({
        "image": "busybox:1.36",
        "command": ["sh", "-c", "print lines"],
        "env": env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        "ttlSecondsAfterFinished": ttl,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_job_keeps_its_whole_output_after_its_ttl_cut_streams_and_restarts() {
    let Some(cluster) = Cluster::emulated("it cuts log streams, drives the emulated kubelet, writes to the emulator's store directly, scripts its pods through EMULATOR_GATE, EMULATOR_LOG, EMULATOR_LOG_LINES").await else {
        return;
    };
    // The first log answer is cut after 700 of the pod's first 2,000 lines (written within
    // the same second or two): the follow resumes from the second of its last line and must
    // drop exactly the lines it already has.
    cluster.emu().cut_log_answers(1, 700);
    let args = cluster.args(&[]);
    let mut server = Server::start(&args).await;
    let id = server
        .submit(kube_input(
            &[
                ("EMULATOR_LOG", "line 0"),
                ("EMULATOR_LOG_LINES", "1999"),
                ("EMULATOR_GATE", "more"),
            ],
            0,
        ))
        .await;
    let pod = {
        let polling = Polling::start();
        loop {
            let pods = cluster.pods_of(&id).await;
            if let Some(p) = pods.first() {
                break p.metadata.name.clone().unwrap();
            }
            polling.pause(|| "the job's pod never appeared".into()).await;
        }
    };
    let write = |from: usize, to: usize| {
        for i in from..to {
            cluster
                .emu()
                .store()
                .append_log(cluster.namespace(), &pod, &format!("line {i}"));
        }
    };
    server.wait_archive_reaches(&id, 2000).await;
    // The stream is cut while the pod writes on.
    cluster.emu().drop_log_streams();
    write(2000, 3000);
    server.wait_archive_reaches(&id, 3000).await;
    // jobgate stops while the pod writes on, and starts again.
    server.stop().await;
    write(3000, 4000);
    let server = server.start_again(&args).await;
    server.wait_archive_reaches(&id, 4000).await;
    cluster.emu().drop_log_streams();
    write(4000, 5000);
    cluster.emu().simulation().open_gate("more");
    server.wait_terminal(&id).await;
    server.wait_archived(&id, 5000).await;
    let resumes = common::scrape(&server)
        .await
        .get("jobgate_log_follow_resumes_total")
        .copied();
    assert!(
        resumes.unwrap_or(0.0) >= 1.0,
        "the cut stream was resumed: {resumes:?}"
    );
    // The Job's TTL of 0 took the Job and, once their logs were archived, its pods.
    cluster
        .until("the TTL controller deletes the Job and its pods", || async {
            cluster
                .jobs()
                .get_opt(&format!("jobgate-{id}"))
                .await
                .unwrap()
                .is_none()
                && cluster.pods_of(&id).await.is_empty()
        })
        .await;
    let expected = numbered(0, 4999);
    assert_read_whole(&server, &id, &expected).await;
    let job = log_archive(&server, &id).await;
    assert_eq!(job["logArchive"]["truncated"], false);
    let bytes: usize = expected.iter().map(|l| l.len() + 1).sum();
    assert_eq!(job["logArchive"]["bytes"], bytes as i64);

    // And after another restart, with the pods long gone.
    let mut server = server;
    server.stop().await;
    let server = server.start_again(&args).await;
    assert_whole(&all_log_lines(&server, &id, 777).await, &expected);
    let tail = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { logs(tailLines: 3) } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(tail["job"]["logs"], "line 4997\nline 4998\nline 4999");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_job_with_ttl_zero_keeps_all_5000_lines() {
    let Some(cluster) =
        Cluster::emulated("it scripts its pods through EMULATOR_LOG, EMULATOR_LOG_LINES").await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(kube_input(
            &[("EMULATOR_LOG", "line 0"), ("EMULATOR_LOG_LINES", "4999")],
            0,
        ))
        .await;
    server.wait_terminal(&id).await;
    cluster
        .until("the TTL controller deletes the Job and its pods", || async {
            cluster
                .jobs()
                .get_opt(&format!("jobgate-{id}"))
                .await
                .unwrap()
                .is_none()
                && cluster.pods_of(&id).await.is_empty()
        })
        .await;
    // Once the pods are gone, their logs were archived whole (the finalizer held them).
    let expected = numbered(0, 4999);
    assert_read_whole(&server, &id, &expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_templates_pod_is_held_until_its_whole_log_is_archived() {
    let Some(cluster) = Cluster::emulated_as("it throttles the API server, serves kinds whose operators the emulator simulates, scripts its pods through EMULATOR_LOG, EMULATOR_LOG_LINES", "workload-kinds").await else {
        return;
    };
    cluster.emu().register_workload_crds(&["PyTorchJob"]).unwrap();
    // No log can be read until the pod has been deleted: whatever the archive gets, it gets
    // from a pod its deletion would have taken at once but for jobgate's finalizer.
    cluster.emu().throttle("pods/log", "log", 1);
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(json!({
            "template": "pytorchjob",
            "image": "example/work:1",
            "command": ["python3", "main.py"],
            "parameters": {"workers": 0, "restartPolicy": "Never"},
            "env": [
                {"name": "EMULATOR_LOG", "value": "line 0"},
                {"name": "EMULATOR_LOG_LINES", "value": "4999"},
            ],
        }))
        .await;
    // The operator made the pod without jobgate's finalizer; jobgate adds it.
    let held = |pod: &Pod| {
        pod.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "jobgate.io/log-archive"))
    };
    let pod = {
        let polling = Polling::start();
        loop {
            let pods = cluster.pods_of(&id).await;
            let done = pods
                .iter()
                .find(|p| held(p) && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"));
            if let Some(p) = done {
                break p.metadata.name.clone().unwrap();
            }
            polling
                .pause(|| format!("the pod never ended holding the finalizer: {pods:?}"))
                .await;
        }
    };
    // Deleted, as an operator's clean-up or a TTL would: the finalizer keeps it, and its log.
    // (The job finishes only once its log can be read: its final report reads the tail.)
    cluster
        .pods()
        .delete(&pod, &DeleteParams::default())
        .await
        .unwrap();
    let deleting = cluster.pods().get_opt(&pod).await.unwrap();
    assert!(
        deleting
            .as_ref()
            .is_some_and(|p| held(p) && p.metadata.deletion_timestamp.is_some()),
        "the deleted pod waits for its log to be archived: {deleting:?}"
    );
    cluster.emu().unthrottle();
    // Once its whole log is archived, jobgate removes the finalizer and the deletion ends.
    cluster
        .until("the pod goes once its log is archived", || async {
            cluster.pods().get_opt(&pod).await.unwrap().is_none()
        })
        .await;
    server.wait_archived(&id, 5000).await;
    assert_whole(&all_log_lines(&server, &id, 1000).await, &numbered(0, 4999));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_job_over_the_cap_is_marked_truncated() {
    let Some(cluster) =
        Cluster::emulated("it scripts its pods through EMULATOR_LOG, EMULATOR_LOG_LINES").await
    else {
        return;
    };
    let server = cluster.jobgate(&["--log-archive-max-bytes", "1000"]).await;
    let id = server
        .submit(kube_input(
            &[("EMULATOR_LOG", "line 0"), ("EMULATOR_LOG_LINES", "499")],
            0,
        ))
        .await;
    server.wait_terminal(&id).await;
    let polling = Polling::start();
    loop {
        let job = log_archive(&server, &id).await;
        if job["logArchive"]["truncated"] == true {
            assert!(
                job["logArchive"]["bytes"].as_i64().unwrap() <= 1000 + 200,
                "{job}"
            );
            break;
        }
        polling
            .pause(|| format!("the archive was never truncated: {job}"))
            .await;
    }
    cluster
        .until(
            "the pods go once the archive stopped taking their lines",
            || async { cluster.pods_of(&id).await.is_empty() },
        )
        .await;
    let lines = all_log_lines(&server, &id, 1000).await;
    // "line 0" … "line 99": 7 or 8 bytes each; the whole lines that fit, then the marker.
    let kept: Vec<String> = lines[..lines.len() - 1].iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(kept, numbered(0, kept.len() - 1));
    let kept_bytes: usize = kept.iter().map(|l| l.len() + 1).sum();
    assert!(
        kept_bytes <= 1000 && kept_bytes + "line 123\n".len() > 1000,
        "{kept_bytes}"
    );
    let marker = &lines.last().unwrap().1;
    assert!(marker.contains("output truncated"), "{marker}");
    assert!(marker.contains("1000 bytes"), "{marker}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_job_keeps_its_whole_output_beyond_rotation_and_restarts() {
    // A log file of 4 KiB, rotated once: the file keeps a few hundred lines at most.
    let mut server = Server::start(&["--local-max-log-bytes", "4096"]).await;
    let id = server
        .submit(
            json!({"command": ["sh", "-c", "i=1; while [ $i -le 5000 ]; do echo line $i; i=$((i+1)); done"]}),
        )
        .await;
    assert_eq!(server.wait_terminal(&id).await.pop().unwrap(), "SUCCEEDED");
    server.wait_archived(&id, 5000).await;
    let expected = numbered(1, 5000);
    assert_whole(&all_log_lines(&server, &id, 1000).await, &expected);
    server.stop().await;
    let server = server.start_again(&["--local-max-log-bytes", "4096"]).await;
    assert_read_whole(&server, &id, &expected).await;

    // A stream cut after 1,234 lines resumes after the last cursor it received.
    let first = stream_log_lines(&server, &id, 10_000, None, Some(1234)).await;
    let last = first.last().unwrap().0.to_string();
    let rest = stream_log_lines(&server, &id, 0, Some(&last), None).await;
    let both: Vec<(i64, String)> = first.into_iter().chain(rest).collect();
    assert_whole(&both, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_logs_resume_after_a_cursor_while_the_job_writes() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    std::fs::create_dir_all(dir.path()).unwrap();
    // Writes 300 lines, waits for the test's signal file, then writes 300 more.
    let script = format!(
        "i=1; while [ $i -le 300 ]; do echo line $i; i=$((i+1)); done; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         while [ $i -le 600 ]; do echo line $i; i=$((i+1)); done",
        go = go.display()
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let id = server.submit(json!({"command": ["sh", "-c", script]})).await;
    // The first connection reads 200 lines and is dropped.
    let first = stream_log_lines(&server, &id, 10_000, None, Some(200)).await;
    assert_whole(&first, &numbered(1, 200));
    std::fs::write(&go, "").unwrap();
    let last = first.last().unwrap().0.to_string();
    let rest = stream_log_lines(&server, &id, 0, Some(&last), None).await;
    let both: Vec<(i64, String)> = first.into_iter().chain(rest).collect();
    assert_whole(&both, &numbered(1, 600));
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
}

#[tokio::test]
async fn another_tenants_job_logs_are_not_found() {
    const ALICE: &str = "alice-token";
    const BOB: &str = "bob-token";
    let (server, _dir) = tenants_server(&[
        token_entry("alice", ALICE, "namespaces = [\"team-a\"]"),
        token_entry("bob", BOB, "namespaces = [\"team-b\"]"),
    ])
    .await;
    let (_, submitted) = server
        .gql_as(
            Some(BOB),
            "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }",
            json!({"input": {"namespace": "team-b", "command": ["echo", "bob's secret"]}}),
        )
        .await;
    let id = submitted["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let polling = Polling::start();
    loop {
        let (_, own) = server
            .gql_as(
                Some(BOB),
                "query($id: ID!) { job(id: $id) { logLines { edges { node { text } } } logArchive { lines } } }",
                json!({"id": id}),
            )
            .await;
        if own["data"]["job"]["logArchive"]["lines"] == 1 {
            assert_eq!(
                own["data"]["job"]["logLines"]["edges"][0]["node"]["text"],
                "bob's secret"
            );
            break;
        }
        polling
            .pause(|| format!("bob's output was never archived: {own}"))
            .await;
    }
    let (_, theirs) = server
        .gql_as(
            Some(ALICE),
            "query($id: ID!) { job(id: $id) { logLines { edges { node { text } } } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(theirs["data"]["job"], Value::Null, "{theirs}");
    let mut ws = GqlWs::connect_with(&server, json!({"authorization": format!("Bearer {ALICE}")})).await;
    ws.subscribe(
        "l",
        "subscription($id: ID!) { jobLogs(id: $id, after: \"0\") { text } }",
        json!({"id": id}),
    )
    .await;
    let msg = ws.recv().await;
    assert_eq!(msg["type"], "next", "{msg}");
    assert_eq!(
        msg["payload"]["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{msg}"
    );
}
