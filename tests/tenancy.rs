//! Tenancy through the API, beyond what tests/production.rs checks for lookups, lists,
//! cancel and live events: the field of one's own job that reaches other jobs
//! (`dependencies`) and `jobEvents` replayed from a cursor show nothing of another tenant,
//! while an admin sees both. (The service's entry points are tested one by one in
//! src/jobs/service/tests.rs.)
//!
//! jobgate runs in the test's process (`common::tenants_server`, `Server::start`) on the local
//! executor.

mod common;

use common::{GqlWs, Server, tenants_server, token_entry};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";
const SUBMIT: &str = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }";

/// jobgate with alice (team-a), bob (team-b) and an admin.
async fn tenants() -> (Server, tempfile::TempDir) {
    tenants_server(&[
        token_entry("alice", ALICE, "namespaces = [\"team-a\"]"),
        token_entry("bob", BOB, "namespaces = [\"team-b\"]"),
        token_entry("admin", ADMIN, "admin = true"),
    ])
    .await
}

async fn submit_as(server: &Server, token: &str, input: Value) -> String {
    let (_, body) = server
        .gql_as(Some(token), SUBMIT, json!({ "input": input }))
        .await;
    body["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("submit failed: {body}"))
        .to_owned()
}

async fn dependencies_as(server: &Server, token: &str, id: &str) -> Value {
    let (_, body) = server
        .gql_as(
            Some(token),
            "query($id: ID!) { job(id: $id) { namespace dependencies { id } } }",
            json!({ "id": id }),
        )
        .await;
    body["data"]["job"].clone()
}

/// The jobs of the events `token`'s `jobEvents` replays from the first cursor, until one of
/// `until`'s, as `namespace/id`.
async fn replayed_as(server: &Server, token: &str, until: &str) -> Vec<String> {
    let mut ws = GqlWs::connect_with(server, json!({ "authorization": format!("Bearer {token}") })).await;
    ws.subscribe(
        "e",
        "subscription { jobEvents(after: \"0\") { job { id namespace } } }",
        json!({}),
    )
    .await;
    let mut seen = Vec::new();
    loop {
        let message = ws.recv().await;
        let job = &message["payload"]["data"]["jobEvents"]["job"];
        let (Some(id), Some(namespace)) = (job["id"].as_str(), job["namespace"].as_str()) else {
            panic!("not an event: {message}");
        };
        seen.push(format!("{namespace}/{id}"));
        if id == until {
            return seen;
        }
    }
}

#[tokio::test]
async fn replayed_events_and_dependencies_show_nothing_of_another_tenant() {
    let (server, _dir) = tenants().await;
    let bobs = submit_as(
        &server,
        BOB,
        json!({"command": ["sleep", "60"], "namespace": "team-b"}),
    )
    .await;
    // An admin may make a job of alice's namespace wait for one of bob's.
    let waiting = submit_as(
        &server,
        ADMIN,
        json!({"command": ["true"], "namespace": "team-a", "dependsOn": [bobs]}),
    )
    .await;
    let alices = submit_as(
        &server,
        ALICE,
        json!({"command": ["sleep", "60"], "namespace": "team-a"}),
    )
    .await;

    // Alice sees the waiting job, which is hers, but not the job it waits for.
    assert_eq!(
        dependencies_as(&server, ALICE, &waiting).await,
        json!({"namespace": "team-a", "dependencies": []})
    );
    assert_eq!(
        dependencies_as(&server, ADMIN, &waiting).await,
        json!({"namespace": "team-a", "dependencies": [{"id": bobs}]})
    );

    // Replayed from the first cursor, alice's events are her namespace's only; bob's job came
    // first, and the admin's replay starts with it.
    let alice_saw = replayed_as(&server, ALICE, &alices).await;
    assert!(
        alice_saw.iter().all(|job| job.starts_with("team-a/")),
        "{alice_saw:?}"
    );
    assert_eq!(alice_saw[0], format!("team-a/{waiting}"), "{alice_saw:?}");
    let admin_saw = replayed_as(&server, ADMIN, &alices).await;
    assert_eq!(admin_saw[0], format!("team-b/{bobs}"), "{admin_saw:?}");
    let bob_saw = replayed_as(&server, BOB, &bobs).await;
    assert_eq!(bob_saw, [format!("team-b/{bobs}")]);
}
