//! Retry rules over the real server: one table of policies and failures (`ROWS`), run on the
//! local executor (processes that `exit N` or kill themselves with SIGKILL) and on the
//! Kubernetes API emulator (pods scripted through `EMULATOR_FAIL_*`, the emulated Job
//! controller enforcing the `podFailurePolicy` and per-index limits jobgate compiles), with the
//! same phase, reason, counts and runs expected of both; then the refusals (bounds with the
//! input path, templates of kinds without such fields, a back-off on Kubernetes), what the
//! Kubernetes Job carries, and the policy read back from the store (SQLite, PostgreSQL) after
//! a kill -9. tests/retry_runs.rs has what takes time, restarts or templates.

mod common;

use common::Server;
use common::cluster::Cluster;
use common::postgres::Postgres;
use serde_json::{Value, json};

/// How the runs of a row's job fail.
struct Failures {
    /// Whether the failing runs are evicted or preempted, which only a cluster does: the local
    /// executor has no such failure, so those rows run on the emulator alone.
    disruption: Option<&'static str>,
    /// The exit code of a failing run; 137 is a run killed by SIGKILL (the OOM killer's signal).
    code: i32,
    /// Each index's first `attempts` runs fail (`u32::MAX`: all of them).
    attempts: u32,
    /// These indexes always fail.
    indexes: &'static [i32],
}

/// What the job of a row ends as.
struct Expected {
    phase: &'static str,
    /// The reason of its `Failed` (or `Complete`) condition.
    reason: &'static str,
    /// Words its message holds.
    message: &'static str,
    failed: i64,
    succeeded: i64,
    /// Runs started: processes, or pods.
    runs: u64,
}

struct Row {
    name: &'static str,
    /// `SubmitJobInput` fields beside the command: retryPolicy, backoffLimit, completions.
    input: fn() -> Value,
    failures: Failures,
    expected: Expected,
}

const ALWAYS: u32 = u32::MAX;

fn fail_job_on(codes: &[i32]) -> Value {
    json!({"action": "FAIL_JOB", "exitCodes": {"operator": "IN", "values": codes}})
}

