//! The command-line client: `jobgate submit | get | list | watch | logs | cancel | schedule`,
//! in the same binary as the server.
//!
//! It owns the client subcommands' arguments ([`ClientCommand`], flattened into `config`'s
//! subcommands), running one of them ([`run`]) and what the user sees: human tables or JSON
//! on standard output, `error: <CODE>: <message>` on standard error, and the exit status.
//! `client.rs` speaks GraphQL over HTTP, `ws.rs` graphql-transport-ws, `follow.rs` keeps a
//! subscription alive across dropped connections, `commands.rs` holds the subcommands,
//! `schedule_commands.rs` the `schedule` subcommands, `job_flags.rs` the flags that describe
//! a job (both `submit` and `schedule create` take them), and `output.rs` the formats.
//!
//! It must not reach into the server's internals (store, service, schema): it talks to a
//! jobgate only through the public GraphQL API over the network, as any other client would,
//! so that it works against any jobgate it can reach and its tests test the API.

mod client;
mod commands;
mod follow;
mod job_flags;
mod output;
mod schedule_commands;
mod ws;

use clap::{Args, Subcommand, ValueEnum};

pub use client::CliError;
pub use job_flags::JobFlags;
pub use schedule_commands::{ScheduleArgs, ScheduleCommand};

/// Exit status: the command did what was asked.
pub const EXIT_OK: i32 = 0;
/// Exit status: the server refused (it printed its code), or it could not be reached.
pub const EXIT_ERROR: i32 = 1;
/// Exit status of `submit --wait` when the job ended FAILED.
pub const EXIT_JOB_FAILED: i32 = 3;
/// Exit status of `submit --wait` when the job ended CANCELLED.
pub const EXIT_JOB_CANCELLED: i32 = 4;

/// The client subcommands (usage errors exit with clap's status, 2).
#[derive(Clone, Debug, Subcommand)]
pub enum ClientCommand {
    /// Submit a job and print its id; with --wait, follow it to its end (exit status 0 when
    /// it SUCCEEDED, 3 when it FAILED, 4 when it was CANCELLED).
    Submit(Box<SubmitArgs>),
    /// Show one job.
    Get(JobArgs),
    /// List jobs, newest first.
    List(ListArgs),
    /// Stream job status events as they happen (one job's, from its history to its end, when
    /// given an id); reconnects after a dropped connection without repeating or skipping any.
    Watch(WatchArgs),
    /// Print a job's output; with --follow, keep printing until the job ends.
    Logs(LogsArgs),
    /// Cancel a PENDING or RUNNING job.
    Cancel(JobArgs),
    /// Manage schedules: create, list, get, pause, resume, trigger, delete.
    Schedule(ScheduleArgs),
}

/// Where the server is and how to talk to it: every client subcommand takes these.
#[derive(Clone, Debug, Args)]
pub struct ClientArgs {
    /// The jobgate to talk to: its base URL (http:// or https://).
    #[arg(long, env = "JOBGATE_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// An API token or JWT, sent as `Authorization: Bearer <token>`.
    #[arg(long, env = "JOBGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// `table` for people, `json` for scripts (one object, or one object per line for
    /// streams).
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Streaming commands: after this many seconds with nothing from the server, ask it for a
    /// pong; with no answer in as many again, the connection is taken as dead (a route that
    /// went silent without closing it) and a new one resumes where it left off.
    #[arg(long, env = "JOBGATE_KEEPALIVE_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub keepalive_secs: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// A job phase, as GraphQL's `JobPhase` (case-insensitive on the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "PENDING",
            Phase::Running => "RUNNING",
            Phase::Succeeded => "SUCCEEDED",
            Phase::Failed => "FAILED",
            Phase::Cancelled => "CANCELLED",
        }
    }
}

#[derive(Clone, Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The job's name (a DNS-1123 label; not unique).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub job: JobFlags,
    /// A template parameter, `key=value`; repeatable. A value that reads as JSON (`3`,
    /// `true`, `["a"]`, `"3"`) is sent as that JSON, any other as a string.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = key_value)]
    pub params: Vec<(String, String)>,
    /// Submitting again with the same key and the same job returns the first job instead of
    /// starting another (a schedule's jobs take none: each tick has its own).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Follow the job until it ends; the exit status says how it ended.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Clone, Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The job's id.
    pub id: String,
}

#[derive(Clone, Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Only jobs in this phase; repeatable.
    #[arg(long, value_enum, ignore_case = true)]
    pub phase: Vec<Phase>,
    /// Only jobs of this namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// At most this many jobs (the newest).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
}

#[derive(Clone, Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Follow this job only: its recorded events first, then live ones, until it ends.
    pub id: Option<String>,
    /// Start after this event cursor (a `cursor` printed earlier; `0` replays every event
    /// the server keeps) instead of now. Not with an id.
    #[arg(long, conflicts_with = "id")]
    pub after: Option<String>,
}

#[derive(Clone, Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The job's id.
    pub id: String,
    /// Keep printing new lines until the job has ended and its output is drained.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How many of the last lines to print first.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub tail: u32,
}

/// `key=value` → (key, value); the key must not be empty.
fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// Runs a client subcommand and returns the process's exit status. Errors are printed here,
/// on standard error, as `error: <CODE>: <message>` (or the reason the server could not be
/// reached).
pub async fn run(command: ClientCommand) -> i32 {
    match commands::run(command).await {
        Ok(code) => code,
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            // The reader went away (`jobgate watch | head`): nothing left to tell anyone.
            EXIT_OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_splits_at_the_first_equals_sign() {
        assert_eq!(key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert_eq!(key_value("a="), Ok(("a".into(), String::new())));
        assert!(key_value("=b").is_err());
        assert!(key_value("ab").is_err());
    }
}
