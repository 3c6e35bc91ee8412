//! Queries built to cost the server far more than they cost to send: fragments
//! that expand exponentially, fragment cycles, queries too deep or too complex, and requests
//! that run too long. Each is refused or stopped with a coded error over every transport:
//! HTTP GET, POST, batched POST and WebSocket `subscribe`. So are documents and variables
//! nested or sized to exhaust the parser's stack or the process's memory before any of those
//! limits could look at them; those tests run the `jobgate` binary, whose process must live
//! through them and whose peak memory they read.
//!
//! No test asserts a duration; timeouts only keep a broken test from hanging.
//!
//! The other tests run jobgate in the test's process (`Server::start`); all on the local executor.

mod common;

use std::time::Duration;

use common::{GqlWs, Polling, Server, WAIT};
use serde_json::{Value, json};

const GQL_RESPONSE: &str = "application/graphql-response+json";

/// About 900 bytes whose fragments each spread the previous one twice: `levels` doublings of
/// `base`, so 2^levels copies of it once expanded.
fn doubling(levels: usize, base: &str) -> String {
    let mut query = format!("query {{ ...F{levels} }}\nfragment F0 on Query {{ {base} }}\n");
    for i in 1..=levels {
        query.push_str(&format!(
            "fragment F{i} on Query {{ ...F{p} ...F{p} }}\n",
            p = i - 1
        ));
    }
    query
}

/// POSTs `body` (one request or a batch) asking for graphql-response+json; status and body.
async fn post(server: &Server, body: Value) -> (u16, Value) {
    answer(server.http().post(server.url("/graphql")).json(&body)).await
}

async fn get(server: &Server, query: &str) -> (u16, Value) {
    answer(
        server
            .http()
            .get(server.url("/graphql"))
            .query(&[("query", query)]),
    )
    .await
}

/// Sends `request` asking for graphql-response+json, bounded by the wait limit; status and body.
async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = tokio::time::timeout(WAIT, request.header("accept", GQL_RESPONSE).send())
        .await
        .expect("no answer within the wait limit")
        .expect("a request to /graphql");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// The one error of a refused request, which must carry `code` and no `data`.
fn refusal(body: &Value, code: &str) -> String {
    assert!(
        body.get("data").is_none(),
        "a refused request has no data: {body}"
    );
    let errors = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors: {body}"));
    assert_eq!(errors.len(), 1, "{body}");
    assert_eq!(errors[0]["extensions"]["code"], code, "{body}");
    errors[0]["message"].as_str().unwrap().to_owned()
}

/// Sends `query` over every transport and returns the refusal message each gave (POST, GET,
/// each item of a batch, WebSocket `error`), checking each is a `BAD_USER_INPUT` request error.
async fn refused_everywhere(server: &Server, query: &str) -> Vec<String> {
    let mut messages = Vec::new();
    let (status, body) = post(server, json!({ "query": query })).await;
    assert_eq!(status, 400, "{body}");
    messages.push(refusal(&body, "BAD_USER_INPUT"));

    let (status, body) = get(server, query).await;
    assert_eq!(status, 400, "{body}");
    messages.push(refusal(&body, "BAD_USER_INPUT"));

    let (status, body) = post(
        server,
        json!([{ "query": query }, { "query": "{ jobs { totalCount } }" }]),
    )
    .await;
    assert_eq!(status, 200, "a batch answers 200 and an array: {body}");
    messages.push(refusal(&body[0], "BAD_USER_INPUT"));
    assert_eq!(body[1]["data"]["jobs"]["totalCount"], 0, "{body}");

    let mut ws = GqlWs::connect(server).await;
    ws.subscribe("q", query, json!({})).await;
    let answer = ws.recv().await;
    assert_eq!(answer["type"], "error", "{answer}");
    assert_eq!(answer["id"], "q", "{answer}");
    let errors = answer["payload"].as_array().unwrap();
    assert_eq!(errors[0]["extensions"]["code"], "BAD_USER_INPUT", "{answer}");
    messages.push(errors[0]["message"].as_str().unwrap().to_owned());
    // The socket stays usable.
    ws.subscribe("ok", "{ jobs { totalCount } }", json!({})).await;
    assert_eq!(ws.recv().await["type"], "next");
    messages
}