const ROWS: &[Row] = &[
    Row {
        name: "no policy: every failure counts",
        input: || json!({"backoffLimit": 2}),
        failures: Failures {
            disruption: None,
            code: 3,
            attempts: ALWAYS,
            indexes: &[],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "BackoffLimitExceeded",
            message: "backoff limit",
            failed: 3,
            succeeded: 0,
            runs: 3,
        },
    },
    Row {
        name: "FAIL_JOB on the exit code fails at the first failure",
        input: || json!({"backoffLimit": 5, "retryPolicy": {"rules": [fail_job_on(&[3])]}}),
        failures: Failures {
            disruption: None,
            code: 3,
            attempts: ALWAYS,
            indexes: &[],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "PodFailurePolicy",
            message: "Container job for",
            failed: 1,
            succeeded: 0,
            runs: 1,
        },
    },
    Row {
        name: "IGNORE retries without counting against backoffLimit 0",
        input: || {
            json!({"backoffLimit": 0, "retryPolicy": {"rules": [
                {"action": "IGNORE", "exitCodes": {"operator": "IN", "values": [42]}},
            ]}})
        },
        failures: Failures {
            disruption: None,
            code: 42,
            attempts: 2,
            indexes: &[],
        },
        expected: Expected {
            phase: "SUCCEEDED",
            reason: "CompletionsReached",
            message: "succeeded",
            failed: 0,
            succeeded: 1,
            runs: 3,
        },
    },
    Row {
        name: "the first matching rule wins: NOT_IN [1] fails the job on exit 7",
        input: || {
            json!({"backoffLimit": 4, "retryPolicy": {"rules": [
                {"action": "COUNT", "exitCodes": {"operator": "IN", "values": [1]}},
                {"action": "FAIL_JOB", "exitCodes": {"operator": "NOT_IN", "values": [1]}},
            ]}})
        },
        failures: Failures {
            disruption: None,
            code: 7,
            attempts: ALWAYS,
            indexes: &[],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "PodFailurePolicy",
            message: "failed with exit code 7 matching FailJob rule at index 1",
            failed: 1,
            succeeded: 0,
            runs: 1,
        },
    },
    Row {
        name: "COUNT, and no rule matching, count as usual",
        input: || {
            json!({"backoffLimit": 1, "retryPolicy": {"rules": [
                fail_job_on(&[2]),
                {"action": "COUNT", "exitCodes": {"operator": "IN", "values": [1]}},
            ]}})
        },
        failures: Failures {
            disruption: None,
            code: 1,
            attempts: ALWAYS,
            indexes: &[],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "BackoffLimitExceeded",
            message: "backoff limit",
            failed: 2,
            succeeded: 0,
            runs: 2,
        },
    },
    Row {
        name: "OOM_KILLED is exit code 137: FAIL_JOB",
        input: || {
            json!({"backoffLimit": 3, "retryPolicy": {"rules": [
                {"action": "FAIL_JOB", "causes": ["OOM_KILLED"]},
            ]}})
        },
        failures: Failures {
            disruption: None,
            code: 137,
            attempts: ALWAYS,
            indexes: &[],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "PodFailurePolicy",
            message: "failed with exit code 137 matching FailJob rule at index 0",
            failed: 1,
            succeeded: 0,
            runs: 1,
        },
    },
    Row {
        name: "OOM_KILLED ignored, then success",
        input: || {
            json!({"backoffLimit": 0, "retryPolicy": {"rules": [
                {"action": "IGNORE", "causes": ["OOM_KILLED"]},
            ]}})
        },
        failures: Failures {
            disruption: None,
            code: 137,
            attempts: 1,
            indexes: &[],
        },
        expected: Expected {
            phase: "SUCCEEDED",
            reason: "CompletionsReached",
            message: "succeeded",
            failed: 0,
            succeeded: 1,
            runs: 2,
        },
    },
    Row {
        name: "EVICTED ignored, then success",
        input: || {
            json!({"backoffLimit": 0, "retryPolicy": {"rules": [
                {"action": "IGNORE", "causes": ["EVICTED"]},
            ]}})
        },
        failures: Failures {
            disruption: Some("EMULATOR_EVICT_ATTEMPTS"),
            code: 137,
            attempts: 1,
            indexes: &[],
        },
        expected: Expected {
            phase: "SUCCEEDED",
            reason: "CompletionsReached",
            message: "succeeded",
            failed: 0,
            succeeded: 1,
            runs: 2,
        },
    },
    Row {
        name: "PREEMPTED fails the job",
        input: || {
            json!({"backoffLimit": 3, "retryPolicy": {"rules": [
                {"action": "IGNORE", "exitCodes": {"operator": "IN", "values": [42]}},
                {"action": "FAIL_JOB", "causes": ["PREEMPTED"]},
            ]}})
        },
        failures: Failures {
            disruption: Some("EMULATOR_PREEMPT_ATTEMPTS"),
            code: 143,
            attempts: ALWAYS,
            indexes: &[],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "PodFailurePolicy",
            message: "has condition DisruptionTarget matching FailJob rule at index 1",
            failed: 1,
            succeeded: 0,
            runs: 1,
        },
    },
    Row {
        name: "backoffLimitPerIndex: one index fails, the others succeed",
        input: || json!({"completions": 3, "retryPolicy": {"backoffLimitPerIndex": 1}}),
        failures: Failures {
            disruption: None,
            code: 3,
            attempts: 0,
            indexes: &[1],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "FailedIndexes",
            message: "Job has failed indexes",
            failed: 2,
            succeeded: 2,
            runs: 4,
        },
    },
    Row {
        name: "FAIL_INDEX past maxFailedIndexes 0 fails the job",
        input: || {
            json!({"completions": 3, "retryPolicy": {
                "backoffLimitPerIndex": 2,
                "maxFailedIndexes": 0,
                "rules": [{"action": "FAIL_INDEX", "exitCodes": {"operator": "IN", "values": [5]}}],
            }})
        },
        failures: Failures {
            disruption: None,
            code: 5,
            attempts: 0,
            indexes: &[0],
        },
        expected: Expected {
            phase: "FAILED",
            reason: "MaxFailedIndexesExceeded",
            message: "maximal number of failed indexes",
            failed: 1,
            succeeded: 0,
            runs: 1,
        },
    },
];

/// The fields read of a finished job.
const FIELDS: &str = "phase message progress { succeeded failed } conditions { type status reason message } logs(tailLines: 1000)";

