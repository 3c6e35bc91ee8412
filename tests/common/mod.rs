//! Test harness: starts jobgate on 127.0.0.1:0 with its own data directory and drives it
//! over HTTP and WebSocket, as a user would. [`Server`] is one jobgate (started, asked,
//! stopped): served in the test's own process through the binary's path (`in_process`), or,
//! for what only a process has (kill -9, signals, its pid, environment, user or mount
//! namespace), the binary spawned (`process`). Its log is in `log`, its waits in `wait`, its
//! WebSocket clients in `ws`, the command-line client run as a user runs it in `cli`, a small disk to fill under it in `disk`, an emulated Kubernetes
//! cluster in `cluster`, a throwaway PostgreSQL server (for the PostgreSQL store) in
//! `postgres`, a webhook receiver that verifies signatures in `receiver`, an OTLP/HTTP trace collector
//! that decodes what jobgate exports in `otlp`, how to run jobgate
//! as root whoever runs the test in `root`, the one decision whether a test may skip (and the tools found on `PATH`) in `skip`. The harness never
//! asserts what a test is about, only that jobgate answered at all.
// Each test binary uses a part of the harness; the rest is unused there, not dead.
#![allow(dead_code, unused_imports)]

pub mod cli;
pub mod cluster;
mod disk;
mod in_process;
pub mod listening;
mod log;
pub mod otlp;
pub mod postgres;
mod process;
pub mod receiver;
pub mod root;
pub mod skip;
pub mod tls;
mod wait;
mod ws;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

pub use disk::SmallDisk;
use in_process::InProcess;
pub use log::Log;
pub use process::run_to_exit;
pub use wait::Polling;
pub use ws::{GqlWs, Ws, close_after_init, close_of, ws_raw};

/// The local executor's default `--local-work-dir`.
pub fn default_work_root() -> PathBuf {
    std::env::temp_dir().join(format!("jobgate-{}", nix::unistd::geteuid()))
}

/// Generous limits so a slow CI machine never hangs a test forever; never assertions.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct Server {
    running: Running,
    /// How it was started: `start_again` starts the next one the same way.
    how: How,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Keeps a temporary data directory alive for the server's lifetime.
    _temp: Option<Arc<tempfile::TempDir>>,
    pub logs: Arc<Log>,
    http: reqwest::Client,
}

/// A jobgate as it runs now.
enum Running {
    InProcess(InProcess),
    Process(Child),
    /// Stopped or killed.
    Stopped,
}

#[derive(Clone)]
enum How {
    InProcess,
    /// The binary, under `wrapper` (a command it runs under, see [`SmallDisk`]; empty for
    /// none).
    Process {
        wrapper: Vec<String>,
    },
}

impl Server {
    /// Starts jobgate, in this process, with a fresh data directory and fast local retries.
    pub async fn start(extra: &[&str]) -> Server {
        Self::start_fresh(How::InProcess, extra, &[]).await
    }

    /// Starts the jobgate binary as a process of its own, with a fresh data directory: for a
    /// test that kills it (-9), signals it, or looks at its process.
    pub async fn spawn(extra: &[&str]) -> Server {
        Self::spawn_with_env(extra, &[]).await
    }

