//! `submitJobs`, the bulk submission, through the real server over HTTP: each input is
//! answered on its own, in input order (its validation, idempotency key, dependencies, the
//! namespace's quota, the caller's namespaces), everything accepted is committed together, a
//! retry of the whole batch creates nothing new, more than 1,000 inputs change nothing, the
//! rate limit counts each job, and a store that cannot write accepts none of it.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor; the full-store
//! test spawns the binary on a small disk of its own (`Server::spawn_on`).

mod common;

use common::{Server, SmallDisk, tenants_server, token_entry};
use serde_json::{Value, json};

const SUBMIT_JOBS: &str = "mutation($inputs: [SubmitJobInput!]!) {
  submitJobs(inputs: $inputs) {
    jobs { id name namespace phase submitter dependsOn }
    created
    errors { index code message field }
  }
}";

/// The total the server counts for a filter (exact without `nameContains`).
async fn total(server: &Server, token: Option<&str>, filter: Value) -> i64 {
    let (_, body) = server
        .gql_as(
            token,
            "query($filter: JobFilter) { jobs(first: 1, filter: $filter) { totalCount } }",
            json!({ "filter": filter }),
        )
        .await;
    body["data"]["jobs"]["totalCount"]
        .as_i64()
        .unwrap_or_else(|| panic!("no totalCount: {body}"))
}

/// `submitJobs` as `token`'s holder (anonymously for `None`): the HTTP status and the body.
async fn submit_jobs(server: &Server, token: Option<&str>, inputs: &[Value]) -> (u16, Value) {
    server
        .gql_as(token, SUBMIT_JOBS, json!({ "inputs": inputs }))
        .await
}

/// The payload of a `submitJobs` that must not fail as a whole.
async fn submitted(server: &Server, token: Option<&str>, inputs: &[Value]) -> Value {
    let (status, body) = submit_jobs(server, token, inputs).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("errors").is_none(), "the call failed as a whole: {body}");
    let payload = body["data"]["submitJobs"].clone();
    assert_eq!(
        payload["jobs"].as_array().unwrap().len(),
        inputs.len(),
        "one job entry per input"
    );
    assert_eq!(
        payload["created"].as_array().unwrap().len(),
        inputs.len(),
        "one created entry per input"
    );
    payload
}

