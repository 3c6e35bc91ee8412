//! Production rules, over HTTP and WebSocket: authentication (API
//! tokens, JWTs, anonymous), tenancy, each limit with its own error, origins, `/metrics`, and
//! the configuration file's precedence.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor; the configuration
//! file's precedence and the refusals to start run the binary (`Server::spawn_with_env`,
//! `CARGO_BIN_EXE_jobgate`), as they read its environment and exit status.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{GqlWs, Polling, Server, close_after_init, scrape, tenants_server, token_entry};
use futures::SinkExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";
const SUBMIT: &str = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { created job { id namespace submitter } } }";

/// jobgate with alice (team-a), bob (team-b) and an admin.
async fn tenants() -> (Server, tempfile::TempDir) {
    tenants_server(&[
        token_entry("alice", ALICE, "namespaces = [\"team-a\"]"),
        token_entry("bob", BOB, "namespaces = [\"team-b\"]"),
        token_entry("admin", ADMIN, "admin = true"),
    ])
    .await
}

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_default()
}

async fn submit_as(server: &Server, token: Option<&str>, input: Value) -> Value {
    let (_, body) = server.gql_as(token, SUBMIT, json!({ "input": input })).await;
    body
}

async fn submit_ok(server: &Server, token: Option<&str>, input: Value) -> String {
    let body = submit_as(server, token, input).await;
    body["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("submit failed: {body}"))
        .to_owned()
}

async fn ws_as(server: &Server, token: &str) -> GqlWs {
    GqlWs::connect_with(server, json!({ "authorization": format!("Bearer {token}") })).await
}

#[tokio::test]
async fn credentials_are_required_and_checked_over_http_and_websocket() {
    let (server, _dir) = tenants().await;
    let query = "{ jobs { totalCount } }";
    for token in [None, Some("wrong-token"), Some("a.b.c")] {
        let response = server
            .http()
            .post(server.url("/graphql"))
            .header("accept", "application/graphql-response+json")
            .header(
                "authorization",
                token.map(|t| format!("Bearer {t}")).unwrap_or_default(),
            )
            .json(&json!({ "query": query }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert_eq!(code(&body), "UNAUTHENTICATED", "{body}");
    }
    let (status, body) = server.gql_as(Some(ALICE), query, json!({})).await;
    assert_eq!(
        (status, &body["data"]["jobs"]["totalCount"]),
        (200, &json!(0)),
        "{body}"
    );

    for (what, payload) in [
        ("a bare init", None),
        ("a wrong token", Some(json!({"authorization": "Bearer nope"}))),
    ] {
        assert_eq!(close_after_init(&server, payload).await.0, 4403, "{what}");
    }
    ws_as(&server, BOB).await; // acknowledged

    // Missing: an empty Authorization header, a bare init; invalid: two wrong tokens (a JWT
    // shape with no JWT keys configured included) and a wrong init token.
    let metrics = scrape(&server).await;
    assert_eq!(
        sample(&metrics, "jobgate_auth_failures_total{reason=\"missing\"}"),
        2.0
    );
    assert_eq!(
        sample(&metrics, "jobgate_auth_failures_total{reason=\"invalid\"}"),
        3.0
    );
    assert_eq!(
        sample(&metrics, "jobgate_auth_failures_total{reason=\"jwt\"}"),
        0.0
    );
}

fn jwt(claims: Value, algorithm: Algorithm, kid: Option<&str>, key: &EncodingKey) -> String {
    let mut header = Header::new(algorithm);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

fn in_an_hour() -> i64 {
    chrono::Utc::now().timestamp() + 3600
}

#[tokio::test]
async fn jwts_signed_by_the_jwks_or_the_hs256_secret_carry_their_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "an-hs256-secret-of-at-least-32-bytes!";
    std::fs::write(dir.path().join("secret"), secret).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
    let server = Server::start(&[
        "--jwt-jwks-file",
        fixtures.join("jwks.json").to_str().unwrap(),
        "--jwt-hs256-secret-file",
        dir.path().join("secret").to_str().unwrap(),
        "--jwt-issuer",
        "https://issuer.example",
        "--allowed-namespaces",
        "team-c,team-d",
    ])
    .await;
    let es256 =
        EncodingKey::from_ec_pem(&std::fs::read(fixtures.join("es256-private.pem")).unwrap()).unwrap();
    let hs256 = EncodingKey::from_secret(secret.as_bytes());
    let claims = |sub: &str, extra: Value| {
        let mut c = json!({"sub": sub, "iss": "https://issuer.example", "exp": in_an_hour()});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let carol = jwt(
        claims("carol", json!({"namespaces": ["team-c"]})),
        Algorithm::ES256,
        Some("test-es256"),
        &es256,
    );
    let body = submit_as(
        &server,
        Some(&carol),
        json!({"command": ["true"], "namespace": "team-c"}),
    )
    .await;
    assert_eq!(body["data"]["submitJob"]["job"]["submitter"], "carol", "{body}");
    let body = submit_as(
        &server,
        Some(&carol),
        json!({"command": ["true"], "namespace": "team-d"}),
    )
    .await;
    assert_eq!(code(&body), "FORBIDDEN", "{body}");

    // HS256, namespaces as a space-separated string; the admin role sees every namespace.
    let dave = jwt(
        claims("dave", json!({"namespaces": "team-d", "roles": ["admin"]})),
        Algorithm::HS256,
        None,
        &hs256,
    );
    let (status, body) = server
        .gql_as(Some(&dave), "{ jobs { totalCount } }", json!({}))
        .await;
    assert_eq!(
        (status, &body["data"]["jobs"]["totalCount"]),
        (200, &json!(1)),
        "{body}"
    );

    let expired = jwt(
        json!({"sub": "carol", "iss": "https://issuer.example", "exp": 1_000_000_000}),
        Algorithm::ES256,
        Some("test-es256"),
        &es256,
    );
    let wrong_issuer = jwt(
        json!({"sub": "carol", "iss": "https://other.example", "exp": in_an_hour()}),
        Algorithm::HS256,
        None,
        &hs256,
    );
    let wrong_key = jwt(
        claims("carol", json!({})),
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(b"another-secret-another-secret-another"),
    );
    // An unsigned token claiming to be from the ES256 key.
    let unsigned = {
        let b64 = |v: Value| base64_url(v.to_string().as_bytes());
        format!(
            "{}.{}.",
            b64(json!({"alg": "none", "kid": "test-es256"})),
            b64(claims("carol", json!({})))
        )
    };
    for (token, why) in [
        (expired, "expired"),
        (wrong_issuer, "wrong issuer"),
        (wrong_key, "bad signature"),
        (unsigned, "malformed"),
    ] {
        let (status, body) = server
            .gql_as(Some(&token), "{ jobs { totalCount } }", json!({}))
            .await;
        assert_eq!(status, 401, "{why}: {body}");
        assert_eq!(code(&body), "UNAUTHENTICATED");
        assert!(
            body["errors"][0]["message"].as_str().unwrap().contains(why),
            "{why}: {body}"
        );
    }
}

#[tokio::test]
async fn a_rotated_jwks_is_read_again_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
    let jwks = std::fs::read_to_string(fixtures.join("jwks.json")).unwrap();
    let path = dir.path().join("jwks.json");
    // The same public key under another kid stands for the issuer's previous key.
    std::fs::write(&path, jwks.replace("test-es256", "retired")).unwrap();
    let server = Server::start(&["--jwt-jwks-file", path.to_str().unwrap()]).await;
    let key = EncodingKey::from_ec_pem(&std::fs::read(fixtures.join("es256-private.pem")).unwrap()).unwrap();
    let token = |kid: &str| {
        jwt(
            json!({"sub": "erin", "exp": in_an_hour(), "roles": ["admin"]}),
            Algorithm::ES256,
            Some(kid),
            &key,
        )
    };
    let query = "{ jobs { totalCount } }";
    let (status, body) = server.gql_as(Some(&token("retired")), query, json!({})).await;
    assert_eq!(status, 200, "{body}");
    // The issuer rotates: the file now holds only the new kid.
    std::fs::write(&path, &jwks).unwrap();
    let (status, body) = server.gql_as(Some(&token("test-es256")), query, json!({})).await;
    assert_eq!(status, 200, "the new key is read from the file: {body}");
    let (status, body) = server.gql_as(Some(&token("retired")), query, json!({})).await;
    assert_eq!(status, 401, "the retired key is gone: {body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("unknown key"),
        "{body}"
    );
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn jobgate_will_not_listen_beyond_loopback_without_credentials_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (vec!["--listen", "0.0.0.0:0"], "--anonymous true"),
        (vec!["--anonymous", "false"], "would let nobody in"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_jobgate"))
            .args(&args)
            .args(["--data-dir", dir.path().to_str().unwrap()])
            .env_remove("JOBGATE_API_TOKEN")
            .env_remove("JOBGATE_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn another_tenants_jobs_are_invisible_to_queries_subscriptions_and_cancel() {
    let (server, _dir) = tenants().await;
    let secret = submit_ok(
        &server,
        Some(ALICE),
        json!({"command": ["sleep", "60"], "namespace": "team-a", "idempotencyKey": "k1"}),
    )
    .await;
    let unknown = "01900000-0000-7000-8000-000000000000";
    // Whatever bob asks, alice's job answers exactly as a job that does not exist.
    let as_bob = |id: &str| {
        let id = id.to_owned();
        let server = &server;
        async move {
            let (_, job) = server
                .gql_as(
                    Some(BOB),
                    "query($id: ID!) { job(id: $id) { id } }",
                    json!({"id": id}),
                )
                .await;
            let (_, cancel) = server
                .gql_as(
                    Some(BOB),
                    "mutation($id: ID!) { cancelJob(id: $id) { job { id } } }",
                    json!({"id": id}),
                )
                .await;
            let depends = submit_as(
                server,
                Some(BOB),
                json!({"command": ["true"], "namespace": "team-b", "dependsOn": [id]}),
            )
            .await;
            let mut ws = ws_as(server, BOB).await;
            ws.subscribe(
                "s",
                "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
                json!({"id": id}),
            )
            .await;
            let status = ws.recv().await;
            let _complete = ws.recv().await;
            ws.subscribe(
                "l",
                "subscription($id: ID!) { jobLogs(id: $id) { text } }",
                json!({"id": id}),
            )
            .await;
            let logs = ws.recv().await;
            [job, cancel, depends, status, logs].map(|v| v.to_string().replace(&id, "ID"))
        }
    };
    let seen = as_bob(&secret).await;
    let never = as_bob(unknown).await;
    assert_eq!(seen, never);
    assert!(seen[0].contains(r#""job":null"#), "{}", seen[0]);
    assert!(seen[1].contains("NOT_FOUND"), "{}", seen[1]);
    assert!(seen[2].contains("BAD_USER_INPUT"), "{}", seen[2]);
    assert!(
        seen[3].contains("NOT_FOUND") && seen[4].contains("NOT_FOUND"),
        "{seen:?}"
    );

    let (_, lists) = server.gql_as(Some(BOB),
        "{ jobs { totalCount edges { node { id } } } jobStats { counts { total running pending } } namespaces }",
        json!({}),
    )
    .await;
    assert_eq!(lists["data"]["jobs"]["totalCount"], 0, "{lists}");
    assert_eq!(lists["data"]["jobStats"]["counts"]["total"], 0, "{lists}");
    assert_eq!(lists["data"]["namespaces"], json!(["team-b"]), "{lists}");

    // Bob may not submit into alice's namespace; his own key "k1" is his own.
    let body = submit_as(
        &server,
        Some(BOB),
        json!({"command": ["true"], "namespace": "team-a"}),
    )
    .await;
    assert_eq!(code(&body), "FORBIDDEN", "{body}");
    let body = submit_as(
        &server,
        Some(BOB),
        json!({"command": ["sleep", "60"], "namespace": "team-b", "idempotencyKey": "k1"}),
    )
    .await;
    assert_eq!(body["data"]["submitJob"]["created"], true, "{body}");
    let bobs = body["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // jobEvents: bob's stream skips alice's events and shows his own.
    let mut ws = ws_as(&server, BOB).await;
    ws.subscribe("e", "subscription { jobEvents { job { id } phase } }", json!({}))
        .await;
    // Live before alice acts, so that skipping her events is the stream's doing.
    server.wait_subscriptions_live(1).await;
    let mut alice_ws = ws_as(&server, ALICE).await;
    alice_ws
        .subscribe(
            "c",
            "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
            json!({"id": secret}),
        )
        .await;
    assert_eq!(
        alice_ws.recv().await["payload"]["data"]["cancelJob"]["job"]["phase"],
        "CANCELLED"
    );
    let (_, cancelled) = server
        .gql_as(
            Some(BOB),
            "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
            json!({"id": bobs}),
        )
        .await;
    assert_eq!(
        cancelled["data"]["cancelJob"]["job"]["phase"], "CANCELLED",
        "{cancelled}"
    );
    let event = ws.recv().await;
    assert_eq!(
        event["payload"]["data"]["jobEvents"]["job"]["id"], bobs,
        "{event}"
    );

    // The admin sees both, each with who submitted it.
    let (_, all) = server
        .gql_as(
            Some(ADMIN),
            "{ jobs { totalCount edges { node { submitter namespace } } } }",
            json!({}),
        )
        .await;
    assert_eq!(all["data"]["jobs"]["totalCount"], 2, "{all}");
    let mut who: Vec<String> = all["data"]["jobs"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}@{}",
                e["node"]["submitter"].as_str().unwrap(),
                e["node"]["namespace"].as_str().unwrap()
            )
        })
        .collect();
    who.sort();
    assert_eq!(who, ["alice@team-a", "bob@team-b"]);
}

#[tokio::test]
async fn rate_limits_answer_each_with_its_own_error() {
    let server = Server::start(&[
        "--mutations-per-minute",
        "2",
        "--connections-per-minute",
        "2",
        "--subscriptions-per-minute",
        "2",
    ])
    .await;
    submit_ok(&server, None, json!({"command": ["true"]})).await;
    submit_ok(&server, None, json!({"command": ["true"]})).await;
    let response = server
        .http()
        .post(server.url("/graphql"))
        .header("accept", "application/graphql-response+json")
        .json(&json!({"query": SUBMIT, "variables": {"input": {"command": ["true"]}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(code(&body), "RATE_LIMITED", "{body}");
    assert_eq!(body["errors"][0]["extensions"]["retryAfterSeconds"], retry_after);
    let (_, count) = server.gql_as(None, "{ jobs { totalCount } }", json!({})).await;
    assert_eq!(
        count["data"]["jobs"]["totalCount"], 2,
        "nothing was created: {count}"
    );

    let mut first = GqlWs::connect(&server).await;
    let _second = GqlWs::connect(&server).await;
    let (close, reason) = close_after_init(&server, None).await;
    assert_eq!(close, 1013, "{reason}");
    assert!(reason.contains("too many connections"), "{reason}");

    let query = "subscription { jobEvents { cursor } }";
    first.subscribe("1", query, json!({})).await;
    first.subscribe("2", query, json!({})).await;
    first.subscribe("3", query, json!({})).await;
    // Two of the three run (they start concurrently, so which two is not fixed; they may
    // already stream the earlier jobs' last events); the other is refused.
    let refused = loop {
        let message = first.recv().await;
        if !message["payload"]["errors"].is_null() {
            break message;
        }
    };
    assert_eq!(
        refused["payload"]["errors"][0]["extensions"]["code"], "RATE_LIMITED",
        "{refused}"
    );
    let metrics = scrape(&server).await;
    for limit in ["mutations", "connections", "subscriptions"] {
        let series = format!("jobgate_rate_limited_total{{limit=\"{limit}\"}}");
        assert_eq!(sample(&metrics, &series), 1.0, "{series}");
    }
}

#[tokio::test]
async fn a_namespace_quota_caps_its_active_jobs() {
    let server = Server::start(&[
        "--max-active-jobs-per-namespace",
        "1",
        "--allowed-namespaces",
        "other",
    ])
    .await;
    let running = submit_ok(&server, None, json!({"command": ["sleep", "60"]})).await;
    let body = submit_as(&server, None, json!({"command": ["true"]})).await;
    assert_eq!(code(&body), "QUOTA_EXCEEDED", "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("\"default\""),
        "{body}"
    );
    submit_ok(
        &server,
        None,
        json!({"command": ["sleep", "60"], "namespace": "other"}),
    )
    .await;
    server.cancel(&running).await;
    submit_ok(&server, None, json!({"command": ["true"]})).await;
}

#[tokio::test]
async fn websocket_limits_frame_size_subscriptions_per_connection_and_idleness() {
    let server = Server::start(&[
        "--ws-max-frame-bytes",
        "1024",
        "--ws-max-message-bytes",
        "4096",
        "--ws-max-subscriptions",
        "2",
        "--ws-idle-timeout-secs",
        "1",
    ])
    .await;
    let mut ws = GqlWs::connect(&server).await;
    let query = "subscription { jobEvents { cursor } }";
    ws.subscribe("1", query, json!({})).await;
    ws.subscribe("2", query, json!({})).await;
    ws.subscribe("3", query, json!({})).await;
    let refused = ws.recv().await;
    assert_eq!(
        (&refused["type"], &refused["id"]),
        (&json!("error"), &json!("3")),
        "{refused}"
    );
    assert_eq!(
        refused["payload"][0]["extensions"]["code"], "LIMIT_EXCEEDED",
        "{refused}"
    );
    // Completing one frees its place. ("2" is live by then: the job below reaches the socket.)
    server.wait_subscriptions_live(2).await;
    ws.send(json!({"id": "1", "type": "complete"})).await;
    ws.subscribe("3", query, json!({})).await;
    server.submit(json!({"command": ["true"]})).await;
    let next = ws.recv().await;
    assert_eq!(next["type"], "next", "{next}");

    // A frame larger than the limit closes the socket with 1009.
    let big = json!({"type": "ping", "payload": {"pad": "x".repeat(2000)}}).to_string();
    ws.ws.send(Message::text(big)).await.unwrap();
    assert_eq!(ws.closed().await.0, 1009);

    // A socket that runs nothing and says nothing is closed.
    let mut idle = GqlWs::connect(&server).await;
    let (close, reason) = idle.closed().await;
    assert_eq!((close, reason.as_str()), (1000, "Idle timeout"));
}

#[tokio::test]
async fn origins_are_checked_and_simple_cross_site_posts_are_refused() {
    let server = Server::start(&["--allowed-origins", "https://app.example"]).await;
    let upgrade = |origin: Option<String>| {
        let mut request = server.ws_url().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse().unwrap());
        if let Some(origin) = origin {
            request.headers_mut().insert("Origin", origin.parse().unwrap());
        }
        tokio_tungstenite::connect_async(request)
    };
    match upgrade(Some("https://evil.example".into())).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 403),
        other => panic!("a foreign origin opened a socket: {:?}", other.map(|_| ())),
    }
    for origin in [
        Some("https://app.example".to_owned()),
        Some(format!("http://{}", server.addr)),
        None,
    ] {
        upgrade(origin.clone())
            .await
            .unwrap_or_else(|e| panic!("{origin:?} was refused: {e}"));
    }

    let preflight = |origin: &'static str| {
        server
            .http()
            .request(reqwest::Method::OPTIONS, server.url("/graphql"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type,authorization")
            .send()
    };
    let allowed = preflight("https://app.example").await.unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let foreign = preflight("https://evil.example").await.unwrap();
    assert!(foreign.headers().get("access-control-allow-origin").is_none());

    // What a page can send cross-site without a preflight is refused and runs nothing.
    let mutation = json!({"query": SUBMIT, "variables": {"input": {"command": ["true"]}}}).to_string();
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let response = server
            .http()
            .post(server.url("/graphql"))
            .header("content-type", content_type)
            .header("origin", "https://evil.example")
            .body(mutation.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 415, "{content_type}");
    }
    let (_, count) = server.gql_as(None, "{ jobs { totalCount } }", json!({})).await;
    assert_eq!(count["data"]["jobs"]["totalCount"], 0, "{count}");
}

#[tokio::test]
async fn introspection_and_suggestions_can_be_turned_off() {
    let closed = Server::start(&["--disable-introspection", "--disable-suggestions"]).await;
    let open = Server::start(&[]).await;
    let introspect = "{ __schema { queryType { name } } }";
    let typo = "{ jobz { totalCount } }";
    let (_, body) = open.gql_as(None, introspect, json!({})).await;
    assert_eq!(body["data"]["__schema"]["queryType"]["name"], "Query", "{body}");
    let (_, body) = closed.gql_as(None, introspect, json!({})).await;
    assert!(body["data"]["__schema"].is_null(), "{body}");
    let (_, body) = open.gql_as(None, typo, json!({})).await;
    assert!(body.to_string().contains("Did you mean"), "{body}");
    let (_, body) = closed.gql_as(None, typo, json!({})).await;
    assert!(
        body["errors"].is_array() && !body.to_string().contains("Did you mean"),
        "{body}"
    );
}

fn sample(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_parse_and_their_counters_move_when_jobs_run() {
    let server = Server::start(&[]).await;
    let before = scrape(&server).await;
    assert_eq!(sample(&before, "jobgate_jobs_submitted_total"), 0.0);
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("e", "subscription { jobEvents { cursor } }", json!({}))
        .await;
    server.wait_subscriptions_live(1).await;
    let id = server.submit(json!({"command": ["true"]})).await;
    assert_eq!(server.wait_terminal(&id).await.last().unwrap(), "SUCCEEDED");
    let body = submit_as(&server, None, json!({"command": []})).await;
    assert_eq!(code(&body), "BAD_USER_INPUT", "{body}");
    ws.recv().await; // the subscription is running
    // `wait_terminal` followed the job on a socket of its own, closed by now; its end is
    // counted once the server has seen it close.
    let polling = Polling::start();
    let after = loop {
        let after = scrape(&server).await;
        let open = sample(&after, "jobgate_websocket_connections");
        if open == 1.0 {
            break after;
        }
        polling
            .pause(|| format!("jobgate_websocket_connections stayed at {open}, not 1"))
            .await;
    };
    for (series, expected) in [
        ("jobgate_jobs_submitted_total", 2.0),
        ("jobgate_jobs_accepted_total", 1.0),
        ("jobgate_jobs_rejected_total{reason=\"invalid\"}", 1.0),
        (
            "jobgate_job_phase_transitions_total{from=\"NONE\",to=\"PENDING\"}",
            1.0,
        ),
        (
            "jobgate_job_phase_transitions_total{from=\"PENDING\",to=\"RUNNING\"}",
            1.0,
        ),
        (
            "jobgate_job_phase_transitions_total{from=\"RUNNING\",to=\"SUCCEEDED\"}",
            1.0,
        ),
        ("jobgate_websocket_connections", 1.0),
        ("jobgate_active_subscriptions", 1.0),
    ] {
        assert_eq!(sample(&after, series), expected, "{series}");
    }
    assert!(
        sample(
            &after,
            "jobgate_graphql_request_duration_seconds_count{operation=\"mutation\"}"
        ) >= 2.0
    );
    assert!(
        sample(
            &after,
            "jobgate_store_operation_duration_seconds_count{op=\"write\"}"
        ) >= 1.0
    );
    assert!(after.contains_key("jobgate_broadcast_lag_recoveries_total"));
    drop(ws);
    // The socket's end is counted once the server has seen it close.
    let polling = Polling::start();
    while sample(&scrape(&server).await, "jobgate_websocket_connections") != 0.0 {
        polling
            .pause(|| "the closed socket is still counted".to_owned())
            .await;
    }
    assert_eq!(
        sample(&scrape(&server).await, "jobgate_active_subscriptions"),
        0.0
    );
}

#[tokio::test]
async fn a_config_file_sets_what_flags_and_the_environment_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobgate.toml");
    std::fs::write(
        &file,
        "default-namespace = \"from-file\"\nallowed_namespaces = [\"from-file\", \"from-env\", \"from-flag\"]\nmax-active-jobs-per-namespace = 1\n",
    )
    .unwrap();
    let config = file.to_str().unwrap();
    let namespace_of = |server: Server| async move {
        let body = submit_as(&server, None, json!({"command": ["sleep", "60"]})).await;
        let ns = body["data"]["submitJob"]["job"]["namespace"]
            .as_str()
            .unwrap()
            .to_owned();
        // The file's quota holds whichever source set the namespace.
        let again = submit_as(&server, None, json!({"command": ["true"]})).await;
        assert_eq!(code(&again), "QUOTA_EXCEEDED", "{again}");
        ns
    };
    let server = Server::start(&["--config", config]).await;
    assert_eq!(namespace_of(server).await, "from-file");
    let server = Server::spawn_with_env(&["--config", config], &[("JOBGATE_NAMESPACE", "from-env")]).await;
    assert_eq!(namespace_of(server).await, "from-env");
    let server = Server::spawn_with_env(
        &["--default-namespace", "from-flag"],
        &[("JOBGATE_NAMESPACE", "from-env"), ("JOBGATE_CONFIG", config)],
    )
    .await;
    assert_eq!(namespace_of(server).await, "from-flag");

    for (text, expected) in [
        ("no-such-setting = 1\n", "unknown setting \"no-such-setting\""),
        (
            "max-active-jobs-per-namespace = \"many\"\n",
            "max-active-jobs-per-namespace",
        ),
        ("listen = [\"a\", \"b\"]\n", "takes one value"),
    ] {
        std::fs::write(&file, text).unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_jobgate"))
            .args(["--config", config, "--data-dir", dir.path().to_str().unwrap()])
            .env_remove("JOBGATE_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
        assert!(
            stderr.contains("jobgate.toml") && stderr.contains(expected),
            "{text}: {stderr}"
        );
    }
}

/// `jobgate 2>&1 | head`: once the reader of its standard error is gone, every log line fails
/// to write. jobgate must go on serving, and still stop cleanly on SIGTERM.
#[tokio::test]
async fn a_closed_standard_error_loses_log_lines_not_the_server() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_jobgate"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        // Every request and job logs at debug: plenty of writes to the closed pipe.
        .args(["--log", "debug", "--local-trusted-tenants"])
        .env_remove("JOBGATE_API_TOKEN")
        .env_remove("JOBGATE_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = {
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            let line = lines
                .next()
                .expect("jobgate's log ended before it said where it listens")
                .unwrap();
            if let Some(addr) = common::listening::listening_address(&line) {
                break addr;
            }
        }
        // The reader goes here: the pipe's read end is closed.
    };
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/graphql");
    let gql = |query: String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let answer: Value = http
                .post(&url)
                .json(&json!({ "query": query }))
                .send()
                .await
                .expect("jobgate answers with its standard error closed")
                .json()
                .await
                .unwrap();
            answer
        }
    };
    let submitted =
        gql(r#"mutation { submitJob(input: {command: ["echo", "hi"]}) { job { id } } }"#.into()).await;
    let id = submitted["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted}"))
        .to_owned();
    let polling = Polling::start();
    loop {
        let job = gql(format!(r#"{{ job(id: "{id}") {{ phase }} }}"#)).await;
        if job["data"]["job"]["phase"] == "SUCCEEDED" {
            break;
        }
        polling.pause(|| format!("the job never succeeded: {job}")).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "jobgate ended with {status} after SIGTERM");
}