/// The local run's script: counts its runs per index in its working directory (kept between
/// runs), logs `run <index>.<n>`, fails as the row says.
fn local_command(f: &Failures) -> Value {
    let fail = if f.code == 137 {
        "kill -9 $$".to_owned()
    } else {
        format!("exit {}", f.code)
    };
    let indexes: Vec<String> = f.indexes.iter().map(i32::to_string).collect();
    let attempts = if f.attempts == ALWAYS {
        i64::MAX
    } else {
        i64::from(f.attempts)
    };
    let script = format!(
        "i=$JOB_COMPLETION_INDEX; n=$(( $(cat \"$HOME/runs-$i\" 2>/dev/null || echo 0) + 1 )); echo $n > \"$HOME/runs-$i\"; \
         echo \"run $i.$n\"; case ' {} ' in *\" $i \"*) {fail};; esac; if [ $n -le {attempts} ]; then {fail}; fi; exit 0",
        indexes.join(" ")
    );
    json!(["sh", "-c", script])
}

/// The emulated pod's script for the same failures.
fn emulator_env(f: &Failures) -> Value {
    let mut env = vec![json!({"name": "EMULATOR_FAIL_EXIT_CODE", "value": f.code.to_string()})];
    let attempts = if f.attempts == ALWAYS { 1000 } else { f.attempts };
    // 137 is the OOM killer's: the kubelet reports it as `OOMKilled`.
    let failing = match (f.disruption, f.code) {
        (Some(variable), _) => variable,
        (None, 137) => "EMULATOR_OOM_ATTEMPTS",
        (None, _) => "EMULATOR_FAIL_ATTEMPTS",
    };
    if attempts > 0 {
        env.push(json!({"name": failing, "value": attempts.to_string()}));
    }
    if !f.indexes.is_empty() {
        let list: Vec<String> = f.indexes.iter().map(i32::to_string).collect();
        env.push(json!({"name": "EMULATOR_FAIL_INDEXES", "value": list.join(",")}));
    }
    json!(env)
}

fn with(mut input: Value, extra: Value) -> Value {
    input
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    input
}

/// Checks a finished job against its row; `runs` is what the executor counted.
fn check(row: &Row, job: &Value, runs: u64) {
    let e = &row.expected;
    let name = row.name;
    assert_eq!(job["phase"], e.phase, "{name}: {job}");
    let condition = if e.phase == "SUCCEEDED" {
        "Complete"
    } else {
        "Failed"
    };
    let c = common::condition(job, condition).unwrap_or_else(|| panic!("{name}: no {condition}: {job}"));
    assert_eq!(c["reason"], e.reason, "{name}: {job}");
    let message = c["message"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        message.contains(&e.message.to_lowercase()) || e.phase == "SUCCEEDED",
        "{name}: {message}"
    );
    assert_eq!(job["progress"]["failed"], e.failed, "{name}: {job}");
    assert_eq!(job["progress"]["succeeded"], e.succeeded, "{name}: {job}");
    assert_eq!(runs, e.runs, "{name}: runs");
}

#[tokio::test]
async fn the_table_on_the_local_executor() {
    let server = Server::start(&[]).await;
    let mut ids = Vec::new();
    let rows: Vec<&Row> = ROWS
        .iter()
        .filter(|row| row.failures.disruption.is_none())
        .collect();
    for row in &rows {
        let input = with((row.input)(), json!({"command": local_command(&row.failures)}));
        ids.push(server.submit(input).await);
    }
    for (row, id) in rows.into_iter().zip(&ids) {
        server.wait_terminal(id).await;
        let job = server.job_with(id, FIELDS).await;
        let runs = job["logs"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("run "))
            .count();
        check(row, &job, runs as u64);
    }
}

#[tokio::test]
async fn the_table_on_the_emulator() {
    let Some(cluster) = Cluster::emulated("it scripts pods through EMULATOR_FAIL_*, EMULATOR_OOM_ATTEMPTS, EMULATOR_EVICT_ATTEMPTS, EMULATOR_PREEMPT_ATTEMPTS").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    // One row at a time: the emulator counts the pods it creates.
    for row in ROWS {
        let before = cluster.emu().simulation().pods_created();
        let input = with(
            (row.input)(),
            json!({"image": "busybox:1.36", "command": ["run"], "env": emulator_env(&row.failures)}),
        );
        let id = server.submit(input).await;
        server.wait_terminal(&id).await;
        let job = server.job_with(&id, FIELDS).await;
        check(row, &job, cluster.emu().simulation().pods_created() - before);
    }
}

