//! Fuzz harness: whatever jobgate accepts, it reads back whole, after a restart too, on
//! SQLite and on PostgreSQL.
//!
//! Generated `submitJob` inputs (parameters of any JSON shape and depth, around the stored
//! JSON bounds; strings with any Unicode, control characters and NUL included; idempotency
//! keys, names, environment variables) are sent to a real jobgate over HTTP. Each is either
//! accepted, and then reads back exactly as sent, or refused with `BAD_USER_INPUT`: any
//! other answer (UNAVAILABLE, a server error, no answer) fails. Then jobgate restarts on the
//! same store and every accepted job must read back the same, be listed, and no row may be
//! unreadable. The shapes that once broke the store always run first.
//!
//! Cases: `JOBGATE_FUZZ_CASES` (default 500 per store); see docs/FUZZING.md.
//!
//! jobgate runs in the test's process (`Server::start`); for PostgreSQL, against the harness's
//! throwaway server (`common::postgres`).

mod common;

use std::sync::Mutex;

use common::Server;
use common::postgres::Postgres;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

fn cases() -> u32 {
    std::env::var("JOBGATE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500)
}

/// Any string: every char, control characters and NUL included, mostly short.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter),
        1 => "[a-z0-9-]{1,20}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::from),
    ]
}

/// JSON of any shape: wide and shallow, or a chain deep enough to cross the depth bound.
fn json_value() -> impl Strategy<Value = Value> {
    let tree = scalar().prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..6)
                .prop_map(|members| Value::Object(Map::from_iter(members))),
        ]
    });
    let chain = (
        20usize..40,
        prop::collection::vec(any::<bool>(), 40),
        scalar(),
        text(),
    )
        .prop_map(|(depth, arrays, leaf, key)| {
            let mut v = leaf;
            for array in arrays.into_iter().take(depth) {
                v = if array {
                    json!([v])
                } else {
                    json!({ key.clone(): v })
                };
            }
            v
        });
    prop_oneof![3 => tree, 1 => chain]
}

fn env_var() -> impl Strategy<Value = Value> {
    (prop_oneof![3 => "[A-Z_][A-Z0-9_]{0,8}", 1 => text()], text())
        .prop_map(|(name, value)| json!({"name": name, "value": value}))
}

/// A `SubmitJobInput` that runs `true` (its arguments are ignored), with everything else
/// generated.
fn submit_input() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof!["[a-z][a-z0-9-]{0,20}[a-z0-9]", text()]),
        prop::collection::vec(text(), 0..5),
        prop::collection::vec(env_var(), 0..4),
        prop::option::of(prop::collection::vec((text(), json_value()), 0..5)),
        prop::option::of(text()),
    )
        .prop_map(|(name, args, env, parameters, key)| {
            let mut input = json!({"command": ["true"], "args": args, "env": env});
            if let Some(name) = name {
                input["name"] = json!(name);
            }
            if let Some(parameters) = parameters {
                input["parameters"] = Value::Object(Map::from_iter(parameters));
            }
            if let Some(key) = key {
                input["idempotencyKey"] = json!(key);
            }
            input
        })
}

/// The shapes that broke the store once, and the edges of the bounds.
fn seeds() -> Vec<Value> {
    let nested = |levels: usize| {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    };
    vec![
        json!({"command": ["true"], "parameters": nested(32)}),
        json!({"command": ["true"], "parameters": nested(33)}),
        json!({"command": ["true"], "parameters": {"s": "x".repeat(64 * 1024 - 10)}}),
        json!({"command": ["true"], "parameters": {"s": "x".repeat(64 * 1024)}}),
        json!({"command": ["true"], "idempotencyKey": "nul\u{0}key"}),
        json!({"command": ["true"], "parameters": {"k\u{0}": "\u{0}\u{1f}\u{7f}\u{85}", "": [[], {}]}}),
        json!({"command": ["true"], "parameters": {"n": [u64::MAX, i64::MIN, 1e308, -0.0, 5e-324]}}),
    ]
}

const SUBMIT: &str = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }";
const READ: &str =
    "query($id: ID!) { job(id: $id) { name spec { args env { name value } parameters idempotencyKey } } }";

/// What an accepted input must read back as.
fn expected(input: &Value) -> Value {
    json!({
        "name": input.get("name").cloned().unwrap_or(Value::Null),
        "spec": {
            "args": input.get("args").cloned().unwrap_or(json!([])),
            "env": input.get("env").cloned().unwrap_or(json!([])),
            "parameters": input.get("parameters").cloned().unwrap_or(Value::Null),
            "idempotencyKey": input.get("idempotencyKey").cloned().unwrap_or(Value::Null),
        }
    })
}

/// Submits `input`: `Ok(Some(id))` accepted, `Ok(None)` refused as bad input; anything else
/// is a failure of the property.
async fn submit(server: &Server, input: &Value) -> Result<Option<String>, String> {
    let answer = server.gql(SUBMIT, json!({"input": input})).await;
    if let Some(id) = answer["data"]["submitJob"]["job"]["id"].as_str() {
        return Ok(Some(id.to_owned()));
    }
    let code = answer["errors"][0]["extensions"]["code"].as_str();
    if code == Some("BAD_USER_INPUT") {
        return Ok(None);
    }
    Err(format!("neither accepted nor refused as bad input: {answer}"))
}

async fn read_back(server: &Server, id: &str) -> Value {
    let answer = server.gql(READ, json!({"id": id})).await;
    answer["data"]["job"].clone()
}

/// The property on one store: `args` start jobgate on it (the same each time).
async fn accepted_submissions_read_back_after_a_restart(args: &[&str]) {
    let mut server = Server::start(args).await;
    // (id, what it must read back as); a repeated idempotency key answers the first job.
    let accepted: Mutex<Vec<(String, Value)>> = Mutex::new(Vec::new());
    let check = |input: Value| -> Result<(), TestCaseError> {
        let outcome = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let Some(id) = submit(&server, &input).await? else {
                    return Ok(());
                };
                let read = read_back(&server, &id).await;
                let mut accepted = accepted.lock().unwrap();
                if accepted.iter().any(|(seen, _)| *seen == id) {
                    // The same idempotency key with the same input: the first job again.
                    return Ok(());
                }
                let want = expected(&input);
                if read != want {
                    return Err(format!("job {id} reads back as {read}, not {want}"));
                }
                accepted.push((id, want));
                Ok(())
            })
        });
        outcome.map_err(TestCaseError::fail)
    };
    for seed in seeds() {
        check(seed).unwrap();
    }
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner.run(&submit_input(), check).unwrap();

    server.stop().await;
    let server = server.start_again(args).await;
    let accepted = accepted.into_inner().unwrap();
    assert!(
        accepted.len() > 10,
        "too few inputs were accepted to test anything: {}",
        accepted.len()
    );
    for (id, want) in &accepted {
        assert_eq!(&read_back(&server, id).await, want, "job {id} after a restart");
    }
    let listed = server
        .gql_ok(
            "{ jobs(first: 1) { totalCount } unreadableRecords { key } }",
            json!({}),
        )
        .await;
    assert_eq!(listed["jobs"]["totalCount"], accepted.len(), "{listed}");
    assert_eq!(listed["unreadableRecords"], json!([]), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_submissions_read_back_after_a_restart_on_sqlite() {
    accepted_submissions_read_back_after_a_restart(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_submissions_read_back_after_a_restart_on_postgres() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let url = pg.url();
    accepted_submissions_read_back_after_a_restart(&["--database-url", &url]).await;
}
