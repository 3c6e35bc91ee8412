//! The request path from bytes, fuzzed against a real spawned jobgate: HTTP bodies (random
//! bytes, JSON of random shape and depth, GraphQL documents from a small grammar with deep and
//! wide nesting, fragments and strings with escapes, byte-level mutations of valid
//! `submitJob`/`submitJobs` requests) and WebSocket messages after `connection_init`
//! (`subscribe` payloads of the same kinds, malformed and binary frames).
//!
//! Properties, for every case: each HTTP request gets an answer that is not a server error,
//! each WebSocket exchange ends in the answer to a closing `ping` or in a close with a code
//! the protocol defines, no answer on either is coded `UNAVAILABLE` (a store failure), the
//! process is alive afterwards (it answers a query), and its peak memory (`VmHWM`) stays
//! within [`MEMORY_BUDGET`] of what it was once started.
//!
//! `JOBGATE_FUZZ_CASES` sets the number of generated cases (docs/FUZZING.md); the known bad
//! shapes in [`seeds`] always run. Time limits only keep a broken server from hanging the
//! test; no duration is asserted.

mod common;

use std::cell::RefCell;

use common::{Server, WAIT};
use futures::{SinkExt, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// How far above its peak after start-up jobgate's peak memory may rise: far below the
/// 200-400 MB one unbounded request could take, far above what any refused request costs.
const MEMORY_BUDGET: u64 = 96 << 20;

/// Generated cases when `JOBGATE_FUZZ_CASES` is not set: 10-20 s in a debug build.
const DEFAULT_CASES: u32 = 2_000;

/// Close codes a graphql-transport-ws server may answer these messages with: normal, protocol
/// error, message too big, try again later, invalid message, unauthorized, subscriber already
/// exists, too many initialisation requests.
const DEFINED_CLOSES: [u16; 8] = [1000, 1002, 1009, 1013, 4400, 4401, 4409, 4429];

/// One request, or one WebSocket conversation.
#[derive(Clone, Debug)]
enum Case {
    /// A POST body, sent as `application/json` whatever it holds.
    Body(Vec<u8>),
    /// A GET with these query-string parameters.
    Get(Vec<(String, String)>),
    /// Frames sent after the handshake, then a `ping`.
    Ws(Vec<Frame>),
}

#[derive(Clone, Debug)]
enum Frame {
    Text(String),
    Binary(Vec<u8>),
}

// ---------------------------------------------------------------------------------------------
// Generators

/// Names the schema has, and some it does not.
const FIELDS: &[&str] = &[
    "jobs",
    "job",
    "__typename",
    "totalCount",
    "edges",
    "node",
    "id",
    "name",
    "spec",
    "command",
    "env",
    "events",
    "phase",
    "cursor",
    "pageInfo",
    "hasNextPage",
    "jobStats",
    "namespaces",
    "templates",
    "submitJob",
    "submitJobs",
    "cancelJob",
    "jobEvents",
    "jobStatus",
    "x",
    "__schema",
    "types",
    "fields",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(FIELDS).prop_map(str::to_owned),
        proptest::collection::vec(proptest::sample::select(&b"abcXYZ_019"[..]), 1..6)
            .prop_map(|b| String::from_utf8(b).unwrap()),
    ]
}

/// String contents: escapes, quotes, brackets, line breaks and non-ASCII characters that a
/// scanner must not mistake for structure.
fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(
            &[
                "a",
                " ",
                "\\\"",
                "\\\\",
                "\\n",
                "\\u00e9",
                "\\u{1F600}",
                "[",
                "{",
                "(",
                "]",
                "}",
                "#",
                "\"\"",
                "é",
                "\u{2028}",
                "\\",
                "$x",
            ][..],
        ),
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

/// A GraphQL value literal, nested up to a few levels.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        text().prop_map(|s| format!("\"{s}\"")),
        text().prop_map(|s| format!("\"\"\"{}\"\"\"", s.replace("\"\"", "\\\"\"\"\n"))),
        proptest::sample::select(&["true", "false", "null", "PENDING", "$v", "$input"][..])
            .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(", "))),
            proptest::collection::vec((name(), inner), 0..5).prop_map(|kv| {
                let fields: Vec<_> = kv.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", fields.join(", "))
            }),
        ]
    })
}

