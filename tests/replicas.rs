//! Several jobgate replicas on one PostgreSQL database (`--database-url`): each serves the
//! whole API, a change committed through one reaches subscribers of every other, in cursor
//! order and once, and a client resumes on any replica after its cursor with no gap. The
//! tests start a throwaway PostgreSQL server (tests/common/postgres.rs) and, for the
//! Kubernetes executor, the API emulator; replicas are real jobgate servers, driven over HTTP
//! and WebSocket.
//!
//! The replicas run in the test's process (`Server::start`), except those a test kills, pauses
//! or sends SIGTERM, which are spawned binaries (`Cluster::spawn_jobgate`), and the refused
//! start, which runs the binary (`CARGO_BIN_EXE_jobgate`).

mod common;

use std::collections::{BTreeMap, HashSet};

use common::cluster::Cluster;
use common::postgres::Postgres;
use common::{GqlWs, Server};
use jobgate::model::shard_of;
use serde_json::{Value, json};

/// The overlay the replicas are deployed with, whose RBAC they run under on the emulator:
/// deploy/overlays/ha (the base's Role, and the Leases they divide the work through).
const HA: &str = "ha";

/// A job input for the emulated kubelet (`image` is required on Kubernetes).
fn input(name: &str) -> Value {
    json!({"name": name, "image": "busybox:1.36", "command": ["echo", "hello"]})
}

/// How long replicas' Leases last here (15 s by default): a dead replica's shards are taken
/// over within it, and a new replica acts for its shards after it.
const LEASE_SECS: &str = "4";

/// The arguments of a replica on the Kubernetes executor sharing the database at `url`.
fn shared(url: &str) -> [&str; 4] {
    ["--database-url", url, "--lease-duration-secs", LEASE_SECS]
}

/// `count` replicas of jobgate on `cluster`, sharing the database at `url`.
async fn replicas(cluster: &Cluster, url: &str, count: usize) -> Vec<Server> {
    let mut servers = Vec::new();
    for _ in 0..count {
        servers.push(cluster.jobgate(&shared(url)).await);
    }
    servers
}

/// One event as a subscriber saw it: (cursor, job id, phase).
type Seen = (i64, String, String);

/// A `jobEvents` subscription from after `after` ("0": from the beginning).
async fn events_socket(server: &Server, after: &str) -> GqlWs {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe(
        "events",
        "subscription($after: String) { jobEvents(after: $after) { cursor phase job { id } } }",
        json!({ "after": after }),
    )
    .await;
    ws
}

/// Reads events until every job of `ids` has reached a terminal phase.
async fn until_all_terminal(ws: &mut GqlWs, ids: &HashSet<String>) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut done = HashSet::new();
    while !ids.is_subset(&done) {
        let msg = ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        assert!(e.is_object(), "not an event: {msg}");
        let cursor: i64 = e["cursor"].as_str().unwrap().parse().unwrap();
        let id = e["job"]["id"].as_str().unwrap().to_owned();
        let phase = e["phase"].as_str().unwrap().to_owned();
        if matches!(phase.as_str(), "SUCCEEDED" | "FAILED" | "CANCELLED") {
            done.insert(id.clone());
        }
        seen.push((cursor, id, phase));
    }
    seen
}

/// Cursors strictly grow: in order, none twice.
fn assert_in_order_once(seen: &[Seen]) {
    for pair in seen.windows(2) {
        assert!(
            pair[0].0 < pair[1].0,
            "cursor {} came after {}: {seen:?}",
            pair[1].0,
            pair[0].0
        );
    }
}

