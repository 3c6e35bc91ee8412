//! Job dependencies (`dependsOn`) through the real server on the local executor: a job waits
//! (PENDING, `WaitingForDependencies`) until every dependency succeeded, fails with
//! `DependencyFailed` (in cascade) when one does not, survives restarts while waiting, and the
//! README's MapReduce example runs as written.
//!
//! jobgate runs in the test's process (`Server::start`); the restart test spawns the binary
//! (`Server::spawn`) to kill it.

mod common;

use std::path::Path;

use common::{Server, WAIT};
use serde_json::{Value, json};

const FIELDS: &str = "id phase message result startedAt finishedAt dependsOn \
    dependencies { id phase } events { phase reason message } conditions { type status reason message }";

async fn job(server: &Server, id: &str) -> Value {
    let q = format!("query($id: ID!) {{ job(id: $id) {{ {FIELDS} }} }}");
    server.gql_ok(&q, json!({"id": id})).await["job"].clone()
}

/// A job that runs until the file `gate` exists, then exits with `code`.
fn gated(gate: &Path, code: i32) -> Value {
    json!({
        "command": ["sh", "-c", format!("while [ ! -e '{}' ]; do sleep 0.02; done; exit {code}", gate.display())],
        "backoffLimit": 0,
    })
}

fn with(mut input: Value, extra: Value) -> Value {
    input
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    input
}

fn reasons(job: &Value) -> Vec<String> {
    job["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["phase"].as_str().unwrap(),
                e["reason"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn a_job_waits_for_its_dependencies_then_runs() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("go");
    let first = server.submit(gated(&gate, 0)).await;
    let second = server.submit(json!({"command": ["true"]})).await;
    server.wait_phase(&first, "RUNNING").await;
    server.wait_terminal(&second).await;
    let answer = server.submit_answer(json!({"command": ["sh", "-c", "echo reduced > $JOBGATE_RESULT_FILE"], "dependsOn": [first, second]}),
    )
    .await;
    let waiting = answer["data"]["submitJob"]["job"].clone();
    assert_eq!(waiting["phase"], "PENDING", "{answer}");
    assert!(
        waiting["message"].as_str().unwrap().contains(&first),
        "it says what it waits for (only the unfinished one): {waiting}"
    );
    assert!(
        !waiting["message"].as_str().unwrap().contains(&second),
        "{waiting}"
    );
    let id = waiting["id"].as_str().unwrap().to_owned();
    let held = job(&server, &id).await;
    assert_eq!(held["dependsOn"], json!([first, second]));
    assert_eq!(held["dependencies"][0]["phase"], "RUNNING");
    assert_eq!(held["dependencies"][1]["phase"], "SUCCEEDED");
    let condition = common::condition(&held, "DependenciesSucceeded").unwrap();
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some("False"), Some("WaitingForDependencies"))
    );

    std::fs::write(&gate, "").unwrap();
    let phases = server.wait_terminal(&id).await;
    assert_eq!(phases.last().unwrap(), "SUCCEEDED");
    let done = job(&server, &id).await;
    let mut history = reasons(&done);
    history.retain(|r| !r.ends_with(":ProgressUpdated"));
    assert_eq!(
        history,
        [
            "PENDING:Submitted",
            "PENDING:WaitingForDependencies",
            "PENDING:DependenciesSucceeded",
            "RUNNING:Started",
            // The run's end, an event of its own.
            "RUNNING:AttemptSucceeded",
            "SUCCEEDED:CompletionsReached"
        ]
    );
    assert_eq!(done["result"], "reduced\n");
    let dependency = job(&server, &first).await;
    assert!(
        done["startedAt"].as_str().unwrap() >= dependency["finishedAt"].as_str().unwrap(),
        "started {} before its dependency finished {}",
        done["startedAt"],
        dependency["finishedAt"]
    );
}

#[tokio::test]
async fn a_dependency_that_fails_or_is_cancelled_fails_its_dependents_in_cascade() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let failing = server.submit(gated(&dir.path().join("fail"), 3)).await;
    let middle = server
        .submit(json!({"command": ["true"], "dependsOn": [failing]}))
        .await;
    let last = server
        .submit(json!({"command": ["true"], "dependsOn": [middle]}))
        .await;
    std::fs::write(dir.path().join("fail"), "").unwrap();
    assert_eq!(server.wait_terminal(&failing).await.last().unwrap(), "FAILED");
    for (id, cause) in [(&middle, &failing), (&last, &middle)] {
        assert_eq!(server.wait_terminal(id).await.last().unwrap(), "FAILED");
        let j = job(&server, id).await;
        assert_eq!(reasons(&j).last().unwrap(), "FAILED:DependencyFailed", "{j}");
        assert_eq!(
            j["message"],
            format!("dependency {cause} ended FAILED, so this job will not run"),
        );
        assert_eq!(j["startedAt"], Value::Null, "it never ran");
    }

    // Cancelled counts as not succeeded; and a dependency already failed fails a new job at once.
    let cancelled = server.submit(gated(&dir.path().join("never"), 0)).await;
    let dependent = server
        .submit(json!({"command": ["true"], "dependsOn": [cancelled]}))
        .await;
    server.cancel(&cancelled).await;
    assert_eq!(server.wait_terminal(&dependent).await.last().unwrap(), "FAILED");
    assert!(
        job(&server, &dependent).await["message"]
            .as_str()
            .unwrap()
            .contains("ended CANCELLED")
    );
    let late = server
        .submit_answer(json!({"command": ["true"], "dependsOn": [failing]}))
        .await;
    assert_eq!(late["data"]["submitJob"]["job"]["phase"], "FAILED", "{late}");
}

