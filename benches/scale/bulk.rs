//! Part 1: bulk submission, `submitJobs` calls on a fresh server for each kind of job
//! (`run`, `held`): accepted jobs per second, the answer time of one call, and for `run` the
//! jobs finished per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::jobgate::{self, Process};
use crate::common::{Table, WAIT, pct};
use crate::{Opts, ms};

pub(crate) const SUBMIT_JOBS: &str = "mutation($inputs: [SubmitJobInput!]!) {
  submitJobs(inputs: $inputs) { jobs { id } errors { index code message } }
}";

/// One `submitJobs` call; returns the number of jobs accepted, or why it failed.
pub(crate) async fn submit_jobs(
    http: &reqwest::Client,
    url: &str,
    body: String,
    size: usize,
) -> Result<usize, String> {
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

pub(crate) async fn bulk(opts: &Opts, kind: &str, table: &mut Table) {
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
