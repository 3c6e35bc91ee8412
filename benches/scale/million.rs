//! Part 2: a million jobs, written straight into SQLite by SQL, then jobgate started on them
//! and every read the API and the dashboard make timed over HTTP, with the start-up time.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection as _;

use crate::common::jobgate::{self, Process};
use crate::common::{Table, pct};
use crate::{Opts, ms};

/// Namespaces of the generated jobs: `ns-0`…`ns-8` share almost all of them; `rare` holds one
/// in 1,000.
const NAMESPACES: u32 = 9;

/// Writes `jobs` jobs straight into the migrated (empty) database of `data_dir`, with SQL:
/// ids like jobgate's, names `etl-NNNNNNN` (one in three `train-NNNNNNN`), 97 % finished
/// (SUCCEEDED, one in ten FAILED, one in 25 CANCELLED), 3 % PENDING held for their
/// dependencies (so that no executor runs them when jobgate starts), one submitted every
/// 30 days / `jobs` until now, each with one event (its latest) holding its body. The bodies
/// are a real job's JSON (from the model, as jobgate stores it) with its fields set per row.
pub(crate) async fn generate(data_dir: &Path, jobs: i64) {
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
pub(crate) async fn ensure_generated(data_dir: &Path, jobs: i64) {
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
pub(crate) async fn timed(
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

pub(crate) async fn million(opts: &Opts, table: &mut Table) {
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