/// A field, maybe aliased, with arguments.
fn field() -> impl Strategy<Value = String> {
    (
        name(),
        proptest::option::of(name()),
        proptest::collection::vec((name(), value()), 0..3),
    )
        .prop_map(|(name, alias, args)| {
            let alias = alias.map(|a| format!("{a}: ")).unwrap_or_default();
            let args: Vec<_> = args.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
            if args.is_empty() {
                format!("{alias}{name}")
            } else {
                format!("{alias}{name}({})", args.join(", "))
            }
        })
}

/// A selection set with arguments, aliases, fragment spreads, inline fragments and comments.
fn selection_set() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => field(),
        1 => proptest::sample::select(&["...F", "...G", "# a comment }}]]\n", "__typename"][..])
            .prop_map(str::to_owned),
    ];
    let items = leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            (field(), proptest::collection::vec(inner.clone(), 1..5))
                .prop_map(|(f, items)| format!("{f} {{ {} }}", items.join(" "))),
            proptest::collection::vec(inner, 1..4)
                .prop_map(|items| format!("... on Query {{ {} }}", items.join(" "))),
        ]
    });
    proptest::collection::vec(items, 1..5).prop_map(|items| format!("{{ {} }}", items.join(" ")))
}

/// A document: an operation (maybe named, with variables), and fragments that may spread
/// each other.
fn document() -> impl Strategy<Value = String> {
    (
        proptest::sample::select(
            &[
                "",
                "query ",
                "mutation ",
                "subscription ",
                "query Q($v: Int, $input: SubmitJobInput) ",
            ][..],
        ),
        selection_set(),
        proptest::collection::vec(
            (proptest::sample::select(&["F", "G", "H"][..]), selection_set()),
            0..3,
        ),
    )
        .prop_map(|(op, set, fragments)| {
            let mut doc = format!("{op}{set}");
            for (name, set) in fragments {
                doc.push_str(&format!("\nfragment {name} on Query {set}"));
            }
            doc
        })
}

/// Nesting far past any limit, or a list far wider than any the schema takes.
fn deep_or_wide() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            proptest::sample::select(&[("[", "]"), ("{a: ", "}"), ("{ a ", "}"), ("(a: ", ")")][..]),
            1..3_000usize
        )
            .prop_map(|((open, close), n)| format!(
                "{{ __typename(a: {}1{}) }}",
                open.repeat(n),
                close.repeat(n)
            )),
        (
            proptest::sample::select(
                &[
                    "1",
                    "-1",
                    "0",
                    "true",
                    "null",
                    "{}",
                    "[]",
                    "\"s\"",
                    "{command: [\"true\"]}"
                ][..]
            ),
            proptest::sample::select(&[",", " ", ""][..]),
            1..5_000usize
        )
            .prop_map(|(item, separator, n)| format!(
                "mutation {{ submitJobs(inputs: [{}]) {{ created }} }}",
                vec![item; n].join(separator)
            )),
    ]
}

/// JSON of random shape and depth, up to past serde_json's own depth limit.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    let shaped = leaf.prop_recursive(8, 128, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::btree_map(name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        4 => shaped,
        1 => (1..200usize, any::<bool>()).prop_map(|(depth, objects)| {
            (0..depth).fold(json!(1), |v, _| if objects { json!({ "a": v }) } else { json!([v]) })
        }),
    ]
}

/// Valid submissions, as whole request bodies.
fn valid_bodies() -> Vec<String> {
    let one = "mutation { submitJob(input: {command: [\"true\"], name: \"fuzz\", env: [{name: \"A\", value: \"b\"}], parameters: {a: [1, {b: \"c\"}]}}) { job { id } } }";
    let many = "mutation { submitJobs(inputs: [{command: [\"true\"]}, {command: [\"true\"], args: [\"x\"]}]) { created errors { index message } } }";
    let by_variables = json!({
        "query": "mutation($inputs: [SubmitJobInput!]!) { submitJobs(inputs: $inputs) { created } }",
        "variables": { "inputs": [{ "command": ["true"], "idempotencyKey": "k" }, { "command": ["true"] }] },
    });
    vec![
        json!({ "query": one }).to_string(),
        json!({ "query": many }).to_string(),
        by_variables.to_string(),
    ]
}

