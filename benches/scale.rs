//! Scale benchmark of a real `jobgate` server on this machine, over 127.0.0.1 only:
//! bulk submission throughput, and reads at a million jobs.
//!
//! `cargo bench --bench scale` builds the `jobgate` binary with the bench profile and runs it
//! (common::jobgate) with a temporary data directory on SQLite (`--durability full`, the
//! default), as two parts:
//!
//! 1. **bulk**: `submitJobs` calls of `BENCH_BULK_SIZE` jobs from `BENCH_BULK_CLIENTS`
//!    concurrent HTTP clients, `BENCH_BULK_CALLS` calls in all, on a fresh server for each of
//!    two kinds of job:
//!    - `run`: plain `["true"]` jobs, accepted while the local executor launches and runs them
//!      as fast as it can on the same two cores (it runs a few hundred a second, so it falls
//!      behind at once: acceptance is measured as the answers, each durable, and execution as
//!      the time until the last job finished, separately).
//!    - `held`: every job depends on one job that sleeps for the whole run, so it is accepted,
//!      durable and answered, but nothing is launched. Each such job costs more than a plain
//!      one (an edge in `job_dependencies`, a second event `WaitingForDependencies`, and it
//!      takes the path of a single submission: a few statements each), so this is the rate
//!      for jobs with dependencies, not a bound of plain acceptance.
//!
//!    Printed: accepted jobs/s (jobs accepted / wall time of all calls), the p50/p99 of one
//!    call's answer time, and for `run` the jobs finished per second until the last one.
//! 2. **million**: a store of `BENCH_JOBS` jobs (1,000,000) written straight into SQLite by
//!    SQL (not through the API; see [`generate`]), then jobgate started on it, and each read the
//!    API and the dashboard make timed `BENCH_REPEAT` times in a row over HTTP (p50/p99/max
//!    per request): the `jobs` page as the dashboard asks it (25 rows with `totalCount`) first
//!    and deep (after a cursor halfway and near the end), with each filter (phase, namespace,
//!    name, combined) and as a caller scoped to two namespaces; `jobStats`; `namespaces`; the
//!    dashboard's three initial queries together. Also the start-up time of jobgate on that
//!    store (which loads its unfinished jobs).
//! 3. **retention** (only when asked: `BENCH_PARTS=retention`; see [`retention`]): a copy of
//!    that store, where 29 in 30 finished jobs are older than `BENCH_RETENTION_DAYS` [1],
//!    with `submitJob` paced at `BENCH_RETENTION_RATE` [50] per second over HTTP, first for
//!    `BENCH_RETENTION_IDLE_SECS` [30] on jobgate with retention off, then on jobgate with
//!    `--retention-days` for as long as its first sweep runs, then as long again on that
//!    server once the sweep is over. Printed: the p50/p99/max of `submitJob` in each phase,
//!    the jobs the sweep deleted, how long it took and the jobs deleted per second.
//!
//! Knobs (environment variables; defaults in brackets): `BENCH_PARTS` [bulk,million],
//! `BENCH_BULK_CALLS` [40], `BENCH_BULK_SIZE` [1000], `BENCH_BULK_CLIENTS` [2],
//! `BENCH_BULK_KINDS` [run,held], `BENCH_JOBS` [1000000], `BENCH_REPEAT` [200],
//! `BENCH_KEEP` [unset: a directory to keep the generated store in, and to reuse it from if
//! it is there; the retention part sweeps a copy of it], `BENCH_RETENTION_DAYS`,
//! `BENCH_RETENTION_RATE`, `BENCH_RETENTION_IDLE_SECS`, `BENCH_RETENTION_BATCH` [unset: jobgate's
//! default `--retention-batch`].
//!
//! Every wait has a time limit. Without `--bench` (as under `cargo test --benches`) the
//! program does nothing. BENCHMARKS.md has the figures.
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::jobgate::{self, Process};
use common::{Table, WAIT, pct, print_table, submissions};
use serde_json::{Value, json};
use sqlx::Connection as _;

