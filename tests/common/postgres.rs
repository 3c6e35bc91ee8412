//! A throwaway PostgreSQL server for one test: Debian's `postgresql` binaries, a fresh
//! cluster in a temporary directory (`initdb`), and `postgres` run as a child process of the
//! test (never daemonised), so that the test owns it: it can kill it (-9), freeze it
//! (SIGSTOP) and thaw it, and it goes with the test. It makes, breaks and removes servers;
//! what a store does against them is the tests'.
//!
//! Parallel tests each start their own server. Ports are not reserved ahead (nothing can
//! hold a port for another process): a server is started on a port the kernel just found
//! free, and if someone took it in between, `postgres` itself fails to bind and exits, and
//! the server is started again on another port. Readiness is read from the server's own log,
//! never asked on the port, so another test's server on the same port can never be mistaken
//! for ours.
//!
//! Tests run the server with `fsync`, `synchronous_commit` and `full_page_writes` off: a
//! crash of the machine is not what they test, and commits then cost no disk flush.
//! [`Postgres::start_durable`] keeps PostgreSQL's defaults (all on), for a benchmark that
//! compares the cost of commits with SQLite's.
//!
//! PostgreSQL refuses to run as root: as root, `initdb` and `postgres` run as `nobody`
//! (through util-linux's `setpriv`), in a temporary directory handed to it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, User};

use super::WAIT;
use super::log::Log;

/// The user a root test runs PostgreSQL as.
const UNPRIVILEGED: &str = "nobody";

/// The superuser `initdb` creates; trusted from anywhere local, without a password.
const SUPERUSER: &str = "jobgate";

/// The database [`Postgres::url`] names.
const DATABASE: &str = "jobgate";

/// How many ports a start tries before giving up: each is one the kernel just found free, so
/// a second collision is already unlikely.
const PORT_ATTEMPTS: usize = 10;

/// One PostgreSQL server, running (or killed or paused by the test) until dropped.
pub struct Postgres {
    /// The postmaster, `None` once killed.
    postmaster: Option<Child>,
    pub port: u16,
    bin: PathBuf,
    /// Whether commits are flushed to disk (PostgreSQL's defaults) or not (the tests').
    durable: bool,
    /// Whether TCP clients must use TLS (the server's certificate is signed by
    /// [`Postgres::ca_cert`]).
    tls: bool,
    /// Everything `initdb` and the server wrote.
    log: Arc<Log>,
    /// The cluster (`data/`) and the Unix socket (`socket/`); removed on drop.
    dir: tempfile::TempDir,
}

impl Postgres {
    /// Starts a server with an empty database `jobgate` (see [`Postgres::url`]). `None` when
    /// PostgreSQL is not installed here, after [`skip_or_fail`](super::skip::skip_or_fail)
    /// (which fails instead in CI). Any other failure to start panics
    /// with the server's log. It blocks for the second or two that takes.
    pub fn start() -> Option<Postgres> {
        Self::start_flushing(false)
    }

    /// [`Postgres::start`], but with `fsync`, `synchronous_commit` and `full_page_writes` on
    /// (PostgreSQL's defaults): every commit waits for its WAL flush, as in production.
    pub fn start_durable() -> Option<Postgres> {
        Self::start_flushing(true)
    }

    /// [`Postgres::start`], but TCP clients must use TLS: the server presents a certificate
    /// for 127.0.0.1 signed by a CA of its own ([`Postgres::ca_cert`]), made with `openssl`.
    pub fn start_tls() -> Option<Postgres> {
        Self::start_options(false, true)
    }

    fn start_flushing(durable: bool) -> Option<Postgres> {
        Self::start_options(durable, false)
    }

    fn start_options(durable: bool, tls: bool) -> Option<Postgres> {
        let Some(bin) = bin_dir() else {
            let why = "it needs PostgreSQL's server binaries (initdb, postgres and createdb: on PATH, \
                       in `pg_config --bindir` or in /usr/lib/postgresql/*/bin): apt-get install postgresql";
            super::skip::skip_or_fail(super::skip::Skip::Missing(why.to_owned()));
            return None;
        };
        Some(Self::start_in(bin, durable, tls))
    }