#[tokio::test]
async fn exponential_fragment_spreads_are_refused_before_they_run() {
    let server = Server::start(&["--allow-batch"]).await;
    // 2^22 `__typename`s once expanded; async-graphql's complexity does not count
    // `__typename`, so this passed every limit and ran for seconds.
    let query = doubling(22, "__typename");
    assert!(query.len() < 1000);
    for message in refused_everywhere(&server, &query).await {
        assert_eq!(
            message,
            "the query makes 12582911 selections (fields and fragments) once its fragments are \
             expanded; at most 2000 are allowed"
        );
    }
    // Spreads of a fragment that does not exist are work to walk too (async-graphql's
    // recursion check walks 2^60 of them within its limit of 64).
    let nothing = doubling(60, "...Missing");
    for message in refused_everywhere(&server, &nothing).await {
        assert!(message.contains("once its fragments are expanded"), "{message}");
    }
    // A query of the same shape that stays small still runs.
    let (status, body) = post(&server, json!({ "query": doubling(8, "__typename") })).await;
    assert_eq!(
        (status, &body["data"]["__typename"]),
        (200, &json!("Query")),
        "{body}"
    );
}

#[tokio::test]
async fn fragment_cycles_are_refused() {
    let server = Server::start(&["--allow-batch"]).await;
    for query in [
        "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }",
        "{ ...A } fragment A on Query { jobs { totalCount } ...A }",
    ] {
        for message in refused_everywhere(&server, query).await {
            assert!(message.contains("spreads itself"), "{query}: {message}");
        }
    }
}

#[tokio::test]
async fn the_selection_limit_is_configurable() {
    let server = Server::start(&["--max-query-selections", "4", "--allow-batch"]).await;
    // jobs, totalCount, pageInfo, hasNextPage: four.
    let four = "{ jobs { totalCount pageInfo { hasNextPage } } }";
    let (status, body) = post(&server, json!({ "query": four })).await;
    assert_eq!(status, 200, "{body}");
    // The same through a fragment: one more (the spread).
    let five = "{ ...F } fragment F on Query { jobs { totalCount pageInfo { hasNextPage } } }";
    for message in refused_everywhere(&server, five).await {
        assert!(message.starts_with("the query makes 5 selections"), "{message}");
        assert!(message.ends_with("at most 4 are allowed"), "{message}");
    }
}

#[tokio::test]
async fn depth_refusals_name_the_depth() {
    // Too deep and too complex at once: the answer is about depth, the first limit checked.
    let server = Server::start(&[
        "--max-query-depth",
        "4",
        "--max-query-complexity",
        "3",
        "--allow-batch",
    ])
    .await;
    let deep = "{ jobs { edges { node { spec { env { name } } } } } }";
    for message in refused_everywhere(&server, deep).await {
        assert_eq!(
            message,
            "the query is nested 6 levels deep; at most 4 are allowed"
        );
    }
    // Depth counts through fragments.
    let through_fragments = "{ jobs { ...E } } fragment E on JobConnection { edges { node { ...S } } } \
                             fragment S on Job { spec { env { name } } }";
    let (_, body) = post(&server, json!({ "query": through_fragments })).await;
    assert_eq!(
        refusal(&body, "BAD_USER_INPUT"),
        "the query is nested 6 levels deep; at most 4 are allowed"
    );
}

#[tokio::test]
async fn complexity_counts_fragment_spreads_and_says_so() {
    let server = Server::start(&["--max-query-complexity", "5", "--allow-batch"]).await;
    // One copy: jobs (1 + totalCount 1 + pageInfo (1 + hasNextPage 1)) = 4.
    let once = "{ ...F } fragment F on Query { jobs { totalCount pageInfo { hasNextPage } } }";
    let (status, body) = post(&server, json!({ "query": once })).await;
    assert_eq!(status, 200, "{body}");
    // Spread twice: 8, though the document is barely longer.
    let twice = "{ ...F ...G } fragment F on Query { jobs { totalCount pageInfo { hasNextPage } } } \
                 fragment G on Query { ...F }";
    for message in refused_everywhere(&server, twice).await {
        assert_eq!(message, "the query's complexity is 8; at most 5 is allowed");
    }
}

/// A query that waits on the store 2^16 times: seconds of work, each step a real wait, so a
/// time limit can stop it. (Selections and complexity limits are off to let it through.)
fn slow_query() -> String {
    doubling(16, "jobs(first: 1) { totalCount }")
}

