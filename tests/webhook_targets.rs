//! The webhook address policy over the real server: `createWebhook` refuses IP literals in
//! every block the IANA special-purpose registries call not globally reachable, and IPv6
//! addresses carrying a refused IPv4 address, naming the literal and why; a host name that
//! resolves to a non-public address is refused, at creation and at delivery, without saying
//! which address it resolved to (no map of jobgate's internal DNS); a name that resolves to a
//! public address when created and to loopback when delivered is refused then, and a receiver's
//! redirect to loopback is not followed.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor. Nothing here
//! connects anywhere but 127.0.0.1, except the tests that need a public address: they run
//! again inside a network namespace of their own with only `lo` (see [`Isolated`]), where
//! jobgate, its receivers and the test all are.

mod common;

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::skip::{Skip, skip_or_fail, tool_on_path};
use common::{Polling, Server};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A public address for the isolated network namespace's `lo` (it is someone's public
/// address, but there it leads nowhere else: the namespace has no other interface).
const PUBLIC: &str = "1.2.3.4";

/// The host name the isolated tests' webhooks target, resolved through the namespace's
/// `/etc/hosts`.
const NAME: &str = "hooks.test";

/// The environment variables that tell a test it runs inside its namespace, and where its
/// `/etc/hosts` is.
const INSIDE: &str = "JOBGATE_TEST_ISOLATED";
const HOSTS: &str = "JOBGATE_TEST_HOSTS";

/// What a test that needs addresses other than 127.0.0.1 runs in: itself again, alone, in a
/// network namespace of its own (only `lo`, up, with [`PUBLIC`] added) and a mount namespace
/// whose `/etc/hosts` is a file of the test's, which it rewrites to change what [`NAME`]
/// resolves to (jobgate resolves names with the system's resolver, which reads the file at
/// every lookup). Nothing there can reach the machine's network, nor the machine's see it.
struct Isolated {
    hosts: std::path::PathBuf,
}

impl Isolated {
    /// Inside the namespace: `Some`. Outside: runs the test `name` inside, fails if it fails,
    /// and returns `None` (the test is done). Without `unshare`, or when the kernel refuses the
    /// namespaces, the test skips through [`skip_or_fail`]: a failure under CI.
    fn enter(name: &str) -> Option<Isolated> {
        if std::env::var(INSIDE).as_deref() == Ok(name) {
            let hosts = std::env::var_os(HOSTS).expect("the hosts file's path").into();
            return Some(Isolated { hosts });
        }
        if tool_on_path("unshare").is_none()
            && skip_or_fail(Skip::Missing(
                "`unshare` (util-linux) is not on PATH: this test needs a network and a mount namespace of its own"
                    .into(),
            ))
        {
            return None;
        }
        let temp = tempfile::tempdir().unwrap();
        let hosts = temp.path().join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
        let setup = format!(
            "ip link set lo up && ip addr add {PUBLIC}/32 dev lo && mount --bind \"$JOBGATE_TEST_HOSTS\" /etc/hosts \
             || exit 97; exec \"$0\" --exact \"$1\" --nocapture --test-threads 1"
        );
        // As an ordinary user, also a user namespace where the user is root, and its jobs' user
        // (nobody) exists, as when root runs the test.
        let as_root = match common::root::wrapper() {
            Ok(as_root) => as_root,
            Err(why) => {
                skip_or_fail(Skip::Missing(why));
                return None;
            }
        };
        let mut command = std::process::Command::new("unshare");
        command.args(as_root.iter().skip(1));
        // As root there, jobgate's default jobs' directory would be /tmp/jobgate-0, which is
        // the real root's when an ordinary user runs the test: one of the test's own instead.
        let work = temp.path().join("work");
        let output = command
            .args(["--net", "--mount", "--propagation", "private", "sh", "-c", &setup])
            .arg(std::env::current_exe().unwrap())
            .arg(name)
            .env(INSIDE, name)
            .env(HOSTS, &hosts)
            .env("JOBGATE_LOCAL_WORK_DIR", &work)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("running unshare");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let no_namespace =
            matches!(output.status.code(), Some(97) | Some(1) if !said.contains("running 1 test"));
        if no_namespace
            && skip_or_fail(Skip::Missing(format!(
                "this test needs a network and a mount namespace of its own, and could not have them: {said}"
            )))
        {
            return None;
        }
        assert!(
            output.status.success() && said.contains("1 passed"),
            "{name}, run in its namespace, failed ({}):\n{said}",
            output.status
        );
        None
    }

    /// Makes [`NAME`] resolve to `addr` from the next lookup on.
    fn resolve_name_to(&self, addr: &str) {
        // Rewritten in place: the bind mount holds this inode.
        std::fs::write(&self.hosts, format!("127.0.0.1 localhost\n{addr} {NAME}\n")).unwrap();
    }
}

