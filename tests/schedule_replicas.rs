//! Schedules on replicas: three jobgate replicas on one PostgreSQL database with the
//! Kubernetes executor (the emulator, or the cluster of `JOBGATE_TEST_KUBECONFIG`), dividing
//! the 32 shards through Leases. A schedule's ticks are fired by the replica acting for the
//! schedule's shard (only it: the others' logs show no firing): each tick starts one job (one
//! Kubernetes Job), whichever replica a client asks, and every replica pushes each tick to its
//! subscribers; when the replica acting for
//! the shard is killed, a successor takes the shard over and fires the ticks that follow, each
//! once.
//!
//! Waits look at the API again and again (`Polling`) until what the test waits for is there.

mod common;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use common::cluster::Cluster;
use common::postgres::Postgres;
use common::{GqlWs, Polling, Server};
use jobgate::model::shard_of;
use serde_json::{Value, json};

/// The overlay the replicas are deployed with (its RBAC grants the Leases).
const HA: &str = "ha";

const CREATE: &str =
    "mutation($input: CreateScheduleInput!) { createSchedule(input: $input) { schedule { id } } }";

const RUNS: &str = "query($id: ID!) { schedule(id: $id) { recentRuns(last: 100) { tick job { id spec { idempotencyKey } schedule { id } } } } }";

/// A replica's arguments: the shared database, short Leases (a dead replica's shards are
/// taken over within 4 s), and rules that may fire every second.
fn replica_args(url: &str) -> [&str; 6] {
    [
        "--database-url",
        url,
        "--lease-duration-secs",
        "4",
        "--schedule-min-interval-secs",
        "1",
    ]
}

fn schedule_input(name: &str, cron: &str) -> Value {
    json!({
        "name": name,
        "cron": cron,
        "startingDeadlineSeconds": 60,
        "job": { "name": name, "image": "busybox:1.36", "command": ["echo", "tick"] },
    })
}

/// The shards `server` acts for now, from its `/metrics`.
async fn shards_of(server: &Server) -> HashSet<u32> {
    common::scrape(server)
        .await
        .iter()
        .filter(|(_, value)| **value == 1.0)
        .filter_map(|(series, _)| {
            series
                .strip_prefix("jobgate_shard_acted_for{shard=\"")?
                .strip_suffix("\"}")
        })
        .map(|shard| shard.parse().unwrap())
        .collect()
}

/// Waits until `servers` divide the 32 shards between them, each acting for some.
async fn until_shards_divided(servers: &[&Server]) {
    let polling = Polling::start();
    loop {
        let mut owned = Vec::new();
        for server in servers {
            owned.push(shards_of(server).await.len());
        }
        if owned.iter().sum::<usize>() == 32 && owned.iter().all(|n| *n > 0) {
            return;
        }
        polling
            .pause(|| format!("the replicas act for {owned:?} shards, not all 32 between them"))
            .await;
    }
}