#[tokio::test]
async fn a_request_past_its_time_limit_is_stopped_with_deadline_exceeded() {
    // Far below the slow query's seconds, far above what a small request takes on a loaded
    // CI machine (a submission waits for an fsync).
    let server = Server::start(&[
        "--request-timeout-ms",
        "1000",
        "--max-query-selections",
        "0",
        "--max-query-complexity",
        "0",
    ])
    .await;
    let query = slow_query();
    let (status, body) = post(&server, json!({ "query": query })).await;
    // It executed (and was stopped): not a request error.
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], Value::Null, "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "DEADLINE_EXCEEDED",
        "{body}"
    );
    assert_eq!(
        body["errors"][0]["message"],
        "the request ran longer than 1000 ms and was stopped"
    );
    let (status, body) = get(&server, &query).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "DEADLINE_EXCEEDED",
        "{body}"
    );

    // Over WebSocket a query is a single-result operation: `next` with the error, then
    // `complete`, and the socket carries on.
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("slow", &query, json!({})).await;
    let next = ws.recv().await;
    assert_eq!(
        (&next["type"], &next["id"]),
        (&json!("next"), &json!("slow")),
        "{next}"
    );
    assert_eq!(
        next["payload"]["errors"][0]["extensions"]["code"], "DEADLINE_EXCEEDED",
        "{next}"
    );
    assert_eq!(ws.recv().await, json!({"id": "slow", "type": "complete"}));
    ws.subscribe("quick", "{ jobs { totalCount } }", json!({})).await;
    let next = ws.recv().await;
    assert_eq!(next["payload"]["data"]["jobs"]["totalCount"], 0, "{next}");
    assert_eq!(ws.recv().await, json!({"id": "quick", "type": "complete"}));

    // Subscriptions are not bounded by it.
    ws.subscribe("events", "subscription { jobEvents { cursor } }", json!({}))
        .await;
    // A submission stopped by the limit may still have been accepted: retried with the same
    // idempotency key, as docs/CONFIG.md tells clients, it is answered once.
    // Retried at once: each try is a request's time limit long already.
    let polling = Polling::every(Duration::ZERO);
    loop {
        let body = server
            .gql(
                "mutation { submitJob(input: {command: [\"true\"], idempotencyKey: \"once\"}) { job { id } } }",
                json!({}),
            )
            .await;
        if body["data"]["submitJob"]["job"]["id"].is_string() {
            break;
        }
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "DEADLINE_EXCEEDED",
            "{body}"
        );
        polling.pause(|| format!("never accepted: {body}")).await;
    }
    let event = ws.recv().await;
    assert_eq!(
        (&event["type"], &event["id"]),
        (&json!("next"), &json!("events")),
        "{event}"
    );
}

/// A client that goes away stops its request: hyper drops the handler's future when the
/// connection closes, and execution runs inside it (nothing is spawned), so the store stops
/// being asked. (Work that never waits, such as resolving the millions of selections an
/// exponential fragment expands to, cannot be interrupted by a drop; the selection limit
/// refuses that before it starts.)
#[tokio::test]
async fn a_request_stops_when_its_client_disconnects() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start(&[
        "--request-timeout-ms",
        "0",
        "--max-query-selections",
        "0",
        "--max-query-complexity",
        "0",
    ])
    .await;
    // 2^15 store reads, each one `list` operation in the metrics.
    let query = doubling(15, "jobs(first: 1) { totalCount }");
    let reads = 1u32 << 15;
    let lists = |m: &std::collections::HashMap<String, f64>| {
        m.get("jobgate_store_operation_duration_seconds_count{op=\"list\"}")
            .copied()
            .unwrap_or(0.0)
    };
    // A: on a raw connection, dropped as soon as the store works for it.
    let body = json!({ "query": query }).to_string();
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(
        format!(
            "POST /graphql HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::timeout(WAIT, async {
        while lists(&common::scrape(&server).await) == 0.0 {}
    })
    .await
    .expect("the request never reached the store");
    drop(tcp);
    let at_drop = lists(&common::scrape(&server).await);
    assert!(
        at_drop < f64::from(reads) / 2.0,
        "A was nearly done already: {at_drop}"
    );
    // B: the same request, answered. The store serves waiters in order, so had A gone on,
    // all of A's reads would be done before B's last one.
    let (status, body) = post(&server, json!({ "query": query })).await;
    assert_eq!(
        (status, &body["data"]["jobs"]["totalCount"]),
        (200, &json!(0)),
        "{body}"
    );
    let since_drop = lists(&common::scrape(&server).await) - at_drop;
    assert!(
        since_drop < f64::from(reads) * 1.5,
        "{since_drop} reads since A's client left: A went on"
    );
}

/// A list literal `levels` deep around one `1`, as an argument: about 2 bytes a level.
fn deep_literal(open: &str, levels: usize, close: &str) -> String {
    format!(
        "{{ __typename(a: {}1{}) }}",
        open.repeat(levels),
        close.repeat(levels)
    )
}

const TOO_DEEP: &str = "the query nests `{`, `[` and `(` more than 64 levels deep; at most 64 are allowed";