#[tokio::test]
async fn a_waiting_job_can_be_cancelled_and_never_runs() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("go");
    let marker = dir.path().join("ran");
    let first = server.submit(gated(&gate, 0)).await;
    let waiting = server
        .submit(json!({"command": ["touch", marker.display().to_string()], "dependsOn": [first]}))
        .await;
    assert_eq!(server.cancel(&waiting).await, "CANCELLED");
    std::fs::write(&gate, "").unwrap();
    server.wait_terminal(&first).await;
    // A job submitted after the dependency finished runs at once: the barrier for the check.
    let after = server
        .submit(json!({"command": ["true"], "dependsOn": [first]}))
        .await;
    assert_eq!(server.wait_terminal(&after).await.last().unwrap(), "SUCCEEDED");
    assert_eq!(job(&server, &waiting).await["phase"], "CANCELLED");
    assert!(!marker.exists(), "the cancelled job never ran");
}

#[tokio::test]
async fn unknown_or_repeated_dependencies_are_refused_and_nothing_is_created() {
    let server = Server::start(&[]).await;
    let real = server.submit(json!({"command": ["true"]})).await;
    for (depends_on, field, text) in [
        (
            json!([real, "no-such-job"]),
            "input.dependsOn[1]",
            "no job with id \"no-such-job\"",
        ),
        (json!([real, real]), "input.dependsOn[1]", "listed twice"),
        (json!([""]), "input.dependsOn[0]", "not a job id"),
        (
            json!((0..101).map(|i| format!("j{i}")).collect::<Vec<_>>()),
            "input.dependsOn",
            "at most 100",
        ),
    ] {
        let answer = server
            .submit_answer(json!({"command": ["true"], "dependsOn": depends_on}))
            .await;
        let e = &answer["errors"][0];
        assert_eq!(e["extensions"]["code"], "BAD_USER_INPUT", "{answer}");
        assert_eq!(e["extensions"]["field"], field, "{answer}");
        assert!(e["message"].as_str().unwrap().contains(text), "{answer}");
    }
    let count = server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    assert_eq!(count["jobs"]["totalCount"], 1);
    // An idempotent retry returns the same waiting job.
    let input = json!({"command": ["true"], "dependsOn": [real], "idempotencyKey": "reduce-1"});
    let a = server.submit_answer(input.clone()).await["data"]["submitJob"]["job"]["id"].clone();
    let b = server.submit_answer(input).await["data"]["submitJob"]["job"]["id"].clone();
    assert_eq!(a, b);
}

#[tokio::test]
async fn jobs_waiting_for_dependencies_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("go");
    let mut server = Server::spawn(&[]).await;
    // Killing jobgate interrupts the run; it is retried after the restart.
    let first = server
        .submit(with(gated(&gate, 0), json!({"backoffLimit": 3})))
        .await;
    server.wait_phase(&first, "RUNNING").await;
    let waiting = server
        .submit(json!({"command": ["sh", "-c", "echo after > $JOBGATE_RESULT_FILE"], "dependsOn": [first]}))
        .await;
    server.kill9();
    std::fs::write(&gate, "").unwrap();
    let server = server.start_again(&[]).await;
    assert_eq!(server.wait_terminal(&first).await.last().unwrap(), "SUCCEEDED");
    assert_eq!(server.wait_terminal(&waiting).await.last().unwrap(), "SUCCEEDED");
    assert_eq!(job(&server, &waiting).await["result"], "after\n");
}

#[tokio::test]
async fn the_readme_mapreduce_example_runs_on_the_local_executor() {
    let server = Server::start(&[]).await;
    let shared = tempfile::tempdir().unwrap();
    // The jobs may run as another user than this test (`nobody`, when jobgate is root).
    std::fs::set_permissions(
        shared.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mapreduce.py");
    let url = server.url("");
    let url = url.trim_end_matches('/').to_owned();
    let dir = shared.path().to_owned();
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new("python3")
            .arg(script)
            .args(["--url", &url, "--dir"])
            .arg(&dir)
            .output(),
    )
    .await
    .expect("the example finishes")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // 4 + 5 + 4 + 2 words.
    assert!(stdout.contains("total words: 15"), "{stdout}");
    assert!(
        stdout.contains("WaitingForDependencies") && stdout.contains("DependenciesSucceeded"),
        "{stdout}"
    );
    for i in 0..4 {
        assert!(
            dir.join(format!("part-{i}")).exists(),
            "map run {i} wrote its part"
        );
    }
}