#[tokio::test]
async fn a_job_submitted_on_any_replica_reaches_subscribers_of_every_replica_in_order_once() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let Some(cluster) = Cluster::emulated_as("it counts the API server's requests", HA).await else {
        return;
    };
    let servers = replicas(&cluster, &pg.url(), 3).await;
    // Live subscribers on every replica before anything is submitted.
    let mut sockets = Vec::new();
    for server in &servers {
        sockets.push(events_socket(server, "0").await);
    }
    // Ten jobs through each replica, all at once.
    let submissions = (0..30).map(|i| {
        let server = &servers[i % servers.len()];
        async move { server.submit(input(&format!("replicated-{i}"))).await }
    });
    let ids: HashSet<String> = futures::future::join_all(submissions).await.into_iter().collect();
    assert_eq!(ids.len(), 30);

    let mut histories = Vec::new();
    for ws in &mut sockets {
        let seen = until_all_terminal(ws, &ids).await;
        assert_in_order_once(&seen);
        histories.push(seen);
    }
    // Every subscriber saw the same events, with the same cursors, in the same order; and
    // each job went PENDING, RUNNING, SUCCEEDED.
    for other in &histories[1..] {
        assert_eq!(other, &histories[0], "replicas disagree on the event log");
    }
    // Each replica published up to the last event, and says so to its monitoring.
    let last = histories[0].last().unwrap().0 as f64;
    for server in &servers {
        assert_eq!(
            common::scrape(server).await["jobgate_events_published_cursor"],
            last
        );
    }
    let mut phases: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (_, id, phase) in &histories[0] {
        let list = phases.entry(id.as_str()).or_default();
        if list.last() != Some(&phase.as_str()) {
            list.push(phase);
        }
    }
    for id in &ids {
        assert_eq!(
            phases[id.as_str()],
            ["PENDING", "RUNNING", "SUCCEEDED"],
            "job {id}"
        );
    }
    // Each replica reads every job, whoever accepted it.
    for server in &servers {
        for id in &ids {
            assert_eq!(server.job(id).await["phase"], "SUCCEEDED");
        }
    }
    // Launched once each, by one replica: one Job each, one create each.
    let managed = cluster.managed_jobs().await;
    assert_eq!(managed.len(), 30);
    assert!(managed.values().all(|jobs| jobs.len() == 1), "one Job per job");
    let counts = cluster.emu().requests();
    assert_eq!(counts.of("jobs.batch", "create"), 30, "{counts:?}");
}

#[tokio::test]
async fn a_client_resumes_on_another_replica_after_its_cursor_with_no_gap() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let cluster = Cluster::start_as(HA).await;
    let servers = replicas(&cluster, &pg.url(), 3).await;
    let first: HashSet<String> = [servers[0].submit(input("before")).await].into();
    let mut ws = events_socket(&servers[0], "0").await;
    let before = until_all_terminal(&mut ws, &first).await;
    let cursor = before.last().unwrap().0;
    drop(ws);

    // While the client is away, jobs are submitted through the other replicas.
    let mut later = HashSet::new();
    for (i, server) in servers[1..].iter().enumerate() {
        later.insert(server.submit(input(&format!("while-away-{i}"))).await);
    }
    // It resumes on the third replica after its cursor: exactly what came after it.
    let mut resumed = events_socket(&servers[2], &cursor.to_string()).await;
    let after = until_all_terminal(&mut resumed, &later).await;
    assert_in_order_once(&after);
    let mut reference = events_socket(&servers[1], "0").await;
    let all = until_all_terminal(&mut reference, &later).await;
    let expected: Vec<Seen> = all.into_iter().filter(|e| e.0 > cursor).collect();
    assert_eq!(after, expected);
    assert!(after.iter().all(|(_, id, _)| later.contains(id)));
}

/// Starts a second jobgate with the local executor on the database at `url`: it must refuse
/// to start, saying why (and never printing the URL, which may hold a password).
fn assert_second_local_replica_refused(url: &str) {
    let data = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_jobgate"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--local-trusted-tenants",
            "--database-url",
            url,
            "--data-dir",
        ])
        .arg(data.path())
        .env_remove("JOBGATE_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A jobgate that starts serves until stopped: it is given the wait limit to exit.
    let deadline = std::time::Instant::now() + common::WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second jobgate with the local executor started on the same database");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("the local executor runs on one replica only"),
        "{stderr}"
    );
    assert!(!stderr.contains(url), "{stderr}");
}