/// A plain HTTP server on one address of the namespace: answers every request with `answer`
/// (a status line and headers) and records each request's body, before it answers.
struct Endpoint {
    port: u16,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Endpoint {
    async fn start(addr: &str, port: u16, answer: String) -> Endpoint {
        let listener = tokio::net::TcpListener::bind((addr, port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let record = bodies.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let record = record.clone();
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    let body = loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let Some((head, body)) = text.split_once("\r\n\r\n") else {
                            continue;
                        };
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse().ok())?
                            })
                            .unwrap_or(0usize);
                        if body.len() >= length {
                            break body.to_owned();
                        }
                    };
                    record
                        .lock()
                        .unwrap()
                        .push(serde_json::from_str(&body).unwrap_or(Value::String(body)));
                    let reply = format!("{answer}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        Endpoint { port, bodies }
    }

    /// An endpoint on `addr` (port 0: any) that accepts every delivery: `204 No Content`.
    async fn accepting(addr: &str, port: u16) -> Endpoint {
        Endpoint::start(addr, port, "HTTP/1.1 204 No Content".into()).await
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    fn phases_of(&self, job: &str) -> Vec<Value> {
        self.bodies()
            .iter()
            .filter(|b| b["data"]["jobId"] == job)
            .map(|b| b["data"]["phase"].clone())
            .collect()
    }
}

const FAST: [&str; 4] = [
    "--webhook-backoff-min-ms",
    "20",
    "--webhook-backoff-max-ms",
    "200",
];

async fn create(server: &Server, url: &str) -> String {
    let data = server.gql_ok(CREATE, json!({ "input": { "url": url } })).await;
    data["createWebhook"]["webhook"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits until a delivery to webhook `id` failed, or `reached` (which must not be) was
/// reached; returns the webhook.
async fn until_failed_or_reached(server: &Server, id: &str, reached: &Endpoint) -> Value {
    let polling = Polling::start();
    loop {
        let webhook = server.webhook(id).await;
        if !webhook["lastError"].is_null() || !reached.bodies().is_empty() {
            return webhook;
        }
        polling
            .pause(|| {
                format!(
                    "no delivery failed: {webhook}; jobgate's log:\n{}",
                    server.log_text()
                )
            })
            .await;
    }
}

#[tokio::test]
async fn a_name_that_resolves_privately_only_at_delivery_is_not_delivered_to() {
    let name = "a_name_that_resolves_privately_only_at_delivery_is_not_delivered_to";
    let Some(net) = Isolated::enter(name) else { return };
    // The same port on the public address and on loopback: only the name says which.
    let public = Endpoint::accepting(PUBLIC, 0).await;
    let private = Endpoint::accepting("127.0.0.1", public.port).await;
    net.resolve_name_to(PUBLIC);
    let server = Server::start(&FAST).await;
    let id = create(&server, &format!("http://{NAME}:{}/hook", public.port)).await;
    // While the name is public, deliveries go to it.
    let first = server.submit(json!({ "command": ["true"] })).await;
    server.wait_terminal(&first).await;
    let polling = Polling::start();
    while !public.phases_of(&first).contains(&json!("SUCCEEDED")) {
        polling
            .pause(|| {
                format!(
                    "the public receiver never got {first}'s end; log:\n{}",
                    server.log_text()
                )
            })
            .await;
    }

    // Then the name leads to loopback: checked when delivering, it is refused there.
    net.resolve_name_to("127.0.0.1");
    let second = server.submit(json!({ "command": ["true"] })).await;
    server.wait_terminal(&second).await;
    let webhook = until_failed_or_reached(&server, &id, &private).await;
    assert_eq!(
        private.bodies(),
        Vec::<Value>::new(),
        "delivered to loopback: {webhook}"
    );
    let error = webhook["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("{NAME} resolves to a non-public address")),
        "{webhook}"
    );
    for resolved in RESOLVED {
        assert!(
            !error.to_lowercase().contains(resolved),
            "lastError tells where the name led ({resolved}): {webhook}"
        );
    }
    assert_eq!(webhook["state"], "RETRYING", "{webhook}");
    assert_eq!(public.phases_of(&second), Vec::<Value>::new());
}

#[tokio::test]
async fn a_redirect_from_the_receiver_is_not_followed() {
    let name = "a_redirect_from_the_receiver_is_not_followed";
    let Some(_net) = Isolated::enter(name) else { return };
    let private = Endpoint::accepting("127.0.0.1", 0).await;
    let redirect = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{}/hook",
        private.port
    );
    let public = Endpoint::start(PUBLIC, 0, redirect).await;
    let server = Server::start(&FAST).await;
    let id = create(&server, &format!("http://{PUBLIC}:{}/hook", public.port)).await;
    let job = server.submit(json!({ "command": ["true"] })).await;
    server.wait_terminal(&job).await;
    let webhook = until_failed_or_reached(&server, &id, &private).await;
    assert_eq!(
        private.bodies(),
        Vec::<Value>::new(),
        "the redirect was followed: {webhook}"
    );
    assert!(!public.bodies().is_empty(), "{webhook}");
    assert_eq!(
        webhook["lastError"], "the endpoint answered HTTP 307",
        "{webhook}"
    );
    assert_eq!(webhook["state"], "RETRYING", "{webhook}");
}