    /// [`Postgres::start`], named for how a test uses it:
    /// `let Some(pg) = Postgres::start_or_skip() else { return };`.
    pub fn start_or_skip() -> Option<Postgres> {
        Self::start()
    }

    fn start_in(bin: PathBuf, durable: bool, tls: bool) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("jobgate-pg-")
            .tempdir()
            .expect("a temporary directory for PostgreSQL");
        let log = Arc::new(Log::default());
        let mut pg = Postgres {
            postmaster: None,
            port: 0,
            bin,
            durable,
            tls,
            log,
            dir,
        };
        let runs_as = unprivileged_user();
        if let Some(user) = &runs_as {
            // PostgreSQL's files must be the server's user's; the directory is 0700, so
            // nobody else sees into it.
            nix::unistd::chown(pg.dir.path(), Some(user.uid), Some(user.gid))
                .expect("handing the temporary directory to the PostgreSQL user");
        }
        pg.initdb(runs_as.as_ref());
        if tls {
            pg.require_tls(runs_as.as_ref());
        }
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match pg.run_postmaster(runs_as.as_ref(), port) {
                Started::Ready(child) => {
                    pg.postmaster = Some(child);
                    pg.port = port;
                    pg.create_database(DATABASE);
                    return pg;
                }
                Started::PortTaken => continue,
            }
        }
        panic!(
            "PostgreSQL found no free port in {PORT_ATTEMPTS} tries; its log:\n{}",
            pg.log.text()
        );
    }

    /// `postgres://jobgate@127.0.0.1:<port>/jobgate`: the database the server started with.
    pub fn url(&self) -> String {
        self.url_of(DATABASE)
    }

    fn url_of(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates another empty database on this server (for a test that needs several: two
    /// stores side by side, say) and returns its URL. Names are plain: `[a-z0-9_]+`.
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "a database name of [a-z0-9_]+, not {name:?}"
        );
        let output = Command::new(self.bin.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
                name,
            ])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .output()
            .expect("running createdb");
        assert!(
            output.status.success(),
            "createdb {name} failed: {}; the server's log:\n{}",
            String::from_utf8_lossy(&output.stderr).trim(),
            self.log.text()
        );
        self.url_of(name)
    }

    /// What `initdb` and the server wrote so far.
    pub fn log_text(&self) -> String {
        self.log.text()
    }

    /// kill -9 of the whole server, the postmaster and every process it started, as in a
    /// crash: open connections break, new ones are refused. It stays dead.
    pub fn kill9(&mut self) {
        let Some(mut postmaster) = self.postmaster.take() else {
            return;
        };
        let pid = Pid::from_raw(postmaster.id() as i32);
        // Each backend is in a process group of its own, so they are found by parent, while
        // they have it: the postmaster is stopped first (it forks nothing more), its children
        // listed, then all are killed.
        stop_and_wait(pid);
        let children = children_of(pid);
        let _ = kill(pid, Signal::SIGKILL);
        for child in children {
            let _ = kill(child, Signal::SIGKILL);
        }
        let _ = postmaster.wait();
    }

    /// Starts the server again after [`Postgres::kill9`], on its data and its port (clients
    /// reconnect to the same URL), after crash recovery. Panics if the port was taken
    /// meanwhile.
    pub fn restart(&mut self) {
        assert!(self.postmaster.is_none(), "kill9 the server before restarting it");
        match self.run_postmaster(unprivileged_user().as_ref(), self.port) {
            Started::Ready(child) => self.postmaster = Some(child),
            Started::PortTaken => panic!(
                "port {} was taken while PostgreSQL was down; its log:\n{}",
                self.port,
                self.log.text()
            ),
        }
    }

    /// Freezes the whole server (SIGSTOP to the postmaster and every process it started): it
    /// holds its connections and answers nothing, as a server that hangs, until
    /// [`Postgres::resume`].
    pub fn pause(&self) {
        let pid = self.postmaster_pid();
        // Stopped, it forks no more: then what it had started is stopped too.
        assert!(
            stop_and_wait(pid),
            "the postmaster ({pid}) never stopped after SIGSTOP"
        );
        for child in children_of(pid) {
            let _ = kill(child, Signal::SIGSTOP);
        }
    }

    /// Thaws a server frozen by [`Postgres::pause`].
    pub fn resume(&self) {
        let pid = self.postmaster_pid();
        for child in children_of(pid) {
            let _ = kill(child, Signal::SIGCONT);
        }
        kill(pid, Signal::SIGCONT).expect("SIGCONT to the postmaster");
    }

    fn postmaster_pid(&self) -> Pid {
        let postmaster = self
            .postmaster
            .as_ref()
            .expect("the server was killed; start another");
        Pid::from_raw(postmaster.id() as i32)
    }

    /// The certificate of the CA that signed a TLS server's certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("tls").join("ca.crt")
    }

    /// The certificate of a CA that signed nothing of this server's.
    pub fn untrusted_ca_cert(&self) -> PathBuf {
        self.dir.path().join("tls").join("other-ca.crt")
    }

    /// Makes a CA, a server certificate for 127.0.0.1 it signs, and a CA that signs nothing;
    /// then lets TCP clients in over TLS only.
    fn require_tls(&self, runs_as: Option<&User>) {
        let tls = self.dir.path().join("tls");
        std::fs::create_dir(&tls).expect("creating the TLS directory");
        super::tls::make(&tls, "IP:127.0.0.1");
        // PostgreSQL reads its key only if no one else can.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tls.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some(user) = runs_as {
            for file in [tls.clone(), tls.join("server.key"), tls.join("server.crt")] {
                nix::unistd::chown(&file, Some(user.uid), Some(user.gid))
                    .expect("handing the TLS files over");
            }
        }
        // The Unix socket stays open for the harness; TCP takes TLS only.
        std::fs::write(
            self.data_dir().join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("writing pg_hba.conf");
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    /// A command for one of the server's binaries, run as `runs_as` when given.
    fn command(&self, runs_as: Option<&User>, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = match runs_as {
            Some(user) => {
                // setpriv execs the program (no process of its own in between), so the child
                // is the program itself: signals reach it, and it is what `wait` waits for.
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={}", user.uid))
                    .arg(format!("--regid={}", user.gid))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(program);
                command
            }
            None => Command::new(program),
        };
        // English messages: the log is read for "ready to accept connections".
        command
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .stdin(Stdio::null());
        command
    }

    fn initdb(&self, runs_as: Option<&User>) {
        let output = self
            .command(runs_as, "initdb")
            .arg("-D")
            .arg(self.data_dir())
            .args([
                "-A",
                "trust",
                "-U",
                SUPERUSER,
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .expect("running initdb");
        for line in String::from_utf8_lossy(&output.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&output.stderr).lines())
        {
            self.log.push(format!("initdb: {line}"));
        }
        assert!(
            output.status.success(),
            "initdb failed ({}); its output:\n{}",
            output.status,
            self.log.text()
        );
        std::fs::create_dir(self.socket_dir()).expect("creating the socket directory");
        if let Some(user) = runs_as {
            nix::unistd::chown(&self.socket_dir(), Some(user.uid), Some(user.gid))
                .expect("handing the socket directory to the PostgreSQL user");
        }
    }

    /// Runs the postmaster on `port` until it says it accepts connections, or exits.
    fn run_postmaster(&self, runs_as: Option<&User>, port: u16) -> Started {
        let flush = if self.durable { "on" } else { "off" };
        let mut child = self
            .command(runs_as, "postgres")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-k")
            .arg(self.socket_dir())
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args([
                "-c",
                &format!("fsync={flush}"),
                "-c",
                &format!("synchronous_commit={flush}"),
            ])
            .args([
                "-c",
                &format!("full_page_writes={flush}"),
                "-c",
                "max_connections=200",
            ])
            .args(if self.tls {
                let tls = self.dir.path().join("tls");
                vec![
                    "-c".to_owned(),
                    "ssl=on".to_owned(),
                    "-c".to_owned(),
                    format!("ssl_cert_file={}", tls.join("server.crt").display()),
                    "-c".to_owned(),
                    format!("ssl_key_file={}", tls.join("server.key").display()),
                ]
            } else {
                Vec::new()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting postgres");
        let stderr = child.stderr.take().expect("postgres's standard error is piped");
        let (lines, seen) = mpsc::channel();
        let log = self.log.clone();
        // Every line goes to the log for as long as the server runs; the start reads them
        // until the server is ready (then stops listening, and sends fail harmlessly).
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                log.push(line.clone());
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + WAIT;
        let mut port_taken = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match seen.recv_timeout(left) {
                Ok(line) if line.contains("database system is ready to accept connections") => {
                    return Started::Ready(child);
                }
                Ok(line) => {
                    port_taken |= line.contains("could not bind") || line.contains("Address already in use");
                }
                // Its standard error closed: the postmaster exited (a server that runs has
                // it open in every process).
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().expect("waiting for postgres");
                    if port_taken {
                        self.log
                            .push(format!("(port {port} was taken; starting again on another)"));
                        return Started::PortTaken;
                    }
                    panic!(
                        "postgres exited ({status}) before accepting connections; its log:\n{}",
                        self.log.text()
                    );
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "postgres did not accept connections within {WAIT:?}; its log:\n{}",
                        self.log.text()
                    );
                }
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // A failing test shows what the server said, so that a failure seen once in CI can be
        // understood from its output alone.
        if std::thread::panicking() {
            eprintln!(
                "--- PostgreSQL's log ({}) ---\n{}",
                self.dir.path().display(),
                self.log.text()
            );
        }
        // A paused server is killed as well: SIGKILL needs no SIGCONT.
        self.kill9();
        // The TempDir goes after this, with the cluster in it.
    }
}

enum Started {
    Ready(Child),
    PortTaken,
}

/// The directory of PostgreSQL's server binaries (the harness runs `initdb`, `postgres` and
/// `createdb` from it): that of `initdb` on `PATH`, its links followed (a link in
/// /usr/local/bin has no `createdb` beside it), else `pg_config --bindir` (not every
/// `pg_config` belongs to a server), else the newest of Debian's
/// `/usr/lib/postgresql/<version>/bin` (Debian keeps them off `PATH`); each only if it holds
/// all three.
fn bin_dir() -> Option<PathBuf> {
    let has_server = |dir: &Path| {
        ["initdb", "postgres", "createdb"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    if let Some(dir) = super::skip::tool_on_path("initdb")
        .and_then(|initdb| std::fs::canonicalize(initdb).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        && has_server(&dir)
    {
        return Some(dir);
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_server(&dir) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The user to run PostgreSQL as: `None` (ourselves) unless we are root, which it refuses.
fn unprivileged_user() -> Option<User> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = User::from_name(UNPRIVILEGED)
        .expect("reading the user database")
        .unwrap_or_else(|| panic!("as root, PostgreSQL runs as {UNPRIVILEGED:?}, and there is no such user"));
    Some(user)
}

/// A port nothing listens on now. Another process may take it before the server binds it:
/// then the server fails to start and is started again on another (see the module's docs).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("finding a free port")
        .port()
}

/// Sends SIGSTOP and waits until the process is stopped or gone (a stopped postmaster
/// starts no more processes); false if it was still running after [`WAIT`]. It never
/// panics: a drop calls it.
fn stop_and_wait(pid: Pid) -> bool {
    let _ = kill(pid, Signal::SIGSTOP);
    let deadline = Instant::now() + WAIT;
    while let Some(state) = process_state(pid)
        && !matches!(state, 'T' | 'Z')
    {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The processes whose parent is `parent`.
fn children_of(parent: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let (_, ppid) = stat_of(Pid::from_raw(pid))?;
            (ppid == parent.as_raw()).then_some(Pid::from_raw(pid))
        })
        .collect()
}

/// A process's state letter (`R`, `S`, `T` for stopped, …), if it exists.
fn process_state(pid: Pid) -> Option<char> {
    stat_of(pid).map(|(state, _)| state)
}

/// A process's state and parent, from `/proc/<pid>/stat` (after the command's closing
/// parenthesis: the command itself may hold spaces and parentheses).
fn stat_of(pid: Pid) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}
