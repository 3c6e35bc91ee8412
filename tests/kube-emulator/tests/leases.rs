//! coordination.k8s.io/v1 Leases as kube-rs sees them, over real HTTP: discovery, create, get,
//! list with selectors, watch, delete, every patch flavour, and the real Lease strategy's
//! optimistic concurrency (a PUT must carry the current resourceVersion; a stale one is 409
//! Conflict, so of two holders racing from the same read exactly one wins), create-on-update,
//! validation, and request accounting per resource.
//!
//! No simulated controller touches Leases, so every change a test sees is one it made.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{
    Api, DeleteParams, GroupVersionKind, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, Discovery, ResourceExt};
use kube_emulator::Emulator;
use serde_json::json;

/// Generous: only reached when the behaviour under test is broken.
const WAIT: Duration = Duration::from_secs(30);

const LEASES: &str = "leases.coordination.k8s.io";

fn client(emulator: &Emulator) -> Client {
    Client::try_from(kube::Config::new(emulator.url().parse().expect("emulator url"))).expect("client")
}

async fn start() -> (Emulator, Api<Lease>) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let leases = Api::namespaced(client(&emulator), "default");
    (emulator, leases)
}

fn lease(name: &str, holder: &str, labels: serde_json::Value) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }))
    .expect("a lease")
}

fn holder(l: &Lease) -> Option<&str> {
    l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
}

fn rv(l: &Lease) -> u64 {
    l.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("a numeric resourceVersion")
}

/// `l` taken over by `who` (what a leader-election client writes).
fn taken_by(l: &Lease, who: &str) -> Lease {
    let mut next = l.clone();
    let spec = next.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(who.to_owned());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    next
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn conflict_message(name: &str) -> String {
    format!(
        "Operation cannot be fulfilled on leases.coordination.k8s.io {name:?}: the object has been modified; \
         please apply your changes to the latest version and try again"
    )
}

/// The next non-bookmark event of a watch.
async fn next_event(
    stream: &mut (impl Stream<Item = kube::Result<WatchEvent<Lease>>> + Unpin),
) -> WatchEvent<Lease> {
    loop {
        let event = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("an event in time")
            .expect("the watch goes on")
            .expect("no error in the watch");
        if !matches!(event, WatchEvent::Bookmark(_)) {
            return event;
        }
    }
}

#[tokio::test]
async fn discovery_lists_leases() {
    let emulator = Emulator::start().await.expect("start");
    let discovery = Discovery::new(client(&emulator)).run().await.expect("discovery");
    assert!(discovery.has_group("coordination.k8s.io"));
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
        .expect("coordination.k8s.io/v1 Lease is served");
    assert_eq!(resource.plural, "leases");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    for verb in ["create", "get", "list", "watch", "update", "patch", "delete"] {
        assert!(caps.supports_operation(verb), "leases support {verb}");
    }
    assert!(caps.subresources.is_empty(), "leases have no subresources");
    emulator.shutdown().await;
}

#[tokio::test]
async fn leases_are_created_read_listed_and_deleted() {
    let (emulator, leases) = start().await;

    let created = leases
        .create(
            &PostParams::default(),
            &lease("shard-0", "replica-a", json!({"app": "jobgate"})),
        )
        .await
        .expect("create");
    assert_eq!(holder(&created), Some("replica-a"));
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.renew_time.clone()),
        Some(MicroTime("2026-01-01T00:00:00Z".parse().expect("time")))
    );

    let again = api_error(
        leases
            .create(&PostParams::default(), &lease("shard-0", "replica-b", json!({})))
            .await,
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        again.message,
        "leases.coordination.k8s.io \"shard-0\" already exists"
    );

    let got = leases.get("shard-0").await.expect("get");
    assert_eq!(got.metadata.resource_version, created.metadata.resource_version);
    assert_eq!(holder(&got), Some("replica-a"));

    let missing = api_error(leases.get("nope").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "leases.coordination.k8s.io \"nope\" not found");
    assert!(leases.get_opt("nope").await.expect("get_opt").is_none());

    leases
        .create(
            &PostParams::default(),
            &lease("shard-1", "replica-b", json!({"app": "jobgate"})),
        )
        .await
        .expect("create shard-1");
    leases
        .create(
            &PostParams::default(),
            &lease("other", "someone", json!({"app": "else"})),
        )
        .await
        .expect("create other");
    let all = leases.list(&ListParams::default()).await.expect("list");
    assert_eq!(
        all.items.iter().map(|l| l.name_any()).collect::<Vec<_>>(),
        ["other", "shard-0", "shard-1"]
    );
    let ours = leases
        .list(&ListParams::default().labels("app=jobgate"))
        .await
        .expect("list by label");
    assert_eq!(
        ours.items.iter().map(|l| l.name_any()).collect::<Vec<_>>(),
        ["shard-0", "shard-1"]
    );
    let not_ours = leases
        .list(&ListParams::default().labels("app notin (jobgate)"))
        .await
        .expect("list by set");
    assert_eq!(
        not_ours.items.iter().map(|l| l.name_any()).collect::<Vec<_>>(),
        ["other"]
    );
    let elsewhere: Api<Lease> = Api::namespaced(client(&emulator), "kube-system");
    assert!(
        elsewhere
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );

    let deleted = leases
        .delete("shard-0", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(deleted.is_right(), "a Lease delete answers a Status");
    let gone = api_error(leases.get("shard-0").await);
    assert_eq!(gone.code, 404);
    let twice = api_error(leases.delete("shard-0", &DeleteParams::default()).await);
    assert_eq!((twice.code, twice.reason.as_str()), (404, "NotFound"));
    emulator.shutdown().await;
}

