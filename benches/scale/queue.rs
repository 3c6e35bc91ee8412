//! Part 4: the local queue's overhead with `BENCH_QUEUE_JOBS` (10,000) jobs waiting, spread
//! over `BENCH_QUEUE_NAMESPACES` (4) namespaces, submitted by `submitJobs` calls of
//! `BENCH_BULK_SIZE` from `BENCH_BULK_CLIENTS` clients:
//!
//! - `uncapped`: no `--max-running`, `["true"]` jobs, each started as it is accepted (the
//!   executor runs them meanwhile on the same cores): acceptance with nothing waiting;
//! - `held`: no cap, every job `dependsOn` one `sleep 3600` job, so the service keeps them
//!   unfinished but not in the queue: the RSS they add, against which the queue's own share
//!   is read (such a job also costs a dependency edge, and is accepted by a slower path);
//! - `capped`: `--max-running 1`, one `sleep 3600` job holding the slot, then the same
//!   submissions of `sleep 3600` jobs, which all wait. On that server, once every waiting job
//!   has its reason recorded: the server's RSS against the same server before the
//!   submissions; `BENCH_QUEUE_LAUNCHES` (20) times, the time from sending `cancelJob` of the
//!   running job to the next job's RUNNING event over a `jobEvents` subscription (the
//!   samples spaced by 0-650 ms, so that they fall anywhere in the queue's 500 ms
//!   recomputation period); `BENCH_REPEAT` (200) reads of one waiting job's
//!   `queue { position localQueuePosition estimate }` and of `jobs(first: 100, PENDING)` with
//!   the same fields; then a restart on the same data directory: the time to listening, to
//!   the first positions readable (the queue rebuilt and one recomputation round), and the
//!   RSS then.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::SinkExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::bulk::{SUBMIT_JOBS, submit_jobs};
use crate::common::jobgate::{self, Process};
use crate::common::procfs::{cpu_secs, status_kib};
use crate::common::subscribers::{Receiver, open_socket};
use crate::common::{Table, WAIT, pct};
use crate::{Opts, ms};

const READ_ONE: &str = "query($id: ID!) { job(id: $id) { queue { position localQueuePosition estimate } } }";
const READ_PAGE: &str = "{ jobs(first: 100, filter: {phases: [PENDING]}) { edges { node { id queue { reason position localQueuePosition estimate } } } } }";
const STARTS: &str =
    "subscription { jobEvents(filter: {phases: [RUNNING]}) { phase previousPhase job { id } } }";

pub(crate) async fn queue(opts: &Opts, table: &mut Table) {
    submit_only(opts, table, "uncapped").await;
    held(opts, table).await;
    capped(opts, table).await;
}

/// The `submitJobs` bodies: `opts.queue_jobs` jobs of `command`, round-robin over the
/// namespaces, in calls of `opts.bulk_size`.
fn bodies(opts: &Opts, command: &[&str]) -> Vec<String> {
    let calls = opts.queue_jobs.div_ceil(opts.bulk_size);
    (0..calls)
        .map(|call| {
            let inputs: Vec<Value> = (0..opts.bulk_size.min(opts.queue_jobs - call * opts.bulk_size))
                .map(|i| {
                    json!({
                        "name": format!("q-{call}-{i}"),
                        "namespace": format!("q{}", i % opts.queue_namespaces),
                        "command": command,
                    })
                })
                .collect();
            json!({ "query": SUBMIT_JOBS, "variables": { "inputs": inputs } }).to_string()
        })
        .collect()
}

