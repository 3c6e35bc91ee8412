//! The load bench's knobs (`BENCH_*` environment variables, with their defaults) and the
//! stores it can run the server on. It measures nothing.

use std::str::FromStr;

use serde_json::Value;

use crate::common::postgres::Postgres;

pub(crate) struct Opts {
    /// The submitted job's `command`, a JSON array; `["true"]` unless told.
    pub(crate) command: Value,
    pub(crate) submits: usize,
    pub(crate) clients: usize,
    pub(crate) stores: Vec<StoreKind>,
    pub(crate) durabilities: Vec<String>,
    pub(crate) drain_secs: u64,
    pub(crate) subscriptions: usize,
    pub(crate) subs_per_socket: usize,
    pub(crate) lat_durability: String,
    pub(crate) lat_store: StoreKind,
    pub(crate) rates: Vec<f64>,
    pub(crate) rate_secs: f64,
    pub(crate) burst_jobs: usize,
    pub(crate) small_subs: usize,
    pub(crate) small_events_per_sec: f64,
    /// Subscribers that stop reading (on sockets with a 4 KiB receive buffer) during part 2.
    pub(crate) stalled: usize,
    /// Where to write a `perf` profile of the part 2 runs with all subscriptions, if anywhere.
    pub(crate) perf: Option<std::path::PathBuf>,
    pub(crate) perf_call_graph: String,
}

pub(crate) fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

fn env_list<T: FromStr>(name: &str, default: &str) -> Vec<T> {
    let raw = std::env::var(name).unwrap_or_else(|_| default.to_owned());
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name}: {s:?} is not a valid value"))
        })
        .collect()
}

impl Opts {
    pub(crate) fn from_env() -> Self {
        let command = std::env::var("BENCH_JOB_COMMAND").unwrap_or_else(|_| r#"["true"]"#.to_owned());
        let command: Value =
            serde_json::from_str(&command).expect("BENCH_JOB_COMMAND: a JSON array of strings");
        assert!(command.is_array(), "BENCH_JOB_COMMAND: a JSON array of strings");
        Self {
            command,
            submits: env_or("BENCH_SUBMITS", 2000),
            clients: env_or("BENCH_CLIENTS", 32usize).max(1),
            stores: env_list("BENCH_STORES", "sqlite"),
            durabilities: env_list("BENCH_DURABILITIES", "full,normal"),
            drain_secs: env_or("BENCH_DRAIN_SECS", 60),
            subscriptions: env_or("BENCH_SUBSCRIPTIONS", 1000),
            subs_per_socket: env_or("BENCH_SUBS_PER_SOCKET", 1usize).max(1),
            lat_durability: env_or("BENCH_LAT_DURABILITY", "full".to_owned()),
            lat_store: env_or("BENCH_LAT_STORE", StoreKind::Sqlite),
            rates: env_list("BENCH_RATES", "20,60"),
            rate_secs: env_or("BENCH_RATE_SECS", 10.0),
            burst_jobs: env_or("BENCH_BURST_JOBS", 300),
            small_subs: env_or("BENCH_SMALL_SUBS", 100),
            small_events_per_sec: env_or("BENCH_SMALL_EVENTS_PER_SEC", 200.0),
            stalled: env_or("BENCH_STALLED", 0),
            perf: std::env::var_os("BENCH_PERF")
                .filter(|d| !d.is_empty())
                .map(Into::into),
            perf_call_graph: env_or("BENCH_PERF_CALL_GRAPH", "fp".to_owned()),
        }
    }
}

/// Where the server under test keeps its jobs.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum StoreKind {
    /// SQLite in the data directory, at the run's `--durability`.
    Sqlite,
    /// A throwaway PostgreSQL server, commits not flushed (`fsync=off`), as the tests run it.
    Postgres,
    /// A throwaway PostgreSQL server with PostgreSQL's defaults (`fsync=on`).
    PostgresFsync,
}

impl FromStr for StoreKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sqlite" => Ok(StoreKind::Sqlite),
            "postgres" => Ok(StoreKind::Postgres),
            "postgres-fsync" => Ok(StoreKind::PostgresFsync),
            _ => Err(format!("{s:?}: one of sqlite, postgres, postgres-fsync")),
        }
    }
}

impl StoreKind {
    /// How a run on this store is named, `durability` being SQLite's.
    pub(crate) fn describe(self, durability: &str) -> String {
        match self {
            StoreKind::Sqlite => format!("SQLite --durability {durability}"),
            StoreKind::Postgres => "PostgreSQL fsync=off".into(),
            StoreKind::PostgresFsync => "PostgreSQL fsync=on".into(),
        }
    }

    /// A fresh PostgreSQL server for a run on this store; `None` for SQLite. It panics when
    /// PostgreSQL is not installed: a run that asked for it must not quietly measure nothing.
    pub(crate) fn start_postgres(self) -> Option<Postgres> {
        let start = match self {
            StoreKind::Sqlite => return None,
            StoreKind::Postgres => Postgres::start,
            StoreKind::PostgresFsync => Postgres::start_durable,
        };
        // initdb and the server's start block for a second or two.
        let pg = tokio::task::block_in_place(start);
        Some(pg.expect("BENCH_STORES asks for PostgreSQL, which is not installed here"))
    }
}
