//! The command-line client (`jobgate submit | get | list | watch | logs | cancel`), run as the
//! real binary (`CARGO_BIN_EXE_jobgate`) against a jobgate served in the test's process
//! (`Server::start`; on the Kubernetes API emulator for the pod logs test), as a user would run it: what it prints, on which
//! stream, and its exit status. `watch` is cut off from the server (a proxy drops its
//! connections and refuses new ones) and the server is restarted under it; it must print
//! exactly the events the server recorded, in order, none twice and none missing.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdout};

use common::cli::{client, ok, run, run_at};
use common::cluster::Cluster;
use common::{Polling, Server, WAIT, scrape};

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON value ({e}): {text:?}"))
}

/// A client whose standard output is read line by line as it runs.
struct Streaming {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Streaming {
    fn start(server: &str, args: &[&str]) -> Streaming {
        let mut child = client(server, args, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the client starts");
        let stdout = child.stdout.take().unwrap();
        Streaming {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next line it prints; `None` once it closed its output.
    async fn line(&mut self) -> Option<String> {
        tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the client printed nothing more within {WAIT:?}"))
            .expect("reading the client's output")
    }

    /// Reads JSON lines until one for which `last` holds; returns them all.
    async fn json_until(&mut self, last: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let line = self
                .line()
                .await
                .unwrap_or_else(|| panic!("the client ended its output after {seen:?}"));
            let value = parse(&line);
            let done = last(&value);
            seen.push(value);
            if done {
                return seen;
            }
        }
    }

    async fn exit_code(mut self) -> i32 {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the client did not exit within {WAIT:?}"))
            .unwrap();
        status.code().expect("an exit code")
    }
}

/// The job's recorded events as `watch --output json` prints them: (cursor, job id, phase,
/// previous phase).
async fn recorded_events(server: &Server, id: &str) -> Vec<(String, String, String, Value)> {
    let job = server
        .job_with(id, "id events(last: 100) { cursor phase previousPhase }")
        .await;
    job["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["cursor"].as_str().unwrap().to_owned(),
                id.to_owned(),
                e["phase"].as_str().unwrap().to_owned(),
                e["previousPhase"].clone(),
            )
        })
        .collect()
}

fn printed_events(lines: &[Value]) -> Vec<(String, String, String, Value)> {
    lines
        .iter()
        .map(|e| {
            (
                e["cursor"].as_str().expect("a cursor").to_owned(),
                e["jobId"].as_str().expect("a job id").to_owned(),
                e["phase"].as_str().expect("a phase").to_owned(),
                e["previousPhase"].clone(),
            )
        })
        .collect()
}

/// A TCP proxy in front of a jobgate that the test can cut: drop every connection through
/// it and refuse (accept and close) new ones, then let them through again, to a restarted
/// jobgate on another port if need be.
struct Proxy {
    addr: SocketAddr,
    upstream: Arc<Mutex<Option<SocketAddr>>>,
    cut: tokio::sync::watch::Sender<u64>,
    freeze: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = Arc::new(Mutex::new(Some(upstream)));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (freeze, _) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn({
            let target = target.clone();
            let cut = cut.clone();
            let freeze = freeze.clone();
            async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        return;
                    };
                    let Some(upstream) = *target.lock().unwrap() else {
                        continue; // refused: dropped at once
                    };
                    let mut cut = cut.subscribe();
                    // Only a freeze from now on stops this connection.
                    let mut frozen = freeze.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            _ = cut.changed() => {}
                            _ = frozen.changed() => {
                                // Silent from now on but open at both ends, as a dead route is:
                                // no close and no reset, until the proxy goes.
                                let _ = cut.changed().await;
                            }
                        }
                    });
                }
            }
        });
        Proxy {
            addr,
            upstream: target,
            cut,
            freeze,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Drops every connection and refuses new ones until [`Proxy::up`].
    fn down(&self) {
        *self.upstream.lock().unwrap() = None;
        self.cut.send_modify(|n| *n += 1);
    }

    /// Every open connection goes silent without closing; new ones pass.
    fn freeze_open(&self) {
        self.freeze.send_modify(|n| *n += 1);
    }

    fn up(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap() = Some(upstream);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut.send_modify(|n| *n += 1);
    }
}