/// Sends the bodies from `opts.bulk_clients` clients; prints and tables the acceptance rate,
/// the per-call answer times, and the server's CPU seconds meanwhile.
async fn submit(opts: &Opts, server: &Process, bodies: Vec<String>, what: &str, table: &mut Table) {
    let pid = server.pid().to_string();
    let cpu_before = cpu_secs(&pid).0;
    let calls = bodies.len();
    // Popped from the end: reversed so that call 0 goes first and the order is the index.
    let bodies: Arc<Mutex<Vec<(usize, String)>>> =
        Arc::new(Mutex::new(bodies.into_iter().enumerate().rev().collect()));
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..opts.bulk_clients {
        let (http, url, bodies, size) = (server.http.clone(), server.url(), bodies.clone(), opts.bulk_size);
        clients.spawn(async move {
            let mut results = Vec::new();
            loop {
                let Some((index, body)) = bodies.lock().unwrap().pop() else {
                    return results;
                };
                let sent = Instant::now();
                let accepted = submit_jobs(&http, &url, body, size).await;
                results.push((index, sent.elapsed(), accepted));
            }
        });
    }
    let mut answers = Vec::new();
    let mut accepted = 0;
    let mut failures = Vec::new();
    while let Some(results) = clients.join_next().await {
        for (index, latency, result) in results.expect("a client") {
            answers.push((index, latency));
            match result {
                Ok(n) => accepted += n,
                Err(e) => failures.push(e),
            }
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_secs(&pid).0 - cpu_before;
    answers.sort();
    let mut latencies: Vec<Duration> = answers.iter().map(|(_, l)| *l).collect();
    // The first and last fifth of the calls, in the order sent: does a call slow as the queue
    // grows?
    let fifth = (calls / 5).max(1);
    let first: Duration = latencies[..fifth].iter().sum::<Duration>() / fifth as u32;
    let last: Duration = latencies[calls - fifth..].iter().sum::<Duration>() / fifth as u32;
    latencies.sort();
    let rate = accepted as f64 / elapsed.as_secs_f64();
    println!(
        "{what}: {accepted} accepted in {:.2} s = {rate:.0} jobs/s; per call p50 {} p99 {}; first/last fifth of calls {} / {}; server CPU {cpu:.2} s; {} failed {:?}",
        elapsed.as_secs_f64(),
        ms(pct(&latencies, 50.0)),
        ms(pct(&latencies, 99.0)),
        ms(first),
        ms(last),
        failures.len(),
        failures.first()
    );
    table.push((what.into(), "accepted jobs/s".into(), format!("{rate:.0}")));
    table.push((what.into(), "per call p50".into(), ms(pct(&latencies, 50.0))));
    table.push((
        what.into(),
        "per call, first / last fifth".into(),
        format!("{} / {}", ms(first), ms(last)),
    ));
    table.push((
        what.into(),
        "server CPU while accepting".into(),
        format!("{cpu:.2} s"),
    ));
    table.push((what.into(), "failed calls".into(), failures.len().to_string()));
}

/// A fresh uncapped server: acceptance of `["true"]` jobs, nothing waiting.
async fn submit_only(opts: &Opts, table: &mut Table, kind: &str) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut command = jobgate::command("full", dir.path(), "warn,jobgate::server=info");
    let mut server = Process::start(&mut command, WAIT, |_| false);
    let what = format!("{} jobs, {kind}, `true`", opts.queue_jobs);
    submit(opts, &server, bodies(opts, &["true"]), &what, table).await;
    report_problems(&server);
    server.stop().await;
}

/// A fresh uncapped server holding `opts.queue_jobs` jobs behind a dependency on a sleeping
/// job: unfinished jobs the service keeps that are not in the queue, for the memory the
/// queue's own structures add.
async fn held(opts: &Opts, table: &mut Table) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut command = jobgate::command("full", dir.path(), "warn,jobgate::server=info");
    let mut server = Process::start(&mut command, WAIT, |_| false);
    let gate = server
        .query(
            "mutation { submitJob(input: {name: \"gate\", command: [\"sleep\", \"3600\"]}) { job { id } } }",
            json!({}),
        )
        .await["submitJob"]["job"]["id"]
        .as_str()
        .expect("the gate's id")
        .to_owned();
    wait_phase(&server, &gate, "RUNNING").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = server.pid().to_string();
    let rss_empty = status_kib(&pid, "VmRSS:");
    let bodies: Vec<String> = bodies(opts, &["sleep", "3600"])
        .into_iter()
        .map(|body| {
            let mut body: Value = serde_json::from_str(&body).expect("a body");
            for input in body["variables"]["inputs"].as_array_mut().expect("inputs") {
                input["dependsOn"] = json!([gate]);
            }
            body.to_string()
        })
        .collect();
    let what = format!("{} jobs, uncapped, held by a dependency", opts.queue_jobs);
    submit(opts, &server, bodies, &what, table).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_full = status_kib(&pid, "VmRSS:");
    let per_job = (rss_full.saturating_sub(rss_empty) * 1024) as f64 / opts.queue_jobs as f64;
    println!(
        "held: RSS empty {rss_empty} KiB, with {} held {rss_full} KiB: {per_job:.0} bytes per job",
        opts.queue_jobs
    );
    table.push((
        what.clone(),
        "RSS empty / held".into(),
        format!("{} / {} MiB", rss_empty / 1024, rss_full / 1024),
    ));
    table.push((what, "RSS per held job".into(), format!("{per_job:.0} B")));
    report_problems(&server);
    server.stop().await;
}

