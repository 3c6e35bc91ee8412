//! Webhook records: kept with their filter, scope, secret and owner; delivered by one
//! claimant at a time; outcomes land only under the claim and revision they were made for; a
//! disabled webhook stays disabled; a webhook's scope narrows only what the scope reads.

use std::sync::Arc;

use jobgate::model::{JobFilter, JobPhase, Scope};
use jobgate::store::{Store, Webhook, WebhookFailure};

use crate::support::team;

backend_tests!(
    webhooks_keep_their_filter_scope_secret_and_owner,
    a_webhook_is_delivered_by_one_claimant_until_its_claim_expires,
    a_disabled_webhook_is_never_claimed_again_and_keeps_its_first_reason,
    a_webhooks_scope_narrows_only_from_the_scope_read,
    a_webhook_outcome_lands_only_under_its_claim_and_revision,
);

fn webhook(id: &str, owner: &str, scope: Scope) -> Webhook {
    Webhook {
        id: id.to_owned(),
        owner: owner.to_owned(),
        url: format!("https://hooks.example.com/{id}"),
        filter: JobFilter {
            phases: Some(vec![JobPhase::Succeeded, JobPhase::Failed]),
            namespace: Some("team-a".into()),
            name_contains: Some("nightly".into()),
        },
        scope,
        secret: format!("whsec_{id}"),
        created_at: 1_700_000_000_000,
        cursor: 7,
        revision: 0,
        attempts: 0,
        failing_since: None,
        last_error: None,
        last_attempt_at: None,
        next_attempt_at: None,
        parked: false,
        claimed_by: None,
        disabled_reason: None,
        disabled_at: None,
    }
}

async fn webhooks_keep_their_filter_scope_secret_and_owner(store: Arc<dyn Store>) {
    let alices = webhook("w1", "token:alice", team("team-a"));
    let admins = webhook("w2", "token:admin", Scope::All);
    store.insert_webhook(&alices).await.unwrap();
    store.insert_webhook(&admins).await.unwrap();
    assert_eq!(store.webhook("w1").await.unwrap(), Some(alices.clone()));
    assert_eq!(store.webhook("w2").await.unwrap(), Some(admins.clone()));
    assert_eq!(
        store.webhooks(Some("token:alice")).await.unwrap(),
        vec![alices.clone()]
    );
    assert_eq!(store.webhooks(None).await.unwrap().len(), 2);
    assert!(store.delete_webhook("w1").await.unwrap());
    assert!(!store.delete_webhook("w1").await.unwrap());
    assert_eq!(store.webhook("w1").await.unwrap(), None);
}

