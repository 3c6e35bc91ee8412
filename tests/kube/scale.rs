//! Many at once: two hundred concurrent submissions create exactly two hundred Jobs, and the
//! API server's watch and list requests stay constant as subscribers grow.

use std::collections::HashSet;

use serde_json::json;

use crate::common::cluster::Cluster;
use crate::common::{self, GqlWs};
use crate::support::{assert_forward_only, history_until_all_terminal, input, status_events};

#[tokio::test]
async fn two_hundred_concurrent_submissions_create_exactly_two_hundred_jobs() {
    let Some(cluster) = Cluster::emulated("it counts the API server's requests").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let submissions = (0..200).map(|i| {
        let server = &server;
        async move {
            server
                .submit(input(&[], json!({"name": format!("many-{i}")})))
                .await
        }
    });
    let ids: HashSet<String> = futures::future::join_all(submissions).await.into_iter().collect();
    assert_eq!(ids.len(), 200);
    let events = history_until_all_terminal(&server, &ids).await;
    assert_forward_only(&events);
    let managed = cluster.managed_jobs().await;
    assert_eq!(managed.len(), 200, "one Job per job");
    assert!(managed.values().all(|jobs| jobs.len() == 1));
    assert_eq!(managed.keys().cloned().collect::<HashSet<_>>(), ids);
    let counts = cluster.emu().requests();
    assert_eq!(counts.of("jobs.batch", "create"), 200, "{counts:?}");
}

#[tokio::test]
async fn watch_and_list_requests_stay_constant_as_subscribers_grow() {
    let Some(cluster) = Cluster::emulated("it counts the API server's requests").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    let run_one = |tag: &'static str| {
        let server = &server;
        async move {
            let id = server.submit(input(&[], json!({"name": tag}))).await;
            assert_eq!(status_events(server, &id).await.last().unwrap().0, "SUCCEEDED");
        }
    };
    run_one("warm-up").await;
    let before = cluster.emu().requests();
    // 1,000 subscriptions: 10 sockets × 100 jobEvents subscriptions.
    let mut sockets = Vec::new();
    for _ in 0..10 {
        let mut ws = GqlWs::connect(&server).await;
        for s in 0..100 {
            ws.subscribe(
                &format!("s{s}"),
                "subscription { jobEvents { phase job { name } } }",
                json!({}),
            )
            .await;
        }
        sockets.push(ws);
    }
    // Every subscription has its place in the event stream before the job starts.
    let poll = common::Polling::start();
    while common::scrape(&server)
        .await
        .get("jobgate_subscription_group_members")
        .copied()
        != Some(1000.0)
    {
        poll.pause(|| "the 1,000 subscriptions never all became live".to_owned())
            .await;
    }
    run_one("watched").await;
    // Every subscriber sees the job through to its end.
    for ws in &mut sockets {
        let mut done = HashSet::new();
        while done.len() < 100 {
            let msg = ws.recv().await;
            let e = &msg["payload"]["data"]["jobEvents"];
            if e["job"]["name"] == "watched" && e["phase"] == "SUCCEEDED" {
                done.insert(msg["id"].as_str().unwrap().to_owned());
            }
        }
    }
    let after = cluster.emu().requests();
    eprintln!(
        "API requests with 1 subscriber: list {} watch {} (open watches {}); with 1,000: list {} watch {} (open watches {})",
        before.verb("list"),
        before.verb("watch"),
        before.open_watches,
        after.verb("list"),
        after.verb("watch"),
        after.open_watches
    );
    assert_eq!(after.verb("list"), before.verb("list"), "no list per subscriber");
    assert_eq!(
        after.verb("watch"),
        before.verb("watch"),
        "no watch per subscriber"
    );
    // deploy/base grants no CustomResourceDefinitions (deploy/overlays/workload-kinds does):
    // that watch was refused once at start and is not asked again.
    assert_eq!(after.open_watches, 2, "one watch of Jobs, one of Pods");
}