#[tokio::test]
async fn a_second_replica_with_the_local_executor_is_refused() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let url = pg.url();
    let first = Server::start(&["--database-url", &url]).await;
    let id = first.submit(json!({"command": ["true"]})).await;
    assert_second_local_replica_refused(&url);
    // The first one is unharmed.
    first.wait_terminal(&id).await;
    assert_eq!(first.job(&id).await["phase"], "SUCCEEDED");
}

#[tokio::test]
async fn a_replica_that_loses_the_database_goes_unready_refuses_and_recovers_by_itself() {
    let Some(mut pg) = Postgres::start_or_skip() else {
        return;
    };
    let server = Server::start(&["--database-url", &pg.url()]).await;
    let before = server.try_submit("before").await.expect("accepted");
    server.wait_phase(&before, "SUCCEEDED").await;

    // The database crashes: jobgate goes unready and refuses, changing nothing.
    pg.kill9();
    server.wait_ready_is(503).await;
    assert_eq!(server.try_submit("refused").await, Err("UNAVAILABLE".to_owned()));
    // Its monitoring sees the event log unreadable (read each second, wake-up or not).
    let polling = common::Polling::start();
    while common::scrape(&server).await["jobgate_event_log_read_failures_total"] == 0.0 {
        polling
            .pause(|| "no failed read of the event log was counted".to_owned())
            .await;
    }

    // It comes back: jobgate notices by itself, with no restart and no request.
    pg.restart();
    server.wait_ready_is(200).await;
    // Its claim on the database's local jobs died with the old server's sessions: it holds it
    // again, so a second jobgate with the local executor is still refused.
    assert_second_local_replica_refused(&pg.url());
    let after = server
        .try_submit("after")
        .await
        .expect("accepted once the database is back");
    server.wait_phase(&after, "SUCCEEDED").await;
    assert_eq!(server.job_names().await, ["after", "before"]);
}

#[tokio::test]
async fn a_database_that_hangs_gets_an_error_not_a_hung_request_and_recovers() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let server = Server::start(&["--database-url", &pg.url()]).await;
    let before = server.try_submit("before").await.expect("accepted");
    server.wait_phase(&before, "SUCCEEDED").await;

    // Frozen: connections stay open and nothing answers. A submission is answered (an
    // error, within jobgate's own time limits), and readiness fails.
    pg.pause();
    assert_eq!(server.try_submit("frozen").await, Err("UNAVAILABLE".to_owned()));
    server.wait_ready_is(503).await;

    pg.resume();
    server.wait_ready_is(200).await;
    let after = server
        .try_submit("after")
        .await
        .expect("accepted once the database answers");
    server.wait_phase(&after, "SUCCEEDED").await;
    assert_eq!(server.job_names().await, ["after", "before"]);
}

/// Submits `input`-shaped jobs to `server` from `clients` concurrent clients until `stop` is
/// set or the server stops answering; the ids answered.
fn submitters(
    server: &Server,
    clients: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Vec<String>>> {
    use std::sync::atomic::Ordering;
    let client = reqwest::Client::new();
    let url = server.url("/graphql");
    let body = json!({
        "query": "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }",
        "variables": {"input": input("burst")},
    });
    (0..clients)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            let (stop, answered) = (stop.clone(), answered.clone());
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let Ok(response) = client.post(&url).json(&body).send().await else {
                        break;
                    };
                    let Ok(value) = response.json::<Value>().await else {
                        break;
                    };
                    let Some(id) = value["data"]["submitJob"]["job"]["id"].as_str() else {
                        panic!("a live replica refused a submission: {value}");
                    };
                    accepted.push(id.to_owned());
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                accepted
            })
        })
        .collect()
}