fn ids(payload: &Value) -> Vec<Option<String>> {
    payload["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().map(str::to_owned))
        .collect()
}

/// A job that never ends on its own.
fn sleeper(name: &str) -> Value {
    json!({"name": name, "command": ["sleep", "300"]})
}

#[tokio::test]
async fn each_input_is_answered_in_order_and_the_valid_ones_are_accepted() {
    let server = Server::start(&[]).await;
    let gate = server.submit(sleeper("gate")).await;
    let inputs = vec![
        sleeper("first"),
        json!({"name": "Not_A_Label", "command": ["true"]}),
        json!({"name": "waits", "command": ["true"], "dependsOn": [gate]}),
        json!({"name": "orphan", "command": ["true"], "dependsOn": ["no-such-job"]}),
        json!({"name": "no-command"}),
        sleeper("last"),
    ];
    let payload = submitted(&server, None, &inputs).await;
    let jobs = payload["jobs"].as_array().unwrap();
    let accepted = [0, 2, 5];
    for (i, job) in jobs.iter().enumerate() {
        if accepted.contains(&i) {
            assert_eq!(job["name"], inputs[i]["name"], "input {i} answered in its place");
            assert_eq!(job["phase"], "PENDING");
            assert_eq!(job["submitter"], "anonymous");
            assert_eq!(payload["created"][i], true);
        } else {
            assert!(job.is_null(), "input {i} was refused: {job}");
            assert!(payload["created"][i].is_null());
        }
    }
    assert_eq!(jobs[2]["dependsOn"], json!([gate]));
    let errors = payload["errors"].as_array().unwrap();
    let refused: Vec<(i64, &str, &str)> = errors
        .iter()
        .map(|e| {
            (
                e["index"].as_i64().unwrap(),
                e["code"].as_str().unwrap(),
                e["field"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            (1, "BAD_USER_INPUT", "inputs[1].name"),
            (3, "BAD_USER_INPUT", "inputs[3].dependsOn[0]"),
            (4, "BAD_USER_INPUT", "inputs[4].command"),
        ],
        "{errors:?}"
    );
    for e in errors {
        let field = e["field"].as_str().unwrap();
        assert!(
            e["message"].as_str().unwrap().starts_with(field),
            "the message names the input: {e}"
        );
    }
    // Exactly the accepted ones exist, and each is the job its answer named.
    assert_eq!(
        total(&server, None, json!({})).await,
        4,
        "the gate and three accepted"
    );
    for i in accepted {
        let id = jobs[i]["id"].as_str().unwrap();
        assert_eq!(server.job(id).await["name"], inputs[i]["name"]);
    }
    let waiting = server.job(jobs[2]["id"].as_str().unwrap()).await;
    assert_eq!(waiting["phase"], "PENDING", "held for its dependency: {waiting}");
}

#[tokio::test]
async fn retrying_a_whole_batch_returns_the_same_jobs_and_creates_nothing() {
    let server = Server::start(&[]).await;
    let gate = server.submit(sleeper("gate")).await;
    // Held behind the gate, so that nothing runs while the test looks.
    let inputs: Vec<Value> = (0..50)
        .map(|i| {
            json!({"name": format!("job-{i}"), "command": ["true"], "dependsOn": [gate],
                   "idempotencyKey": format!("key-{i}")})
        })
        .collect();
    let first = submitted(&server, None, &inputs).await;
    assert!(first["errors"].as_array().unwrap().is_empty(), "{first}");
    assert!(first["created"].as_array().unwrap().iter().all(|c| c == true));
    let again = submitted(&server, None, &inputs).await;
    assert_eq!(ids(&again), ids(&first), "the same jobs, in the same order");
    assert!(
        again["created"].as_array().unwrap().iter().all(|c| c == false),
        "nothing created: {}",
        again["created"]
    );
    assert_eq!(total(&server, None, json!({})).await, 51);

    // In one batch: a key used twice with the same input is one job; a key reused with a
    // different input is refused for that input alone.
    let mixed = vec![
        json!({"name": "twice", "command": ["true"], "dependsOn": [gate], "idempotencyKey": "twice"}),
        json!({"name": "twice", "command": ["true"], "dependsOn": [gate], "idempotencyKey": "twice"}),
        json!({"name": "other", "command": ["false"], "idempotencyKey": "key-7"}),
    ];
    let payload = submitted(&server, None, &mixed).await;
    assert_eq!(payload["created"], json!([true, false, null]));
    assert_eq!(payload["jobs"][0]["id"], payload["jobs"][1]["id"]);
    assert_eq!(payload["errors"][0]["index"], 2);
    assert_eq!(payload["errors"][0]["field"], "inputs[2].idempotencyKey");
    assert_eq!(total(&server, None, json!({})).await, 52);
}

#[tokio::test]
async fn a_key_repeated_within_one_batch_answers_its_first_job_or_the_conflict() {
    let server = Server::start(&[]).await;
    // Jobs without dependencies, which the batch writes together after checking them all.
    let inputs = vec![
        json!({"name": "once", "command": ["true"], "idempotencyKey": "same"}),
        json!({"name": "between", "command": ["true"]}),
        json!({"name": "once", "command": ["true"], "idempotencyKey": "same"}),
        json!({"name": "changed", "command": ["false"], "idempotencyKey": "same"}),
        json!({"name": "once", "command": ["true"], "idempotencyKey": "same"}),
    ];
    let payload = submitted(&server, None, &inputs).await;
    assert_eq!(
        payload["created"],
        json!([true, true, false, null, false]),
        "{payload}"
    );
    let first = payload["jobs"][0]["id"].as_str().expect("the first job");
    assert_eq!(payload["jobs"][2]["id"], first, "{payload}");
    assert_eq!(payload["jobs"][4]["id"], first, "{payload}");
    let errors = payload["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "only the changed input is refused: {payload}");
    assert_eq!(errors[0]["index"], 3);
    assert_eq!(errors[0]["code"], "BAD_USER_INPUT");
    assert_eq!(errors[0]["field"], "inputs[3].idempotencyKey");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("same"),
        "names the key: {payload}"
    );
    assert_eq!(total(&server, None, json!({})).await, 2);
    // As across requests: the same key and input answer the same job, a different input the
    // conflict.
    let again = submitted(&server, None, &inputs[3..4]).await;
    assert_eq!(again["errors"][0]["code"], errors[0]["code"], "{again}");
    assert_eq!(
        again["errors"][0]["message"].as_str().unwrap(),
        errors[0]["message"]
            .as_str()
            .unwrap()
            .replace("inputs[3]", "inputs[0]"),
        "{again}"
    );
    let again = submitted(&server, None, &inputs[..1]).await;
    assert_eq!(
        (&again["created"][0], &again["jobs"][0]["id"]),
        (&json!(false), &json!(first))
    );
}

#[tokio::test]
async fn a_thousand_inputs_are_accepted_at_once_and_more_are_refused_with_nothing_changed() {
    let server = Server::start(&[]).await;
    let gate = server.submit(sleeper("gate")).await;
    // About 700 bytes each, as a real submission with a command, environment and key may be:
    // a thousand of them fit the default request size.
    let input = |i: usize| {
        json!({
            "name": format!("etl-{i:04}"),
            "namespace": "default",
            "command": ["sh", "-c", "python3 /opt/etl/run.py --input s3://bucket/raw/2024-06-01 --output s3://bucket/clean"],
            "args": [format!("--shard={i}"), "--retries=3", "--log-level=info"],
            "env": [
                {"name": "STAGE", "value": "production"},
                {"name": "REGION", "value": "eu-west-1"},
                {"name": "TRACE_ID", "value": format!("{i:032x}")},
                {"name": "INPUT_MANIFEST", "value": format!("s3://bucket/manifests/2024-06-01/part-{i:05}.json")},
                {"name": "OWNER", "value": "data-platform@example.com"},
            ],
            "backoffLimit": 2,
            "activeDeadlineSeconds": 3600,
            "dependsOn": [gate],
            "idempotencyKey": format!("etl-2024-06-01-shard-{i:04}-of-1000"),
        })
    };
    let inputs: Vec<Value> = (0..1000).map(input).collect();
    let size = serde_json::to_vec(&json!({ "query": SUBMIT_JOBS, "variables": { "inputs": inputs } }))
        .unwrap()
        .len();
    assert!(size > 600_000, "inputs of a realistic size: {size} bytes");
    let payload = submitted(&server, None, &inputs).await;
    assert!(
        payload["errors"].as_array().unwrap().is_empty(),
        "{}",
        payload["errors"]
    );
    let names: Vec<&str> = payload["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..1000).map(|i| format!("etl-{i:04}")).collect();
    assert_eq!(names, expected, "in input order");
    assert_eq!(total(&server, None, json!({})).await, 1001);

    let too_many: Vec<Value> = (0..1001).map(|i| sleeper(&format!("over-{i}"))).collect();
    let (_, body) = submit_jobs(&server, None, &too_many).await;
    assert!(
        body["data"].is_null() || body["data"]["submitJobs"].is_null(),
        "{body}"
    );
    assert_eq!(body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
    assert_eq!(body["errors"][0]["extensions"]["field"], "inputs");
    assert_eq!(
        total(&server, None, json!({})).await,
        1001,
        "nothing of it was submitted"
    );
}

#[tokio::test]
async fn the_namespaces_quota_holds_within_one_batch() {
    let server = Server::start(&["--max-active-jobs-per-namespace", "3"]).await;
    server.submit(sleeper("before")).await;
    let inputs: Vec<Value> = (0..4).map(|i| sleeper(&format!("bulk-{i}"))).collect();
    let payload = submitted(&server, None, &inputs).await;
    assert_eq!(payload["created"], json!([true, true, null, null]));
    let codes: Vec<&str> = payload["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["QUOTA_EXCEEDED", "QUOTA_EXCEEDED"]);
    assert_eq!(total(&server, None, json!({})).await, 3);
}

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

#[tokio::test]
async fn each_input_keeps_to_the_callers_namespaces_and_keys() {
    let (server, _dir) = tenants_server(&[
        token_entry("alice", ALICE, "namespaces = [\"team-a\"]"),
        token_entry("bob", BOB, "namespaces = [\"team-b\"]"),
    ])
    .await;
    let bobs = submitted(
        &server,
        Some(BOB),
        &[json!({"name": "bobs", "namespace": "team-b", "command": ["sleep", "300"], "idempotencyKey": "shared"})],
    )
    .await;
    let bobs_id = bobs["jobs"][0]["id"].as_str().unwrap().to_owned();
    let inputs = vec![
        json!({"name": "mine", "namespace": "team-a", "command": ["sleep", "300"], "idempotencyKey": "shared"}),
        json!({"name": "theirs", "namespace": "team-b", "command": ["true"]}),
        json!({"name": "after-bob", "namespace": "team-a", "command": ["true"], "dependsOn": [bobs_id]}),
    ];
    let payload = submitted(&server, Some(ALICE), &inputs).await;
    assert_eq!(payload["created"], json!([true, null, null]));
    assert_ne!(
        payload["jobs"][0]["id"], bobs_id,
        "another caller's idempotency key is not this caller's"
    );
    assert_eq!(payload["jobs"][0]["submitter"], "alice");
    let errors = payload["errors"].as_array().unwrap();
    assert_eq!(errors[0]["index"], 1);
    assert_eq!(errors[0]["code"], "FORBIDDEN");
    assert_eq!(errors[1]["index"], 2);
    assert_eq!(
        errors[1]["code"], "BAD_USER_INPUT",
        "bob's job does not exist for alice"
    );
    assert_eq!(errors[1]["field"], "inputs[2].dependsOn[0]");
    assert_eq!(total(&server, Some(ALICE), json!({})).await, 1);
    assert_eq!(total(&server, Some(BOB), json!({})).await, 1);
    // Without a token, nothing at all.
    let (status, body) = submit_jobs(&server, None, &inputs[..1]).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(total(&server, Some(BOB), json!({})).await, 1);
}

#[tokio::test]
async fn the_rate_limit_counts_each_job_of_a_batch() {
    let server = Server::start(&["--mutations-per-minute", "4"]).await;
    let batch = |n: usize, tag: &str| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"name": format!("{tag}-{i}"), "command": ["true"]}))
            .collect()
    };
    // Four a minute: one more every 15 s, far longer than this test takes between requests.
    // More than the bucket ever holds: refused as such, and nothing taken from it.
    let (_, body) = submit_jobs(&server, None, &batch(5, "big")).await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{body}"
    );
    assert_eq!(body["errors"][0]["extensions"]["field"], "inputs");
    let payload = submitted(&server, None, &batch(3, "fits")).await;
    assert!(payload["errors"].as_array().unwrap().is_empty());
    // One left: two are refused together, with when to come back.
    let (status, body) = submit_jobs(&server, None, &batch(2, "late")).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["errors"][0]["extensions"]["code"], "RATE_LIMITED");
    assert!(
        body["errors"][0]["extensions"]["retryAfterSeconds"]
            .as_u64()
            .unwrap()
            >= 1
    );
    assert_eq!(total(&server, None, json!({})).await, 3);
    // The refused batch took nothing: a single submission still fits, and then none.
    server.try_submit("one").await.expect("the fourth mutation");
    assert_eq!(server.try_submit("two").await, Err("RATE_LIMITED".to_owned()));
}