#[tokio::test]
async fn of_two_holders_racing_from_the_same_read_exactly_one_wins() {
    let emulator = Emulator::start().await.expect("start");
    let a: Api<Lease> = Api::namespaced(client(&emulator), "default");
    let b: Api<Lease> = Api::namespaced(client(&emulator), "default");
    let created = a
        .create(&PostParams::default(), &lease("shard-0", "nobody", json!({})))
        .await
        .expect("create");

    // Both candidates read the same version, then both try to take the lease.
    let seen_by_a = a.get("shard-0").await.expect("a reads");
    let seen_by_b = b.get("shard-0").await.expect("b reads");
    assert_eq!(
        seen_by_a.metadata.resource_version,
        seen_by_b.metadata.resource_version
    );
    let params = PostParams::default();
    let (want_a, want_b) = (
        taken_by(&seen_by_a, "replica-a"),
        taken_by(&seen_by_b, "replica-b"),
    );
    let (result_a, result_b) = tokio::join!(
        a.replace("shard-0", &params, &want_a),
        b.replace("shard-0", &params, &want_b),
    );
    let (winner, loser_name, loser_result, loser_api) = match (result_a, result_b) {
        (Ok(w), Err(e)) => (w, "replica-b", Err::<Lease, _>(e), &b),
        (Err(e), Ok(w)) => (w, "replica-a", Err(e), &a),
        (a, b) => panic!("exactly one replace must win: {a:?} / {b:?}"),
    };
    assert!(
        rv(&winner) > rv(&created),
        "a successful write bumps the resourceVersion"
    );
    assert_ne!(holder(&winner), Some(loser_name));
    let conflict = api_error(loser_result);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(conflict.message, conflict_message("shard-0"));
    let details = conflict.details.as_ref().expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("shard-0", "coordination.k8s.io", "leases")
    );

    // The loser re-reads, sees the winner, and can then write (e.g. hand-over after expiry).
    let fresh = loser_api.get("shard-0").await.expect("re-read");
    assert_eq!(fresh.metadata.resource_version, winner.metadata.resource_version);
    let taken = loser_api
        .replace("shard-0", &PostParams::default(), &taken_by(&fresh, loser_name))
        .await
        .expect("replace from the fresh read");
    assert_eq!(holder(&taken), Some(loser_name));
    assert!(rv(&taken) > rv(&winner));
    assert_eq!(taken.spec.as_ref().and_then(|s| s.lease_transitions), Some(2));

    // The winner's own stale copy now loses in turn.
    let stale = api_error(
        a.replace("shard-0", &PostParams::default(), &taken_by(&winner, "late"))
            .await,
    );
    assert_eq!(stale.code, 409);
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_lease_update_needs_a_resource_version_and_may_create() {
    let (emulator, leases) = start().await;
    // AllowCreateOnUpdate: a PUT to an absent lease creates it.
    let put = leases
        .replace(
            "fresh",
            &PostParams::default(),
            &lease("fresh", "replica-a", json!({})),
        )
        .await
        .expect("PUT creates an absent lease");
    assert_eq!(holder(&put), Some("replica-a"));
    assert!(put.metadata.uid.is_some());

    // No AllowUnconditionalUpdate: a PUT without resourceVersion is refused, unlike Jobs.
    let mut blind = taken_by(&put, "replica-b");
    blind.metadata.resource_version = None;
    let refused = api_error(leases.replace("fresh", &PostParams::default(), &blind).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        refused.message,
        "leases.coordination.k8s.io \"fresh\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    assert_eq!(
        holder(&leases.get("fresh").await.expect("get")),
        Some("replica-a")
    );

    // An unchanged write keeps the version; a changed one bumps it.
    let same = leases
        .replace("fresh", &PostParams::default(), &put)
        .await
        .expect("a no-op replace");
    assert_eq!(same.metadata.resource_version, put.metadata.resource_version);
    let renewed = leases
        .replace("fresh", &PostParams::default(), &taken_by(&put, "replica-a"))
        .await
        .expect("renew");
    assert!(rv(&renewed) > rv(&put));
    emulator.shutdown().await;
}