/// The shards `server` acts for now, from its `/metrics`.
async fn shards_owned(server: &Server) -> u64 {
    let metrics = common::scrape(server).await;
    *metrics
        .get("jobgate_shards_owned")
        .unwrap_or_else(|| panic!("no jobgate_shards_owned in {metrics:?}")) as u64
}

/// Waits until `servers` divide the 32 shards between them, each owning some.
async fn until_shards_divided(servers: &[&Server]) {
    let polling = common::Polling::start();
    loop {
        let mut owned = Vec::new();
        for server in servers {
            owned.push(shards_owned(server).await);
        }
        if owned.iter().sum::<u64>() == 32 && owned.iter().all(|n| *n > 0) {
            return;
        }
        polling
            .pause(|| format!("the replicas own {owned:?} shards, not all 32 between them"))
            .await;
    }
}

/// Reads `count` events of a `jobEvents` subscription; the cursor of the last one.
async fn read_events(ws: &mut GqlWs, count: usize) -> i64 {
    let mut last = 0;
    for _ in 0..count {
        let msg = ws.recv().await;
        last = msg["payload"]["data"]["jobEvents"]["cursor"]
            .as_str()
            .unwrap_or_else(|| panic!("not an event: {msg}"))
            .parse()
            .unwrap();
    }
    last
}

#[tokio::test]
async fn kill_9_of_one_replica_then_another_mid_burst_loses_no_job_and_the_survivor_takes_over() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let cluster = Cluster::start_as(HA).await;
    let url = pg.url();
    let mut doomed = vec![
        cluster.spawn_jobgate(&shared(&url)).await,
        cluster.spawn_jobgate(&shared(&url)).await,
    ];
    let survivor = cluster.jobgate(&shared(&url)).await;
    let mut watcher = events_socket(&survivor, "0").await;
    let mut clients_of_doomed = Vec::new();
    for server in &doomed {
        clients_of_doomed.push(events_socket(server, "0").await);
    }
    until_shards_divided(&[&doomed[0], &doomed[1], &survivor]).await;

    // Four clients a replica submit continuously; one replica dies mid-burst, then another,
    // and with them every shard they owned: the survivor must take them all over.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut tasks = submitters(&survivor, 4, &stop, &answered);
    for server in &doomed {
        tasks.extend(submitters(server, 4, &stop, &answered));
    }
    let polling = common::Polling::start();
    let mut resume_after = Vec::new();
    for (server, client) in doomed.iter_mut().zip(&mut clients_of_doomed) {
        let before = answered.load(Ordering::Relaxed);
        while answered.load(Ordering::Relaxed) < before + 40 {
            polling
                .pause(|| "submissions are not being answered".to_owned())
                .await;
        }
        // Its client has read some events: it resumes on the survivor after the last one.
        resume_after.push(read_events(client, 3).await);
        server.kill9();
    }
    let after_kills = answered.load(Ordering::Relaxed);
    while answered.load(Ordering::Relaxed) < after_kills + 40 {
        polling
            .pause(|| "the survivor stopped answering".to_owned())
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut accepted = HashSet::new();
    for task in tasks {
        accepted.extend(task.await.unwrap());
    }

    // The survivor's subscriber sees every accepted job finish, in order, once: the jobs the
    // dead replicas had launched were adopted from their shards and followed to the end.
    let history = until_all_terminal(&mut watcher, &accepted).await;
    assert_in_order_once(&history);
    // Each dead replica's client resumes on the survivor with nothing missed.
    for last_seen in resume_after {
        let mut resumed = events_socket(&survivor, &last_seen.to_string()).await;
        let after = until_all_terminal(&mut resumed, &accepted).await;
        assert_in_order_once(&after);
        let expected: Vec<&Seen> = history.iter().filter(|e| e.0 > last_seen).collect();
        assert_eq!(
            after.iter().take(expected.len()).collect::<Vec<_>>(),
            expected,
            "the resumed stream differs from the survivor's"
        );
    }
    // Every accepted job ran once: one Job each.
    let managed = cluster.managed_jobs().await;
    for id in &accepted {
        assert_eq!(survivor.job(id).await["phase"], "SUCCEEDED", "job {id}");
        assert_eq!(managed.get(id).map(Vec::len), Some(1), "job {id}: one Job");
    }
    // Alone, it owns every shard.
    until_shards_divided(&[&survivor]).await;
}

