//! The command-line client as a user runs it: the real binary (`CARGO_BIN_EXE_jobgate`)
//! pointed at a server, with no token unless a test gives one and never the tests' own
//! `JOBGATE_*` settings; what it printed, on which stream, and its exit status.

use std::process::Stdio;

use tokio::process::Command;

use super::{Server, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_jobgate");

/// What one run of the client did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The client pointed at `server` (an `http://` base URL) with `args`, and `env` on top.
pub fn client(server: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("JOBGATE_SERVER", server)
        .env_remove("JOBGATE_TOKEN")
        .env_remove("JOBGATE_CONFIG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Runs the client against the server at `server` to its end (within the harness' wait).
pub async fn run_at(server: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output = tokio::time::timeout(WAIT, client(server, args, env).output())
        .await
        .unwrap_or_else(|_| panic!("jobgate {args:?} did not end within {WAIT:?}"))
        .expect("the client runs");
    Run {
        code: output
            .status
            .code()
            .expect("the client exits rather than being killed"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 errors"),
    }
}

/// Runs the client against `server`.
pub async fn run(server: &Server, args: &[&str]) -> Run {
    run_at(&server.url(""), args, &[]).await
}

/// Runs the client against `server`; it must exit 0. Returns its standard output.
pub async fn ok(server: &Server, args: &[&str]) -> String {
    let run = run(server, args).await;
    assert_eq!(
        run.code,
        0,
        "jobgate {args:?} failed: {}{}; jobgate's log:\n{}",
        run.stdout,
        run.stderr,
        server.log_text()
    );
    run.stdout
}
