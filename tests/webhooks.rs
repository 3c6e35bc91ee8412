//! Signed webhooks over the real server, delivered to a real HTTP receiver
//! (`common::receiver`, which checks every Standard Webhooks signature with its own
//! HMAC-SHA256): what arrives, in which order, for whom, through failures, parking and
//! replay, restarts and deletes; and which targets are refused. Owners' rights changing under
//! their endpoints are in tests/webhook_rights.rs.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor; the test of a
//! restart while undeliverable spawns the binary (`Server::spawn`).

mod common;

use std::sync::atomic::Ordering;

use common::receiver::{Receiver, assert_whole_history};
use common::{Polling, Server, scrape, token_entry};
use serde_json::{Value, json};

const ALLOW: &str = "--webhook-allow-private-targets";
/// Retries come quickly in tests.
const FAST_RETRIES: [&str; 4] = [
    "--webhook-backoff-min-ms",
    "20",
    "--webhook-backoff-max-ms",
    "200",
];

const CREATE: &str = "mutation($input: CreateWebhookInput!) { createWebhook(input: $input) { webhook { id url state cursor } secret } }";

async fn create(server: &Server, url: &str, filter: Value) -> (String, String) {
    let data = server
        .gql_ok(CREATE, json!({ "input": { "url": url, "filter": filter } }))
        .await;
    let payload = &data["createWebhook"];
    assert_eq!(payload["webhook"]["state"], "ACTIVE");
    (
        payload["webhook"]["id"].as_str().unwrap().to_owned(),
        payload["secret"].as_str().unwrap().to_owned(),
    )
}

/// A receiver and an endpoint delivering to it, trusted.
async fn endpoint(server: &Server, filter: Value) -> (Receiver, String) {
    let receiver = Receiver::start().await;
    let (id, secret) = create(server, &receiver.url, filter).await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    receiver.trust(&secret);
    (receiver, id)
}

/// Asks `webhooks` until the endpoint `id` satisfies `check`; returns it.
async fn listed_until(server: &Server, id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let polling = Polling::start();
    loop {
        let webhook = server.webhook(id).await;
        if check(&webhook) {
            return webhook;
        }
        polling
            .pause(|| {
                format!(
                    "never: {what}; last {webhook}; jobgate's log:\n{}",
                    server.log_text()
                )
            })
            .await;
    }
}

async fn run_job(server: &Server, name: &str) -> String {
    let id = server.submit(json!({ "name": name, "command": ["true"] })).await;
    server.wait_terminal(&id).await;
    id
}

#[tokio::test]
async fn every_event_of_the_matching_jobs_arrives_signed_and_in_order() {
    let server = Server::start(&[ALLOW]).await;
    let (receiver, id) = endpoint(&server, json!({ "nameContains": "wanted" })).await;
    // The other job's events all come before the wanted job's: once the wanted one's last
    // event arrived, the endpoint has passed over every one of the other's.
    let other = run_job(&server, "other").await;
    let wanted = run_job(&server, "wanted-1").await;
    let events = receiver.wait_terminal_of(&server, &wanted).await;
    assert_whole_history(&events);
    let accepted = receiver.accepted();
    assert!(
        accepted
            .iter()
            .all(|r| r.body["data"]["jobId"] == wanted.as_str()),
        "only the filter's job arrives, not {other}: {accepted:?}"
    );
    assert_eq!(receiver.state.forged.load(Ordering::SeqCst), 0);
    for r in &accepted {
        assert_eq!(r.body["type"], "job.event");
        assert_eq!(r.body["data"]["job"]["id"], wanted.as_str());
        assert_eq!(r.body["data"]["job"]["name"], "wanted-1");
        // The message id is the endpoint's and the event's: stable across retries.
        assert_eq!(
            r.id,
            format!("{id}-{}", r.body["data"]["cursor"].as_str().unwrap())
        );
    }
    let webhook = listed_until(&server, &id, "caught up", |w| w["lag"] == 0).await;
    assert_eq!(webhook["state"], "ACTIVE");
    assert_eq!(webhook["attempts"], 0);
    assert_eq!(webhook["url"], receiver.url.as_str());
    assert_eq!(webhook["filter"]["nameContains"], "wanted");
    assert!(webhook["lastAttemptAt"].is_string(), "{webhook}");
    let metrics = scrape(&server).await;
    assert!(
        metrics
            .get("jobgate_webhook_deliveries_total{outcome=\"delivered\"}")
            .copied()
            .unwrap_or(0.0)
            >= events.len() as f64,
        "{metrics:?}"
    );
}

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