#[tokio::test]
async fn patches_apply_and_honour_a_resource_version_precondition() {
    let (emulator, leases) = start().await;
    let created = leases
        .create(&PostParams::default(), &lease("shard-0", "replica-a", json!({})))
        .await
        .expect("create");

    let merged = leases
        .patch(
            "shard-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "replica-b"}})),
        )
        .await
        .expect("merge patch without a precondition");
    assert_eq!(holder(&merged), Some("replica-b"));
    assert_eq!(
        merged.spec.as_ref().and_then(|s| s.lease_duration_seconds),
        Some(15)
    );
    assert!(rv(&merged) > rv(&created));

    // A resourceVersion inside the patch is a precondition.
    let stale = api_error(
        leases
            .patch(
                "shard-0",
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": created.metadata.resource_version},
                    "spec": {"holderIdentity": "replica-c"},
                })),
            )
            .await,
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(stale.message, conflict_message("shard-0"));
    let strategic = leases
        .patch(
            "shard-0",
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "metadata": {"resourceVersion": merged.metadata.resource_version},
                "spec": {"holderIdentity": "replica-c", "leaseTransitions": 2},
            })),
        )
        .await
        .expect("strategic patch at the current version");
    assert_eq!(holder(&strategic), Some("replica-c"));
    assert!(rv(&strategic) > rv(&merged));

    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/holderIdentity", "value": "replica-c"},
        {"op": "replace", "path": "/spec/holderIdentity", "value": "replica-d"},
    ]))
    .expect("a JSON patch");
    let patched = leases
        .patch("shard-0", &PatchParams::default(), &Patch::Json::<()>(json_patch))
        .await
        .expect("JSON patch");
    assert_eq!(holder(&patched), Some("replica-d"));

    let applied = leases
        .patch(
            "applied",
            &PatchParams::apply("jobgate"),
            &Patch::Apply(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "applied"},
                "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 10},
            })),
        )
        .await
        .expect("apply creates");
    assert_eq!(holder(&applied), Some("replica-a"));

    let absent = api_error(
        leases
            .patch(
                "absent",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {}})),
            )
            .await,
    );
    assert_eq!(absent.code, 404);
    emulator.shutdown().await;
}

