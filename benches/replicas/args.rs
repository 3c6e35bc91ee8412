//! The replicas bench's command-line options (`--name value`, after `--` on cargo's command
//! line) and their defaults. It measures nothing.

use std::collections::HashMap;
use std::str::FromStr;

/// Command-line options, `--name value`.
pub(crate) struct Args {
    pub(crate) replicas: usize,
    pub(crate) subs: usize,
    pub(crate) sockets: usize,
    pub(crate) jobs: usize,
    pub(crate) rate: f64,
    pub(crate) run_ms: u64,
    pub(crate) steady_jobs: usize,
    pub(crate) steady_secs: u64,
    pub(crate) clients: usize,
    /// `--lease-duration-secs` of every replica.
    pub(crate) lease_secs: u64,
    pub(crate) failover_jobs: usize,
    pub(crate) failover_runs: usize,
    /// PostgreSQL's `fsync`, `synchronous_commit` and `full_page_writes`.
    pub(crate) postgres_fsync: bool,
}

impl Args {
    pub(crate) fn parse() -> Args {
        let mut map: HashMap<String, String> = HashMap::new();
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(name) = args.next() {
            let Some(key) = name.strip_prefix("--") else {
                panic!("unexpected argument {name:?}; options are --name value");
            };
            let value = args.next().unwrap_or_else(|| panic!("--{key} needs a value"));
            map.insert(key.to_owned(), value);
        }
        fn get<T: FromStr>(map: &mut HashMap<String, String>, key: &str, default: T) -> T {
            match map.remove(key) {
                Some(v) => v.parse().unwrap_or_else(|_| panic!("--{key} {v:?} is not valid")),
                None => default,
            }
        }
        let fsync: String = get(&mut map, "postgres-fsync", "off".to_owned());
        let args = Args {
            // At most 16: each replica holds up to 17 of the server's 200 connections.
            replicas: get(&mut map, "replicas", 3usize).clamp(1, 16),
            subs: get(&mut map, "subs", 1000usize).min(100_000),
            sockets: get(&mut map, "sockets", 30usize).clamp(1, 10_000),
            jobs: get(&mut map, "jobs", 200usize).min(100_000),
            rate: get(&mut map, "rate", 10.0f64).clamp(0.1, 1000.0),
            run_ms: get(&mut map, "run-ms", 500),
            steady_jobs: get(&mut map, "steady-jobs", 300usize).min(100_000),
            steady_secs: get(&mut map, "steady-secs", 30u64).clamp(1, 600),
            clients: get(&mut map, "clients", 32usize).clamp(1, 256),
            // jobgate's own bounds.
            lease_secs: get(&mut map, "lease-secs", 15u64).clamp(2, 300),
            failover_jobs: get(&mut map, "failover-jobs", 60usize).min(10_000),
            failover_runs: get(&mut map, "failover-runs", 3usize).clamp(1, 20),
            postgres_fsync: match fsync.as_str() {
                "on" => true,
                "off" => false,
                other => panic!("--postgres-fsync {other:?}: on or off"),
            },
        };
        if let Some(unknown) = map.keys().next() {
            panic!("unknown option --{unknown}; see the module's docs");
        }
        args
    }
}
