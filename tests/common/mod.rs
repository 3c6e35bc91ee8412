//! Test harness: starts the real `jobgate` binary on 127.0.0.1:0 with its own data
//! directory and drives it over HTTP and WebSocket, as a user would.
#![allow(dead_code)]

pub mod cluster;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The local executor's default `--local-work-dir`.
pub fn default_work_root() -> PathBuf {
    std::env::temp_dir().join(format!("jobgate-{}", nix::unistd::geteuid()))
}

/// Generous limits so a slow CI machine never hangs a test forever; never assertions.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Keeps a temporary data directory alive for the server's lifetime.
    _temp: Option<Arc<tempfile::TempDir>>,
    pub logs: Arc<Mutex<Vec<String>>>,
    http: reqwest::Client,
    /// A command jobgate runs under (see [`SmallDisk`]); empty for none.
    wrapper: Vec<String>,
}

impl Server {
    /// Starts jobgate with a fresh data directory and fast local retries.
    pub async fn start(extra: &[&str]) -> Server {
        let temp = Arc::new(tempfile::tempdir().expect("tempdir"));
        let dir = temp.path().to_owned();
        let mut server = Self::start_in(&dir, extra).await;
        server._temp = Some(temp);
        server
    }

    /// Starts jobgate over an existing data directory (to test restarts).
    pub async fn start_in(data_dir: &Path, extra: &[&str]) -> Server {
        Self::start_in_with_env(data_dir, extra, &[]).await
    }