    /// Starts the jobgate binary, with a fresh data directory and these environment variables
    /// (a jobgate in this process would share the tests' environment).
    pub async fn spawn_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let how = How::Process { wrapper: Vec::new() };
        Self::start_fresh(how, extra, env).await
    }

    /// Starts the jobgate binary under `wrapper` (a command and its arguments; the binary and
    /// its arguments follow them), with a fresh data directory.
    pub async fn spawn_under(wrapper: &[&str], extra: &[&str]) -> Server {
        let how = How::Process {
            wrapper: wrapper.iter().map(|s| s.to_string()).collect(),
        };
        Self::start_fresh(how, extra, &[]).await
    }

    /// Starts the jobgate binary as root (`root::wrapper`: directly, or in a user namespace
    /// where this user is root), under `wrapper` inside that, with a fresh data directory and
    /// these environment variables; `None` when it cannot be done here (a skip, or a failure
    /// in CI: `skip::skip_or_fail`).
    pub async fn spawn_as_root(wrapper: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Option<Server> {
        let mut outer = match root::wrapper() {
            Ok(outer) => outer,
            Err(why) => {
                skip::skip_or_fail(skip::Skip::Missing(why));
                return None;
            }
        };
        outer.extend(wrapper.iter().map(|s| s.to_string()));
        // Its data directory and its jobs' directories side by side in one of the test's own,
        // open for the jobs' user to pass through: the default work directory,
        // /tmp/jobgate-0, is the real root's when jobgate is root in a namespace.
        let temp = Arc::new(tempfile::tempdir().expect("tempdir"));
        std::fs::set_permissions(temp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("opening the test's directory to the jobs' user");
        let data = temp.path().join("data");
        let work = temp.path().join("work");
        let mut args = vec!["--local-work-dir", work.to_str().expect("a UTF-8 path")];
        args.extend_from_slice(extra);
        let how = How::Process { wrapper: outer };
        let mut server = Self::start_how(how, &data, &args, env).await;
        server._temp = Some(temp);
        Some(server)
    }

    /// Starts the jobgate binary on a small disk of its own, with its data directory there
    /// (it runs in the disk's mount namespace).
    pub async fn spawn_on(disk: &SmallDisk, extra: &[&str]) -> Server {
        let how = How::Process {
            wrapper: disk.wrapper(),
        };
        Self::start_how(how, &disk.data_dir(), extra, &[]).await
    }

    async fn start_fresh(how: How, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let temp = Arc::new(tempfile::tempdir().expect("tempdir"));
        let dir = temp.path().to_owned();
        let mut server = Self::start_how(how, &dir, extra, env).await;
        server._temp = Some(temp);
        server
    }

    /// Starts jobgate again over this server's data directory, the way this one was started
    /// (stop or kill this one first).
    pub async fn start_again(&self, extra: &[&str]) -> Server {
        assert!(
            matches!(self.running, Running::Stopped),
            "stop the running server before starting it again"
        );
        let mut server = Self::start_how(self.how.clone(), &self.data_dir, extra, &[]).await;
        server._temp = self._temp.clone();
        server
    }

    async fn start_how(how: How, data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--local-retry-delay-ms".into(),
            "20".into(),
            "--local-kill-grace-ms".into(),
            "300".into(),
            "--log".into(),
            std::env::var("JOBGATE_TEST_LOG").unwrap_or_else(|_| "info,tower_http=warn".into()),
            // Tests serve several tenants; run as an ordinary user, jobgate would refuse to
            // on the local executor (as root, jobs run as `nobody` and this changes nothing).
            // tests/local_isolation.rs checks the refusal and the isolation.
            "--local-trusted-tenants".into(),
        ];
        // Sessions keep their own runtime but not a lower priority: many jobgates and test
        // processes share the test machine's cores, and a niced session could then start its
        // subscription long after a test acts (tests that need a live subscription wait for
        // `jobgate_subscription_group_members`; not all do). tests/ws_protocol/shutdown.rs checks the
        // priority itself.
        if !extra.contains(&"--delivery-nice") {
            args.extend(["--delivery-nice".to_owned(), "0".to_owned()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let logs = Arc::new(Log::default());
        let started = match &how {
            How::InProcess => {
                assert!(
                    env.is_empty(),
                    "a jobgate in this process has the tests' environment"
                );
                InProcess::start(&args, logs.clone())
                    .await
                    .map(|(server, addr)| (Running::InProcess(server), addr))
            }
            How::Process { wrapper } => {
                let wrapper = wrapper.clone();
                let env: Vec<(String, String)> =
                    env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                let log = logs.clone();
                tokio::task::spawn_blocking(move || process::spawn(&wrapper, &args, &env, log))
                    .await
                    .unwrap()
                    .map(|(child, addr)| (Running::Process(child), addr))
            }
        };
        let (running, addr) =
            started.unwrap_or_else(|why| panic!("jobgate did not start ({why}); its log:\n{}", logs.text()));
        Server {
            running,
            how,
            addr,
            data_dir: data_dir.to_owned(),
            _temp: None,
            logs,
            http: reqwest::Client::new(),
        }
    }

    /// A local job's working directory under the default `--local-work-dir`; it exists while
    /// the job runs and is removed when it ends.
    pub fn work_dir(&self, id: &str) -> PathBuf {
        default_work_root().join(id)
    }

    /// The SQLite store's database file in the data directory.
    pub fn database_file(&self) -> PathBuf {
        self.data_dir.join("jobgate.db")
    }

    /// Cuts the database file to `len` bytes under the running jobgate, as something outside
    /// it might: what jobgate then answers is the test's to check.
    pub fn truncate_database(&self, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.database_file())
            .unwrap()
            .set_len(len)
            .unwrap();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/graphql", self.addr)
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// POSTs a GraphQL request and returns the JSON body (whatever the status).
    pub async fn gql(&self, query: &str, variables: Value) -> Value {
        let response = self
            .http
            .post(self.url("/graphql"))
            .json(&json!({ "query": query, "variables": variables }))
            .send()
            .await
            .expect("POST /graphql");
        response.json().await.expect("a JSON body")
    }

    /// POSTs a GraphQL request that must succeed; returns its `data`.
    pub async fn gql_ok(&self, query: &str, variables: Value) -> Value {
        let body = self.gql(query, variables).await;
        assert!(body.get("errors").is_none(), "unexpected errors: {body}");
        body["data"].clone()
    }

    /// POSTs a GraphQL request as `token`'s holder (anonymously for `None`), asking for
    /// `application/graphql-response+json`; returns the status and the JSON body.
    pub async fn gql_as(&self, token: Option<&str>, query: &str, variables: Value) -> (u16, Value) {
        let mut request = self
            .http
            .post(self.url("/graphql"))
            .header("accept", "application/graphql-response+json")
            .json(&json!({ "query": query, "variables": variables }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("POST /graphql");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON body"))
    }

    /// Submits a job and returns its id.
    pub async fn submit(&self, input: Value) -> String {
        let data = self
            .gql_ok(
                "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id phase } } }",
                json!({ "input": input }),
            )
            .await;
        assert_eq!(data["submitJob"]["job"]["phase"], "PENDING");
        data["submitJob"]["job"]["id"].as_str().unwrap().to_owned()
    }

    /// Submits a job that may be refused; returns the whole answer, `data` (the job's id,
    /// phase and message) or `errors`.
    /// Submits a `["true"]` job named `name`: its id, or the error's `extensions.code`.
    pub async fn try_submit(&self, name: &str) -> Result<String, String> {
        let body = self
            .submit_answer(json!({"name": name, "command": ["true"]}))
            .await;
        match body["data"]["submitJob"]["job"]["id"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => Err(body["errors"][0]["extensions"]["code"]
                .as_str()
                .unwrap_or_else(|| panic!("neither a job nor a coded error: {body}"))
                .to_owned()),
        }
    }

    /// Every job's name, as jobgate lists them (up to 500), sorted.
    pub async fn job_names(&self) -> Vec<String> {
        let data = self
            .gql_ok("{ jobs(first: 500) { edges { node { name } } } }", json!({}))
            .await;
        let mut names: Vec<String> = data["jobs"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"]["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    pub async fn submit_answer(&self, input: Value) -> Value {
        self.gql(
            "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id phase message } } }",
            json!({ "input": input }),
        )
        .await
    }

    /// Cancels a job, which must succeed; returns the phase the answer gives it.
    pub async fn cancel(&self, id: &str) -> String {
        let data = self
            .gql_ok(
                "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
                json!({ "id": id }),
            )
            .await;
        data["cancelJob"]["job"]["phase"]
            .as_str()
            .expect("the cancelled job's phase")
            .to_owned()
    }

    pub async fn job(&self, id: &str) -> Value {
        let data = self
            .gql_ok(
                "query($id: ID!) { job(id: $id) { id name namespace phase message result startedAt finishedAt \
                 progress { succeeded failed active total } conditions { type status reason message } } }",
                json!({ "id": id }),
            )
            .await;
        data["job"].clone()
    }

    /// The webhook endpoint `id` as `webhooks` lists it, with every field it has; the caller
    /// must see it.
    pub async fn webhook(&self, id: &str) -> Value {
        let data = self
            .gql_ok(
                "{ webhooks { id url state cursor lag attempts lastError lastAttemptAt nextAttemptAt createdAt \
                 filter { nameContains namespace phases } } }",
                json!({}),
            )
            .await;
        data["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("webhook {id} is not listed: {data}"))
    }

    /// `job(id) { <fields> }`.
    pub async fn job_with(&self, id: &str, fields: &str) -> Value {
        let query = format!("query($id: ID!) {{ job(id: $id) {{ {fields} }} }}");
        self.gql_ok(&query, json!({ "id": id })).await["job"].clone()
    }

    /// A spawned jobgate's process id.
    pub fn pid(&self) -> i32 {
        match &self.running {
            Running::Process(child) => child.id() as i32,
            _ => panic!("only a spawned jobgate has a pid of its own: start it with Server::spawn"),
        }
    }

    /// A spawned jobgate's peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_memory(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the process's status: is jobgate still running?");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM in {status}"));
        kib * 1024
    }

    /// kill -9 of a spawned jobgate: no chance to clean up.
    pub fn kill9(&mut self) {
        match std::mem::replace(&mut self.running, Running::Stopped) {
            Running::Process(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Running::InProcess(_) => {
                panic!("kill -9 needs a jobgate of its own: start it with Server::spawn")
            }
            Running::Stopped => {}
        }
    }

    /// SIGTERM to a spawned jobgate, then wait for it to exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let Running::Process(mut child) = std::mem::replace(&mut self.running, Running::Stopped) else {
            panic!("only a spawned jobgate can be sent SIGTERM: start it with Server::spawn");
        };
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap()
    }

    /// Stops jobgate as SIGTERM does (for one in this process, by its shutdown token) and
    /// checks that it stopped cleanly.
    pub async fn stop(&mut self) {
        match std::mem::replace(&mut self.running, Running::Stopped) {
            Running::InProcess(mut server) => {
                if let Err(e) = server.stop().await {
                    panic!("jobgate stopped with {e:#}; its log:\n{}", self.log_text());
                }
            }
            running @ Running::Process(_) => {
                self.running = running;
                let status = self.terminate().await;
                assert!(
                    status.success(),
                    "jobgate exited with {status}; its log:\n{}",
                    self.log_text()
                );
            }
            Running::Stopped => panic!("jobgate is not running"),
        }
    }

    pub fn log_text(&self) -> String {
        self.logs.text()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failing test shows what jobgate said, so that a failure seen once in CI can be
        // understood from its output alone.
        if std::thread::panicking() {
            eprintln!(
                "--- jobgate's log ({}) ---\n{}",
                self.data_dir.display(),
                self.log_text()
            );
        }
        // Abruptly, either way: a test that cares how jobgate stops says so.
        match std::mem::replace(&mut self.running, Running::Stopped) {
            Running::InProcess(mut server) => server.abort(),
            Running::Process(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Running::Stopped => {}
        }
    }
}

/// The job's condition of type `type_`, if it has one (jobgate keeps one per type); `job` is
/// a job as `job_with` answers it, with `conditions { type … }` asked for.
pub fn condition<'a>(job: &'a Value, type_: &str) -> Option<&'a Value> {
    job["conditions"]
        .as_array()
        .unwrap_or_else(|| panic!("no conditions in {job}"))
        .iter()
        .find(|c| c["type"] == type_)
}

/// One entry of an `--api-tokens-file`: the token `name` hashed, and its scope, a TOML line
/// such as `namespaces = ["team-a"]` or `admin = true`.
pub fn token_entry(name: &str, token: &str, scope: &str) -> String {
    format!(
        "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\n{scope}\n",
        jobgate::auth::hash_token(token)
    )
}

/// jobgate serving the namespaces team-a and team-b to the API tokens `entries` (each a
/// [`token_entry`]), with the directory holding their file, which must outlive the server.
pub async fn tenants_server(entries: &[String]) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, entries.concat()).unwrap();
    let server = Server::start(&[
        "--api-tokens-file",
        tokens.to_str().unwrap(),
        "--allowed-namespaces",
        "team-a,team-b",
    ])
    .await;
    (server, dir)
}

/// Names a table's row in the test's output if the test fails while the row runs (an
/// assertion of the row's, or a helper's time limit): `let _row = TableRow::named(&name);`.
pub struct TableRow(String);

impl TableRow {
    pub fn named(name: &str) -> TableRow {
        TableRow(name.to_owned())
    }
}

impl Drop for TableRow {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the failing row: {}", self.0);
        }
    }
}

/// Parses the OpenMetrics text: every sample by `name{labels}`, checking the format.
pub fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "OpenMetrics text ends with # EOF");
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(
                ["HELP ", "TYPE ", "UNIT "].iter().any(|p| comment.starts_with(p)),
                "bad comment line {line:?}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample line {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.starts_with("jobgate_") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name in {line:?}"
        );
        assert!(
            samples.insert(series.to_owned(), value).is_none(),
            "duplicate {series}"
        );
    }
    samples
}

/// GETs `/metrics`: OpenMetrics text.
pub async fn metrics_text(server: &Server) -> String {
    let response = server.http().get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    response.text().await.unwrap()
}

/// GETs `/metrics` and parses it.
pub async fn scrape(server: &Server) -> HashMap<String, f64> {
    parse_metrics(&metrics_text(server).await)
}

/// Waits until the server's metric `name` (absent: 0) is `value`.
pub async fn wait_for_metric(server: &Server, name: &str, value: f64) {
    let poll = Polling::start();
    loop {
        let seen = scrape(server).await.get(name).copied().unwrap_or(0.0);
        if seen == value {
            return;
        }
        poll.pause(|| format!("{name} stayed at {seen}, not {value}"))
            .await;
    }
}