fn capped_command(dir: &std::path::Path) -> std::process::Command {
    let mut command = jobgate::command("full", dir, "warn,jobgate::server=info");
    command.args(["--max-running", "1"]);
    command
}

async fn capped(opts: &Opts, table: &mut Table) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut server = Process::start(&mut capped_command(dir.path()), WAIT, |_| false);
    let blocker = server
        .query(
            "mutation { submitJob(input: {name: \"blocker\", namespace: \"q0\", command: [\"sleep\", \"3600\"]}) { job { id } } }",
            json!({}),
        )
        .await["submitJob"]["job"]["id"]
        .as_str()
        .expect("the blocker's id")
        .to_owned();
    wait_phase(&server, &blocker, "RUNNING").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = server.pid().to_string();
    let rss_empty = status_kib(&pid, "VmRSS:");
    let cpu_before = cpu_secs(&pid).0;
    let what = format!("{} jobs, --max-running 1, `sleep`", opts.queue_jobs);
    submit(opts, &server, bodies(opts, &["sleep", "3600"]), &what, table).await;
    let settled = Instant::now();
    let last_ids = wait_reasons_recorded(&server, opts).await;
    let settle = settled.elapsed();
    println!(
        "every waiting job's reason recorded {:.2} s after the last answer",
        settle.as_secs_f64()
    );
    let cpu = cpu_secs(&pid).0 - cpu_before;
    table.push((what.clone(), "all reasons recorded after".into(), ms(settle)));
    table.push((
        what.clone(),
        "server CPU, accepting + reasons".into(),
        format!("{cpu:.2} s"),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_full = status_kib(&pid, "VmRSS:");
    let per_job = (rss_full.saturating_sub(rss_empty) * 1024) as f64 / opts.queue_jobs as f64;
    println!(
        "RSS empty {rss_empty} KiB, with {} waiting {rss_full} KiB: {per_job:.0} bytes per waiting job",
        opts.queue_jobs
    );
    table.push((
        what.clone(),
        "RSS empty / waiting".into(),
        format!("{} / {} MiB", rss_empty / 1024, rss_full / 1024),
    ));
    table.push((
        what.clone(),
        "RSS per waiting job".into(),
        format!("{per_job:.0} B"),
    ));

    launches(opts, &server, &blocker, &what, table).await;
    reads(opts, &server, &last_ids[last_ids.len() / 2], &what, table).await;

    report_problems(&server);
    let stopped = server.stop().await;
    println!("stopped: {stopped}");
    let mut server = Process::start(&mut capped_command(dir.path()), Duration::from_secs(300), |_| {
        false
    });
    let listening = server.listening_after;
    let target = last_ids.last().expect("a job").clone();
    let began = Instant::now();
    loop {
        let data = server.query(READ_ONE, json!({"id": target})).await;
        if !data["job"]["queue"]["position"].is_null() {
            break;
        }
        assert!(
            began.elapsed() < WAIT,
            "no position after the restart within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let positions = began.elapsed();
    let rss_restart = status_kib(&server.pid().to_string(), "VmRSS:");
    println!(
        "restart: listening after {}, positions {} later, RSS {rss_restart} KiB",
        ms(listening),
        ms(positions)
    );
    table.push((
        what.clone(),
        "restart: start-up to listening".into(),
        ms(listening),
    ));
    table.push((
        what.clone(),
        "restart: then positions readable".into(),
        ms(positions),
    ));
    table.push((what, "restart: RSS".into(), format!("{} MiB", rss_restart / 1024)));
    report_problems(&server);
    server.stop().await;
}

async fn wait_phase(server: &Process, id: &str, phase: &str) {
    let began = Instant::now();
    loop {
        let data = server
            .query("query($id: ID!) { job(id: $id) { phase } }", json!({"id": id}))
            .await;
        if data["job"]["phase"] == phase {
            return;
        }
        assert!(
            began.elapsed() < WAIT,
            "job {id} not {phase} within {WAIT:?}: {data}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the newest waiting job of each namespace has its reason recorded (the keeper
/// records the nearest to start first, so these are the last); returns the ids of the
/// waiting jobs, oldest first (at most `opts.queue_jobs`, read page by page).
async fn wait_reasons_recorded(server: &Process, opts: &Opts) -> Vec<String> {
    let began = Instant::now();
    let limit = Duration::from_secs(120);
    for namespace in 0..opts.queue_namespaces {
        loop {
            let data = server
                .query(
                    "query($ns: String) { jobs(first: 1, filter: {phases: [PENDING], namespace: $ns}) { edges { node { id events { reason } } } } }",
                    json!({"ns": format!("q{namespace}")}),
                )
                .await;
            let events = &data["jobs"]["edges"][0]["node"]["events"];
            if events
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["reason"] == "WaitingForCapacity"))
            {
                break;
            }
            assert!(
                began.elapsed() < limit,
                "reasons not recorded within {limit:?}: {data}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut ids = Vec::new();
    let mut after = Value::Null;
    loop {
        let data = server
            .query(
                "query($after: String) { jobs(first: 500, after: $after, filter: {phases: [PENDING]}) { edges { node { id } } pageInfo { hasNextPage endCursor } } }",
                json!({"after": after}),
            )
            .await;
        for edge in data["jobs"]["edges"].as_array().expect("edges") {
            ids.push(edge["node"]["id"].as_str().expect("an id").to_owned());
        }
        if data["jobs"]["pageInfo"]["hasNextPage"] != true || ids.len() >= opts.queue_jobs {
            break;
        }
        after = data["jobs"]["pageInfo"]["endCursor"].clone();
    }
    // Pages are newest first.
    ids.reverse();
    ids
}

/// Hands each RUNNING event's job id, with when it arrived, to the bench.
struct Starts(mpsc::UnboundedSender<(String, Instant)>);

impl Receiver for Starts {
    type Sample = ();

    fn frame(&self, text: &str, _: DateTime<Utc>, _: &Mutex<Vec<()>>) {
        let now = Instant::now();
        let Ok(frame) = serde_json::from_str::<Value>(text) else {
            return self.fault(format!("not JSON: {text}"));
        };
        let event = &frame["payload"]["data"]["jobEvents"];
        if event["phase"] == "RUNNING"
            && event["previousPhase"] == "PENDING"
            && let Some(id) = event["job"]["id"].as_str()
        {
            let _ = self.0.send((id.to_owned(), now));
        }
    }

    fn fault(&self, what: String) {
        println!("subscriber: {what}");
    }
}

/// Cancels the running job and times the next job's RUNNING event, `opts.queue_launches`
/// times.
async fn launches(opts: &Opts, server: &Process, blocker: &str, what: &str, table: &mut Table) {
    let (sender, mut starts) = mpsc::unbounded_channel();
    let mut socket = open_socket(server.ws_url(), Arc::new(Starts(sender)))
        .await
        .expect("a subscriber");
    let subscribe = json!({"id": "s", "type": "subscribe", "payload": {"query": STARTS}});
    socket
        .sink
        .send(Message::text(subscribe.to_string()))
        .await
        .expect("subscribing");
    // Live once the server counts it as a member of a subscription group (its /metrics).
    let began = Instant::now();
    loop {
        let metrics = server
            .http
            .get(server.url().replace("/graphql", "/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap_or_default();
        let live = metrics
            .lines()
            .find_map(|l| l.strip_prefix("jobgate_subscription_group_members "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if live >= 1.0 {
            break;
        }
        assert!(
            began.elapsed() < WAIT,
            "the subscription not live within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut running = VecDeque::from([blocker.to_owned()]);
    let mut samples = Vec::new();
    let mut cancels = Vec::new();
    for i in 0..opts.queue_launches {
        // Anywhere in the 500 ms recomputation period.
        tokio::time::sleep(Duration::from_millis((i as u64 * 137) % 650)).await;
        let id = running.pop_front().expect("a running job");
        let sent = Instant::now();
        server
            .query(
                "mutation($id: ID!) { cancelJob(id: $id) { job { id } } }",
                json!({"id": id}),
            )
            .await;
        cancels.push(sent.elapsed());
        let (next, at) = tokio::time::timeout(WAIT, starts.recv())
            .await
            .expect("a job started within the limit")
            .expect("the subscriber is open");
        samples.push(at - sent);
        running.push_back(next);
    }
    drop(socket);
    let mut sorted = samples.clone();
    sorted.sort();
    cancels.sort();
    println!(
        "cancel → next RUNNING, {} samples: {:?}",
        samples.len(),
        samples
            .iter()
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
    );
    table.push((
        what.into(),
        "cancel → next RUNNING p50/p95/max".into(),
        format!(
            "{:.1} / {:.1} / {:.1} ms",
            pct(&sorted, 50.0).as_secs_f64() * 1000.0,
            pct(&sorted, 95.0).as_secs_f64() * 1000.0,
            sorted[sorted.len() - 1].as_secs_f64() * 1000.0
        ),
    ));
    table.push((
        what.into(),
        "cancelJob answer p50".into(),
        ms(pct(&cancels, 50.0)),
    ));
}

/// `opts.repeat` reads of one waiting job's place, and of a page of 100 waiting jobs.
async fn reads(opts: &Opts, server: &Process, id: &str, what: &str, table: &mut Table) {
    let one = json!({"query": READ_ONE, "variables": {"id": id}}).to_string();
    let page = json!({"query": READ_PAGE}).to_string();
    for (label, body) in [
        ("job(id).queue read", one),
        ("jobs(first: 100, PENDING) with queue", page),
    ] {
        let mut times = Vec::new();
        for i in 0..opts.repeat + 10 {
            let sent = Instant::now();
            let answer: Value = server
                .http
                .post(server.url())
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .expect("POST /graphql")
                .json()
                .await
                .expect("a JSON body");
            let took = sent.elapsed();
            assert!(answer.get("errors").is_none(), "{label} failed: {answer}");
            if i == 0 {
                println!(
                    "{label}: {}",
                    answer.to_string().chars().take(300).collect::<String>()
                );
            }
            if i >= 10 {
                times.push(took);
            }
        }
        times.sort();
        table.push((
            what.into(),
            format!("{label} p50/p95"),
            format!("{} / {}", ms(pct(&times, 50.0)), ms(pct(&times, 95.0))),
        ));
    }
}

fn report_problems(server: &Process) {
    let problems = server.problems();
    if !problems.is_empty() {
        println!("jobgate warned: {:?}", &problems[..problems.len().min(5)]);
    }
}