/// One edit of a text: delete, insert a snippet, repeat a slice, or change a byte.
#[derive(Clone, Debug)]
enum Edit {
    Delete(f64, usize),
    Insert(f64, &'static str),
    Repeat(f64, usize, usize),
    Byte(f64, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = 0.0..1.0f64;
    prop_oneof![
        (at.clone(), 1..20usize).prop_map(|(a, n)| Edit::Delete(a, n)),
        (
            at.clone(),
            proptest::sample::select(
                &[
                    "[", "{", "}", "]", "\"", "\\", "{}", "[[[[", ",{}", "...F", "#", "\\u0000", "null", "$v"
                ][..]
            )
        )
            .prop_map(|(a, s)| Edit::Insert(a, s)),
        (at.clone(), 1..8usize, 1..2_000usize).prop_map(|(a, len, times)| Edit::Repeat(a, len, times)),
        (at, any::<u8>()).prop_map(|(a, b)| Edit::Byte(a, b)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for edit in edits {
        let place = |at: f64, len: usize| ((at * len as f64) as usize).min(len);
        match *edit {
            Edit::Delete(at, n) => {
                let start = place(at, bytes.len());
                let end = (start + n).min(bytes.len());
                bytes.drain(start..end);
            }
            Edit::Insert(at, s) => {
                let i = place(at, bytes.len());
                bytes.splice(i..i, s.bytes());
            }
            Edit::Repeat(at, len, times) => {
                let start = place(at, bytes.len());
                let slice = bytes[start..(start + len).min(bytes.len())].to_vec();
                let copies = slice.repeat(times);
                bytes.splice(start..start, copies);
            }
            Edit::Byte(at, b) => {
                if !bytes.is_empty() {
                    let i = place(at, bytes.len() - 1);
                    bytes[i] = b;
                }
            }
        }
    }
    bytes
}

fn mutated_submission() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(valid_bodies()),
        proptest::collection::vec(edit(), 1..5),
    )
        .prop_map(|(body, edits)| apply(&body, &edits))
}

/// A GraphQL request object: a document (generated, deep or wide) and variables.
fn request() -> impl Strategy<Value = Value> {
    let query = prop_oneof![3 => document(), 1 => deep_or_wide()];
    let variables = prop_oneof![
        Just(Value::Null),
        json_value().prop_map(|v| json!({ "v": v, "input": v }))
    ];
    (query, variables).prop_map(|(query, variables)| json!({ "query": query, "variables": variables }))
}

fn case() -> impl Strategy<Value = Case> {
    let frame = prop_oneof![
        4 => request().prop_map(|payload| {
            Frame::Text(json!({ "id": "f", "type": "subscribe", "payload": payload }).to_string())
        }),
        2 => mutated_submission().prop_map(|body| {
            let payload = String::from_utf8_lossy(&body).into_owned();
            Frame::Text(format!(r#"{{"id":"m","type":"subscribe","payload":{payload}}}"#))
        }),
        1 => json_value().prop_map(|v| Frame::Text(v.to_string())),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| Frame::Text(String::from_utf8_lossy(&b).into_owned())),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Frame::Binary),
        1 => proptest::sample::select(&[
            r#"{"type":"connection_init"}"#,
            r#"{"type":"complete","id":"f"}"#,
            r#"{"type":"subscribe","id":"f","payload":{"query":"subscription { jobEvents { cursor } }"}}"#,
            r#"{"type":"pong"}"#,
            r#"{"type":"next","id":"x","payload":{}}"#,
        ][..]).prop_map(|s| Frame::Text(s.to_owned())),
    ];
    prop_oneof![
        2 => proptest::collection::vec(any::<u8>(), 0..256).prop_map(Case::Body),
        2 => json_value().prop_map(|v| Case::Body(v.to_string().into_bytes())),
        4 => request().prop_map(|r| Case::Body(r.to_string().into_bytes())),
        1 => proptest::collection::vec(request(), 1..4).prop_map(|rs| Case::Body(Value::Array(rs).to_string().into_bytes())),
        3 => mutated_submission().prop_map(Case::Body),
        2 => (document(), json_value()).prop_map(|(query, variables)| Case::Get(vec![
            ("query".into(), query),
            ("variables".into(), json!({ "v": variables }).to_string()),
        ])),
        3 => proptest::collection::vec(frame, 1..4).prop_map(Case::Ws),
    ]
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Sends the case and checks what came back, that the process lives and its peak memory.
async fn check(server: &Server, baseline: u64, case: &Case) -> Result<(), String> {
    match case {
        Case::Body(body) => {
            let request = server
                .http()
                .post(server.url("/graphql"))
                .header("content-type", "application/json")
                .body(body.clone());
            http_answer(request).await?;
        }
        Case::Get(params) => {
            http_answer(server.http().get(server.url("/graphql")).query(params)).await?;
        }
        Case::Ws(frames) => ws_exchange(server, frames).await?,
    }
    // Alive: a crash from work the request left behind shows here.
    http_answer(
        server
            .http()
            .post(server.url("/graphql"))
            .json(&json!({ "query": "{ __typename }" })),
    )
    .await?;
    let peak = server.peak_memory();
    if peak > baseline + MEMORY_BUDGET {
        return Err(format!(
            "peak memory {} MiB, {} MiB above the baseline",
            peak >> 20,
            (peak - baseline) >> 20
        ));
    }
    Ok(())
}

async fn http_answer(request: reqwest::RequestBuilder) -> Result<(), String> {
    let response = tokio::time::timeout(WAIT, request.send())
        .await
        .map_err(|_| "no answer within the time limit".to_owned())?
        .map_err(|e| format!("no answer: {e} (is jobgate alive?)"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("reading the body: {e}"))?;
    if status.is_server_error() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    if let Ok(answer) = serde_json::from_slice::<Value>(&body) {
        match &answer {
            Value::Array(batch) => batch.iter().try_for_each(no_fault)?,
            one => no_fault(one)?,
        }
    }
    Ok(())
}

/// Whatever a client sends, the store must stay readable and writable for everyone: an answer
/// coded `UNAVAILABLE` (how every store failure is answered) is jobgate's fault.
fn no_fault(answer: &Value) -> Result<(), String> {
    let errors = match answer {
        Value::Array(errors) => errors.as_slice(),
        answer => answer["errors"].as_array().map_or(&[][..], Vec::as_slice),
    };
    if errors.iter().any(|e| e["extensions"]["code"] == "UNAVAILABLE") {
        return Err(format!("the store failed: {answer}"));
    }
    Ok(())
}

/// Sends the frames after the handshake, then a `ping`; the exchange ends at the `pong` or at
/// a close, whose code must be one the protocol defines.
async fn ws_exchange(server: &Server, frames: &[Frame]) -> Result<(), String> {
    let mut request = server.ws_url().into_client_request().map_err(|e| e.to_string())?;
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse().unwrap());
    let (mut ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .map_err(|_| "no WebSocket handshake within the time limit".to_owned())?
        .map_err(|e| format!("no WebSocket: {e} (is jobgate alive?)"))?;
    let init = json!({ "type": "connection_init" }).to_string();
    ws.send(Message::text(init)).await.map_err(|e| e.to_string())?;
    for frame in frames {
        let message = match frame {
            Frame::Text(t) => Message::text(t.clone()),
            Frame::Binary(b) => Message::binary(b.clone()),
        };
        // After the server closed, sends may fail; the close frame is read below.
        if ws.send(message).await.is_err() {
            break;
        }
    }
    let _ = ws.send(Message::text(r#"{"type":"ping"}"#)).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let frame = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| "no pong nor close within the time limit".to_owned())?;
        match frame {
            Some(Ok(Message::Text(t))) => {
                let message: Value =
                    serde_json::from_str(t.as_str()).map_err(|e| format!("not JSON: {e}: {t}"))?;
                if message["type"] == "pong" {
                    return Ok(());
                }
                // `error` carries a list of errors, `next` a response.
                no_fault(&message["payload"])?;
            }
            Some(Ok(Message::Close(Some(close)))) => {
                let code = u16::from(close.code);
                return if DEFINED_CLOSES.contains(&code) {
                    Ok(())
                } else {
                    Err(format!("closed with {code} {}", close.reason))
                };
            }
            Some(Ok(Message::Close(None))) => return Err("closed without a code".to_owned()),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("socket error: {e} (is jobgate alive?)")),
            None => return Err("the socket ended without a close frame".to_owned()),
        }
    }
}

fn cases() -> u32 {
    match std::env::var("JOBGATE_FUZZ_CASES") {
        Ok(n) => n.parse().expect("JOBGATE_FUZZ_CASES must be a number"),
        Err(_) => DEFAULT_CASES,
    }
}

/// The jobgate the cases of a test talk to, and its peak memory once it had answered.
struct Target {
    server: Server,
    baseline: u64,
}

impl Target {
    async fn new(server: Server) -> Target {
        http_answer(
            server
                .http()
                .post(server.url("/graphql"))
                .json(&json!({ "query": "{ jobs { totalCount } }" })),
        )
        .await
        .expect("jobgate answers");
        let baseline = server.peak_memory();
        Target { server, baseline }
    }

    fn alive(&self) -> bool {
        // A dead child is a zombie until it is waited for.
        std::fs::read_to_string(format!("/proc/{}/stat", self.server.pid()))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_owned())
            })
            .is_some_and(|rest| !rest.starts_with('Z'))
    }
}

/// Runs one case; when jobgate died of it, says so and starts it again for the next case
/// (so that shrinking looks for the smallest case that kills it).
fn run_case(rt: &tokio::runtime::Runtime, target: &RefCell<Target>, case: &Case) -> Result<(), String> {
    let result = {
        let target = target.borrow();
        rt.block_on(check(&target.server, target.baseline, case))
    };
    let Err(e) = result else { return Ok(()) };
    if target.borrow().alive() {
        return Err(e);
    }
    let mut target = target.borrow_mut();
    let log = target.server.log_text();
    let last = log.lines().rev().take(5).collect::<Vec<_>>();
    target.server.kill9();
    let fresh = rt.block_on(target.server.start_again(&["--allow-batch"]));
    *target = rt.block_on(Target::new(fresh));
    Err(format!("jobgate died ({e}); the end of its log: {last:?}"))
}

#[test]
fn generated_requests_are_answered_within_the_memory_budget() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let target =
        RefCell::new(rt.block_on(async { Target::new(Server::spawn(&["--allow-batch"]).await).await }));
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        // Each step of shrinking a case that kills jobgate starts it again.
        max_shrink_iters: 256,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(), |case| {
        run_case(&rt, &target, &case).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // What the run reached, for whoever runs it longer.
    let target = target.borrow();
    let jobs = rt.block_on(target.server.gql_ok("{ jobs { totalCount } }", json!({})));
    eprintln!(
        "{} cases, {} jobs accepted; peak memory {} MiB above the baseline",
        runner.config().cases,
        jobs["jobs"]["totalCount"],
        target.server.peak_memory().saturating_sub(target.baseline) >> 20
    );
}

/// The known bad shapes: each once, over HTTP and WebSocket.
#[test]
fn seeds() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let target =
        RefCell::new(rt.block_on(async { Target::new(Server::spawn(&["--allow-batch"]).await).await }));
    let deep = format!("{{ __typename(a: {}1{}) }}", "[".repeat(2_000), "]".repeat(2_000));
    let inputs = format!(
        "mutation {{ submitJobs(inputs: [{}]) {{ created }} }}",
        vec!["{}"; ((1 << 20) - 200) / 3].join(",")
    );
    let mut doubling = String::from("query { ...F22 }\nfragment F0 on Query { __typename }\n");
    for i in 1..=22 {
        doubling.push_str(&format!(
            "fragment F{i} on Query {{ ...F{p} ...F{p} }}\n",
            p = i - 1
        ));
    }
    let deep_variables = json!({ "v": (0..100).fold(json!(1), |v, _| json!({ "a": v })) });
    let deep_json = format!("{}1{}", "[".repeat(5_000), "]".repeat(5_000));
    let zeros = format!("{{ __typename(a: [{}]) }}", "0".repeat((1 << 20) - 100));
    let booleans = format!("{{ __typename(a: [{}]) }}", "true".repeat(((1 << 20) - 100) / 4));
    let requests = [
        json!({ "query": deep }),
        json!({ "query": inputs }),
        json!({ "query": zeros }),
        json!({ "query": booleans }),
        json!({ "query": doubling }),
        json!({ "query": "query($v: JSON) { __typename }", "variables": deep_variables }),
    ];
    let mut cases: Vec<Case> = requests
        .iter()
        .map(|r| Case::Body(r.to_string().into_bytes()))
        .collect();
    cases.push(Case::Body(deep_json.clone().into_bytes()));
    cases.push(Case::Get(vec![("query".into(), deep.clone())]));
    cases.extend(requests.iter().map(|r| {
        Case::Ws(vec![Frame::Text(
            json!({ "id": "s", "type": "subscribe", "payload": r }).to_string(),
        )])
    }));
    cases.push(Case::Ws(vec![Frame::Text(deep_json)]));
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            run_case(&rt, &target, case).err().map(|e| {
                let shown = format!("{case:?}");
                format!("{e}: {}", &shown[..shown.len().min(200)])
            })
        })
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}