struct Opts {
    parts: Vec<String>,
    bulk_calls: usize,
    bulk_size: usize,
    bulk_clients: usize,
    bulk_kinds: Vec<String>,
    jobs: i64,
    repeat: usize,
    keep: Option<PathBuf>,
    retention_days: f64,
    retention_rate: f64,
    retention_idle: Duration,
    retention_batch: Option<String>,
}

impl Opts {
    fn from_env() -> Opts {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
        let list = |name: &str, default: &str| -> Vec<String> {
            var(name, default)
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let number = |name: &str, default: &str| -> i64 {
            var(name, default)
                .parse()
                .unwrap_or_else(|_| panic!("{name} must be a number"))
        };
        Opts {
            parts: list("BENCH_PARTS", "bulk,million"),
            bulk_calls: number("BENCH_BULK_CALLS", "40") as usize,
            bulk_size: number("BENCH_BULK_SIZE", "1000") as usize,
            bulk_clients: number("BENCH_BULK_CLIENTS", "2") as usize,
            bulk_kinds: list("BENCH_BULK_KINDS", "run,held"),
            jobs: number("BENCH_JOBS", "1000000"),
            repeat: number("BENCH_REPEAT", "200") as usize,
            keep: std::env::var_os("BENCH_KEEP").map(PathBuf::from),
            retention_days: var("BENCH_RETENTION_DAYS", "1")
                .parse()
                .expect("BENCH_RETENTION_DAYS must be a number"),
            retention_rate: number("BENCH_RETENTION_RATE", "50") as f64,
            retention_idle: Duration::from_secs(number("BENCH_RETENTION_IDLE_SECS", "30") as u64),
            retention_batch: std::env::var("BENCH_RETENTION_BATCH").ok(),
        }
    }
}

fn main() {
    common::main("scale", || run(Opts::from_env()));
}

async fn run(opts: Opts) {
    let mut table = Table::new();
    if opts.parts.iter().any(|p| p == "bulk") {
        for kind in &opts.bulk_kinds {
            bulk(&opts, kind, &mut table).await;
        }
    }
    if opts.parts.iter().any(|p| p == "million") {
        million(&opts, &mut table).await;
    }
    if opts.parts.iter().any(|p| p == "retention") {
        retention(&opts, &mut table).await;
    }
    print_table(&table, ["measured", "figure", "value"], [58, 22, 14]);
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

// ---------------------------------------------------------------------------------------------
// Part 1: bulk submission

const SUBMIT_JOBS: &str = "mutation($inputs: [SubmitJobInput!]!) {
  submitJobs(inputs: $inputs) { jobs { id } errors { index code message } }
}";

/// One `submitJobs` call; returns the number of jobs accepted, or why it failed.
async fn submit_jobs(http: &reqwest::Client, url: &str, body: String, size: usize) -> Result<usize, String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request: {e}"))?;
    let answer: Value = response.json().await.map_err(|e| format!("body: {e}"))?;
    if let Some(errors) = answer.get("errors") {
        return Err(errors.to_string());
    }
    let payload = &answer["data"]["submitJobs"];
    let refused = payload["errors"].as_array().map_or(0, Vec::len);
    if refused > 0 {
        return Err(format!("{refused} refused: {}", payload["errors"][0]));
    }
    Ok(size - refused)
}