#[tokio::test]
async fn job_status_and_job_logs_follow_on_a_replica_that_did_not_accept_the_job() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let Some(cluster) = Cluster::emulated_as(
        "it drives the emulated kubelet, scripts its pods through EMULATOR_GATE, EMULATOR_LOG",
        HA,
    )
    .await
    else {
        return;
    };
    let servers = replicas(&cluster, &pg.url(), 2).await;
    let mut job = input("gated");
    job["env"] = json!([
        {"name": "EMULATOR_LOG", "value": "alpha\nbeta"},
        {"name": "EMULATOR_GATE", "value": "logs"},
    ]);
    let id = servers[0].submit(job).await;
    let mut ws = GqlWs::connect(&servers[1]).await;
    ws.subscribe(
        "logs",
        "subscription($id: ID!) { jobLogs(id: $id, follow: true) { text } }",
        json!({"id": id}),
    )
    .await;
    ws.subscribe(
        "status",
        "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
        json!({"id": id}),
    )
    .await;
    let (mut lines, mut phases, mut completed) = (Vec::new(), Vec::new(), HashSet::new());
    while completed.len() < 2 {
        let msg = ws.recv().await;
        let op = msg["id"].as_str().unwrap().to_owned();
        match (msg["type"].as_str(), op.as_str()) {
            (Some("complete"), _) => {
                completed.insert(op);
            }
            (Some("next"), "logs") => {
                let text = msg["payload"]["data"]["jobLogs"]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                lines.push(text);
                // Both lines are there while the job still runs: now let it finish.
                if lines.len() == 2 {
                    // Its pod is listed here too, while it runs.
                    let pods = &servers[1].job_with(&id, "pods { name }").await["pods"];
                    assert_eq!(pods.as_array().map(Vec::len), Some(1), "{pods}");
                    cluster.emu().simulation().open_gate("logs");
                }
            }
            (Some("next"), "status") => {
                let phase = msg["payload"]["data"]["jobStatus"]["phase"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                if phases.last() != Some(&phase) {
                    phases.push(phase);
                }
            }
            _ => panic!("unexpected message: {msg}"),
        }
    }
    assert_eq!(lines, ["alpha", "beta"]);
    assert_eq!(phases.last().map(String::as_str), Some("SUCCEEDED"), "{phases:?}");
    // Finished: no pods shown, whichever replica is asked, once it knows the job finished
    // (another replica learns it from the shared event log, a moment later; meanwhile the
    // pods, which keep the log-archive finalizer until their log is stored, are still listed).
    for server in &servers {
        server.wait_terminal(&id).await;
        assert_eq!(server.job_with(&id, "pods { name }").await["pods"], json!([]));
    }
}

