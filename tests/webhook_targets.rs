//! The webhook address policy over the real server: `createWebhook` refuses IP literals in
//! every block the IANA special-purpose registries call not globally reachable, and IPv6
//! addresses carrying a refused IPv4 address, naming the literal and why; a host name that
//! resolves to a non-public address is refused, at creation and at delivery, without saying
//! which address it resolved to (no map of jobgate's internal DNS). Nothing here connects
//! anywhere but 127.0.0.1.

mod common;

use std::net::TcpListener;

use common::{Polling, Server};
use serde_json::{Value, json};

const ALLOW: &str = "--webhook-allow-private-targets";
const CREATE: &str =
    "mutation($input: CreateWebhookInput!) { createWebhook(input: $input) { webhook { id } } }";

/// What a message must not contain to keep a name's resolution private: the addresses
/// `localhost` resolves to, and how the policy would call them.
const RESOLVED: [&str; 4] = ["127.0.0.1", "::1", "127.0.0.0", "loopback"];

async fn refusal(server: &Server, url: &str) -> String {
    let body = server.gql(CREATE, json!({ "input": { "url": url } })).await;
    let error = &body["errors"][0];
    assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{url}: {body}");
    assert_eq!(error["extensions"]["field"], "input.url", "{url}: {body}");
    error["message"].as_str().unwrap_or_default().to_owned()
}

async fn no_webhooks(server: &Server) {
    assert_eq!(
        server.gql_ok("{ webhooks { id } }", json!({})).await["webhooks"],
        json!([])
    );
}

#[tokio::test]
async fn literals_in_non_public_blocks_or_carrying_non_public_ipv4_are_refused() {
    let server = Server::start(&[]).await;
    for (url, says) in [
        // 6to4 of 127.0.0.1.
        (
            "http://[2002:7f00:1::]/hook",
            "a 6to4 address embedding 127.0.0.1",
        ),
        // NAT64 of the cloud metadata address.
        (
            "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
            "a NAT64 address embedding 169.254.169.254",
        ),
        // Local-use NAT64 of a private address.
        (
            "http://[64:ff9b:1::a00:1]/hook",
            "a local-use NAT64 address embedding 10.0.0.1",
        ),
        // Teredo whose client (the last 32 bits, inverted) is 127.0.0.1.
        (
            "http://[2001:0:808:808::80ff:fffe]/hook",
            "a Teredo address whose client is 127.0.0.1",
        ),
        // IPv4-translated 127.0.0.1.
        (
            "http://[::ffff:0:7f00:1]/hook",
            "an IPv4-translated address embedding 127.0.0.1",
        ),
        ("http://198.18.0.1/hook", "198.18.0.0/15 (Benchmarking, RFC 2544)"),
        (
            "http://192.0.0.1/hook",
            "192.0.0.0/29 (IPv4 Service Continuity Prefix",
        ),
        (
            "http://192.0.0.100/hook",
            "192.0.0.0/24 (IETF Protocol Assignments",
        ),
        ("http://192.0.2.1/hook", "(Documentation (TEST-NET-1)"),
        ("http://198.51.100.1/hook", "(Documentation (TEST-NET-2)"),
        ("http://203.0.113.1/hook", "(Documentation (TEST-NET-3)"),
        (
            "http://[2001:db8::1]/hook",
            "2001:db8::/32 (Documentation, RFC 3849)",
        ),
        ("http://[fec0::1]/hook", "fec0::/10 (Site-Local (deprecated)"),
        ("http://[::ffff:8.8.8.8]/hook", "(IPv4-mapped Address, RFC 4291)"),
        ("http://[ff02::1]/hook", "ff00::/8 (Multicast"),
    ] {
        let message = refusal(&server, url).await;
        assert!(message.contains(says), "{url}: {message}");
        assert!(message.contains("not globally reachable"), "{url}: {message}");
    }
    no_webhooks(&server).await;
}

#[tokio::test]
async fn a_name_resolving_to_a_non_public_address_is_refused_without_that_address() {
    let server = Server::start(&[]).await;
    let message = refusal(&server, "http://localhost:8080/hook").await;
    assert!(
        message.contains("localhost resolves to a non-public address"),
        "{message}"
    );
    for resolved in RESOLVED {
        assert!(
            !message.to_lowercase().contains(resolved),
            "the refusal tells where the name led ({resolved}): {message}"
        );
    }
    no_webhooks(&server).await;
}

#[tokio::test]
async fn a_delivery_to_a_name_that_resolves_privately_fails_without_telling_the_address() {
    // The endpoint is made while private targets are allowed, then jobgate starts again
    // without: its name now leads where webhooks may not go.
    let receiver = TcpListener::bind("127.0.0.1:0").unwrap();
    receiver.set_nonblocking(true).unwrap();
    let url = format!("http://localhost:{}/hook", receiver.local_addr().unwrap().port());
    let fast = [
        "--webhook-backoff-min-ms",
        "20",
        "--webhook-backoff-max-ms",
        "200",
    ];
    let mut server = Server::start(&[&[ALLOW][..], &fast[..]].concat()).await;
    let data = server.gql_ok(CREATE, json!({ "input": { "url": url } })).await;
    let id = data["createWebhook"]["webhook"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.stop().await;

    let server = server.start_again(&fast).await;
    let job = server.submit(json!({ "command": ["true"] })).await;
    server.wait_terminal(&job).await;
    let polling = Polling::start();
    let webhook: Value = loop {
        let webhook = server.webhook(&id).await;
        if !webhook["lastError"].is_null() {
            break webhook;
        }
        polling
            .pause(|| {
                format!(
                    "no delivery failed: {webhook}; jobgate's log:\n{}",
                    server.log_text()
                )
            })
            .await;
    };
    let error = webhook["lastError"].as_str().unwrap();
    assert!(
        error.contains("localhost resolves to a non-public address"),
        "{webhook}"
    );
    for resolved in RESOLVED {
        assert!(
            !error.to_lowercase().contains(resolved),
            "lastError tells where the name led ({resolved}): {webhook}"
        );
    }
    assert_eq!(webhook["state"], "RETRYING", "{webhook}");
    // The attempt was refused before connecting: the receiver was never reached.
    assert_eq!(
        receiver.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock)
    );
}