#[tokio::test]
async fn lease_validation_follows_the_real_server() {
    let (emulator, leases) = start().await;
    let mut bad = lease("bad", "x", json!({}));
    bad.spec.as_mut().expect("spec").lease_duration_seconds = Some(0);
    let e = api_error(leases.create(&PostParams::default(), &bad).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Lease.coordination.k8s.io \"bad\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );

    let mut bad = lease("bad", "x", json!({}));
    bad.spec.as_mut().expect("spec").lease_transitions = Some(-1);
    let e = api_error(leases.create(&PostParams::default(), &bad).await);
    assert_eq!(e.code, 422);
    assert!(e.message.contains("spec.leaseTransitions"), "{}", e.message);

    // The CoordinatedLeaderElection fields are dropped (the gate is off by default).
    let mut coordinated = lease("coordinated", "x", json!({}));
    let spec = coordinated.spec.as_mut().expect("spec");
    spec.strategy = Some("OldestEmulationVersion".into());
    spec.preferred_holder = Some("y".into());
    let stored = leases
        .create(&PostParams::default(), &coordinated)
        .await
        .expect("create");
    let spec = stored.spec.expect("spec");
    assert_eq!((spec.strategy, spec.preferred_holder), (None, None));

    // An empty lease is valid and comes back with an empty spec.
    let empty: Lease = serde_json::from_value(json!({"metadata": {"name": "empty"}})).expect("lease");
    let stored = leases
        .create(&PostParams::default(), &empty)
        .await
        .expect("create");
    assert_eq!(stored.spec, Some(LeaseSpec::default()));
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_watch_sees_the_holder_change_hands() {
    let (emulator, leases) = start().await;
    let created = leases
        .create(&PostParams::default(), &lease("shard-0", "replica-a", json!({})))
        .await
        .expect("create");
    let list = leases.list(&ListParams::default()).await.expect("list");
    let from = list.metadata.resource_version.clone().expect("list rv");
    let mut stream = leases
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();

    let taken = leases
        .replace(
            "shard-0",
            &PostParams::default(),
            &taken_by(&created, "replica-b"),
        )
        .await
        .expect("take over");
    match next_event(&mut stream).await {
        WatchEvent::Modified(l) => {
            assert_eq!(holder(&l), Some("replica-b"));
            assert_eq!(l.metadata.resource_version, taken.metadata.resource_version);
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // A refused write is no change: the next event is the next successful write.
    let refused = leases
        .replace(
            "shard-0",
            &PostParams::default(),
            &taken_by(&created, "replica-c"),
        )
        .await;
    assert_eq!(api_error(refused).code, 409);
    let added = leases
        .create(&PostParams::default(), &lease("shard-1", "replica-a", json!({})))
        .await
        .expect("create shard-1");
    match next_event(&mut stream).await {
        WatchEvent::Added(l) => {
            assert_eq!(l.name_any(), "shard-1");
            assert_eq!(l.metadata.resource_version, added.metadata.resource_version);
        }
        other => panic!("expected ADDED, got {other:?}"),
    }
    leases
        .delete("shard-0", &DeleteParams::default())
        .await
        .expect("delete");
    match next_event(&mut stream).await {
        WatchEvent::Deleted(l) => {
            assert_eq!(l.name_any(), "shard-0");
            assert_eq!(holder(&l), Some("replica-b"));
            assert!(rv(&l) > rv(&added), "DELETED carries the deletion's version");
        }
        other => panic!("expected DELETED, got {other:?}"),
    }

    // From "0": the current state as ADDED.
    let mut initial = leases
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch from 0")
        .boxed();
    match next_event(&mut initial).await {
        WatchEvent::Added(l) => assert_eq!(l.name_any(), "shard-1"),
        other => panic!("expected ADDED, got {other:?}"),
    }
    emulator.shutdown().await;
}

#[tokio::test]
async fn lease_requests_are_counted_per_resource_and_verb() {
    let (emulator, leases) = start().await;
    emulator.reset_requests();
    let created = leases
        .create(&PostParams::default(), &lease("shard-0", "replica-a", json!({})))
        .await
        .expect("create");
    leases.get("shard-0").await.expect("get");
    leases.list(&ListParams::default()).await.expect("list");
    leases
        .replace(
            "shard-0",
            &PostParams::default(),
            &taken_by(&created, "replica-b"),
        )
        .await
        .expect("replace");
    let stale = leases
        .replace(
            "shard-0",
            &PostParams::default(),
            &taken_by(&created, "replica-c"),
        )
        .await;
    assert_eq!(api_error(stale).code, 409);
    leases
        .patch(
            "shard-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"leaseTransitions": 5}})),
        )
        .await
        .expect("patch");
    leases
        .delete("shard-0", &DeleteParams::default())
        .await
        .expect("delete");

    let counts = emulator.requests();
    for (verb, n) in [
        ("create", 1),
        ("get", 1),
        ("list", 1),
        ("update", 2),
        ("patch", 1),
        ("delete", 1),
        ("watch", 0),
    ] {
        assert_eq!(counts.of(LEASES, verb), n, "{verb}: {counts:?}");
    }
    emulator.shutdown().await;
}