#[tokio::test]
async fn deeply_nested_literals_are_refused_and_the_server_lives() {
    let server = Server::spawn(&["--allow-batch"]).await;
    // 4 KB whose parse recursed once per level, past the end of a runtime thread's stack.
    let lists = deep_literal("[", 2_000, "]");
    assert!(lists.len() < 4_100);
    let objects = deep_literal("{a: ", 2_000, "}");
    let selections = format!("{}__typename{}", "{ a ".repeat(2_000), "}".repeat(2_000));
    for query in [&lists, &objects, &selections] {
        for message in refused_everywhere(&server, query).await {
            assert_eq!(message, TOO_DEEP);
        }
    }
    // At the bound, the document is parsed and runs (`__typename` ignores arguments).
    let deepest = deep_literal("[", 62, "]");
    let (status, body) = post(&server, json!({ "query": deepest })).await;
    assert_eq!(
        (status, &body["data"]["__typename"]),
        (200, &json!("Query")),
        "{body}"
    );
    // The same process answers as ever.
    let body = server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    assert_eq!(body["jobs"]["totalCount"], 0, "{body}");
}

#[tokio::test]
async fn deeply_nested_variables_are_refused() {
    let server = Server::spawn(&[]).await;
    let deep = (0..100).fold(json!(1), |v, _| json!({ "a": v }));
    let submit = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }";
    let variables = json!({ "input": { "command": ["true"], "parameters": deep } });
    let expected =
        "the request's variables nest lists and objects more than 64 levels deep; at most 64 are allowed";

    let (status, body) = post(&server, json!({ "query": submit, "variables": variables })).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(refusal(&body, "BAD_USER_INPUT"), expected);

    let filter = "query($f: JobFilter) { jobs(filter: $f) { totalCount } }";
    let (status, body) = answer(server.http().get(server.url("/graphql")).query(&[
        ("query", filter),
        ("variables", &json!({ "f": { "phases": [deep] } }).to_string()),
    ]))
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(refusal(&body, "BAD_USER_INPUT"), expected);

    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("deep", submit, variables).await;
    let answer = ws.recv().await;
    assert_eq!(
        (&answer["type"], &answer["id"]),
        (&json!("error"), &json!("deep")),
        "{answer}"
    );
    assert_eq!(
        answer["payload"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{answer}"
    );
    assert_eq!(answer["payload"][0]["message"], expected, "{answer}");
    // The socket stays usable, and nothing was submitted.
    ws.subscribe("count", "{ jobs { totalCount } }", json!({})).await;
    let next = ws.recv().await;
    assert_eq!(next["payload"]["data"]["jobs"]["totalCount"], 0, "{next}");
}

#[tokio::test]
async fn a_megabyte_of_inputs_is_refused_within_a_memory_budget() {
    let server = Server::spawn(&[]).await;
    // Everything a first request sets up is in the baseline.
    server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    let before = server.peak_memory();
    // Just under the default body limit of 1 MiB: about 349,000 inputs.
    let count = ((1 << 20) - 200) / 3;
    let literal = format!(
        "mutation {{ submitJobs(inputs: [{}]) {{ created }} }}",
        vec!["{}"; count].join(",")
    );
    let by_variable = json!({
        "query": "mutation($i: [SubmitJobInput!]!) { submitJobs(inputs: $i) { created } }",
        "variables": { "i": vec![json!({}); count - 10] },
    });
    // Values the parser reads apart with nothing between them: a million zeros.
    let packed = format!("{{ __typename(a: [{}]) }}", "0".repeat((1 << 20) - 100));
    let literal_answer = post(&server, json!({ "query": literal })).await;
    let variable_answer = post(&server, by_variable).await;
    let packed_answer = post(&server, json!({ "query": packed })).await;
    let growth = server.peak_memory().saturating_sub(before);
    assert!(growth < 64 << 20, "peak memory grew by {} MiB", growth >> 20);
    let (status, body) = packed_answer;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        refusal(&body, "BAD_USER_INPUT"),
        "a list in the query has more than 1024 items; at most 1024 are allowed"
    );
    let (status, body) = literal_answer;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        refusal(&body, "BAD_USER_INPUT"),
        "a list in the query has more than 1024 items; at most 1024 are allowed"
    );
    let (status, body) = variable_answer;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        refusal(&body, "BAD_USER_INPUT"),
        format!(
            "a list in the request's variables has {} items; at most 1024 are allowed",
            count - 10
        )
    );
    assert_eq!(
        server.gql_ok("{ jobs { totalCount } }", json!({})).await["jobs"]["totalCount"],
        0
    );
}