async fn bulk(opts: &Opts, kind: &str, table: &mut Table) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut command = jobgate::command("full", dir.path(), "warn,jobgate::server=info");
    let mut server = Process::start(&mut command, WAIT, |_| false);
    let url = server.url();
    let gate = server
        .query(
            "mutation { submitJob(input: {name: \"gate\", command: [\"sleep\", \"3600\"]}) { job { id } } }",
            json!({}),
        )
        .await["submitJob"]["job"]["id"]
        .as_str()
        .expect("the gate's id")
        .to_owned();
    // Every call's body made before the clock starts: distinct names, no idempotency keys.
    let bodies: Vec<String> = (0..opts.bulk_calls)
        .map(|call| {
            let inputs: Vec<Value> = (0..opts.bulk_size)
                .map(|i| {
                    let mut input = json!({
                        "name": format!("bulk-{call}-{i}"),
                        "command": ["true"],
                        "env": [{"name": "CALL", "value": call.to_string()}],
                    });
                    if kind == "held" {
                        input["dependsOn"] = json!([gate]);
                    }
                    input
                })
                .collect();
            json!({ "query": SUBMIT_JOBS, "variables": { "inputs": inputs } }).to_string()
        })
        .collect();
    let bodies = Arc::new(std::sync::Mutex::new(bodies));
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..opts.bulk_clients {
        let (http, url, bodies, size) = (server.http.clone(), url.clone(), bodies.clone(), opts.bulk_size);
        clients.spawn(async move {
            let mut results = Vec::new();
            loop {
                let Some(body) = bodies.lock().unwrap().pop() else {
                    return results;
                };
                let sent = Instant::now();
                let accepted = submit_jobs(&http, &url, body, size).await;
                results.push((sent.elapsed(), accepted));
            }
        });
    }
    let mut latencies = Vec::new();
    let mut accepted = 0;
    let mut failures = Vec::new();
    while let Some(results) = clients.join_next().await {
        for (latency, result) in results.expect("a client") {
            latencies.push(latency);
            match result {
                Ok(n) => accepted += n,
                Err(e) => failures.push(e),
            }
        }
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let what = format!(
        "submitJobs, {} × {} jobs, {} clients, {kind}",
        opts.bulk_calls, opts.bulk_size, opts.bulk_clients
    );
    let rate = accepted as f64 / elapsed.as_secs_f64();
    println!(
        "{what}: {accepted} accepted in {:.2} s = {rate:.0} jobs/s; per call p50 {} p99 {}; {} failed calls {:?}",
        elapsed.as_secs_f64(),
        ms(pct(&latencies, 50.0)),
        ms(pct(&latencies, 99.0)),
        failures.len(),
        failures.first()
    );
    table.push((what.clone(), "accepted jobs/s".into(), format!("{rate:.0}")));
    table.push((what.clone(), "per call p50".into(), ms(pct(&latencies, 50.0))));
    table.push((what.clone(), "per call p99".into(), ms(pct(&latencies, 99.0))));
    table.push((what.clone(), "failed calls".into(), failures.len().to_string()));
    if kind == "run" {
        // Until every job of the run has finished (the gate excepted).
        let limit = Duration::from_secs(600);
        let unfinished = "{ jobs(first: 1, filter: {phases: [PENDING, RUNNING]}) { totalCount } }";
        loop {
            let left = server.query(unfinished, json!({})).await["jobs"]["totalCount"]
                .as_i64()
                .expect("totalCount");
            if left <= 1 {
                break;
            }
            assert!(
                started.elapsed() < limit,
                "{left} jobs still unfinished after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let finished = started.elapsed();
        let rate = accepted as f64 / finished.as_secs_f64();
        println!(
            "{what}: all finished {:.1} s after the first call = {rate:.0} jobs/s run",
            finished.as_secs_f64()
        );
        table.push((what, "finished jobs/s".into(), format!("{rate:.0}")));
    }
    let problems = server.problems();
    server.stop().await;
    if !problems.is_empty() {
        println!("jobgate warned: {:?}", &problems[..problems.len().min(5)]);
    }
}

// ---------------------------------------------------------------------------------------------
// Part 2: a million jobs

/// Namespaces of the generated jobs: `ns-0`…`ns-8` share almost all of them; `rare` holds one
/// in 1,000.
const NAMESPACES: u32 = 9;

/// Writes `jobs` jobs straight into the migrated (empty) database of `data_dir`, with SQL:
/// ids like jobgate's, names `etl-NNNNNNN` (one in three `train-NNNNNNN`), 97 % finished
/// (SUCCEEDED, one in ten FAILED, one in 25 CANCELLED), 3 % PENDING held for their
/// dependencies (so that no executor runs them when jobgate starts), one submitted every
/// 30 days / `jobs` until now, each with one event (its latest) holding its body. The bodies
/// are a real job's JSON (from the model, as jobgate stores it) with its fields set per row.
async fn generate(data_dir: &Path, jobs: i64) {
    let template = {
        let spec = ::jobgate::model::SubmitRequest {
            name: Some("template".into()),
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                "python3 /opt/etl/run.py --day 2024-06-01".into(),
            ]),
            env: Some(vec![::jobgate::model::EnvVar {
                name: "STAGE".into(),
                value: "production".into(),
            }]),
            ..::jobgate::model::SubmitRequest::default()
        }
        .validate(&::jobgate::model::ValidationLimits::default())
        .expect("a valid job");
        let job = ::jobgate::model::Job::accepted("template".into(), spec, None, chrono::Utc::now());
        serde_json::to_string(&job).expect("a job as JSON")
    };
    let mut db =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", data_dir.join("jobgate.db").display()))
            .await
            .expect("opening the database");
    for pragma in [
        "PRAGMA synchronous = OFF",
        "PRAGMA cache_size = -1000000",
        "PRAGMA temp_store = MEMORY",
    ] {
        sqlx::query(pragma).execute(&mut db).await.expect(pragma);
    }
    let started = Instant::now();
    let span = 30 * 86_400;
    let sql = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {jobs}), \
         rows AS (SELECT i, \
             printf('00000000-0000-7000-8000-%012x', i) AS id, \
             (CASE WHEN i % 3 = 0 THEN 'train-' ELSE 'etl-' END) || printf('%07d', i) AS name, \
             CASE WHEN i % 1000 = 500 THEN 'rare' ELSE 'ns-' || (i % {NAMESPACES}) END AS namespace, \
             CASE WHEN i % 33 = 0 THEN 'PENDING' WHEN i % 25 = 0 THEN 'CANCELLED' \
                  WHEN i % 10 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END AS phase, \
             strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (({jobs} - i) * {span}.0 / {jobs}) || ' seconds') AS at \
             FROM n) \
         INSERT INTO jobs (seq, id, name, namespace, template, phase, submitted_at, fingerprint, launched, body) \
         SELECT i, id, name, namespace, 'container', phase, at, 'generated', \
             CASE WHEN phase = 'PENDING' THEN -1 ELSE 1 END, \
             json_set(?1, '$.id', id, '$.spec.name', name, '$.spec.namespace', namespace, '$.phase', phase, \
                      '$.submittedAt', at, '$.lastEventSeq', i) \
         FROM rows"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&template)
        .execute(&mut db)
        .await
        .expect("generating jobs");
    let jobs_done = started.elapsed();
    sqlx::query(
        "INSERT INTO events (seq, job_id, phase, previous_phase, at, reason, message, job) \
         SELECT seq, id, phase, CASE WHEN phase = 'PENDING' THEN NULL ELSE 'RUNNING' END, \
             strftime('%Y-%m-%dT%H:%M:%fZ', submitted_at, '+30 seconds'), 'Generated', NULL, body \
         FROM jobs",
    )
    .execute(&mut db)
    .await
    .expect("generating events");
    // Held jobs wait for a dependency that never finishes: the first job, which is SUCCEEDED
    // here, would release them; make them wait on a job of their own that stays PENDING.
    sqlx::query(
        "INSERT INTO job_dependencies (job_id, depends_on) \
         SELECT id, (SELECT id FROM jobs WHERE phase = 'PENDING' ORDER BY seq LIMIT 1) \
         FROM jobs WHERE phase = 'PENDING' AND seq > (SELECT min(seq) FROM jobs WHERE phase = 'PENDING')",
    )
    .execute(&mut db)
    .await
    .expect("generating dependencies");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut db)
        .await
        .expect("checkpointing");
    db.close().await.expect("closing the database");
    let size = std::fs::metadata(data_dir.join("jobgate.db")).map_or(0, |m| m.len());
    println!(
        "generated {jobs} jobs in {:.1} s (events and the rest by {:.1} s), database {:.0} MiB",
        jobs_done.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        size as f64 / (1 << 20) as f64
    );
}

