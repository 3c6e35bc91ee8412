//! Webhook endpoints bounded by what their owner may read now, over the real server and a real
//! receiver (`common::receiver`): a tenant narrowed in the tokens file (read again without a
//! restart, and after one) stops receiving the namespace it lost; a removed token's endpoint
//! is disabled, saying why, and receives nothing more; a JWT owner's endpoints narrow to a
//! narrower token it calls with; admins list, disable and delete anyone's endpoints, tenants
//! only their own; and an endpoint cannot be created for a namespace its creator may not read.
//! Also the reading again of the tokens file these rely on: a file that has become invalid
//! keeps the tokens already loaded.
//!
//! "Receives nothing" is never a wait followed by a look: a job that must not arrive runs to
//! its end before a job that must arrive is submitted, and an endpoint delivers in cursor
//! order, so once the later job's last event has arrived the earlier one's were passed over.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor.

mod common;

use std::path::PathBuf;

use common::receiver::Receiver;
use common::{Polling, Server, token_entry};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const ALLOW: &str = "--webhook-allow-private-targets";
const ADMIN: &str = "admin-token-0123456789";
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";
const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!";

const CREATE: &str =
    "mutation($input: CreateWebhookInput!) { createWebhook(input: $input) { webhook { id state } secret } }";
const LIST: &str = "query($all: Boolean! = false) { webhooks(allOwners: $all) { id owner namespaces state disabledReason disabledAt } }";

/// A tokens file (always with the admin `admin`) and the arguments of a jobgate reading it,
/// which also takes HS256 JWTs.
struct Tenants {
    dir: tempfile::TempDir,
}

