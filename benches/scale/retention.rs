//! Part 3: the retention sweep of a large store against `submitJob` latency, paced writers
//! before, during and after the first sweep.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection as _;

use crate::common::jobgate::{self, Process};
use crate::common::{Table, pct, submissions};
use crate::million::ensure_generated;
use crate::{Opts, ms};

/// One `submitJob` as the writers of the retention part send it: when it was sent, how long
/// its answer took, and whether it was accepted.
pub(crate) type Sample = (Instant, Duration, bool);

/// The retention sweep of a large store, against `submitJob` latency: retention must run
/// without stalling writers.
///
/// The store is the [`generate`]d one (a copy of `BENCH_KEEP`'s, which the sweep would
/// empty): finished jobs finished one every 2.6 s over 30 days, so with retention of one day
/// the first sweep deletes 29 in 30 of them, about 940,000 jobs with their events. Writers are
/// `submitJob`s of plain `["true"]` jobs paced at a fixed rate (each sent on time, whatever
/// the answers before it), which the local executor runs as they come:
///
/// 1. jobgate on the store with retention off: the idle latency;
/// 2. jobgate on the same store with `--retention-days` (its first sweep starts with it; the
///    next one an hour later): the latency while the sweep runs, which is over once
///    `jobgate_retention_deleted_jobs_total` has reached the jobs past retention and stayed
///    still for two seconds (submissions sent after its last change are not counted);
/// 3. the same server after the sweep, idle again.
pub(crate) async fn retention(opts: &Opts, table: &mut Table) {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let data_dir = temp.path().join("data");
    match &opts.keep {
        Some(keep) => {
            ensure_generated(keep, opts.jobs).await;
            std::fs::create_dir_all(&data_dir).expect("creating the data directory");
            let copied = Instant::now();
            // jobgate leaves the store checkpointed when it stops; a WAL, if any, goes along.
            for file in ["jobgate.db", "jobgate.db-wal"] {
                if keep.join(file).exists() {
                    std::fs::copy(keep.join(file), data_dir.join(file)).expect("copying the store");
                }
            }
            println!("copied the kept store in {:.1} s", copied.elapsed().as_secs_f64());
        }
        None => ensure_generated(&data_dir, opts.jobs).await,
    }
    let expired = past_retention(&data_dir, opts.retention_days).await;
    assert!(
        expired > 0,
        "no finished job is older than {} days",
        opts.retention_days
    );
    let what = format!(
        "retention of {} days on {} jobs (SQLite, batch {}), submitJob at {}/s",
        opts.retention_days,
        opts.jobs,
        opts.retention_batch.as_deref().unwrap_or("default"),
        opts.retention_rate
    );
    let body = submissions::body(&json!({"name": "writer", "command": ["true"]}));
    let log = "warn,jobgate::server=info";
    let start = |retention: bool| {
        let mut command = jobgate::command("full", &data_dir, log);
        if retention {
            command
                .arg("--retention-days")
                .arg(opts.retention_days.to_string())
                .args(["--retention-interval-ms", "3600000"]);
            if let Some(batch) = &opts.retention_batch {
                command.args(["--retention-batch", batch]);
            }
        }
        Process::start(&mut command, Duration::from_secs(600), |_| false)
    };
    // 1. Retention off.
    let mut server = start(false);
    submissions::many(&server.http, &server.url(), body.clone(), 100, 1)
        .await
        .assert_all_accepted("the warm-up");
    let idle = paced_for(&server, body.clone(), opts.retention_rate, opts.retention_idle).await;
    report_samples(table, &what, "idle, retention off", &idle);
    let problems = server.problems();
    server.stop().await;

    // 2. The sweep, from the start of the server that runs it.
    let mut server = start(true);
    let sweep_started = server.spawned + server.listening_after;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn(watch_sweep(
        server.http.clone(),
        format!("http://{}/metrics", server.addr),
        expired,
        done.clone(),
    ));
    let during = paced_until(&server, body.clone(), opts.retention_rate, done).await;
    let (deleted, last_change) = watcher.await.expect("the sweep's watcher");
    let swept = last_change - sweep_started;
    let during: Vec<Sample> = during.into_iter().filter(|s| s.0 < last_change).collect();
    report_samples(table, &what, "during the sweep", &during);
    let rate = deleted as f64 / swept.as_secs_f64();
    println!(
        "the sweep deleted {deleted} jobs ({expired} were past retention) in {:.1} s = {rate:.0} jobs/s",
        swept.as_secs_f64()
    );
    table.push((what.clone(), "jobs deleted".into(), deleted.to_string()));
    table.push((
        what.clone(),
        "sweep took".into(),
        format!("{:.1} s", swept.as_secs_f64()),
    ));
    table.push((what.clone(), "deleted jobs/s".into(), format!("{rate:.0}")));

    // 3. The same server, the sweep over.
    let after = paced_for(&server, body, opts.retention_rate, opts.retention_idle).await;
    report_samples(table, &what, "idle, after the sweep", &after);
    let problems = [problems, server.problems()].concat();
    server.stop().await;
    if !problems.is_empty() {
        println!("jobgate warned: {:?}", &problems[..problems.len().min(5)]);
    }
}