async fn a_webhook_is_delivered_by_one_claimant_until_its_claim_expires(store: Arc<dyn Store>) {
    store
        .insert_webhook(&webhook("w1", "o", Scope::All))
        .await
        .unwrap();
    let held = store.claim_webhooks("a", 1_000, 31_000).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].claimed_by.as_deref(), Some("a"));
    // Another process gets nothing while the claim lasts; the holder renews it.
    assert!(store.claim_webhooks("b", 2_000, 32_000).await.unwrap().is_empty());
    assert_eq!(store.claim_webhooks("a", 20_000, 50_000).await.unwrap().len(), 1);
    assert!(
        store
            .claim_webhooks("b", 40_000, 70_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Not renewed in time: taken over.
    assert_eq!(store.claim_webhooks("b", 50_001, 80_000).await.unwrap().len(), 1);
    assert!(
        !store
            .webhook_delivered("w1", "a", 0, 9, Some(50_002))
            .await
            .unwrap()
    );
    // Released at shutdown: free at once.
    store.release_webhooks("b").await.unwrap();
    assert_eq!(store.claim_webhooks("a", 50_003, 80_003).await.unwrap().len(), 1);
}

async fn a_disabled_webhook_is_never_claimed_again_and_keeps_its_first_reason(store: Arc<dyn Store>) {
    store
        .insert_webhook(&webhook("w1", "token:alice", team("team-a")))
        .await
        .unwrap();
    assert_eq!(store.claim_webhooks("a", 1_000, 31_000).await.unwrap().len(), 1);
    assert!(
        store
            .disable_webhook("w1", "the API token \"alice\" no longer exists", 2_000)
            .await
            .unwrap()
    );
    let disabled = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!(
        disabled.disabled_reason.as_deref(),
        Some("the API token \"alice\" no longer exists")
    );
    assert_eq!(
        (disabled.disabled_at, disabled.claimed_by.as_deref()),
        (Some(2_000), None)
    );
    // Still listed, as its owner's, with the reason.
    assert_eq!(
        store.webhooks(Some("token:alice")).await.unwrap(),
        vec![disabled.clone()]
    );
    // No outcome lands on it, and no claim (renewal or takeover) takes it.
    assert!(
        !store
            .webhook_delivered("w1", "a", 0, 9, Some(3_000))
            .await
            .unwrap()
    );
    assert!(store.claim_webhooks("a", 3_000, 33_000).await.unwrap().is_empty());
    assert!(
        store
            .claim_webhooks("b", 40_000, 70_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Nor does a replay enable it again.
    assert!(store.replay_webhook("w1", 0).await.unwrap());
    assert!(
        store
            .claim_webhooks("a", 41_000, 71_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Disabled twice: the first reason stays.
    assert!(
        !store
            .disable_webhook("w1", "disabled by token:admin", 4_000)
            .await
            .unwrap()
    );
    let again = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!(again.disabled_reason, disabled.disabled_reason);
    assert_eq!(again.disabled_at, Some(2_000));
    assert!(!store.disable_webhook("missing", "r", 4_000).await.unwrap());
}

async fn a_webhooks_scope_narrows_only_from_the_scope_read(store: Arc<dyn Store>) {
    let both = Scope::namespaces(["team-a", "team-b"]);
    for (id, scope) in [("w1", both.clone()), ("w2", Scope::All)] {
        store
            .insert_webhook(&webhook(id, "jwt:[null,\"carol\"]", scope))
            .await
            .unwrap();
    }
    assert!(
        store
            .narrow_webhook_scope("w1", &both, &team("team-b"))
            .await
            .unwrap()
    );
    assert_eq!(store.webhook("w1").await.unwrap().unwrap().scope, team("team-b"));
    // A narrowing computed from a scope that has changed since misses.
    assert!(
        !store
            .narrow_webhook_scope("w1", &both, &team("team-a"))
            .await
            .unwrap()
    );
    assert_eq!(store.webhook("w1").await.unwrap().unwrap().scope, team("team-b"));
    // Every namespace (stored as NULL) narrows too.
    assert!(
        store
            .narrow_webhook_scope("w2", &Scope::All, &team("team-a"))
            .await
            .unwrap()
    );
    assert_eq!(store.webhook("w2").await.unwrap().unwrap().scope, team("team-a"));
    assert!(
        !store
            .narrow_webhook_scope("w2", &Scope::All, &team("team-b"))
            .await
            .unwrap()
    );
}

async fn a_webhook_outcome_lands_only_under_its_claim_and_revision(store: Arc<dyn Store>) {
    store
        .insert_webhook(&webhook("w1", "o", Scope::All))
        .await
        .unwrap();
    store.claim_webhooks("a", 1_000, 31_000).await.unwrap();
    let failure = WebhookFailure {
        attempts: 1,
        failing_since: 2_000,
        error: "the endpoint answered HTTP 500".into(),
        at: 2_000,
        next_attempt_at: Some(3_000),
    };
    assert!(store.webhook_failed("w1", "a", 0, &failure).await.unwrap());
    let failing = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!((failing.attempts, failing.next_attempt_at), (1, Some(3_000)));
    assert_eq!(
        failing.last_error.as_deref(),
        Some("the endpoint answered HTTP 500")
    );
    assert!(
        store
            .webhook_delivered("w1", "a", 0, 9, Some(3_000))
            .await
            .unwrap()
    );
    let delivered = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!(
        (delivered.cursor, delivered.attempts, delivered.last_error),
        (9, 0, None)
    );
    assert_eq!(delivered.last_attempt_at, Some(3_000));
    // Passing over events that do not match is no attempt.
    assert!(store.webhook_delivered("w1", "a", 0, 12, None).await.unwrap());
    assert_eq!(
        store.webhook("w1").await.unwrap().unwrap().last_attempt_at,
        Some(3_000)
    );
    // A replay moves the cursor back under a new revision: a delivery started before it
    // records nothing.
    assert!(store.replay_webhook("w1", 3).await.unwrap());
    assert!(
        !store
            .webhook_delivered("w1", "a", 0, 13, Some(4_000))
            .await
            .unwrap()
    );
    let replayed = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!((replayed.cursor, replayed.revision), (3, 1));
    // Parking gives up the claim; a parked endpoint is claimed by nobody until replayed.
    let parks = WebhookFailure {
        next_attempt_at: None,
        ..failure
    };
    assert!(store.webhook_failed("w1", "a", 1, &parks).await.unwrap());
    let parked = store.webhook("w1").await.unwrap().unwrap();
    assert!(parked.parked);
    assert_eq!(parked.claimed_by, None);
    assert!(store.claim_webhooks("a", 5_000, 35_000).await.unwrap().is_empty());
    assert!(store.replay_webhook("w1", 3).await.unwrap());
    assert_eq!(store.claim_webhooks("a", 5_000, 35_000).await.unwrap().len(), 1);
    assert!(!store.replay_webhook("nope", 3).await.unwrap());
}