/// A schedule's runs as `server` reads them: (tick, job id, idempotency key), newest first.
async fn runs(server: &Server, id: &str) -> Vec<(Option<DateTime<Utc>>, String, String)> {
    let data = server.gql_ok(RUNS, json!({ "id": id })).await;
    data["schedule"]["recentRuns"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {data}"))
        .iter()
        .map(|run| {
            assert_eq!(
                run["job"]["schedule"]["id"], id,
                "a run not linked to its schedule: {run}"
            );
            let tick = run["tick"].as_str().map(|t| t.parse().unwrap());
            let job = run["job"]["id"].as_str().unwrap().to_owned();
            let key = run["job"]["spec"]["idempotencyKey"].as_str().unwrap().to_owned();
            (tick, job, key)
        })
        .collect()
}

/// Each tick ran once: no tick, job or idempotency key twice.
fn assert_each_tick_once(runs: &[(Option<DateTime<Utc>>, String, String)]) {
    let mut ticks = HashSet::new();
    let mut jobs = HashSet::new();
    let mut keys = HashSet::new();
    for (tick, job, key) in runs {
        let tick = tick.unwrap_or_else(|| panic!("a run with no tick: {runs:?}"));
        assert!(ticks.insert(tick), "tick {tick} ran twice: {runs:?}");
        assert!(jobs.insert(job), "job {job} listed twice: {runs:?}");
        assert!(keys.insert(key), "key {key} used twice: {runs:?}");
    }
}

/// Every job of `runs` is one Kubernetes Job.
async fn assert_one_workload_each(cluster: &Cluster, runs: &[(Option<DateTime<Utc>>, String, String)]) {
    let polling = Polling::start();
    loop {
        let managed = cluster.managed_jobs().await;
        let counts: HashMap<&str, usize> = runs
            .iter()
            .map(|(_, job, _)| (job.as_str(), managed.get(job).map_or(0, Vec::len)))
            .collect();
        assert!(
            counts.values().all(|n| *n <= 1),
            "a job with several Jobs: {counts:?}"
        );
        if counts.values().all(|n| *n == 1) {
            return;
        }
        polling
            .pause(|| format!("not every run has its Job yet: {counts:?}"))
            .await;
    }
}

#[tokio::test]
async fn on_three_replicas_each_tick_starts_one_job_and_every_replica_pushes_it() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let cluster = Cluster::start_as(HA).await;
    let url = pg.url();
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(cluster.jobgate(&replica_args(&url)).await);
    }
    until_shards_divided(&servers.iter().collect::<Vec<_>>()).await;
    let mut acting_before = Vec::new();
    for server in &servers {
        acting_before.push(shards_of(server).await);
    }
    let mut sockets = Vec::new();
    for server in &servers {
        let mut ws = GqlWs::connect(server).await;
        ws.subscribe(
            "ticks",
            "subscription { scheduleEvents(after: \"0\") { cursor kind scheduleId jobId } }",
            json!({}),
        )
        .await;
        sockets.push(ws);
    }

    let created = servers[0]
        .gql_ok(
            CREATE,
            json!({ "input": schedule_input("every-second", "* * * * * *") }),
        )
        .await;
    let id = created["createSchedule"]["schedule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Read through another replica than the one it was created on.
    let polling = Polling::start();
    let seen = loop {
        let seen = runs(&servers[1], &id).await;
        if seen.len() >= 6 {
            break seen;
        }
        polling
            .pause(|| format!("schedule {id} started {} runs, not 6", seen.len()))
            .await;
    };
    assert_each_tick_once(&seen);
    assert_one_workload_each(&cluster, &seen).await;

    // Only the replica acting for the schedule's shard fired its ticks (the others leave them,
    // rather than firing each and finding the job through the tick's key), as their logs say.
    let shard = shard_of(&id);
    let mut acting = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        acting.push(acting_before[i].contains(&shard) || shards_of(server).await.contains(&shard));
    }
    for (i, server) in servers.iter().enumerate() {
        let fired = server
            .log_text()
            .lines()
            .filter(|l| l.contains("schedules: tick fired") && l.contains(id.as_str()))
            .count();
        assert!(
            acting[i] || fired == 0,
            "replica {i}, not acting for shard {shard} (acting: {acting:?}), fired {fired} ticks of {id}"
        );
    }

    // Every replica pushes each tick's job once, in cursor order.
    let fired: HashSet<&str> = seen.iter().map(|(_, job, _)| job.as_str()).collect();
    for ws in &mut sockets {
        let mut last_cursor = 0_i64;
        let mut pushed = HashSet::new();
        while !fired.iter().all(|job| pushed.contains(*job)) {
            let message = ws.recv().await;
            assert_eq!(message["type"], "next", "{message}");
            let event = &message["payload"]["data"]["scheduleEvents"];
            let cursor: i64 = event["cursor"].as_str().unwrap().parse().unwrap();
            assert!(cursor > last_cursor, "cursor {cursor} after {last_cursor}");
            last_cursor = cursor;
            if event["kind"] == "FIRED" {
                assert_eq!(event["scheduleId"], id.as_str());
                let job = event["jobId"].as_str().unwrap().to_owned();
                assert!(pushed.insert(job.clone()), "job {job} pushed twice");
            }
        }
    }
}

#[tokio::test]
async fn the_replica_acting_for_a_schedule_killed_leaves_its_next_ticks_to_a_successor_once_each() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let cluster = Cluster::start_as(HA).await;
    let url = pg.url();
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(cluster.spawn_jobgate(&replica_args(&url)).await);
    }
    until_shards_divided(&servers.iter().collect::<Vec<_>>()).await;
    let created = servers[0]
        .gql_ok(
            CREATE,
            json!({ "input": schedule_input("every-two-seconds", "*/2 * * * * *") }),
        )
        .await;
    let id = created["createSchedule"]["schedule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shard = shard_of(&id);

    // The replica acting for the schedule's shard fires it: kill it once it has.
    let polling = Polling::start();
    let owner = loop {
        let mut acting = Vec::new();
        for (i, server) in servers.iter().enumerate() {
            if shards_of(server).await.contains(&shard) {
                acting.push(i);
            }
        }
        if acting.len() == 1 && !runs(&servers[acting[0]], &id).await.is_empty() {
            break acting[0];
        }
        polling
            .pause(|| format!("replicas {acting:?} act for shard {shard}, or no run yet"))
            .await;
    };
    let mut killed = servers.remove(owner);
    killed.kill9();
    let killed_at = Utc::now();

    // A successor acts for the shard and goes on firing: three ticks after the kill, each once.
    let survivor = &servers[0];
    let polling = Polling::start();
    let seen = loop {
        let seen = runs(survivor, &id).await;
        let after_kill = seen
            .iter()
            .filter(|(tick, _, _)| tick.is_some_and(|t| t > killed_at))
            .count();
        if after_kill >= 3 {
            break seen;
        }
        polling
            .pause(|| format!("{after_kill} runs of ticks after the kill, not 3: {seen:?}"))
            .await;
    };
    assert_each_tick_once(&seen);
    assert_one_workload_each(&cluster, &seen).await;
    let mut successors = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        if shards_of(server).await.contains(&shard) {
            successors.push(i);
        }
    }
    assert_eq!(
        successors.len(),
        1,
        "replicas {successors:?} act for shard {shard}"
    );
}