#[tokio::test]
async fn a_cancel_through_another_replica_stops_the_workload_and_every_replica_records_it() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let Some(cluster) = Cluster::emulated_as(
        "it counts the API server's requests, scripts its pods through EMULATOR_GATE",
        HA,
    )
    .await
    else {
        return;
    };
    let servers = replicas(&cluster, &pg.url(), 2).await;
    let mut job = input("held");
    job["env"] = json!([{"name": "EMULATOR_GATE", "value": "held"}]);
    let id = servers[0].submit(job).await;
    servers[1].wait_phase(&id, "RUNNING").await;
    assert_eq!(servers[1].cancel(&id).await, "CANCELLED");
    let name = format!("jobgate-{id}");
    cluster
        .until("the Job is deleted", || async {
            cluster.jobs().get_opt(&name).await.unwrap().is_none()
        })
        .await;
    // Both replicas say CANCELLED, and the job's history has it once, last.
    for server in &servers {
        assert_eq!(server.wait_terminal(&id).await.last().unwrap(), "CANCELLED");
    }
    for server in &servers {
        let events = &server.job_with(&id, "events { phase }").await["events"];
        let phases: Vec<&str> = events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases.last(), Some(&"CANCELLED"), "{phases:?}");
        assert_eq!(
            phases.iter().filter(|p| **p == "CANCELLED").count(),
            1,
            "{phases:?}"
        );
    }
    // The workload that was cancelled does not come back, nor is it recreated.
    let counts = cluster.emu().requests();
    assert_eq!(counts.of("jobs.batch", "create"), 1, "{counts:?}");
}

/// Sends `signal` to a spawned jobgate.
fn signal(server: &Server, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(server.pid()), signal).unwrap();
}

/// How many requests to the Kubernetes API `server` made with this verb that ended with this
/// code (`error`: no answer, or refused before it was sent), from its `/metrics`.
async fn kube_requests(server: &Server, verb: &str, code: &str) -> u64 {
    let (verb, code) = (format!("verb=\"{verb}\""), format!("code=\"{code}\""));
    common::scrape(server)
        .await
        .iter()
        .filter(|(series, _)| {
            series.starts_with("jobgate_kube_requests_total{")
                && series.contains(&verb)
                && series.contains(&code)
        })
        .map(|(_, value)| value)
        .sum::<f64>() as u64
}

