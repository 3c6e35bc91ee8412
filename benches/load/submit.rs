//! Part 1: `submitJob` throughput and latency, on a fresh server for each store and
//! durability.

use std::time::{Duration, Instant};

use crate::common::{Table, pct};
use crate::opts::{Opts, StoreKind};
use crate::server::{CpuMark, Server, ms, report_problems, submit_many};
use crate::{FAILED, UNFINISHED};

pub(crate) async fn submit_throughput(opts: &Opts, store: StoreKind, durability: &str, table: &mut Table) {
    let what = format!("1. submitJob, {}", store.describe(durability));
    println!("\n== {what}: {} jobs from {} clients", opts.submits, opts.clients);
    let mut server = Server::start(store, durability, &opts.command);
    // Warm-up: connections, statement cache, the first commit.
    submit_many(&server, 2 * opts.clients, opts.clients)
        .await
        .assert_all_accepted("warm-up submissions");

    let cpu = CpuMark::new(&server);
    let started = Instant::now();
    let mut result = submit_many(&server, opts.submits, opts.clients).await;
    println!("  cpu while submitting: {}", cpu.since());
    result.latencies.sort_unstable();
    let rate = result.ids.len() as f64 / result.elapsed.as_secs_f64();
    println!(
        "  accepted {} in {:.2} s: {rate:.0} jobs/s; latency p50 {} ms, p99 {} ms, max {} ms; {} errors",
        result.ids.len(),
        result.elapsed.as_secs_f64(),
        ms(pct(&result.latencies, 50.0)),
        ms(pct(&result.latencies, 99.0)),
        ms(*result.latencies.last().unwrap()),
        result.errors.len()
    );
    for e in result.errors.iter().take(5) {
        println!("  error: {e}");
    }
    table.push((what.clone(), "accepted jobs/s".into(), format!("{rate:.0}")));
    table.push((
        what.clone(),
        "submitJob p50 / p99 (ms)".into(),
        format!(
            "{} / {}",
            ms(pct(&result.latencies, 50.0)),
            ms(pct(&result.latencies, 99.0))
        ),
    ));
    table.push((what.clone(), "errors".into(), result.errors.len().to_string()));

    // How long until every accepted job has run (bounded): the executor's pace.
    let mut unfinished = server.count(UNFINISHED).await;
    let drain_limit = Duration::from_secs(opts.drain_secs);
    while unfinished > 0 && started.elapsed() < drain_limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
        unfinished = server.count(UNFINISHED).await;
    }
    let failed = server.count(FAILED).await;
    let done = started.elapsed().as_secs_f64();
    println!(
        "  all jobs finished {done:.2} s after the first submission ({unfinished} still unfinished, \
         {failed} failed or cancelled); cpu: {}",
        cpu.since()
    );
    table.push((
        what.clone(),
        "submit → all finished (s)".into(),
        if unfinished == 0 {
            format!("{done:.1}")
        } else {
            format!(">{done:.0} ({unfinished} left)")
        },
    ));
    report_problems(&server, table, &what);
    println!("  server stopped: {}", server.process.stop().await);
}
