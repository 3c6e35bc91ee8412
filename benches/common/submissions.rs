//! `submitJob` as a benchmark's clients send it: one request body serialised once, sent as
//! fast as `clients` concurrent clients can, or paced at a rate. It times each answer and
//! keeps each job's id or the error; the figures made of them are the benchmark's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The mutation every benchmark submits, with what [`submit`] checks of its answer.
pub const SUBMIT: &str =
    "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id phase } } }";

/// The `submitJob` request body for `input`, serialised once for every submission.
pub fn body(input: &Value) -> Arc<String> {
    Arc::new(json!({ "query": SUBMIT, "variables": { "input": input } }).to_string())
}

/// Submits one job; returns its id, or what went wrong.
pub async fn submit(http: &reqwest::Client, url: &str, body: &str) -> Result<String, String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .map_err(|e| format!("{status}, body: {e}"))?;
    if let Some(errors) = answer.get("errors") {
        return Err(format!("{status}: {errors}"));
    }
    let job = &answer["data"]["submitJob"]["job"];
    match (job["phase"].as_str(), job["id"].as_str()) {
        (Some("PENDING"), Some(id)) => Ok(id.to_owned()),
        _ => Err(format!("{status}: unexpected answer {answer}")),
    }
}

/// What a batch of submissions gave.
#[derive(Default)]
pub struct Submitted {
    /// The accepted jobs' ids.
    pub ids: Vec<String>,
    pub errors: Vec<String>,
    /// How long each submission took to be answered, accepted or not.
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
}

impl Submitted {
    fn with_capacity(n: usize) -> Submitted {
        Submitted {
            latencies: Vec::with_capacity(n),
            ..Submitted::default()
        }
    }

    fn record(&mut self, latency: Duration, result: Result<String, String>) {
        self.latencies.push(latency);
        match result {
            Ok(id) => self.ids.push(id),
            Err(e) => self.errors.push(e),
        }
    }

    /// Fails the benchmark unless every submission was accepted: `what` (a warm-up, a probe)
    /// measures nothing if some were not.
    pub fn assert_all_accepted(&self, what: &str) {
        assert!(self.errors.is_empty(), "{what} failed: {:?}", self.errors);
    }
}

/// `n` submissions from `clients` concurrent clients, each waiting for its answer.
pub async fn many(
    http: &reqwest::Client,
    url: &str,
    body: Arc<String>,
    n: usize,
    clients: usize,
) -> Submitted {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..clients.min(n.max(1)) {
        let (next, http, url, body) = (next.clone(), http.clone(), url.to_owned(), body.clone());
        tasks.spawn(async move {
            let mut done = Submitted::default();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let t0 = Instant::now();
                let result = submit(&http, &url, &body).await;
                done.record(t0.elapsed(), result);
            }
            done
        });
    }
    let mut all = Submitted::with_capacity(n);
    while let Some(joined) = tasks.join_next().await {
        let done = joined.expect("a submit task");
        all.ids.extend(done.ids);
        all.errors.extend(done.errors);
        all.latencies.extend(done.latencies);
    }
    all.elapsed = started.elapsed();
    all
}

/// `n` submissions paced at `rate` per second, at most 256 in flight.
pub async fn paced(http: &reqwest::Client, url: &str, body: Arc<String>, rate: f64, n: usize) -> Submitted {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let in_flight = Arc::new(Semaphore::new(256));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        ticks.tick().await;
        let permit = in_flight.clone().acquire_owned().await.expect("semaphore");
        let (http, url, body) = (http.clone(), url.to_owned(), body.clone());
        tasks.spawn(async move {
            let t0 = Instant::now();
            let result = submit(&http, &url, &body).await;
            drop(permit);
            (t0.elapsed(), result)
        });
    }
    let mut all = Submitted::with_capacity(n);
    while let Some(joined) = tasks.join_next().await {
        let (latency, result) = joined.expect("a submit task");
        all.record(latency, result);
    }
    all.elapsed = started.elapsed();
    all
}