/// Submits `input` (a command added) and returns the error's field and message.
async fn refusal(server: &Server, input: Value) -> (String, String) {
    let input = with(json!({"command": ["true"], "image": "busybox:1.36"}), input);
    let body = server
        .gql(
            "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }",
            json!({"input": input}),
        )
        .await;
    let error = &body["errors"][0];
    assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{body}");
    (
        error["extensions"]["field"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        error["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn bad_policies_are_refused_naming_the_input_path() {
    let server = Server::start(&[]).await;
    let rule = |codes: Value| json!({"action": "COUNT", "exitCodes": {"operator": "IN", "values": codes}});
    let many_codes: Vec<i32> = (1..=256).collect();
    let cases = [
        (
            json!({"rules": (0..21).map(|_| rule(json!([1]))).collect::<Vec<_>>()}),
            "input.retryPolicy.rules",
            "at most 20",
        ),
        (
            json!({"rules": [rule(json!([3, 0]))]}),
            "input.retryPolicy.rules[0].exitCodes.values[1]",
            "IN",
        ),
        (
            json!({"rules": [rule(json!([256]))]}),
            "input.retryPolicy.rules[0].exitCodes.values[0]",
            "0 to 255",
        ),
        (
            json!({"rules": [rule(json!([4, 4]))]}),
            "input.retryPolicy.rules[0].exitCodes.values[1]",
            "twice",
        ),
        (
            json!({"rules": [rule(json!(many_codes))]}),
            "input.retryPolicy.rules[0].exitCodes.values",
            "at most 255",
        ),
        (
            json!({"rules": [rule(json!([]))]}),
            "input.retryPolicy.rules[0].exitCodes.values",
            "at least one",
        ),
        (
            json!({"rules": [{"action": "COUNT", "exitCodes": {"operator": "IN", "values": [1], "containerName": "sidecar"}}]}),
            "input.retryPolicy.rules[0].exitCodes.containerName",
            "job",
        ),
        (
            json!({"rules": [{"action": "IGNORE"}]}),
            "input.retryPolicy.rules[0]",
            "exactly one",
        ),
        (
            json!({"rules": [{"action": "IGNORE", "causes": ["DEADLINE_EXCEEDED"]}]}),
            "input.retryPolicy.rules[0].causes[0]",
            "activeDeadlineSeconds",
        ),
        (
            json!({"rules": [{"action": "IGNORE", "causes": ["OOM_KILLED", "EVICTED"]}]}),
            "input.retryPolicy.rules[0].causes",
            "a rule each",
        ),
        (
            json!({"rules": [{"action": "FAIL_INDEX", "exitCodes": {"operator": "IN", "values": [1]}}]}),
            "input.retryPolicy.rules[0].action",
            "backoffLimitPerIndex",
        ),
        (
            json!({"backoffLimitPerIndex": 1}),
            "input.retryPolicy.backoffLimitPerIndex",
            "completions",
        ),
        (
            json!({"maxFailedIndexes": 1}),
            "input.retryPolicy.maxFailedIndexes",
            "backoffLimitPerIndex",
        ),
        (
            json!({"backoff": {"factor": 0.5}}),
            "input.retryPolicy.backoff.factor",
            "1 to 10",
        ),
        (
            json!({"backoff": {"initialSeconds": 30, "maxSeconds": 5}}),
            "input.retryPolicy.backoff.maxSeconds",
            "initialSeconds",
        ),
    ];
    for (policy, field, words) in cases {
        let (got, message) = refusal(&server, json!({"retryPolicy": policy})).await;
        assert_eq!(got, field, "{policy}: {message}");
        assert!(message.contains(words), "{policy}: {message}");
    }
    let (field, message) = refusal(
        &server,
        json!({"completions": 2, "retryPolicy": {"backoffLimitPerIndex": 1, "maxFailedIndexes": 3}}),
    )
    .await;
    assert_eq!(field, "input.retryPolicy.maxFailedIndexes", "{message}");
    // Templates whose kinds have no podFailurePolicy refuse one, and say so.
    let (field, message) = refusal(
        &server,
        json!({"template": "argo-workflow", "retryPolicy": {"rules": [rule(json!([1]))]}}),
    )
    .await;
    assert_eq!(field, "input.retryPolicy", "{message}");
    assert!(
        message.contains("template argo-workflow takes no retryPolicy") && message.contains("Workflow"),
        "{message}"
    );
}

#[tokio::test]
async fn the_policy_is_stored_and_read_back_after_a_kill_9() {
    the_policy_is_read_back_after_a_kill_9(&[]).await;
}

#[tokio::test]
async fn on_postgresql_the_policy_is_stored_and_read_back_after_a_kill_9() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let url = pg.url();
    the_policy_is_read_back_after_a_kill_9(&["--database-url", &url]).await;
}

/// A job with every part of a retry policy, read back over GraphQL, then again after a kill -9
/// of jobgate on the same store (`store`: its flags, none for SQLite in the data directory).
async fn the_policy_is_read_back_after_a_kill_9(store: &[&str]) {
    let mut server = Server::spawn(store).await;
    let policy = json!({
        "rules": [
            {"action": "FAIL_JOB", "exitCodes": {"operator": "NOT_IN", "values": [9, 0, 4], "containerName": "job"}},
            {"action": "IGNORE", "causes": ["EVICTED", "PREEMPTED"]},
            {"action": "FAIL_INDEX", "causes": ["OOM_KILLED"]},
        ],
        "backoff": {"initialSeconds": 0.05, "factor": 3, "jitter": 0.5},
        "backoffLimitPerIndex": 2,
        "maxFailedIndexes": 1,
    });
    let input =
        json!({"command": ["true"], "completions": 2, "retryPolicy": policy, "idempotencyKey": "retry-1"});
    let id = server.submit(input.clone()).await;
    server.wait_terminal(&id).await;
    const SPEC: &str = "spec { backoffLimit retryPolicy { rules { action exitCodes { operator values containerName } causes } \
        backoff { initialSeconds maxSeconds factor jitter } backoffLimitPerIndex maxFailedIndexes } }";
    let expected = json!({
        "backoffLimit": i32::MAX,
        "retryPolicy": {
            "rules": [
                {"action": "FAIL_JOB", "exitCodes": {"operator": "NOT_IN", "values": [0, 4, 9], "containerName": "job"}, "causes": null},
                {"action": "IGNORE", "exitCodes": null, "causes": ["EVICTED", "PREEMPTED"]},
                {"action": "FAIL_INDEX", "exitCodes": null, "causes": ["OOM_KILLED"]},
            ],
            "backoff": {"initialSeconds": 0.05, "maxSeconds": 360.0, "factor": 3.0, "jitter": 0.5},
            "backoffLimitPerIndex": 2,
            "maxFailedIndexes": 1,
        },
    });
    assert_eq!(server.job_with(&id, SPEC).await["spec"], expected);
    server.kill9();
    let server = server.start_again(store).await;
    assert_eq!(
        server.job_with(&id, SPEC).await["spec"],
        expected,
        "read back after a restart"
    );
    // The policy is part of what an idempotency key stands for.
    let same = server.submit_answer(input.clone()).await;
    assert_eq!(same["data"]["submitJob"]["job"]["id"], id.as_str(), "{same}");
    let mut changed = input;
    changed["retryPolicy"]["maxFailedIndexes"] = json!(0);
    let conflict = server.submit_answer(changed).await;
    assert_eq!(
        conflict["errors"][0]["extensions"]["field"], "input.idempotencyKey",
        "{conflict}"
    );
    assert!(
        conflict["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("different job input"),
        "{conflict}"
    );
}

#[tokio::test]
async fn on_kubernetes_the_job_carries_the_policy_and_refuses_a_back_off() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let (field, message) = refusal(
        &server,
        json!({"retryPolicy": {"backoff": {"initialSeconds": 1}}}),
    )
    .await;
    assert_eq!(field, "input.retryPolicy.backoff", "{message}");
    assert!(
        message.contains("Job controller's back-off is fixed"),
        "{message}"
    );

    let id = server
        .submit(json!({
            "image": "busybox:1.36",
            "command": ["true"],
            "completions": 2,
            "retryPolicy": {
                "rules": [
                    {"action": "IGNORE", "causes": ["EVICTED"]},
                    {"action": "FAIL_JOB", "causes": ["OOM_KILLED"]},
                    {"action": "FAIL_INDEX", "exitCodes": {"operator": "IN", "values": [5, 3], "containerName": "job"}},
                ],
                "backoffLimitPerIndex": 1,
                "maxFailedIndexes": 1,
            },
        }))
        .await;
    server.wait_terminal(&id).await;
    let jobs = cluster.managed_jobs().await;
    let job = serde_json::to_value(&jobs[&id][0]).unwrap();
    let spec = &job["spec"];
    assert_eq!(
        spec["podFailurePolicy"],
        json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}},
            {"action": "FailIndex", "onExitCodes": {"containerName": "job", "operator": "In", "values": [3, 5]}},
        ]}),
        "{job}"
    );
    assert_eq!(spec["backoffLimitPerIndex"], 1, "{job}");
    assert_eq!(spec["maxFailedIndexes"], 1, "{job}");
    assert_eq!(spec["completionMode"], "Indexed", "{job}");
    assert_eq!(spec["template"]["spec"]["restartPolicy"], "Never", "{job}");
}