#[tokio::test]
async fn a_store_that_cannot_write_accepts_nothing_of_a_batch() {
    let server = Server::start(&[]).await;
    let id = server.try_submit("kept").await.expect("accepted");
    server.wait_phase(&id, "SUCCEEDED").await;
    server.truncate_database(0);
    let inputs: Vec<Value> = (0..5).map(|i| sleeper(&format!("lost-{i}"))).collect();
    let (_, body) = submit_jobs(&server, None, &inputs).await;
    assert!(body["data"]["submitJobs"].is_null(), "{body}");
    assert_eq!(body["errors"][0]["extensions"]["code"], "UNAVAILABLE");
    assert_eq!(server.readyz().await, 503);
}

#[tokio::test]
async fn a_full_disk_refuses_a_whole_batch_and_its_retry_lands_once_there_is_room() {
    let Some(disk) = SmallDisk::or_skip("4m") else {
        return;
    };
    let mut server = Server::spawn_on(&disk, &[]).await;
    let gate = server.submit(sleeper("gate")).await;
    let batch = |b: usize| -> Vec<Value> {
        (0..20)
            .map(|i| {
                json!({"name": format!("b{b}-{i}"), "command": ["true"], "dependsOn": [gate],
                       "idempotencyKey": format!("b{b}-{i}")})
            })
            .collect()
    };
    disk.fill();
    // The write-ahead log may still hold room for a few commits: batches accepted then are
    // whole and durable. Then a batch is refused, whole.
    let mut accepted = 1;
    let mut refused = None;
    for b in 0..200 {
        let (_, body) = submit_jobs(&server, None, &batch(b)).await;
        if body["data"]["submitJobs"].is_null() {
            assert_eq!(body["errors"][0]["extensions"]["code"], "UNAVAILABLE", "{body}");
            refused = Some(b);
            break;
        }
        assert!(
            body["data"]["submitJobs"]["errors"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        accepted += 20;
    }
    let refused = refused.expect("a full disk never refused a batch");
    assert_eq!(
        total(&server, None, json!({})).await,
        accepted,
        "nothing of the refused batch"
    );

    disk.free();
    server.wait_ready_is(200).await;
    let payload = submitted(&server, None, &batch(refused)).await;
    assert!(payload["created"].as_array().unwrap().iter().all(|c| c == true));
    accepted += 20;
    server.kill9();
    let server = server.start_again(&[]).await;
    assert_eq!(
        total(&server, None, json!({})).await,
        accepted,
        "every accepted batch survived"
    );
}