#[tokio::test]
async fn a_replica_paused_longer_than_its_lease_does_not_act_when_it_resumes() {
    use nix::sys::signal::Signal;
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let Some(cluster) = Cluster::emulated_as(
        "it throttles the API server, counts the API server's requests",
        HA,
    )
    .await
    else {
        return;
    };
    let url = pg.url();
    // A alone: every shard is its own.
    let paused = cluster.spawn_jobgate(&shared(&url)).await;
    until_shards_divided(&[&paused]).await;

    // Its create of the next job is held up: the API server answers 429 and asks it to come
    // back in 40 s, which its Kubernetes client (kube-rs retries 429s) waits out.
    cluster.emu().throttle("jobs.batch", "create", 40);
    let id = paused.submit(input("fenced")).await;
    let polling = common::Polling::start();
    while cluster.emu().requests().injected_failures == 0 {
        polling
            .pause(|| "jobgate never tried to create the job".to_owned())
            .await;
    }
    // Paused mid-retry, for longer than its Lease.
    signal(&paused, Signal::SIGSTOP);
    let successor = cluster.jobgate(&shared(&url)).await;
    // The successor counts it dead once its Lease has not moved for a lease duration, and
    // takes every shard.
    until_shards_divided(&[&successor]).await;
    cluster.emu().unthrottle();
    // It launches the job (once the paused replica's claim on it has expired) and follows it
    // to the end; then the Job is cleaned up, as its TTL would.
    loop {
        let job = successor.job(&id).await;
        if job["phase"] == "SUCCEEDED" {
            break;
        }
        polling
            .pause(|| format!("the successor never ran the job: {job}"))
            .await;
    }
    let name = jobgate::executor::kube::manifest::workload_name(&id);
    cluster
        .jobs()
        .delete(&name, &kube::api::DeleteParams::background())
        .await
        .unwrap();
    while cluster.managed_jobs().await.contains_key(&id) {
        polling.pause(|| "the Job was never deleted".to_owned()).await;
    }

    // Resumed: the create it was waiting to retry comes due, and must be refused. It rejoins
    // and takes its share of shards back, which must not revive that create either.
    signal(&paused, Signal::SIGCONT);
    // Its client's create ends in an error: the retry was refused before it was sent (on a
    // replica without fencing it is answered 201, and a second Job runs).
    while kube_requests(&paused, "create", "error").await == 0 {
        polling
            .pause(|| "the resumed replica's stale create never ended".to_owned())
            .await;
    }
    until_shards_divided(&[&paused, &successor]).await;
    // One Job was ever created for the job (the successor's), and it is gone: no second run.
    let counts = cluster.emu().requests();
    assert_eq!(
        counts.of("jobs.batch", "create") - counts.injected_failures,
        1,
        "{counts:?}"
    );
    assert!(
        !cluster.managed_jobs().await.contains_key(&id),
        "a second Job was created"
    );
    let job = successor.job(&id).await;
    assert_eq!(job["phase"], "SUCCEEDED", "{job}");
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

/// Waits until every job of `ids` is in `phase` on `server`.
async fn until_phase(server: &Server, ids: &[String], phase: &str) {
    let polling = common::Polling::start();
    for id in ids {
        loop {
            let job = server.job(id).await;
            if job["phase"] == phase {
                break;
            }
            polling
                .pause(|| format!("job {id} never reached {phase}: {job}"))
                .await;
        }
    }
}

#[tokio::test]
async fn a_replica_joining_takes_over_running_jobs_of_its_shards_and_one_leaving_hands_them_back() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let Some(cluster) = Cluster::emulated_as(
        "it drives the emulated kubelet, scripts its pods through EMULATOR_GATE",
        HA,
    )
    .await
    else {
        return;
    };
    let url = pg.url();
    let first = cluster.jobgate(&shared(&url)).await;
    until_shards_divided(&[&first]).await;
    // Jobs held running by a closed gate, all launched and followed by the first replica.
    let mut held = input("held");
    held["env"] = json!([{"name": "EMULATOR_GATE", "value": "rebalance"}]);
    let mut ids = Vec::new();
    for _ in 0..24 {
        ids.push(first.submit(held.clone()).await);
    }
    until_phase(&first, &ids, "RUNNING").await;
    let mut subscriber = events_socket(&first, "0").await;

    // A second replica joins: the first gives it its share of the shards, and with them the
    // running jobs of those shards, which only the second follows from then on.
    let mut second = cluster.spawn_jobgate(&shared(&url)).await;
    until_shards_divided(&[&first, &second]).await;
    let (mine, theirs) = (shards_of(&first).await, shards_of(&second).await);
    assert!(mine.is_disjoint(&theirs), "{mine:?} and {theirs:?} overlap");
    let moved: Vec<&String> = ids.iter().filter(|id| theirs.contains(&shard_of(id))).collect();
    assert!(!moved.is_empty(), "24 random jobs, none in half the shards");
    // They finish: the second, which adopted them, reports it; every subscriber sees every
    // job finish once, in order.
    cluster.emu().simulation().open_gate("rebalance");
    let all: HashSet<String> = ids.iter().cloned().collect();
    let seen = until_all_terminal(&mut subscriber, &all).await;
    assert_in_order_once(&seen);
    until_phase(&second, &ids, "SUCCEEDED").await;

    // The second leaves (SIGTERM): it stops acting and deletes its Lease, and the first takes
    // every shard back; jobs of the shards it had run to the end.
    assert!(second.terminate().await.success());
    until_shards_divided(&[&first]).await;
    let mut later = Vec::new();
    while !later.iter().any(|id: &String| theirs.contains(&shard_of(id))) {
        later.push(first.submit(input("later")).await);
    }
    until_phase(&first, &later, "SUCCEEDED").await;
    let managed = cluster.managed_jobs().await;
    for id in ids.iter().chain(&later) {
        assert_eq!(managed.get(id).map(Vec::len), Some(1), "job {id}: one Job");
    }
}