#[tokio::test]
async fn get_shows_the_jobs_trace_and_where_its_time_went() {
    let server = Server::start(&[]).await;
    let id = server.submit(json!({"command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let trace_id = server.job_with(&id, "traceId").await["traceId"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = ok(&server, &["get", &id]).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("trace ") && l.ends_with(&trace_id)),
        "{text}"
    );
    let time = text
        .lines()
        .find(|l| l.starts_with("time "))
        .unwrap_or_else(|| panic!("{text}"));
    for part in [
        "queued ",
        ", launching ",
        ", attempt index-0-run-1 ",
        "s (exit 0), finishing ",
    ] {
        assert!(time.contains(part), "{part:?} in {time:?}");
    }
}

#[tokio::test]
async fn submit_prints_an_id_that_get_then_shows() {
    let server = Server::start(&[]).await;
    let out = ok(
        &server,
        &[
            "submit",
            "--name",
            "hello",
            "--env",
            "GREETING=hi",
            "--",
            "sh",
            "-c",
            "echo $GREETING",
        ],
    )
    .await;
    let id = out.trim();
    assert_eq!(out.lines().count(), 1, "submit prints the id alone: {out:?}");
    let job = parse(&ok(&server, &["get", id, "--output", "json"]).await);
    assert_eq!(job["id"], id);
    assert_eq!(job["name"], "hello");
    assert_eq!(job["spec"]["command"], json!(["sh", "-c", "echo $GREETING"]));
    assert_eq!(job["spec"]["env"], json!([{"name": "GREETING", "value": "hi"}]));
    // For people: one `key  value` line per field, values aligned.
    let text = ok(&server, &["get", id]).await;
    assert!(
        text.lines().any(|l| l.starts_with("id ") && l.ends_with(id)),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("name ") && l.ends_with(" hello")),
        "{text}"
    );
    let columns: Vec<usize> = text
        .lines()
        .map(|l| l.find("  ").unwrap() + l[l.find("  ").unwrap()..].find(|c| c != ' ').unwrap())
        .collect();
    assert!(
        columns.windows(2).all(|w| w[0] == w[1]),
        "values are aligned: {text}"
    );
    server.wait_terminal(id).await;
}

#[tokio::test]
async fn submit_wait_exits_zero_only_when_the_job_succeeds() {
    let server = Server::start(&[]).await;
    let succeeded = run(&server, &["submit", "--wait", "--", "true"]).await;
    assert_eq!(succeeded.code, 0, "{}", succeeded.stderr);
    let id = succeeded.stdout.trim();
    assert_eq!(server.job(id).await["phase"], "SUCCEEDED");
    assert!(
        succeeded.stderr.contains(&format!("job {id} SUCCEEDED")),
        "{}",
        succeeded.stderr
    );

    let failed = run(&server, &["submit", "--wait", "--", "false"]).await;
    assert_eq!(failed.code, 3, "FAILED exits 3: {}", failed.stderr);
    let id = failed.stdout.trim();
    assert_eq!(server.job(id).await["phase"], "FAILED");
    assert!(
        failed.stderr.contains(&format!("job {id} ended FAILED")),
        "{}",
        failed.stderr
    );

    // For scripts: the finished job, as one JSON object.
    let json_run = run(&server, &["submit", "--wait", "--output", "json", "--", "true"]).await;
    assert_eq!(json_run.code, 0, "{}", json_run.stderr);
    let job = parse(&json_run.stdout);
    assert_eq!(job["phase"], "SUCCEEDED");
    assert_eq!(
        server.job(job["id"].as_str().unwrap()).await["phase"],
        "SUCCEEDED"
    );
}

#[tokio::test]
async fn submit_wait_exits_four_when_the_job_is_cancelled_from_elsewhere() {
    let server = Server::start(&[]).await;
    let mut child = client(&server.url(""), &["submit", "--wait", "--", "sleep", "300"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let id = tokio::time::timeout(WAIT, stdout.next_line())
        .await
        .expect("the client prints the id")
        .unwrap()
        .expect("an id line");
    // It says each phase it is told: once it says RUNNING, its jobStatus is live and the job
    // runs, so the cancel below is one it follows.
    let mut said = Vec::new();
    while !said.contains(&format!("job {id} RUNNING")) {
        let line = tokio::time::timeout(WAIT, stderr.next_line())
            .await
            .unwrap_or_else(|_| panic!("the client never said RUNNING: {said:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the client ended its errors after {said:?}"));
        said.push(line);
    }
    assert_eq!(server.cancel(&id).await, "CANCELLED");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the client did not exit within {WAIT:?}"))
        .unwrap();
    while let Some(line) = stderr.next_line().await.unwrap() {
        said.push(line);
    }
    assert_eq!(status.code(), Some(4), "CANCELLED exits 4: {said:?}");
    assert_eq!(
        stdout.next_line().await.unwrap(),
        None,
        "only the id goes to standard output"
    );
    assert!(said.contains(&format!("job {id} CANCELLED")), "{said:?}");
    assert!(
        said.last()
            .is_some_and(|l| l.starts_with(&format!("job {id} ended CANCELLED"))),
        "{said:?}"
    );
    assert_eq!(server.job(&id).await["phase"], "CANCELLED");
}

#[tokio::test]
async fn list_filters_by_phase_and_cancel_cancels() {
    let server = Server::start(&[]).await;
    let done = ok(&server, &["submit", "--wait", "--name", "done", "--", "true"])
        .await
        .trim()
        .to_owned();
    let busy = ok(&server, &["submit", "--name", "busy", "--", "sleep", "3600"])
        .await
        .trim()
        .to_owned();
    server.wait_phase(&busy, "RUNNING").await;

    let ids = |out: &str| -> Vec<String> {
        let list = parse(out);
        list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let running = ok(&server, &["list", "--phase", "running", "--output", "json"]).await;
    assert_eq!(ids(&running), vec![busy.as_str()]);
    assert_eq!(parse(&running)["totalCount"], 1);
    let succeeded = ok(&server, &["list", "--phase", "SUCCEEDED", "--output", "json"]).await;
    assert_eq!(ids(&succeeded), vec![done.as_str()]);
    let both = ok(
        &server,
        &[
            "list",
            "--phase",
            "running",
            "--phase",
            "succeeded",
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(ids(&both), vec![busy.as_str(), done.as_str()], "newest first");

    // For people: a header and one aligned row per job.
    let table = ok(&server, &["list"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("PHASE"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&busy) && lines[1].contains("RUNNING"),
        "{table}"
    );
    assert!(
        lines[2].starts_with(&done) && lines[2].contains("SUCCEEDED"),
        "{table}"
    );
    let phase_column = lines[0].find("PHASE").unwrap();
    assert_eq!(lines[1].find("RUNNING"), Some(phase_column), "{table}");
    assert_eq!(lines[2].find("SUCCEEDED"), Some(phase_column), "{table}");

    let cancelled = ok(&server, &["cancel", &busy]).await;
    assert!(cancelled.starts_with(&busy), "{cancelled}");
    assert_eq!(server.terminal_phase(&busy).await, "CANCELLED");
    let cancelled = ok(&server, &["list", "--phase", "cancelled", "--output", "json"]).await;
    assert_eq!(ids(&cancelled), vec![busy.as_str()]);

    // Cancelling it again is the server's refusal, by its code.
    let again = run(&server, &["cancel", &busy]).await;
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.starts_with("error: FAILED_PRECONDITION: "),
        "{}",
        again.stderr
    );
}

#[tokio::test]
async fn logs_print_a_jobs_output_and_follow_it_to_its_end() {
    let server = Server::start(&[]).await;
    let id = ok(
        &server,
        &["submit", "--wait", "--", "sh", "-c", "echo one; echo two"],
    )
    .await
    .trim()
    .to_owned();
    assert_eq!(ok(&server, &["logs", &id]).await, "one\ntwo\n");
    let lines = ok(&server, &["logs", &id, "--tail", "1", "--output", "json"]).await;
    assert_eq!(parse(&lines)["text"], "two");

    // --follow prints lines as the job writes them and ends with the job.
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let script = format!(
        "echo first; while [ ! -e {} ]; do sleep 0.05; done; echo last",
        go.display()
    );
    let id = ok(&server, &["submit", "--", "sh", "-c", &script])
        .await
        .trim()
        .to_owned();
    let mut follow = Streaming::start(&server.url(""), &["logs", &id, "--follow"]);
    assert_eq!(follow.line().await.as_deref(), Some("first"));
    std::fs::write(&go, "").unwrap();
    assert_eq!(follow.line().await.as_deref(), Some("last"));
    assert_eq!(follow.line().await, None);
    assert_eq!(follow.exit_code().await, 0);
    assert_eq!(server.job(&id).await["phase"], "SUCCEEDED");
}

#[tokio::test]
async fn errors_name_the_servers_code() {
    let server = Server::start(&["--api-token", "s3cret"]).await;
    let url = server.url("");
    let missing = run_at(
        &url,
        &["get", "01a20f90-0000-7000-8000-000000000000", "--token", "s3cret"],
        &[],
    )
    .await;
    assert_eq!(missing.code, 1);
    assert_eq!(missing.stdout, "");
    assert!(
        missing.stderr.starts_with("error: NOT_FOUND: "),
        "{}",
        missing.stderr
    );

    // A wrong token, over HTTP and over the WebSocket.
    for args in [
        &["get", "x", "--token", "wrong"][..],
        &["list", "--token", "wrong"],
        &["logs", "x", "--token", "wrong"],
        &["watch", "--after", "0", "--token", "wrong"],
    ] {
        let refused = run_at(&url, args, &[]).await;
        assert_eq!(refused.code, 1, "{args:?}");
        assert!(
            refused.stderr.starts_with("error: UNAUTHENTICATED: "),
            "{args:?}: {}",
            refused.stderr
        );
    }
    // The right one, from the environment.
    let submitted = run_at(
        &url,
        &["submit", "--wait", "--", "true"],
        &[("JOBGATE_TOKEN", "s3cret")],
    )
    .await;
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);

    // A bad input is the server's BAD_USER_INPUT.
    let bad = run_at(
        &url,
        &[
            "submit",
            "--name",
            "Not A Label",
            "--token",
            "s3cret",
            "--",
            "true",
        ],
        &[],
    )
    .await;
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.starts_with("error: BAD_USER_INPUT: "),
        "{}",
        bad.stderr
    );

    // Nobody listening: the message names the URL.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let nobody = format!("http://{closed}");
    let unreachable = run_at(&nobody, &["list"], &[]).await;
    assert_eq!(unreachable.code, 1);
    assert!(
        unreachable
            .stderr
            .starts_with(&format!("error: cannot reach jobgate at {nobody}")),
        "{}",
        unreachable.stderr
    );

    // A usage mistake is clap's.
    let usage = run_at(&url, &["submit", "--param", "novalue", "--", "true"], &[]).await;
    assert_eq!(usage.code, 2, "{}", usage.stderr);
}

/// `watch` with no id, from the first event, while its connection is cut (a job runs and
/// ends meanwhile) and while the server stops under it and starts again: it prints every
/// job's recorded events once each, in order.
#[tokio::test]
async fn watch_resumes_after_dropped_connections_and_restarts_without_gaps_or_repeats() {
    let mut server = Server::start(&[]).await;
    let proxy = Proxy::start(server.addr).await;
    let mut watch = Streaming::start(&proxy.url(), &["watch", "--after", "0", "--output", "json"]);

    let a = server.submit(json!({"name": "a", "command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&a).await, "SUCCEEDED");
    let mut seen = watch
        .json_until(|e| e["jobId"] == a.as_str() && e["phase"] == "SUCCEEDED")
        .await;

    // Cut off: job b runs from start to end while the client cannot connect.
    proxy.down();
    let b = server.submit(json!({"name": "b", "command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&b).await, "SUCCEEDED");
    proxy.up(server.addr);
    seen.extend(
        watch
            .json_until(|e| e["jobId"] == b.as_str() && e["phase"] == "SUCCEEDED")
            .await,
    );

    // The server stops under the connected client and starts again (on another port,
    // behind the same address); job c runs after.
    server.stop().await;
    let server = server.start_again(&[]).await;
    proxy.up(server.addr);
    let c = server.submit(json!({"name": "c", "command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&c).await, "SUCCEEDED");
    seen.extend(
        watch
            .json_until(|e| e["jobId"] == c.as_str() && e["phase"] == "SUCCEEDED")
            .await,
    );

    let mut expected = recorded_events(&server, &a).await;
    expected.extend(recorded_events(&server, &b).await);
    expected.extend(recorded_events(&server, &c).await);
    assert_eq!(printed_events(&seen), expected);
}

/// A connection that goes silent without closing (a dead route) is noticed by the client's
/// keepalive and replaced; the events of the silence come on the new one, none lost.
#[tokio::test]
async fn watch_replaces_a_connection_that_went_silent_without_closing() {
    let server = Server::start(&[]).await;
    let proxy = Proxy::start(server.addr).await;
    let mut watch = Streaming::start(
        &proxy.url(),
        &[
            "watch",
            "--after",
            "0",
            "--output",
            "json",
            "--keepalive-secs",
            "1",
        ],
    );
    let a = server.submit(json!({"name": "a", "command": ["true"]})).await;
    let mut seen = watch
        .json_until(|e| e["jobId"] == a.as_str() && e["phase"] == "SUCCEEDED")
        .await;

    proxy.freeze_open();
    let b = server.submit(json!({"name": "b", "command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&b).await, "SUCCEEDED");
    seen.extend(
        watch
            .json_until(|e| e["jobId"] == b.as_str() && e["phase"] == "SUCCEEDED")
            .await,
    );

    let mut expected = recorded_events(&server, &a).await;
    expected.extend(recorded_events(&server, &b).await);
    assert_eq!(printed_events(&seen), expected);
}

/// `watch ID` prints the job's history, follows it across a dropped connection, and exits 0
/// after its terminal phase, having printed exactly the job's recorded events.
#[tokio::test]
async fn watch_of_one_job_resumes_and_stops_after_its_end() {
    let server = Server::start(&[]).await;
    let proxy = Proxy::start(server.addr).await;
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let id = server
        .submit(json!({"name": "gated", "command": ["sh", "-c", script]}))
        .await;
    // Another job's events, which `watch ID` must not print.
    let other = server.submit(json!({"name": "other", "command": ["true"]})).await;
    server.wait_phase(&id, "RUNNING").await;

    let mut watch = Streaming::start(&proxy.url(), &["watch", &id, "--output", "json"]);
    let mut seen = watch.json_until(|e| e["phase"] == "RUNNING").await;
    // It printed the history it queried; the cut comes once it follows the job live.
    let polling = Polling::start();
    loop {
        let live = scrape(&server).await.get("jobgate_active_subscriptions").copied();
        if live == Some(1.0) {
            break;
        }
        polling
            .pause(|| format!("watch never subscribed: jobgate_active_subscriptions {live:?}"))
            .await;
    }

    proxy.down();
    std::fs::write(&go, "").unwrap();
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    server.wait_terminal(&other).await;
    proxy.up(server.addr);

    while let Some(line) = watch.line().await {
        seen.push(parse(&line));
    }
    assert_eq!(watch.exit_code().await, 0);
    assert_eq!(printed_events(&seen), recorded_events(&server, &id).await);
}

/// `logs --follow` cut off from the server while the job writes resumes after the last line
/// it printed: every line once, in order, then it exits 0 with the job.
#[tokio::test]
async fn logs_follow_resumes_after_a_dropped_connection() {
    let server = Server::start(&[]).await;
    let proxy = Proxy::start(server.addr).await;
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let script = format!(
        "i=1; while [ $i -le 200 ]; do echo line $i; i=$((i+1)); done; \
         while [ ! -e {} ]; do sleep 0.05; done; \
         while [ $i -le 400 ]; do echo line $i; i=$((i+1)); done",
        go.display()
    );
    let id = server.submit(json!({"command": ["sh", "-c", script]})).await;
    let mut follow = Streaming::start(&proxy.url(), &["logs", &id, "--follow", "--tail", "1000"]);
    let mut printed = Vec::new();
    while printed.len() < 200 {
        printed.push(follow.line().await.expect("a line"));
    }
    proxy.down();
    std::fs::write(&go, "").unwrap();
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    proxy.up(server.addr);
    while let Some(line) = follow.line().await {
        printed.push(line);
    }
    assert_eq!(follow.exit_code().await, 0);
    let expected: Vec<String> = (1..=400).map(|i| format!("line {i}")).collect();
    assert_eq!(printed, expected);
}

/// A TLS front for `backend`, as an ingress would be, with a certificate for `localhost`
/// made in `dir`: the certificates and the port.
async fn tls_front(backend: SocketAddr, dir: &std::path::Path) -> (common::tls::Certificates, u16) {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let made = common::tls::make(dir, "DNS:localhost");
    let certs = CertificateDer::pem_file_iter(&made.server_cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, PrivateKeyDer::from_pem_file(&made.server_key).unwrap())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut tls), Ok(mut up)) =
                    (acceptor.accept(tcp).await, TcpStream::connect(backend).await)
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    (made, port)
}

#[tokio::test]
async fn an_https_server_is_reached_over_tls_for_requests_and_subscriptions() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let (certificates, port) = tls_front(server.addr, dir.path()).await;
    let url = format!("https://localhost:{port}");
    let trusted = [("SSL_CERT_FILE", certificates.ca.to_str().unwrap())];

    // submit is a mutation over HTTPS; --wait follows jobStatus over wss://.
    let submitted = run_at(&url, &["submit", "--wait", "--", "true"], &trusted).await;
    assert_eq!(submitted.code, 0, "{}{}", submitted.stdout, submitted.stderr);
    let id = submitted.stdout.trim();
    let job = run_at(&url, &["get", id, "--output", "json"], &trusted).await;
    assert_eq!(job.code, 0, "{}", job.stderr);
    assert_eq!(parse(&job.stdout)["phase"], "SUCCEEDED", "{}", job.stdout);

    // The certificate is checked: signed by a CA the client does not trust, it is refused.
    let other = [("SSL_CERT_FILE", certificates.untrusted_ca.to_str().unwrap())];
    let untrusted = run_at(&url, &["get", id], &other).await;
    assert_ne!(untrusted.code, 0, "{}", untrusted.stdout);
    assert!(
        untrusted.stderr.contains("cannot reach jobgate at"),
        "{}",
        untrusted.stderr
    );
}

/// What a hostile job writes to take over the terminal of whoever looks at it: a new window
/// title (OSC, ended by BEL) and a cleared screen (CSI).
const HOSTILE: &str = "\x1b]0;pwned\x07 done \x1b[2J";
/// [`HOSTILE`] as the client shows it to people.
const SHOWN: &str = r"\x1b]0;pwned\x07 done \x1b[2J";

/// Whether `text` holds anything a terminal acts on, but the newlines that end lines.
fn has_controls(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && c != '\n')
}

#[tokio::test]
async fn a_jobs_result_is_shown_escaped_and_its_logs_as_they_are() {
    let server = Server::start(&[]).await;
    // The shell's printf makes the bytes from octal escapes.
    let bytes = r"\033]0;pwned\007 done \033[2J";
    let script = format!("printf '{bytes}\\n'; printf '{bytes}' > \"$JOBGATE_RESULT_FILE\"");
    let out = ok(&server, &["submit", "--", "sh", "-c", &script]).await;
    let id = out.trim();
    server.wait_phase(id, "SUCCEEDED").await;

    // For scripts, JSON carries the text exactly (and escaped, as JSON).
    let job = parse(&ok(&server, &["get", id, "--output", "json"]).await);
    assert_eq!(job["result"], HOSTILE, "{job}");

    let text = ok(&server, &["get", id]).await;
    assert!(!has_controls(&text), "get printed control characters: {text:?}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("result ") && l.ends_with(SHOWN)),
        "{text}"
    );

    // A job's output is its own: `logs` prints it as it is, as `kubectl logs` does.
    let logs = ok(&server, &["logs", id]).await;
    assert!(logs.contains(HOSTILE), "{logs:?}");
}

#[tokio::test]
async fn a_jobs_message_is_shown_escaped_by_get_and_watch() {
    let Some(cluster) =
        Cluster::emulated("it scripts its pods through EMULATOR_EXIT_CODE, EMULATOR_TERMINATION_MESSAGE")
            .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    // On Kubernetes the failed container's termination message, which the job writes, becomes
    // the job's message and its last event's.
    let id = server
        .submit(json!({
            "image": "busybox:1.36",
            "command": ["false"],
            "backoffLimit": 0,
            "env": [
                {"name": "EMULATOR_EXIT_CODE", "value": "3"},
                {"name": "EMULATOR_TERMINATION_MESSAGE", "value": HOSTILE},
            ],
        }))
        .await;
    server.wait_phase(&id, "FAILED").await;
    assert!(
        server.job_with(&id, "message").await["message"]
            .as_str()
            .is_some_and(|m| m.contains(HOSTILE)),
        "the test's premise: the message holds the sequences"
    );

    let text = ok(&server, &["get", &id]).await;
    assert!(!has_controls(&text), "get printed control characters: {text:?}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("message ") && l.contains(SHOWN)),
        "{text}"
    );

    // The job has ended: `watch` prints its recorded events and exits.
    let events = ok(&server, &["watch", &id]).await;
    assert!(
        !has_controls(&events),
        "watch printed control characters: {events:?}"
    );
    assert!(
        events.lines().any(|l| l.contains("FAILED") && l.contains(SHOWN)),
        "{events}"
    );
    let json_events = ok(&server, &["watch", &id, "--output", "json"]).await;
    assert!(
        json_events
            .lines()
            .any(|l| parse(l)["message"].as_str().is_some_and(|m| m.contains(HOSTILE))),
        "{json_events}"
    );
}
