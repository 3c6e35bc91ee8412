//! The edge of the server, over raw TCP, HTTP and WebSocket: the Host
//! check against DNS rebinding, JWT claims and the separation of JWT subjects from API
//! tokens, and the connection limits (header, idle and body timeouts, the connection cap).
//! Timeouts are set small here; no assertion depends on how long anything took.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor; the SIGTERM test
//! spawns the binary (`Server::spawn`).

mod common;

use std::collections::HashMap;

use common::{GqlWs, Polling, Server, WAIT, close_after_init, scrape, token_entry};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

const SUBMIT: &str =
    "mutation($input: SubmitJobInput!) { submitJob(input: $input) { created job { id submitter } } }";

/// Reads until the server closes the connection (an orderly close or a reset); returns what
/// arrived. Panics if it stays open for the whole wait limit.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("the server kept the connection open")
        {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `request` on a new connection and returns everything the server answers until it
/// closes (the request should say `connection: close`).
async fn raw(server: &Server, request: &str) -> String {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    read_until_closed(&mut stream).await
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

fn body_of(response: &str) -> &str {
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// A GraphQL request on a connection of its own, closed after it: with small idle timeouts,
/// a pooled connection could be closed by jobgate just as a client reuses it.
async fn gql_once(server: &Server, query: &str, variables: Value) -> Value {
    let body = json!({"query": query, "variables": variables}).to_string();
    let response = raw(server, &post("localhost", &body)).await;
    serde_json::from_str(body_of(&response)).unwrap_or_else(|_| panic!("not JSON: {response}"))
}

/// `/metrics`, on a connection of its own.
async fn scrape_once(server: &Server) -> HashMap<String, f64> {
    let response = raw(
        server,
        "GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    common::parse_metrics(body_of(&response))
}

fn post(host: &str, body: &str) -> String {
    format!(
        "POST /graphql HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn upgrade(host: &str, origin: &str) -> String {
    format!(
        "GET /graphql HTTP/1.1\r\nhost: {host}\r\norigin: {origin}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\
         sec-websocket-protocol: graphql-transport-ws\r\n\r\n"
    )
}

/// The status of a WebSocket upgrade request (read up to the end of the response head).
async fn upgrade_status(server: &Server, host: &str, origin: &str) -> u16 {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(upgrade(host, origin).as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("no answer to the upgrade")
            .unwrap();
        if n == 0 {
            break;
        }
        head.push(byte[0]);
    }
    status_of(&String::from_utf8_lossy(&head))
}

#[tokio::test]
async fn requests_naming_a_foreign_host_are_refused_before_any_work() {
    // The default laptop set-up: loopback, anonymous. A page of evil.example whose name was
    // rebound to 127.0.0.1 sends `Host: evil.example` (and `Origin: http://evil.example`).
    let server = Server::start(&["--allowed-hosts", "jobgate.test,.example.org"]).await;
    let port = server.addr.port();
    let submit = json!({
        "query": SUBMIT,
        "variables": {"input": {"command": ["true"]}},
    })
    .to_string();
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "localhost.evil.example",
        "127.0.0.1.evil.example",
    ] {
        let response = raw(&server, &post(host, &submit)).await;
        assert_eq!(status_of(&response), 421, "{host}: {response}");
        assert_eq!(
            upgrade_status(&server, host, &format!("http://{host}")).await,
            421,
            "{host}"
        );
        let healthz = raw(
            &server,
            &format!("GET /healthz HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status_of(&healthz), 421, "{host}: {healthz}");
    }
    // Nothing ran.
    let jobs = server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    assert_eq!(jobs["jobs"]["totalCount"], 0);

    // IP literals, localhost and the listed names are answered, the port whatever it is.
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("[::1]:{port}"),
        format!("localhost:{port}"),
        "app.localhost".to_owned(),
        "jobgate.test:80".to_owned(),
        "a.example.org".to_owned(),
        "example.org:443".to_owned(),
    ] {
        let response = raw(&server, &post(&host, &submit)).await;
        assert_eq!(status_of(&response), 200, "{host}: {response}");
        // Same origin (Origin equals the validated Host) may open a socket.
        assert_eq!(
            upgrade_status(&server, &host, &format!("http://{host}")).await,
            101,
            "{host}"
        );
    }
    // A listed Host does not make another Origin same-origin.
    assert_eq!(
        upgrade_status(&server, &format!("127.0.0.1:{port}"), "http://evil.example").await,
        403
    );
    let metrics = scrape(&server).await;
    assert_eq!(metrics["jobgate_misdirected_requests_total"], 12.0);
}

fn jwt(claims: Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!";
const ALICE: &str = "alice-token-0123456789";

/// jobgate with an API token named `alice` (team-a) and HS256 JWTs of one issuer and
/// audience.
async fn jwt_server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, token_entry("alice", ALICE, "namespaces = [\"team-a\"]")).unwrap();
    let server = Server::start(&[
        "--jwt-hs256-secret-file",
        dir.path().join("secret").to_str().unwrap(),
        "--api-tokens-file",
        tokens.to_str().unwrap(),
        "--jwt-issuer",
        "https://issuer.example",
        "--jwt-audience",
        "jobgate",
        "--allowed-namespaces",
        "team-a",
    ])
    .await;
    (server, dir)
}

fn claims(sub: &str, without: &[&str], extra: Value) -> Value {
    let mut c = json!({
        "sub": sub,
        "iss": "https://issuer.example",
        "aud": "jobgate",
        "exp": now() + 3600,
        "iat": now(),
        "roles": ["admin"],
    });
    let object = c.as_object_mut().unwrap();
    for claim in without {
        object.remove(*claim);
    }
    object.extend(extra.as_object().unwrap().clone());
    c
}

#[tokio::test]
async fn jwts_must_carry_the_configured_claims_and_not_come_from_the_future() {
    let (server, _dir) = jwt_server().await;
    let cases = [
        (
            "no aud",
            jwt(claims("mallory", &["aud"], json!({})), SECRET),
            "aud",
        ),
        (
            "no iss",
            jwt(claims("mallory", &["iss"], json!({})), SECRET),
            "iss",
        ),
        (
            "nbf in an hour",
            jwt(claims("mallory", &[], json!({"nbf": now() + 3600})), SECRET),
            "nbf",
        ),
        (
            "iat in an hour",
            jwt(claims("mallory", &[], json!({"iat": now() + 3600})), SECRET),
            "iat",
        ),
    ];
    for (what, token, claim) in &cases {
        let (status, body) = server
            .gql_as(Some(token.as_str()), "{ jobs { totalCount } }", json!({}))
            .await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
            "{what}: {body}"
        );
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(claim), "{what}: {message}");

        let init = json!({"authorization": format!("Bearer {token}")});
        assert_eq!(close_after_init(&server, Some(init)).await.0, 4403, "{what}");
    }
    // The same claims, valid (nbf and iat now, within the leeway), are accepted.
    let good = jwt(claims("mallory", &[], json!({"nbf": now()})), SECRET);
    let (status, body) = server
        .gql_as(Some(&good), "{ jobs { totalCount } }", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    GqlWs::connect_with(&server, json!({"authorization": format!("Bearer {good}")})).await;
}

#[tokio::test]
async fn a_jwt_subject_named_like_an_api_token_shares_none_of_its_idempotency_keys() {
    let (server, _dir) = jwt_server().await;
    let jwt_alice = jwt(
        claims("alice", &["roles"], json!({"namespaces": ["team-a"]})),
        SECRET,
    );
    let input = json!({"input": {"command": ["true"], "namespace": "team-a", "idempotencyKey": "nightly-1"}});
    let submit = |token: String| {
        let server = &server;
        let input = input.clone();
        async move {
            let (status, body) = server.gql_as(Some(&token), SUBMIT, input).await;
            assert_eq!(status, 200, "{body}");
            let payload = body["data"]["submitJob"].clone();
            assert!(payload.is_object(), "{body}");
            payload
        }
    };
    let by_token = submit(ALICE.to_owned()).await;
    let by_jwt = submit(jwt_alice.clone()).await;
    assert_eq!(by_token["created"], true);
    assert_eq!(by_jwt["created"], true, "the JWT found the token's job: {by_jwt}");
    assert_ne!(by_token["job"]["id"], by_jwt["job"]["id"]);
    // Both still show the human name.
    assert_eq!(by_token["job"]["submitter"], "alice");
    assert_eq!(by_jwt["job"]["submitter"], "alice");
    // Each retry finds its own job, not the other's.
    let again_token = submit(ALICE.to_owned()).await;
    let again_jwt = submit(jwt_alice).await;
    assert_eq!(
        (&again_token["created"], &again_token["job"]["id"]),
        (&json!(false), &by_token["job"]["id"])
    );
    assert_eq!(
        (&again_jwt["created"], &again_jwt["job"]["id"]),
        (&json!(false), &by_jwt["job"]["id"])
    );
}

/// jobgate with small connection timeouts.
async fn timed_server(extra: &[&str]) -> Server {
    let mut args = vec![
        "--http-header-timeout-ms",
        "500",
        "--http-idle-timeout-ms",
        "500",
        "--http-body-timeout-ms",
        "500",
    ];
    args.extend_from_slice(extra);
    Server::start(&args).await
}

fn timeouts(metrics: &HashMap<String, f64>, which: &str) -> f64 {
    metrics
        .get(&format!("jobgate_http_timeouts_total{{timeout=\"{which}\"}}"))
        .copied()
        .unwrap_or_default()
}

#[tokio::test]
async fn silent_half_sent_and_idle_connections_are_closed() {
    let server = timed_server(&[]).await;
    let host = format!("127.0.0.1:{}", server.addr.port());

    // A connection that never sends a byte.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(read_until_closed(&mut silent).await, "");

    // Half a request head.
    let mut half = TcpStream::connect(server.addr).await.unwrap();
    half.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {host}\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_until_closed(&mut half).await;
    assert!(!answer.contains("200"), "{answer}");

    // Half a request line.
    let mut half_line = TcpStream::connect(server.addr).await.unwrap();
    half_line.write_all(b"GET /heal").await.unwrap();
    read_until_closed(&mut half_line).await;

    // A kept-alive connection after one answered request.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");

    let metrics = scrape_once(&server).await;
    assert!(timeouts(&metrics, "header") >= 3.0, "{metrics:?}");
    assert!(timeouts(&metrics, "idle") >= 1.0, "{metrics:?}");

    // An ordinary client is not affected.
    let body = gql_once(&server, SUBMIT, json!({"input": {"command": ["true"]}})).await;
    assert_eq!(body["data"]["submitJob"]["created"], true, "{body}");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_answered_408() {
    let server = timed_server(&[]).await;
    let host = format!("127.0.0.1:{}", server.addr.port());
    // A body announced as 1000 bytes of which 10 come.
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(
        format!(
            "POST /graphql HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"query\":"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_until_closed(&mut slow).await;
    assert_eq!(status_of(&answer), 408, "{answer}");

    assert_eq!(timeouts(&scrape_once(&server).await, "body"), 1.0);

    // A whole body is read as before.
    let body = gql_once(&server, SUBMIT, json!({"input": {"command": ["true"]}})).await;
    assert_eq!(body["data"]["submitJob"]["created"], true, "{body}");
}

#[tokio::test]
async fn a_websocket_outlives_the_http_idle_timeout() {
    // Keepalive pings every 100 ms: a socket that does not answer one by the next is dropped.
    let server = timed_server(&["--ws-keepalive-ms", "100"]).await;
    let mut ws = GqlWs::connect(&server).await;
    // An HTTP connection opened after the socket went quiet (no GraphQL message since the
    // ack), and closed for idleness: by then the socket has been quiet longer than the idle
    // timeout. Meanwhile the socket is read, so the client answers the server's pings.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let closed = read_until_closed(&mut idle);
    tokio::pin!(closed);
    let answer = loop {
        tokio::select! {
            answer = &mut closed => break answer,
            frame = futures::StreamExt::next(&mut ws.ws) => match frame {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                other => panic!("the socket ended or spoke during the wait: {other:?}"),
            },
        }
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(timeouts(&scrape_once(&server).await, "idle") >= 1.0);
    // The socket still answers: a protocol ping, then a subscription.
    ws.send(json!({"type": "ping"})).await;
    assert_eq!(ws.recv().await["type"], "pong");
    let body = gql_once(&server, SUBMIT, json!({"input": {"command": ["true"]}})).await;
    let id = body["data"]["submitJob"]["job"]["id"].clone();
    assert!(id.is_string(), "{body}");
    ws.subscribe(
        "s",
        "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
        json!({"id": id}),
    )
    .await;
    let event = ws.recv().await;
    assert_eq!(event["type"], "next", "{event}");
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused_and_counted() {
    let server = Server::start(&[
        "--max-connections",
        "5",
        "--http-header-timeout-ms",
        "0",
        "--http-idle-timeout-ms",
        "0",
    ])
    .await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // Accepted in order: the sixth finds five open.
    let sixth = raw(
        &server,
        "GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(
        sixth.is_empty() || sixth.starts_with("HTTP/1.1 503"),
        "the sixth connection was served: {sixth}"
    );
    // Closing two makes room (once jobgate has seen them close).
    held.truncate(3);
    let polling = Polling::start();
    let metrics = loop {
        let answer = raw(
            &server,
            "GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
        )
        .await;
        if answer.starts_with("HTTP/1.1 200") {
            break answer;
        }
        polling.pause(|| format!("never served again: {answer}")).await;
    };
    let samples = common::parse_metrics(body_of(&metrics));
    assert!(
        samples["jobgate_http_connections_refused_total"] >= 1.0,
        "{samples:?}"
    );
    // The three held and the scrape itself.
    assert!(
        (4.0..=5.0).contains(&samples["jobgate_http_connections"]),
        "{samples:?}"
    );
    drop(held);
}

#[tokio::test]
async fn on_sigterm_a_request_in_flight_still_finishes() {
    let mut server = Server::spawn(&[]).await;
    let query = r#"{"query":"{ jobs { totalCount } }"}"#;
    let mut in_flight = TcpStream::connect(server.addr).await.unwrap();
    in_flight
        .write_all(
            format!(
                "POST /graphql HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
                query.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // `100 Continue` comes once the handler reads the body: the request is in flight.
    let continued = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut head = vec![0u8; continued.len()];
    tokio::time::timeout(WAIT, in_flight.read_exact(&mut head))
        .await
        .expect("no 100 Continue")
        .unwrap();
    assert_eq!(head, continued, "{}", String::from_utf8_lossy(&head));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    server.wait_log("shutdown requested").await;
    // Shutdown has begun; the request is answered all the same, and its connection closed.
    in_flight.write_all(query.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut in_flight).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""totalCount":0"#), "{answer}");
    assert!(server.terminate().await.success(), "{}", server.log_text());
}