impl Tenants {
    /// `tenants`: (name, token, TOML scope line) beside the admin.
    fn new(entries: &[(&str, &str, &str)]) -> Tenants {
        let tenants = Tenants {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::write(tenants.dir.path().join("secret"), SECRET).unwrap();
        tenants.write(entries);
        tenants
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("tokens.toml")
    }

    /// Replaces the tokens file whole, as a Secret update does (a new file renamed over it).
    fn write(&self, tenants: &[(&str, &str, &str)]) {
        let mut text = token_entry("admin", ADMIN, "admin = true");
        for (name, token, scope) in tenants {
            text.push_str(&token_entry(name, token, scope));
        }
        let fresh = self.dir.path().join("tokens.toml.new");
        std::fs::write(&fresh, text).unwrap();
        std::fs::rename(&fresh, self.path()).unwrap();
    }

    fn args(&self) -> Vec<String> {
        [
            ALLOW,
            "--api-tokens-file",
            self.path().to_str().unwrap(),
            "--jwt-hs256-secret-file",
            self.dir.path().join("secret").to_str().unwrap(),
            "--allowed-namespaces",
            "team-a,team-b",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    async fn server(&self) -> Server {
        let args = self.args();
        Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>()).await
    }

    async fn restart(&self, mut server: Server) -> Server {
        server.stop().await;
        let args = self.args();
        server
            .start_again(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .await
    }
}

async fn gql_as(server: &Server, token: &str, query: &str, variables: Value) -> Value {
    server.gql_as(Some(token), query, variables).await.1
}

/// The first error's code of an answer that must have failed.
fn code(answer: &Value) -> &str {
    answer["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {answer}"))
}

/// A receiver and an endpoint created by `token`'s holder delivering to it, trusted.
async fn hook_as(server: &Server, token: &str, filter: Value) -> (Receiver, String) {
    let receiver = Receiver::start().await;
    let created = gql_as(
        server,
        token,
        CREATE,
        json!({ "input": { "url": receiver.url, "filter": filter } }),
    )
    .await;
    let payload = &created["data"]["createWebhook"];
    receiver.trust(payload["secret"].as_str().unwrap_or_else(|| panic!("{created}")));
    (receiver, payload["webhook"]["id"].as_str().unwrap().to_owned())
}

/// The endpoints `token`'s holder lists (every owner's with `all`).
async fn listed_as(server: &Server, token: &str, all: bool) -> Vec<Value> {
    let answer = gql_as(server, token, LIST, json!({ "all": all })).await;
    answer["data"]["webhooks"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .clone()
}

/// Submits a job in `namespace` as the admin and waits until it has finished: every one of
/// its events has a cursor below the next job's.
async fn run_in(server: &Server, namespace: &str, name: &str) -> String {
    let submitted = gql_as(
        server,
        ADMIN,
        "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }",
        json!({ "input": { "name": name, "namespace": namespace, "command": ["true"] } }),
    )
    .await;
    let id = submitted["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted}"))
        .to_owned();
    let polling = Polling::start();
    loop {
        let job = gql_as(
            server,
            ADMIN,
            "query($id: ID!) { job(id: $id) { phase } }",
            json!({ "id": id }),
        )
        .await;
        if job["data"]["job"]["phase"] == "SUCCEEDED" {
            return id;
        }
        polling.pause(|| format!("job {id} never succeeded: {job}")).await;
    }
}

/// A job in `hidden_in` runs to its end, then one in `shown_in`: `receiver` gets the second
/// and nothing of the first.
async fn only_the_readable_arrives(server: &Server, receiver: &Receiver, hidden_in: &str, shown_in: &str) {
    let hidden = run_in(server, hidden_in, "hidden").await;
    let shown = run_in(server, shown_in, "shown").await;
    receiver.wait_terminal_of(server, &shown).await;
    assert!(
        receiver.events_of(&hidden).is_empty(),
        "the {hidden_in} job {hidden} reached an endpoint whose owner may no longer read {hidden_in}: {:?}",
        receiver.accepted()
    );
}

/// Waits until jobgate answers `token`'s holder by the tokens file as rewritten: it no longer
/// sees the `team-a` job `job`.
async fn wait_narrowed(server: &Server, token: &str, job: &str) {
    let polling = Polling::start();
    loop {
        let seen = gql_as(
            server,
            token,
            "query($id: ID!) { job(id: $id) { id } }",
            json!({ "id": job }),
        )
        .await;
        if seen["data"]["job"].is_null() {
            return;
        }
        polling
            .pause(|| format!("the rewritten tokens file never took effect: {seen}"))
            .await;
    }
}

#[tokio::test]
async fn a_tenant_narrowed_in_the_tokens_file_stops_receiving_the_namespace_it_lost() {
    let tenants = Tenants::new(&[("alice", ALICE, "namespaces = [\"team-a\", \"team-b\"]")]);
    let server = tenants.server().await;
    let (receiver, id) = hook_as(&server, ALICE, json!({})).await;
    // While alice may read team-a, its jobs' events (and results) arrive.
    let before = run_in(&server, "team-a", "before").await;
    receiver.wait_terminal_of(&server, &before).await;
    tenants.write(&[("alice", ALICE, "namespaces = [\"team-b\"]")]);
    wait_narrowed(&server, ALICE, &before).await;
    only_the_readable_arrives(&server, &receiver, "team-a", "team-b").await;
    // The endpoint itself is unchanged: it is the owner's rights that narrow it.
    let listed = listed_as(&server, ALICE, false).await;
    assert_eq!(listed[0]["id"], id.as_str(), "{listed:?}");
    assert_eq!(listed[0]["state"], "ACTIVE", "{listed:?}");
    // After a restart, the file as it is now counts, not the scope alice created it with.
    let server = tenants.restart(server).await;
    only_the_readable_arrives(&server, &receiver, "team-a", "team-b").await;
}

#[tokio::test]
async fn a_removed_tokens_endpoint_is_disabled_with_the_reason_and_receives_nothing_more() {
    let tenants = Tenants::new(&[("alice", ALICE, "namespaces = [\"team-a\"]")]);
    let server = tenants.server().await;
    let (receiver, id) = hook_as(&server, ALICE, json!({})).await;
    let (witness, _) = hook_as(&server, ADMIN, json!({})).await;
    let before = run_in(&server, "team-a", "before").await;
    receiver.wait_terminal_of(&server, &before).await;
    tenants.write(&[]);
    let polling = Polling::start();
    let disabled = loop {
        let all = listed_as(&server, ADMIN, true).await;
        let alices = all.iter().find(|w| w["id"] == id.as_str()).cloned();
        match alices {
            Some(w) if w["state"] == "DISABLED" => break w,
            _ => {
                polling
                    .pause(|| format!("alice's endpoint was never disabled: {all:?}"))
                    .await
            }
        }
    };
    assert_eq!(disabled["owner"], "token:alice", "{disabled}");
    let reason = disabled["disabledReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("\"alice\"") && reason.contains("no longer exists"),
        "{disabled}"
    );
    assert!(disabled["disabledAt"].is_string(), "{disabled}");
    assert_eq!(
        server
            .gql_as(Some(ALICE), "{ webhooks { id } }", json!({}))
            .await
            .0,
        401
    );
    // The admin's endpoint shows when a later job's events have all been delivered.
    let after = run_in(&server, "team-a", "after").await;
    witness.wait_terminal_of(&server, &after).await;
    assert!(
        receiver.events_of(&after).is_empty(),
        "a removed token's endpoint still receives: {:?}",
        receiver.accepted()
    );
    // Disabled stays disabled across a restart, and is still listed with its reason.
    let server = tenants.restart(server).await;
    let all = listed_as(&server, ADMIN, true).await;
    let again = all.iter().find(|w| w["id"] == id.as_str()).unwrap();
    assert_eq!(again["state"], "DISABLED", "{again}");
    assert_eq!(again["disabledReason"], disabled["disabledReason"], "{again}");
}

#[tokio::test]
async fn an_admin_lists_disables_and_deletes_any_endpoint_and_a_tenant_only_its_own() {
    let tenants = Tenants::new(&[
        ("alice", ALICE, "namespaces = [\"team-a\"]"),
        ("bob", BOB, "namespaces = [\"team-b\"]"),
    ]);
    let server = tenants.server().await;
    let (receiver, alices) = hook_as(&server, ALICE, json!({})).await;
    let (_, bobs) = hook_as(&server, BOB, json!({})).await;
    let all = listed_as(&server, ADMIN, true).await;
    let owners: Vec<(&str, &str)> = all
        .iter()
        .map(|w| (w["id"].as_str().unwrap(), w["owner"].as_str().unwrap()))
        .collect();
    assert_eq!(
        owners,
        [(alices.as_str(), "token:alice"), (bobs.as_str(), "token:bob")]
    );
    assert_eq!(all[0]["namespaces"], json!(["team-a"]), "{all:?}");
    // Without allOwners an admin lists its own, as anyone does.
    assert!(listed_as(&server, ADMIN, false).await.is_empty());

    // Bob sees and touches only his own.
    let refused = gql_as(&server, BOB, LIST, json!({ "all": true })).await;
    assert_eq!(code(&refused), "FORBIDDEN", "{refused}");
    let bobs_list = listed_as(&server, BOB, false).await;
    assert_eq!(bobs_list.len(), 1, "{bobs_list:?}");
    assert_eq!(bobs_list[0]["id"], bobs.as_str());
    for mutation in [
        "mutation($id: ID!) { disableWebhook(id: $id, reason: \"mine now\") { webhook { id } } }",
        "mutation($id: ID!) { deleteWebhook(id: $id) { id } }",
    ] {
        let refused = gql_as(&server, BOB, mutation, json!({ "id": alices })).await;
        assert_eq!(code(&refused), "NOT_FOUND", "{refused}");
    }
    let alices_list = listed_as(&server, ALICE, false).await;
    assert_eq!(alices_list[0]["state"], "ACTIVE", "{alices_list:?}");

    // A reason too long to record is refused, and changes nothing.
    let long = gql_as(
        &server,
        ADMIN,
        "mutation($id: ID!, $reason: String) { disableWebhook(id: $id, reason: $reason) { webhook { id } } }",
        json!({ "id": alices, "reason": "x".repeat(1_001) }),
    )
    .await;
    assert_eq!(code(&long), "BAD_USER_INPUT", "{long}");
    assert_eq!(long["errors"][0]["extensions"]["field"], "reason", "{long}");
    assert_eq!(listed_as(&server, ALICE, false).await[0]["state"], "ACTIVE");
    // The admin disables alice's endpoint: alice sees why, and can no longer replay it.
    let disabled = gql_as(
        &server,
        ADMIN,
        "mutation($id: ID!) { disableWebhook(id: $id, reason: \"leaked receiver\") { webhook { id state disabledReason } } }",
        json!({ "id": alices }),
    )
    .await;
    let webhook = &disabled["data"]["disableWebhook"]["webhook"];
    assert_eq!(webhook["state"], "DISABLED", "{disabled}");
    assert_eq!(
        webhook["disabledReason"], "disabled by token:admin: leaked receiver",
        "{disabled}"
    );
    let alices_list = listed_as(&server, ALICE, false).await;
    assert_eq!(alices_list[0]["state"], "DISABLED", "{alices_list:?}");
    assert_eq!(alices_list[0]["disabledReason"], webhook["disabledReason"]);
    let replay = gql_as(
        &server,
        ALICE,
        "mutation($id: ID!) { replayWebhook(id: $id, after: \"0\") { webhook { id } } }",
        json!({ "id": alices }),
    )
    .await;
    assert_eq!(code(&replay), "FAILED_PRECONDITION", "{replay}");
    // Nothing more is delivered to it.
    let (witness, _) = hook_as(&server, ADMIN, json!({})).await;
    let after = run_in(&server, "team-a", "after").await;
    witness.wait_terminal_of(&server, &after).await;
    assert!(receiver.events_of(&after).is_empty(), "{:?}", receiver.accepted());

    // The admin deletes it: gone for everyone.
    let deleted = gql_as(
        &server,
        ADMIN,
        "mutation($id: ID!) { deleteWebhook(id: $id) { id } }",
        json!({ "id": alices }),
    )
    .await;
    assert_eq!(
        deleted["data"]["deleteWebhook"]["id"],
        alices.as_str(),
        "{deleted}"
    );
    assert!(listed_as(&server, ALICE, false).await.is_empty());
    let all = listed_as(&server, ADMIN, true).await;
    assert!(all.iter().all(|w| w["id"] != alices.as_str()), "{all:?}");
    assert_eq!(listed_as(&server, BOB, false).await.len(), 1);
}

#[tokio::test]
async fn a_webhook_for_a_namespace_its_creator_may_not_read_is_forbidden_and_not_created() {
    let tenants = Tenants::new(&[("alice", ALICE, "namespaces = [\"team-a\"]")]);
    let server = tenants.server().await;
    let receiver = Receiver::start().await;
    for namespace in ["team-b", "kube-system"] {
        let refused = gql_as(
            &server,
            ALICE,
            CREATE,
            json!({ "input": { "url": receiver.url, "filter": { "namespace": namespace } } }),
        )
        .await;
        assert_eq!(code(&refused), "FORBIDDEN", "{namespace}: {refused}");
        assert_eq!(refused["data"], Value::Null, "{refused}");
    }
    assert!(listed_as(&server, ALICE, false).await.is_empty());
    assert!(listed_as(&server, ADMIN, true).await.is_empty());
    // Its own namespace is accepted.
    let created = gql_as(
        &server,
        ALICE,
        CREATE,
        json!({ "input": { "url": receiver.url, "filter": { "namespace": "team-a" } } }),
    )
    .await;
    assert_eq!(
        created["data"]["createWebhook"]["webhook"]["state"], "ACTIVE",
        "{created}"
    );
}

fn jwt(sub: &str, namespaces: &[&str]) -> String {
    let now = chrono::Utc::now().timestamp();
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({ "sub": sub, "exp": now + 3600, "iat": now, "namespaces": namespaces }),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

#[tokio::test]
async fn a_jwt_owners_endpoints_narrow_to_a_narrower_token_it_calls_with() {
    let tenants = Tenants::new(&[]);
    let server = tenants.server().await;
    let wide = jwt("carol", &["team-a", "team-b"]);
    let (receiver, id) = hook_as(&server, &wide, json!({})).await;
    let listed = listed_as(&server, &wide, false).await;
    assert_eq!(listed[0]["namespaces"], json!(["team-a", "team-b"]), "{listed:?}");
    assert_eq!(listed[0]["owner"], r#"jwt:[null,"carol"]"#, "{listed:?}");
    // Carol calls with a token of team-b only: her endpoint keeps only team-b, for good.
    let narrow = jwt("carol", &["team-b"]);
    let polling = Polling::start();
    loop {
        let listed = listed_as(&server, &narrow, false).await;
        if listed[0]["namespaces"] == json!(["team-b"]) {
            break;
        }
        polling
            .pause(|| format!("carol's endpoint was never narrowed: {listed:?}"))
            .await;
    }
    only_the_readable_arrives(&server, &receiver, "team-a", "team-b").await;
    // A wider token again does not widen it.
    listed_as(&server, &wide, false).await;
    let server = tenants.restart(server).await;
    let listed = listed_as(&server, &wide, false).await;
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["namespaces"], json!(["team-b"]), "{listed:?}");
    only_the_readable_arrives(&server, &receiver, "team-a", "team-b").await;
}

#[tokio::test]
async fn a_tokens_file_that_has_become_invalid_keeps_the_tokens_already_loaded() {
    let tenants = Tenants::new(&[("alice", ALICE, "namespaces = [\"team-a\", \"team-b\"]")]);
    let server = tenants.server().await;
    let before = run_in(&server, "team-a", "before").await;
    let fresh = tenants.dir.path().join("tokens.toml.new");
    std::fs::write(&fresh, "[[token]]\nname = \"alice\"\n").unwrap();
    std::fs::rename(&fresh, tenants.path()).unwrap();
    // Requests make jobgate look at the file; it says so when it finds it invalid.
    let polling = Polling::start();
    while !server
        .log_text()
        .contains("the tokens file has changed and is invalid")
    {
        let answer = gql_as(&server, ALICE, "{ namespaces }", json!({})).await;
        assert!(answer["errors"].is_null(), "{answer}");
        polling
            .pause(|| {
                format!(
                    "the invalid tokens file was never reported; log:\n{}",
                    server.log_text()
                )
            })
            .await;
    }
    // Alice's token and namespaces stand, and the admin's.
    let seen = gql_as(
        &server,
        ALICE,
        "query($id: ID!) { job(id: $id) { id } }",
        json!({ "id": before }),
    )
    .await;
    assert_eq!(seen["data"]["job"]["id"], before.as_str(), "{seen}");
    assert_eq!(listed_as(&server, ADMIN, true).await.len(), 0);
    // A valid file replaces them.
    tenants.write(&[("alice", ALICE, "namespaces = [\"team-b\"]")]);
    wait_narrowed(&server, ALICE, &before).await;
}
