//! The jobgate process a benchmark measures: started on 127.0.0.1:0 from the binary cargo
//! built for the bench, configured by its flags alone, asked over HTTP, stopped with SIGTERM
//! (or kill -9) and never left running. Its log is handed line by line to the benchmark; the
//! WARN and ERROR lines the benchmark does not take are kept as problems to report. What the
//! benchmark makes of the lines it takes is its own.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::WAIT;
use super::listening::read_log_until_listening;

/// A jobgate command: listening on 127.0.0.1:0 with `--durability` and `--data-dir`, logging
/// at `log` (which must include the "listening on" line, `jobgate::server=info`), and
/// configured by its flags alone, whatever `JOBGATE_*` this shell exports.
///
/// Two variables let one bench build compare servers: `BENCH_JOBGATE`, another jobgate binary
/// to run (e.g. a copy of an earlier build), and `BENCH_SERVER_ARGS`, flags added to every
/// server's command line (split on whitespace).
pub fn command(durability: &str, data_dir: &Path, log: &str) -> Command {
    let binary = std::env::var_os("BENCH_JOBGATE")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_jobgate").into());
    let mut command = Command::new(binary);
    command
        .args(["--listen", "127.0.0.1:0", "--durability", durability])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--log", log])
        .args(
            std::env::var("BENCH_SERVER_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("JOBGATE_") {
            command.env_remove(name);
        }
    }
    command
}

/// A running jobgate.
pub struct Process {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// When the process was spawned, and how long until its "listening on" line was read.
    pub spawned: Instant,
    pub listening_after: Duration,
    /// Lines logged at WARN or ERROR that the benchmark did not take, but for the expected
    /// "anonymous access is enabled" notice.
    problems: Arc<Mutex<Vec<String>>>,
    /// For the benchmark's requests, each bounded by [`WAIT`].
    pub http: reqwest::Client,
}

impl Process {
    /// Spawns `command` and returns once jobgate says where it listens (or panics after
    /// `limit`, or if it exits first), handing every line of its log to `take` as it is read:
    /// the lines `take` keeps (returns true for) are not problems.
    pub fn start(
        command: &mut Command,
        limit: Duration,
        mut take: impl FnMut(&str) -> bool + Send + 'static,
    ) -> Process {
        let problems = Arc::new(Mutex::new(Vec::new()));
        let sink = problems.clone();
        let each_line = move |line: String| {
            if !take(&line)
                && (line.contains(" WARN ") || line.contains("ERROR "))
                && !line.contains("anonymous access is enabled")
            {
                sink.lock().unwrap().push(line);
            }
        };
        let spawned = Instant::now();
        let mut child = command.spawn().expect("starting jobgate");
        let stderr = child.stderr.take().expect("piped stderr");
        match read_log_until_listening(stderr, limit, each_line) {
            Ok((addr, at)) => Process {
                child: Some(child),
                addr,
                spawned,
                listening_after: at - spawned,
                problems,
                http: reqwest::Client::builder()
                    .timeout(WAIT)
                    .build()
                    .expect("an HTTP client"),
            },
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("jobgate did not start ({why:?}): {:?}", problems.lock().unwrap());
            }
        }
    }

    /// The WARN and ERROR lines logged so far that the benchmark did not take.
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }

    /// POSTs a GraphQL request that must succeed; returns its `data`.
    pub async fn query(&self, query: &str, variables: Value) -> Value {
        let body: Value = self
            .http
            .post(self.url())
            .json(&json!({ "query": query, "variables": variables }))
            .send()
            .await
            .expect("POST /graphql")
            .json()
            .await
            .expect("a JSON body");
        assert!(body.get("errors").is_none(), "query failed: {body}");
        body["data"].clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn url(&self) -> String {
        format!("http://{}/graphql", self.addr)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/graphql", self.addr)
    }

    /// kill -9: no chance to clean up.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait (bounded) for the exit; kill -9 after the limit.
    pub async fn stop(&mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return "not running".into();
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let started = Instant::now();
        while started.elapsed() < WAIT {
            if let Ok(Some(status)) = child.try_wait() {
                return format!("{status} after {:.1} s", started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        "did not exit within 60 s of SIGTERM; killed".into()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill9();
    }
}