/// Generates the store of `jobs` jobs in `data_dir` unless it holds one already.
async fn ensure_generated(data_dir: &Path, jobs: i64) {
    if !data_dir.join("jobgate.db").exists() {
        // jobgate migrates the empty database; the jobs are then written beside it.
        let mut command = jobgate::command("full", data_dir, "warn,jobgate::server=info");
        let mut empty = Process::start(&mut command, Duration::from_secs(600), |_| false);
        empty.stop().await;
        generate(data_dir, jobs).await;
    }
}

/// The dashboard's documents (web/src/documents.js), as it sends them.
const JOB_ROW_FIELDS: &str = "id name namespace template phase submittedAt startedAt finishedAt message lastEventCursor progress { succeeded failed active ready total }";
const STATS_QUERY: &str = "query Stats($windowMinutes: Int!, $bucketSeconds: Int!) {
  jobStats(windowMinutes: $windowMinutes, bucketSeconds: $bucketSeconds) {
    cursor
    counts { pending running succeeded failed cancelled total }
    activity { start submitted succeeded failed cancelled }
  }
}";
const NAMESPACES_QUERY: &str = "query { namespaces }";

fn jobs_query() -> String {
    format!(
        "query Jobs($first: Int!, $after: String, $filter: JobFilter) {{
  jobs(first: $first, after: $after, filter: $filter) {{
    totalCount
    pageInfo {{ hasNextPage endCursor }}
    edges {{ node {{ {JOB_ROW_FIELDS} }} }}
  }}
}}"
    )
}