    /// Starts jobgate with a fresh data directory and these environment variables.
    pub async fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let temp = Arc::new(tempfile::tempdir().expect("tempdir"));
        let dir = temp.path().to_owned();
        let mut server = Self::start_in_with_env(&dir, extra, env).await;
        server._temp = Some(temp);
        server
    }

    async fn start_in_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::start_wrapped(Vec::new(), data_dir, extra, env).await
    }

    /// Starts jobgate on a small disk of its own, with its data directory there.
    pub async fn start_on(disk: &SmallDisk, extra: &[&str]) -> Server {
        Self::start_wrapped(disk.wrapper(), &disk.data_dir(), extra, &[]).await
    }

    async fn start_wrapped(
        wrapper: Vec<String>,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let dir = data_dir.to_owned();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        tokio::task::spawn_blocking(move || Self::spawn(&wrapper, &dir, &extra, &env))
            .await
            .unwrap()
    }

    /// Starts jobgate again over this server's data directory (stop this one first).
    pub async fn start_again(&self, extra: &[&str]) -> Server {
        assert!(
            self.child.is_none(),
            "stop the running server before starting it again"
        );
        let mut server = Self::start_wrapped(self.wrapper.clone(), &self.data_dir, extra, &[]).await;
        server._temp = self._temp.clone();
        server
    }

    fn spawn(wrapper: &[String], data_dir: &Path, extra: &[String], env: &[(String, String)]) -> Server {
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
            "info,tower_http=warn".into(),
            // Tests serve several tenants; run as an ordinary user, jobgate would refuse to
            // on the local executor (as root, jobs run as `nobody` and this changes nothing).
            // tests/local_isolation.rs checks the refusal and the isolation.
            "--local-trusted-tenants".into(),
        ];
        args.extend(extra.iter().cloned());
        let binary = env!("CARGO_BIN_EXE_jobgate");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let mut child = command
            .args(&args)
            .env_remove("JOBGATE_API_TOKEN")
            .env_remove("JOBGATE_CONFIG")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting jobgate");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = logs.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let addr: String = rest
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != ' ')
                        .collect();
                    let _ = tx.send(addr);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(WAIT) {
            Ok(addr) => addr
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .expect("address"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "jobgate did not start; its log:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        Server {
            child: Some(child),
            addr,
            data_dir: data_dir.to_owned(),
            _temp: None,
            logs,
            http: reqwest::Client::new(),
            wrapper: wrapper.to_vec(),
        }
    }

    /// A local job's working directory under the default `--local-work-dir`; it exists while
    /// the job runs and is removed when it ends.
    pub fn work_dir(&self, id: &str) -> PathBuf {
        default_work_root().join(id)
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

    /// `job(id) { <fields> }`.
    pub async fn job_with(&self, id: &str, fields: &str) -> Value {
        let query = format!("query($id: ID!) {{ job(id: $id) {{ {fields} }} }}");
        self.gql_ok(&query, json!({ "id": id })).await["job"].clone()
    }

    /// Asks for the job (with `fields`) until `check` holds of it, and returns it: for states
    /// a subscription does not announce (progress, conditions, another object's effect). The
    /// test polls its own API; jobgate polls nothing.
    pub async fn job_until(
        &self,
        id: &str,
        fields: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let job = self.job_with(id, fields).await;
            if check(&job) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never: {what}; last {job}; jobgate's log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (through a jobStatus subscription, never by polling) until the job is terminal;
    /// returns the phases seen, the first being the state at subscription time.
    pub async fn wait_terminal(&self, id: &str) -> Vec<String> {
        let mut ws = GqlWs::connect(self).await;
        ws.subscribe(
            "s",
            "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
            json!({"id": id}),
        )
        .await;
        let mut phases = Vec::new();
        loop {
            let msg = ws.recv().await;
            match msg["type"].as_str() {
                Some("next") => phases.push(
                    msg["payload"]["data"]["jobStatus"]["phase"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                ),
                Some("complete") => return phases,
                _ => panic!("unexpected message {msg}"),
            }
        }
    }

    /// Waits (through jobStatus) until the job reaches `phase`; panics if it ends first.
    pub async fn wait_phase(&self, id: &str, phase: &str) {
        let mut ws = GqlWs::connect(self).await;
        ws.subscribe(
            "s",
            "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
            json!({"id": id}),
        )
        .await;
        loop {
            let Some(msg) = ws.recv_within(WAIT).await else {
                let job = self.job(id).await;
                panic!(
                    "job {id} did not reach {phase} within {WAIT:?}; it is {job}; jobgate's log:\n{}",
                    self.log_text()
                );
            };
            assert_eq!(msg["type"], "next", "jobStatus ended before {phase}: {msg}");
            if msg["payload"]["data"]["jobStatus"]["phase"] == phase {
                return;
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// kill -9: no chance to clean up.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait for the exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap()
    }

    /// Waits until jobgate's log has a line containing `needle` (its log is read from a pipe
    /// by a thread of ours, so a line written before an answer may be read after it).
    pub async fn wait_log(&self, needle: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.log_text().contains(needle) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "jobgate's log never said {needle:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a WebSocket to jobgate offering `protocols` (none when empty).
pub async fn ws_raw(server: &Server, protocols: &[&str]) -> Ws {
    let mut request = server.ws_url().into_client_request().unwrap();
    if !protocols.is_empty() {
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", protocols.join(", ").parse().unwrap());
    }
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connect");
    ws
}

/// A graphql-transport-ws client over tokio-tungstenite.
pub struct GqlWs {
    pub ws: Ws,
}

impl GqlWs {
    /// Connects and completes connection_init / connection_ack.
    pub async fn connect(server: &Server) -> GqlWs {
        Self::connect_with(server, json!({})).await
    }

    pub async fn connect_with(server: &Server, payload: Value) -> GqlWs {
        let ws = ws_raw(server, &["graphql-transport-ws"]).await;
        let mut client = GqlWs { ws };
        client
            .send(json!({"type": "connection_init", "payload": payload}))
            .await;
        let ack = client.recv().await;
        assert_eq!(ack["type"], "connection_ack", "expected an ack, got {ack}");
        client
    }

    pub async fn send(&mut self, msg: Value) {
        self.ws.send(Message::text(msg.to_string())).await.expect("send");
    }

    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(
            json!({"id": id, "type": "subscribe", "payload": {"query": query, "variables": variables}}),
        )
        .await;
    }

    /// The next protocol message (control frames are skipped); panics on close.
    pub async fn recv(&mut self) -> Value {
        self.recv_within(WAIT)
            .await
            .expect("no message within the wait limit")
    }

    /// The next protocol message within `limit`, or `None`; panics on close.
    pub async fn recv_within(&mut self, limit: Duration) -> Option<Value> {
        // One deadline for the message, however many keepalive pings arrive meanwhile.
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()?
                .expect("socket ended")
                .expect("socket error");
            match frame {
                Message::Text(t) => return Some(serde_json::from_str(t.as_str()).expect("JSON message")),
                Message::Close(c) => panic!("socket closed: {c:?}"),
                _ => continue,
            }
        }
    }

    /// Reads until the socket closes; returns the close code and reason.
    pub async fn closed(&mut self) -> (u16, String) {
        close_of(&mut self.ws).await
    }
}

/// Reads frames until a close frame; returns its code and reason.
pub async fn close_of(ws: &mut Ws) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let frame = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("no close within the wait limit");
        match frame {
            Some(Ok(Message::Close(Some(c)))) => return (c.code.into(), c.reason.to_string()),
            Some(Ok(Message::Close(None))) => return (1005, String::new()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("socket error before close: {e}"),
            None => panic!("socket ended without a close frame"),
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

/// A small disk for jobgate's data directory, to fill and free under a running jobgate: a
/// tmpfs mounted in a mount namespace of its own (so nothing on the machine sees it), held
/// open by a `sleep` in that namespace. jobgate runs in it through `nsenter`; the test reaches
/// its files through `/proc/<holder>/root`. As root this needs only a mount namespace; as
/// another user, a user namespace mapping that user to itself.
pub struct SmallDisk {
    holder: Child,
    /// The mount point, as seen inside the namespace.
    dir: PathBuf,
    _temp: tempfile::TempDir,
}

impl SmallDisk {
    /// A tmpfs of `size` (e.g. "4m"), or why one cannot be made here.
    pub fn create(size: &str) -> Result<SmallDisk, String> {
        let temp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dir = temp.path().to_owned();
        let root = nix::unistd::geteuid().is_root();
        let mut command = Command::new("unshare");
        if !root {
            command.args(["--user", "--map-current-user"]);
        }
        let script = format!(
            "mount -t tmpfs -o size={size},mode=0755 tmpfs '{}' && echo mounted && exec sleep 600",
            dir.display()
        );
        let mut holder = command
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running unshare: {e}"))?;
        let mut line = String::new();
        let stdout = holder.stdout.take().expect("piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.trim() != "mounted" {
            let _ = holder.kill();
            let output = holder.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "unshare could not mount a tmpfs: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            holder,
            dir,
            _temp: temp,
        })
    }

    /// A small disk, or `None` with a loud notice where namespaces are not allowed; in CI
    /// (`CI=true`) it must work.
    pub fn or_skip(size: &str) -> Option<SmallDisk> {
        match Self::create(size) {
            Ok(disk) => Some(disk),
            Err(why) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("SKIPPED: this test needs a tmpfs in a mount namespace of its own: {why}");
                None
            }
            Err(why) => panic!("CI=true, and this test needs a tmpfs in a mount namespace: {why}"),
        }
    }

    /// jobgate's data directory, as jobgate sees it.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The path, seen from the test, of `relative` on the disk.
    pub fn path(&self, relative: &str) -> PathBuf {
        let inside = self.dir.join(relative);
        PathBuf::from(format!("/proc/{}/root{}", self.holder.id(), inside.display()))
    }

    /// The command that runs a program in the disk's namespace.
    fn wrapper(&self) -> Vec<String> {
        let mut wrapper = vec![
            "nsenter".to_owned(),
            "--target".to_owned(),
            self.holder.id().to_string(),
        ];
        if !nix::unistd::geteuid().is_root() {
            wrapper.extend(["--user".to_owned(), "--preserve-credentials".to_owned()]);
        }
        wrapper.push("--mount".to_owned());
        wrapper.push("--".to_owned());
        wrapper
    }

    /// Fills every free byte with a file of its own.
    pub fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.path("filler")).expect("creating the filler");
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // Smaller writes for the last partial block.
        while let Ok(n) = file.write(&block[..512]) {
            if n == 0 {
                break;
            }
        }
    }

    /// Frees what [`SmallDisk::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.path("filler")).expect("removing the filler");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // The namespace, and the tmpfs with it, go when its last process does.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
