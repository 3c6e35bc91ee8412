//! Parts 2 and 3: status event → subscriber frame latency with the subscriptions open (paced,
//! in a burst, and with few subscriptions), with stalled subscribers if asked, and the server's
//! memory before and after opening them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::submissions::Submitted;
use crate::common::{Table, pct};
use crate::hub::{Hub, Socket, fan_out, settle, take_samples};
use crate::opts::Opts;
use crate::server::{CpuMark, Server, ms, report_problems, submit_many, submit_paced};
use crate::{SELECTION, open_reader};

/// Most sockets this process may open, keeping room for everything else. jobgate, started
/// with the same limit, accepts at most that limit less 256 connections (its default
/// `--max-connections`), so the budget stays 64 below that, for the HTTP clients.
fn socket_budget() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1024);
    soft.saturating_sub(256 + 64).max(1)
}

pub(crate) async fn subscriptions(opts: &Opts, table: &mut Table) {
    let mut per_socket = opts.subs_per_socket;
    let budget = socket_budget();
    if opts.subscriptions.div_ceil(per_socket) > budget {
        per_socket = opts.subscriptions.div_ceil(budget);
        println!(
            "RLIMIT_NOFILE allows about {budget} sockets: carrying {per_socket} subscriptions per socket \
             (raise `ulimit -n` for one socket each)"
        );
    }
    let n_sockets = opts.subscriptions.div_ceil(per_socket);
    let total_subs = n_sockets * per_socket;
    let what_mem = format!("3. memory, {total_subs} subs on {n_sockets} sockets");
    println!(
        "\n== 2/3. {total_subs} jobEvents subscriptions on {n_sockets} WebSockets ({per_socket} each), \
         {}",
        opts.lat_store.describe(&opts.lat_durability)
    );
    let mut server = Server::start(opts.lat_store, &opts.lat_durability, &opts.command);
    let hub = Arc::new(Hub::default());

    // Warm-up: one subscriber sees a few jobs; then it goes away.
    {
        let mut socket = open_reader(server.process.ws_url(), hub.clone())
            .await
            .expect("warm-up socket");
        subscribe(&mut socket, "w").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        submit_many(&server, 10, 4)
            .await
            .assert_all_accepted("warm-up submissions");
        settle(&hub, Duration::from_millis(700)).await;
    }
    hub.frames.store(0, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0 = server.rss_kib();

    // Sockets, acknowledged, no subscription yet.
    let t0 = Instant::now();
    let opened: Vec<Result<Socket, String>> = futures::stream::iter(0..n_sockets)
        .map(|_| open_reader(server.process.ws_url(), hub.clone()))
        .buffer_unordered(64)
        .collect()
        .await;
    let mut sockets = Vec::with_capacity(n_sockets);
    let mut failures = Vec::new();
    for socket in opened {
        match socket {
            Ok(s) => sockets.push(s),
            Err(e) => failures.push(e),
        }
    }
    println!(
        "  opened {} sockets in {:.2} s ({} failed{})",
        sockets.len(),
        t0.elapsed().as_secs_f64(),
        failures.len(),
        failures
            .first()
            .map(|e| format!(", first: {e}"))
            .unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = server.rss_kib();

    // Subscriptions, idle.
    let t0 = Instant::now();
    for socket in &mut sockets {
        for i in 0..per_socket {
            subscribe(socket, &format!("s{i}")).await;
        }
    }
    let live_subs = (sockets.len() * per_socket) as u64;
    println!(
        "  sent {live_subs} subscribe messages in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss2 = server.rss_kib();

    // A probe job: every subscription must see it; gives the events per job.
    hub.tag.store(0, Ordering::Relaxed);
    submit_many(&server, 1, 1)
        .await
        .assert_all_accepted("probe submission");
    let (seen, _) = settle(&hub, Duration::from_secs(2)).await;
    let events_per_job = seen as f64 / live_subs as f64;
    println!(
        "  probe job: {seen} frames over {live_subs} subscriptions = {events_per_job:.2} events per job"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss3 = server.rss_kib();
    take_samples(&sockets, 0);

    let kib = |a: u64, b: u64, n: u64| (b as f64 - a as f64) / n.max(1) as f64;
    println!(
        "  server VmRSS: {rss0} KiB idle, {rss1} with {} sockets, {rss2} with {live_subs} idle \
         subscriptions, {rss3} after one event delivered to each",
        sockets.len()
    );
    table.push((
        what_mem.clone(),
        "server VmRSS before (KiB)".into(),
        rss0.to_string(),
    ));
    table.push((
        what_mem.clone(),
        "per socket, acked (KiB)".into(),
        format!("{:.1}", kib(rss0, rss1, sockets.len() as u64)),
    ));
    table.push((
        what_mem.clone(),
        "per subscription, idle (KiB)".into(),
        format!("{:.1}", kib(rss1, rss2, live_subs)),
    ));
    table.push((
        what_mem.clone(),
        "per socket+subscription, idle (KiB)".into(),
        format!("{:.1}", kib(rss0, rss2, live_subs)),
    ));
    table.push((
        what_mem.clone(),
        "per sub, after 1 delivery (KiB)".into(),
        format!("{:.1}", kib(rss0, rss3, live_subs)),
    ));

    // Subscribers that never read again: the server must close them (slow consumer) without
    // the others noticing. Held, unread, until part 2 ends.
    let stalled = open_stalled(&server, opts.stalled).await;
    // Where the server's CPU goes while it fans out to every subscription (opt-in).
    let recording = opts.perf.as_deref().map(|dir| {
        println!("  perf record of the server into {}", dir.display());
        crate::common::perf::record(
            server.process.pid(),
            dir,
            &format!("part2-{live_subs}subs"),
            &opts.perf_call_graph,
        )
    });

    // Steady rates.
    let mut tag = 1u8;
    for &rate in &opts.rates {
        let what = format!(
            "2. {live_subs} subs, {rate} jobs/s (~{:.0} ev/s)",
            rate * events_per_job
        );
        measure(&server, &hub, &sockets, tag, &what, per_socket, table, async {
            submit_paced(&server, rate, opts.rate_secs).await
        })
        .await;
        tag += 1;
    }

    // A burst: the fan-out capacity.
    if opts.burst_jobs > 0 {
        let what = format!("2. {live_subs} subs, burst of {} jobs", opts.burst_jobs);
        measure(&server, &hub, &sockets, tag, &what, per_socket, table, async {
            submit_many(&server, opts.burst_jobs, opts.clients).await
        })
        .await;
        tag += 1;
    }

    if let Some(recording) = recording {
        let summary = tokio::task::block_in_place(|| recording.finish());
        println!("\n-- perf profile of the runs with {live_subs} subscriptions\n\n{summary}");
    }

    // The design's latency point: 200 events/s to 100 subscribers.
    if opts.small_subs > 0 && opts.small_events_per_sec > 0.0 {
        let keep = opts.small_subs.div_ceil(per_socket).min(sockets.len());
        sockets.truncate(keep);
        let small_subs = (keep * per_socket) as u64;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rate = opts.small_events_per_sec / events_per_job.max(1.0);
        let what = format!(
            "2. {small_subs} subs, {} ev/s ({rate:.1} jobs/s)",
            opts.small_events_per_sec
        );
        measure(&server, &hub, &sockets, tag, &what, per_socket, table, async {
            submit_paced(&server, rate, opts.rate_secs).await
        })
        .await;
    }

    let bad = hub.faults.count.load(Ordering::Relaxed);
    println!("  unexpected frames or socket ends: {bad}");
    for example in hub.faults.examples.lock().unwrap().iter() {
        println!("    {example}");
    }
    table.push((
        "2. all subscription runs".into(),
        "unexpected frames/closes".into(),
        bad.to_string(),
    ));
    if !stalled.is_empty() {
        let metrics = server
            .process
            .http
            .get(server.process.url().replace("/graphql", "/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap_or_default();
        let closed = metrics
            .lines()
            .find(|l| l.starts_with("jobgate_websocket_slow_consumers_closed_total "))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_owned();
        println!(
            "  stalled subscribers closed as slow consumers: {closed} of {} (each also logs a WARN line)",
            stalled.len()
        );
        table.push((
            "2. all subscription runs".into(),
            "stalled subscribers closed (slow consumer)".into(),
            format!("{closed} of {}", stalled.len()),
        ));
    }
    report_problems(&server, table, "2. all subscription runs");
    drop(stalled);
    drop(sockets);
    println!("  server stopped: {}", server.process.stop().await);
}

/// `n` sockets with a 4 KiB receive buffer (so the server's queue fills after little data),
/// each with the part's subscription, which are then never read.
async fn open_stalled(
    server: &Server,
    n: usize,
) -> Vec<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>> {
    if n == 0 {
        return Vec::new();
    }
    let url = server.process.ws_url();
    let addr: std::net::SocketAddr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("the server's address");
    let selection = std::env::var("BENCH_SELECTION").unwrap_or_else(|_| SELECTION.to_owned());
    let subscribe = json!({"id": "stalled", "type": "subscribe",
        "payload": {"query": format!("subscription {{ jobEvents {{ {selection} }} }}")}});
    let mut stalled = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let tcp = socket.connect(addr).await.expect("connect");
        let mut request = url.as_str().into_client_request().expect("a request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "graphql-transport-ws".parse().expect("a valid header value"),
        );
        let (mut ws, _) = tokio_tungstenite::client_async(request, tcp)
            .await
            .expect("handshake");
        ws.send(Message::text(r#"{"type":"connection_init","payload":{}}"#))
            .await
            .expect("init");
        while let Some(Ok(frame)) = ws.next().await {
            if matches!(&frame, Message::Text(t) if t.as_str().contains("connection_ack")) {
                break;
            }
        }
        ws.send(Message::text(subscribe.to_string()))
            .await
            .expect("subscribe");
        stalled.push(ws);
    }
    println!("  {n} stalled subscribers (4 KiB receive buffer, never read) opened");
    stalled
}

async fn subscribe(socket: &mut Socket, id: &str) {
    static QUERY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let query = QUERY.get_or_init(|| {
        let selection = std::env::var("BENCH_SELECTION").unwrap_or_else(|_| SELECTION.to_owned());
        format!("subscription {{ jobEvents {{ {selection} }} }}")
    });
    let message = json!({ "id": id, "type": "subscribe", "payload": { "query": query } });
    socket
        .sink
        .send(Message::text(message.to_string()))
        .await
        .expect("send subscribe");
}

/// Runs one submission pattern while every subscriber records what it receives.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn measure(
    server: &Server,
    hub: &Hub,
    sockets: &[Socket],
    tag: u8,
    what: &str,
    per_socket: usize,
    table: &mut Table,
    submissions: impl Future<Output = Submitted>,
) {
    println!("\n-- {what}");
    hub.tag.store(tag, Ordering::Relaxed);
    let cpu = CpuMark::new(server);
    let mut submitted = submissions.await;
    let submit_secs = submitted.elapsed.as_secs_f64();
    let submissions_done = Instant::now();
    let (_, last_frame) = settle(hub, Duration::from_secs(2)).await;
    // Read now: the 2 s of quiet `settle` waited for cost the server next to nothing.
    let server_secs = cpu.server_secs();
    println!(
        "  frames stopped {:.2} s after the last submission's answer; cpu until then: {}",
        last_frame
            .saturating_duration_since(submissions_done)
            .as_secs_f64(),
        cpu.until(last_frame.max(submissions_done))
    );
    submitted.latencies.sort_unstable();
    let achieved = submitted.ids.len() as f64 / submit_secs;
    println!(
        "  submitted {} jobs in {submit_secs:.2} s ({achieved:.1} jobs/s, submitJob p50 {} ms, p99 {} ms, \
         {} errors)",
        submitted.ids.len(),
        ms(pct(&submitted.latencies, 50.0)),
        ms(pct(&submitted.latencies, 99.0)),
        submitted.errors.len()
    );
    for e in submitted.errors.iter().take(5) {
        println!("  error: {e}");
    }
    table.push((
        what.into(),
        "jobs/s; submitJob p50 / p99 (ms)".into(),
        format!(
            "{achieved:.1}; {} / {}",
            ms(pct(&submitted.latencies, 50.0)),
            ms(pct(&submitted.latencies, 99.0))
        ),
    ));
    let samples = take_samples(sockets, tag);
    let Some(f) = fan_out(&samples, per_socket) else {
        println!("  no frames");
        table.push((what.into(), "frames".into(), "0".into()));
        return;
    };
    println!(
        "  {} frames for {} events ({:.2} per job) to {} subscriptions: {} missing, {} duplicated",
        f.frames,
        f.events,
        f.events as f64 / submitted.ids.len().max(1) as f64,
        sockets.len() * per_socket,
        f.missing,
        f.duplicates
    );
    println!(
        "  event at → frame received: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} negative); \
         {:.0} frames/s while frames arrived",
        f.p50_ms, f.p99_ms, f.max_ms, f.negative, f.frames_per_sec
    );
    println!(
        "  per event: at → first frame p50 {:.2} ms, p99 {:.2} ms (commit, publish, render); \
         first → last frame p50 {:.2} ms, p99 {:.2} ms (the fan-out)",
        f.first_frame_ms.0, f.first_frame_ms.1, f.spread_ms.0, f.spread_ms.1
    );
    // Everything the server did in the part counts (accepting and launching the jobs too), so
    // this is an upper bound on the cost of delivering a frame.
    let us_per_frame = 1e6 * server_secs / f.frames.max(1) as f64;
    println!(
        "  server CPU per delivered frame: {us_per_frame:.2} µs ({server_secs:.2} s for {} frames)",
        f.frames
    );
    table.push((
        what.into(),
        "server CPU per frame (µs)".into(),
        format!("{us_per_frame:.2}"),
    ));
    for (phase, n, p50, p99) in &f.by_phase {
        println!("    {phase:<9} events: {n:>8} frames, p50 {p50:.2} ms, p99 {p99:.2} ms");
    }
    table.push((
        what.into(),
        "frames (missing, duplicated)".into(),
        format!("{} ({}, {})", f.frames, f.missing, f.duplicates),
    ));
    table.push((
        what.into(),
        "latency p50 / p99 (ms)".into(),
        format!("{:.2} / {:.2}", f.p50_ms, f.p99_ms),
    ));
    table.push((what.into(), "latency max (ms)".into(), format!("{:.1}", f.max_ms)));
    table.push((
        what.into(),
        "frames/s delivered".into(),
        format!("{:.0}", f.frames_per_sec),
    ));
}
