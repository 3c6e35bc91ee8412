//! jobgate as a process of its own: the real binary, started with a test's flags (optionally
//! through a wrapper command and with extra environment), found listening by its log line.
//! For what only a process has: kill -9, signals, its pid, environment and user, a mount
//! namespace. Everything else runs in the test's process (`in_process.rs`). It starts the
//! process; killing and waiting are the `Server`'s.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use super::WAIT;
use super::listening;
use super::log::Log;

/// Starts the binary with `args` under `wrapper` (a command and its arguments, the binary
/// after them; empty for none) and `env` added; returns it once it says where it listens, or
/// why not. Every line of its standard error goes to `log`.
pub fn spawn(
    wrapper: &[String],
    args: &[String],
    env: &[(String, String)],
    log: Arc<Log>,
) -> Result<(Child, SocketAddr), String> {
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
        .args(args)
        .env_remove("JOBGATE_API_TOKEN")
        .env_remove("JOBGATE_CONFIG")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {binary}: {e}"))?;
    let stderr = child.stderr.take().expect("jobgate's standard error is piped");
    let listening = listening::read_log_until_listening(stderr, WAIT, move |line| log.push(line));
    match listening {
        Ok((addr, _)) => Ok((child, addr)),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("{why:?}"))
        }
    }
}

/// Runs the jobgate binary with `args` and `env` until it exits, or kills it after [`WAIT`]
/// (a jobgate that starts serves until stopped); its exit code (`None` if it had to be
/// killed) and standard error.
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_jobgate"))
        .args(["--listen", "127.0.0.1:0", "--local-trusted-tenants", "--data-dir"])
        .arg(data.path())
        .args(args)
        .env_remove("JOBGATE_CONFIG")
        .env_remove("JOBGATE_DATABASE_URL")
        .env_remove("JOBGATE_DATABASE_URL_FILE")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (code, stderr)
}