const ADMIN: &str = "bench-admin-token-0123456789";
const TEAM: &str = "bench-team-token-0123456789";

/// Times `query` `repeat` times in a row as `token`'s holder; checks each answer has no
/// errors; returns the sorted times and the last answer's data.
async fn timed(
    server: &Process,
    token: &str,
    query: &str,
    variables: &Value,
    repeat: usize,
) -> (Vec<Duration>, Value) {
    let body = json!({ "query": query, "variables": variables }).to_string();
    let mut times = Vec::with_capacity(repeat);
    let mut last = Value::Null;
    for _ in 0..repeat {
        let sent = Instant::now();
        let mut answer: Value = server
            .http
            .post(server.url())
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("POST /graphql")
            .json()
            .await
            .expect("a JSON body");
        times.push(sent.elapsed());
        assert!(answer.get("errors").is_none(), "{query} failed: {answer}");
        last = answer["data"].take();
    }
    times.sort();
    (times, last)
}

async fn million(opts: &Opts, table: &mut Table) {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let data_dir = opts.keep.clone().unwrap_or_else(|| temp.path().join("data"));
    let tokens = temp.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nname = \"admin\"\nsha256 = \"{}\"\nadmin = true\n\n\
             [[token]]\nname = \"team\"\nsha256 = \"{}\"\nnamespaces = [\"ns-1\", \"rare\"]\n",
            ::jobgate::auth::hash_token(ADMIN),
            ::jobgate::auth::hash_token(TEAM)
        ),
    )
    .expect("writing the tokens file");
    let start = |data_dir: &Path| {
        let mut command = jobgate::command("full", data_dir, "warn,jobgate::server=info");
        command.arg("--api-tokens-file").arg(&tokens);
        Process::start(&mut command, Duration::from_secs(600), |_| false)
    };
    ensure_generated(&data_dir, opts.jobs).await;
    let mut server = start(&data_dir);
    let startup = server.listening_after;
    println!(
        "jobgate listening {:.2} s after it started on the store",
        startup.as_secs_f64()
    );
    let what = format!("{} jobs on SQLite", opts.jobs);
    table.push((what.clone(), "start-up to listening".into(), ms(startup)));

    let jobs = jobs_query();
    let total = opts.jobs;
    let cases: Vec<(&str, &str, Value)> = vec![
        ("first page, no filter", ADMIN, json!({})),
        (
            "page after a cursor halfway",
            ADMIN,
            json!({"after": (total / 2).to_string()}),
        ),
        (
            "page after a cursor near the end",
            ADMIN,
            json!({"after": "1000"}),
        ),
        ("phase FAILED", ADMIN, json!({"filter": {"phases": ["FAILED"]}})),
        (
            "phase PENDING (3 %)",
            ADMIN,
            json!({"filter": {"phases": ["PENDING"]}}),
        ),
        (
            "phases FAILED or CANCELLED",
            ADMIN,
            json!({"filter": {"phases": ["FAILED", "CANCELLED"]}}),
        ),
        ("namespace ns-4", ADMIN, json!({"filter": {"namespace": "ns-4"}})),
        (
            "namespace rare (0.1 %)",
            ADMIN,
            json!({"filter": {"namespace": "rare"}}),
        ),
        (
            "namespace rare, deep",
            ADMIN,
            json!({"filter": {"namespace": "rare"}, "after": (total / 2).to_string()}),
        ),
        (
            "name contains train (1 in 3)",
            ADMIN,
            json!({"filter": {"nameContains": "train"}}),
        ),
        (
            "name contains 0424242 (1 job)",
            ADMIN,
            json!({"filter": {"nameContains": "0424242"}}),
        ),
        (
            "name contains etl-00123 (66 jobs)",
            ADMIN,
            json!({"filter": {"nameContains": "etl-00123"}}),
        ),
        (
            "name contains 42 (2 chars, no trigram)",
            ADMIN,
            json!({"filter": {"nameContains": "42"}}),
        ),
        (
            "phase FAILED + namespace ns-4",
            ADMIN,
            json!({"filter": {"phases": ["FAILED"], "namespace": "ns-4"}}),
        ),
        (
            "phase PENDING + namespace rare",
            ADMIN,
            json!({"filter": {"phases": ["PENDING"], "namespace": "rare"}}),
        ),
        (
            "namespace ns-3 + name train",
            ADMIN,
            json!({"filter": {"namespace": "ns-3", "nameContains": "train"}}),
        ),
        (
            "namespace ns-4 + name train (no job has both: worst case)",
            ADMIN,
            json!({"filter": {"namespace": "ns-4", "nameContains": "train"}}),
        ),
        (
            "namespace ns-4 + name train, after a cursor halfway",
            ADMIN,
            json!({"filter": {"namespace": "ns-4", "nameContains": "train"}, "after": (total / 2).to_string()}),
        ),
        (
            "namespace rare + name train (sparse: 1 match in 1,000)",
            ADMIN,
            json!({"filter": {"namespace": "rare", "nameContains": "train"}}),
        ),
        (
            "phase PENDING + name train (sparse: 3 %)",
            ADMIN,
            json!({"filter": {"phases": ["PENDING"], "nameContains": "train"}}),
        ),
        (
            "namespace ns-4 + name 42 (2 chars, checked per row)",
            ADMIN,
            json!({"filter": {"namespace": "ns-4", "nameContains": "42"}}),
        ),
        (
            "phase FAILED + namespace ns-4 + name etl-0",
            ADMIN,
            json!({"filter": {"phases": ["FAILED"], "namespace": "ns-4", "nameContains": "etl-0"}}),
        ),
        ("caller scoped to 2 namespaces, no filter", TEAM, json!({})),
        (
            "caller scoped to 2 namespaces, phase FAILED",
            TEAM,
            json!({"filter": {"phases": ["FAILED"]}}),
        ),
    ];
    // Warm the page cache and the statement caches once, as a running server would be.
    for (_, token, variables) in &cases {
        let mut variables = variables.clone();
        variables["first"] = json!(25);
        timed(&server, token, &jobs, &variables, 1).await;
    }
    let mut record = |name: String, times: &[Duration], note: String| {
        println!(
            "{name}: p50 {} p99 {} max {}{note}",
            ms(pct(times, 50.0)),
            ms(pct(times, 99.0)),
            ms(*times.last().unwrap())
        );
        table.push((name.clone(), "p50".into(), ms(pct(times, 50.0))));
        table.push((name.clone(), "p99".into(), ms(pct(times, 99.0))));
    };
    for (name, token, variables) in &cases {
        let mut variables = variables.clone();
        variables["first"] = json!(25);
        let (times, data) = timed(&server, token, &jobs, &variables, opts.repeat).await;
        let rows = data["jobs"]["edges"].as_array().map_or(0, Vec::len);
        let note = format!(
            "; {rows} rows, totalCount {}, hasNextPage {}",
            data["jobs"]["totalCount"], data["jobs"]["pageInfo"]["hasNextPage"]
        );
        record(format!("jobs: {name}"), &times, note);
    }
    // A page stops at its budget of candidates (short or empty, with a next page): what it
    // costs to follow a search that matches little or nothing to its end, page after page,
    // 25 jobs at a time, as a client that wants every match would.
    for (name, filter) in [
        (
            "namespace ns-4 + name train",
            json!({"namespace": "ns-4", "nameContains": "train"}),
        ),
        (
            "namespace rare + name train",
            json!({"namespace": "rare", "nameContains": "train"}),
        ),
    ] {
        let started = Instant::now();
        let mut times = Vec::new();
        let (mut found, mut after) = (0, Value::Null);
        loop {
            let variables = json!({"first": 25, "after": after, "filter": filter});
            let (time, data) = timed(&server, ADMIN, &jobs, &variables, 1).await;
            times.extend(time);
            found += data["jobs"]["edges"].as_array().map_or(0, Vec::len);
            if data["jobs"]["pageInfo"]["hasNextPage"] != json!(true) {
                break;
            }
            after = data["jobs"]["pageInfo"]["endCursor"].clone();
        }
        let walk = started.elapsed();
        times.sort();
        let pages = times.len();
        record(
            format!("jobs: every page of {name}"),
            &times,
            format!("; {pages} pages, {found} jobs, {} s in all", walk.as_secs_f64()),
        );
    }
    let stats_vars = json!({"windowMinutes": 60, "bucketSeconds": 60});
    let (times, data) = timed(&server, ADMIN, STATS_QUERY, &stats_vars, opts.repeat).await;
    record(
        "jobStats (60 min, 60 s buckets)".into(),
        &times,
        format!("; total {}", data["jobStats"]["counts"]["total"]),
    );
    let (times, _) = timed(&server, TEAM, STATS_QUERY, &stats_vars, opts.repeat).await;
    record(
        "jobStats, caller scoped to 2 namespaces".into(),
        &times,
        String::new(),
    );
    let (times, data) = timed(&server, ADMIN, NAMESPACES_QUERY, &json!({}), opts.repeat).await;
    record("namespaces".into(), &times, format!("; {}", data["namespaces"]));
    // The dashboard's first screen: jobStats, the first jobs page, namespaces, one after another.
    let mut together = Vec::with_capacity(opts.repeat);
    let first_page = json!({"first": 25, "filter": {}});
    for _ in 0..opts.repeat {
        let started = Instant::now();
        timed(&server, ADMIN, STATS_QUERY, &stats_vars, 1).await;
        timed(&server, ADMIN, &jobs, &first_page, 1).await;
        timed(&server, ADMIN, NAMESPACES_QUERY, &json!({}), 1).await;
        together.push(started.elapsed());
    }
    together.sort();
    record(
        "dashboard's initial queries, together".into(),
        &together,
        String::new(),
    );
    let problems = server.problems();
    server.stop().await;
    if !problems.is_empty() {
        println!("jobgate warned: {:?}", &problems[..problems.len().min(5)]);
    }
}

// ---------------------------------------------------------------------------------------------
// Part 3: retention under write load

/// One `submitJob` as the writers of the retention part send it: when it was sent, how long
/// its answer took, and whether it was accepted.
type Sample = (Instant, Duration, bool);

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
async fn retention(opts: &Opts, table: &mut Table) {
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