async fn gql_as(server: &Server, token: &str, query: &str, variables: Value) -> Value {
    server.gql_as(Some(token), query, variables).await.1
}

/// Asks for the job as `token`'s holder until it has finished.
async fn wait_finished_as(server: &Server, token: &str, id: &str) {
    let polling = Polling::start();
    loop {
        let body = gql_as(
            server,
            token,
            "query($id: ID!) { job(id: $id) { phase } }",
            json!({ "id": id }),
        )
        .await;
        if matches!(
            body["data"]["job"]["phase"].as_str(),
            Some("SUCCEEDED" | "FAILED" | "CANCELLED")
        ) {
            return;
        }
        polling.pause(|| format!("job {id} never finished: {body}")).await;
    }
}

#[tokio::test]
async fn a_tenants_webhook_never_receives_another_tenants_events() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        [
            token_entry("alice", ALICE, "namespaces = [\"team-a\"]"),
            token_entry("bob", BOB, "namespaces = [\"team-b\"]"),
        ]
        .concat(),
    )
    .unwrap();
    let server = Server::start(&[
        ALLOW,
        "--api-tokens-file",
        tokens.to_str().unwrap(),
        "--allowed-namespaces",
        "team-a,team-b",
    ])
    .await;
    let receiver = Receiver::start().await;
    // No filter: everything alice may see.
    let created = gql_as(
        &server,
        ALICE,
        CREATE,
        json!({ "input": { "url": receiver.url } }),
    )
    .await;
    let id = created["data"]["createWebhook"]["webhook"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    receiver.trust(created["data"]["createWebhook"]["secret"].as_str().unwrap());
    let submit = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }";
    let bobs = gql_as(
        &server,
        BOB,
        submit,
        json!({ "input": { "namespace": "team-b", "command": ["true"] } }),
    )
    .await["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_finished_as(&server, BOB, &bobs).await;
    let alices = gql_as(
        &server,
        ALICE,
        submit,
        json!({ "input": { "namespace": "team-a", "command": ["true"] } }),
    )
    .await["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = receiver.wait_terminal_of(&server, &alices).await;
    assert_whole_history(&events);
    assert!(
        receiver
            .accepted()
            .iter()
            .all(|r| r.body["data"]["job"]["namespace"] == "team-a"),
        "bob's job {bobs} reached alice's webhook: {:?}",
        receiver.accepted()
    );
    // Bob neither sees nor touches alice's endpoint.
    let bobs_list = gql_as(&server, BOB, "{ webhooks { id } }", json!({})).await;
    assert_eq!(bobs_list["data"]["webhooks"], json!([]), "{bobs_list}");
    for mutation in [
        "mutation($id: ID!) { deleteWebhook(id: $id) { id } }",
        "mutation($id: ID!) { replayWebhook(id: $id, after: \"0\") { webhook { id } } }",
    ] {
        let refused = gql_as(&server, BOB, mutation, json!({ "id": id })).await;
        assert_eq!(
            refused["errors"][0]["extensions"]["code"], "NOT_FOUND",
            "{refused}"
        );
    }
    let alices_list = gql_as(&server, ALICE, "{ webhooks { id } }", json!({})).await;
    assert_eq!(
        alices_list["data"]["webhooks"][0]["id"],
        id.as_str(),
        "{alices_list}"
    );
}

#[tokio::test]
async fn a_failing_receiver_is_retried_and_then_gets_every_event_in_order() {
    let mut args = vec![ALLOW];
    args.extend(FAST_RETRIES);
    let server = Server::start(&args).await;
    let (receiver, id) = endpoint(&server, json!({})).await;
    receiver.fail(true);
    let job = run_job(&server, "flaky").await;
    let webhook = listed_until(&server, &id, "retrying after two failures", |w| {
        w["state"] == "RETRYING" && w["attempts"].as_i64() >= Some(2)
    })
    .await;
    assert!(
        webhook["lastError"].as_str().unwrap().contains("500"),
        "{webhook}"
    );
    assert!(webhook["nextAttemptAt"].is_string(), "{webhook}");
    assert!(webhook["lag"].as_i64() >= Some(1), "{webhook}");
    assert!(receiver.refused() >= 2);
    receiver.fail(false);
    let events = receiver.wait_terminal_of(&server, &job).await;
    assert_whole_history(&events);
    let webhook = listed_until(&server, &id, "caught up", |w| w["lag"] == 0).await;
    assert_eq!(webhook["state"], "ACTIVE");
    assert_eq!(webhook["attempts"], 0);
    assert_eq!(webhook["lastError"], Value::Null);
}

#[tokio::test]
async fn an_endpoint_failing_for_the_whole_window_is_parked_until_replayed() {
    let mut args = vec![ALLOW, "--webhook-retry-window-secs", "1"];
    args.extend(FAST_RETRIES);
    let server = Server::start(&args).await;
    let (receiver, id) = endpoint(&server, json!({})).await;
    let created_at = server.webhook(&id).await["cursor"].as_str().unwrap().to_owned();
    receiver.fail(true);
    let job = run_job(&server, "parked").await;
    let webhook = listed_until(&server, &id, "parked", |w| w["state"] == "PARKED").await;
    assert!(
        webhook["lastError"].as_str().unwrap().contains("500"),
        "{webhook}"
    );
    assert_eq!(webhook["nextAttemptAt"], Value::Null);
    assert_eq!(webhook["cursor"], created_at.as_str(), "nothing was delivered");
    assert!(webhook["lag"].as_i64() >= Some(1), "{webhook}");
    let metrics = scrape(&server).await;
    assert!(
        metrics
            .get("jobgate_webhook_parked_total")
            .copied()
            .unwrap_or(0.0)
            >= 1.0
    );
    assert!(
        metrics
            .get("jobgate_webhook_deliveries_total{outcome=\"rejected\"}")
            .copied()
            .unwrap_or(0.0)
            >= 1.0
    );
    receiver.fail(false);
    let replayed = server
        .gql_ok(
            "mutation($id: ID!, $after: String!) { replayWebhook(id: $id, after: $after) { webhook { state attempts lastError } } }",
            json!({ "id": id, "after": created_at }),
        )
        .await;
    assert_eq!(
        replayed["replayWebhook"]["webhook"]["state"], "ACTIVE",
        "{replayed}"
    );
    assert_eq!(replayed["replayWebhook"]["webhook"]["lastError"], Value::Null);
    let events = receiver.wait_terminal_of(&server, &job).await;
    assert_whole_history(&events);
    listed_until(&server, &id, "caught up", |w| {
        w["lag"] == 0 && w["state"] == "ACTIVE"
    })
    .await;
    // A replay from an earlier cursor delivers the same events again.
    let before = receiver.events_of(&job).len();
    server
        .gql_ok(
            "mutation($id: ID!, $after: String!) { replayWebhook(id: $id, after: $after) { webhook { id } } }",
            json!({ "id": id, "after": created_at }),
        )
        .await;
    let polling = Polling::start();
    while receiver.events_of(&job).len() < 2 * before {
        polling
            .pause(|| format!("the replay never arrived: {:?}", receiver.accepted()))
            .await;
    }
    assert_whole_history(&receiver.events_of(&job)[before..]);
    // A cursor past the newest event is not one to replay after.
    let bad = server
        .gql(
            "mutation($id: ID!) { replayWebhook(id: $id, after: \"999999999\") { webhook { id } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(bad["errors"][0]["extensions"]["code"], "BAD_USER_INPUT", "{bad}");
}

#[tokio::test]
async fn events_recorded_while_undeliverable_arrive_after_a_restart_none_skipped() {
    let mut args = vec![ALLOW];
    args.extend(FAST_RETRIES);
    let mut server = Server::spawn(&args).await;
    let (receiver, id) = endpoint(&server, json!({})).await;
    receiver.fail(true);
    let before = run_job(&server, "before-restart").await;
    listed_until(&server, &id, "a failed attempt", |w| w["state"] == "RETRYING").await;
    server.stop().await;
    let server = server.start_again(&args).await;
    let after = run_job(&server, "after-restart").await;
    receiver.fail(false);
    let first = receiver.wait_terminal_of(&server, &before).await;
    let second = receiver.wait_terminal_of(&server, &after).await;
    assert_whole_history(&first);
    assert_whole_history(&second);
    // In cursor order across both jobs: the first job's last event came before the second's
    // first.
    let arrival: Vec<String> = receiver
        .accepted()
        .iter()
        .map(|r| r.body["data"]["jobId"].as_str().unwrap().to_owned())
        .collect();
    let last_of_first = arrival.iter().rposition(|j| *j == before).unwrap();
    let first_of_second = arrival.iter().position(|j| *j == after).unwrap();
    assert!(last_of_first < first_of_second, "{arrival:?}");
}

#[tokio::test]
async fn a_deleted_webhook_receives_nothing_more() {
    let server = Server::start(&[ALLOW]).await;
    let (receiver, id) = endpoint(&server, json!({})).await;
    let first = run_job(&server, "first").await;
    receiver.wait_terminal_of(&server, &first).await;
    let deleted = server
        .gql_ok(
            "mutation($id: ID!) { deleteWebhook(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(deleted["deleteWebhook"]["id"], id.as_str());
    let gone = server
        .gql(
            "mutation($id: ID!) { deleteWebhook(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(gone["errors"][0]["extensions"]["code"], "NOT_FOUND", "{gone}");
    assert_eq!(
        server.gql_ok("{ webhooks { id } }", json!({})).await["webhooks"],
        json!([])
    );
    // Its delivery loop has ended once it reports no lag any more.
    let series = format!("jobgate_webhook_lag_events{{webhook=\"{id}\"}}");
    let polling = Polling::start();
    while scrape(&server).await.contains_key(&series) {
        polling
            .pause(|| {
                format!(
                    "the deleted webhook's delivery never stopped; log:\n{}",
                    server.log_text()
                )
            })
            .await;
    }
    // Another endpoint shows when the next job's events have been delivered.
    let (witness, _) = endpoint(&server, json!({})).await;
    let second = run_job(&server, "second").await;
    witness.wait_terminal_of(&server, &second).await;
    assert!(
        receiver.events_of(&second).is_empty(),
        "{:?}",
        receiver.accepted()
    );
}

#[tokio::test]
async fn targets_on_private_addresses_are_refused_by_default() {
    let server = Server::start(&[]).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:8080/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://localhost:8080/hook",
        "ftp://example.com/hook",
        "http://user:secret@example.com/hook",
        "not a url",
    ] {
        let body = server.gql(CREATE, json!({ "input": { "url": url } })).await;
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{url}: {body}"
        );
        assert_eq!(
            body["errors"][0]["extensions"]["field"], "input.url",
            "{url}: {body}"
        );
    }
    assert_eq!(
        server.gql_ok("{ webhooks { id } }", json!({})).await["webhooks"],
        json!([])
    );
}