/// Prints and tables the `submitJob` times of one phase of the retention part.
fn report_samples(table: &mut Table, what: &str, phase: &str, samples: &[Sample]) {
    let mut times: Vec<Duration> = samples.iter().map(|s| s.1).collect();
    times.sort();
    let failed = samples.iter().filter(|s| !s.2).count();
    println!(
        "submitJob {phase}: {} sent, p50 {} p99 {} max {}, {failed} failed",
        times.len(),
        ms(pct(&times, 50.0)),
        ms(pct(&times, 99.0)),
        ms(*times.last().unwrap())
    );
    table.push((what.into(), format!("{phase}: p50"), ms(pct(&times, 50.0))));
    table.push((what.into(), format!("{phase}: p99"), ms(pct(&times, 99.0))));
    table.push((what.into(), format!("{phase}: max"), ms(*times.last().unwrap())));
    assert_eq!(failed, 0, "submissions failed {phase}");
}

/// How many finished jobs of the store in `data_dir` finished more than `days` days ago (by
/// their finishing event, as retention reads them).
async fn past_retention(data_dir: &Path, days: f64) -> u64 {
    let mut db =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", data_dir.join("jobgate.db").display()))
            .await
            .expect("opening the database");
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events e JOIN jobs j ON j.id = e.job_id \
         WHERE e.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') \
         AND j.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') \
         AND e.at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?1)",
    )
    .bind(format!("-{} seconds", days * 86_400.0))
    .fetch_one(&mut db)
    .await
    .expect("counting the jobs past retention");
    db.close().await.expect("closing the database");
    n as u64
}

/// Polls `jobgate_retention_deleted_jobs_total` until it has reached `expected` and not
/// moved for two seconds; then sets `done`. Returns the jobs deleted and when the count last
/// changed.
async fn watch_sweep(
    http: reqwest::Client,
    metrics: String,
    expected: u64,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> (u64, Instant) {
    let limit = Instant::now() + Duration::from_secs(3600);
    let (mut deleted, mut last_change) = (0, Instant::now());
    loop {
        let text = http
            .get(&metrics)
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics");
        let now: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("jobgate_retention_deleted_jobs_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("jobgate_retention_deleted_jobs_total") as u64;
        if now != deleted {
            (deleted, last_change) = (now, Instant::now());
        } else if deleted >= expected && last_change.elapsed() >= Duration::from_secs(2) {
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            return (deleted, last_change);
        }
        assert!(
            Instant::now() < limit,
            "the sweep deleted {deleted} of {expected} jobs in an hour"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `submitJob`s paced at `rate` per second for `secs`.
async fn paced_for(server: &Process, body: Arc<String>, rate: f64, secs: Duration) -> Vec<Sample> {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let timer = {
        let done = done.clone();
        tokio::spawn(async move {
            tokio::time::sleep(secs).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let samples = paced_until(server, body, rate, done).await;
    timer.await.expect("the timer");
    samples
}

/// `submitJob`s paced at `rate` per second until `done`, each sent on its tick whatever the
/// answers before it (at most 256 in flight); every answer waited for.
async fn paced_until(
    server: &Process,
    body: Arc<String>,
    rate: f64,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Sample> {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = tokio::task::JoinSet::new();
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        ticks.tick().await;
        let permit = in_flight.clone().acquire_owned().await.expect("semaphore");
        let (http, url, body) = (server.http.clone(), server.url(), body.clone());
        tasks.spawn(async move {
            let sent = Instant::now();
            let accepted = submissions::submit(&http, &url, &body).await;
            drop(permit);
            if let Err(e) = &accepted {
                println!("submitJob failed: {e}");
            }
            (sent, sent.elapsed(), accepted.is_ok())
        });
    }
    let mut samples = Vec::new();
    while let Some(sample) = tasks.join_next().await {
        samples.push(sample.expect("a submission"));
    }
    samples
}
