//! The kube bench's command-line options (`--name value`, after `--` on cargo's command
//! line) and their defaults. It measures nothing.

use std::collections::HashMap;
use std::str::FromStr;

/// Command-line options, `--name value` (after `--` on cargo's command line).
pub(crate) struct Args {
    /// Which parts to run, e.g. `1,2,3,4` (3 and 4 share a server: 4 needs 3).
    pub(crate) parts: Vec<u8>,
    /// Part 1: subscriptions and the sockets that carry them.
    pub(crate) subs: usize,
    pub(crate) sockets: usize,
    /// Part 1: jobs measured, their submission rate (jobs/s) and their run time in the kubelet.
    pub(crate) latency_jobs: usize,
    pub(crate) rate: f64,
    pub(crate) run_ms: u64,
    /// Part 1, the design's point: subscriptions kept and events/s.
    pub(crate) design_subs: usize,
    pub(crate) design_events: f64,
    /// Part 2: jobs held running, the counting window; the polling design's clients and window.
    pub(crate) steady_jobs: usize,
    pub(crate) steady_secs: u64,
    pub(crate) poll_clients: usize,
    pub(crate) poll_secs: u64,
    /// Part 3: the largest number of unfinished jobs, and the time allowed to get there.
    pub(crate) jobs: usize,
    pub(crate) fill_minutes: u64,
    /// Concurrent `submitJob` clients when filling.
    pub(crate) clients: usize,
    /// jobgate's `--durability`.
    pub(crate) durability: String,
    /// The emulator's change history (watches may resume within it).
    pub(crate) history: usize,
    /// Extra environment of the jobgate process, `NAME=value;NAME=value` (e.g. a profiler's
    /// `LD_PRELOAD`); this process keeps its own.
    pub(crate) server_env: Vec<(String, String)>,
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
        let parts: String = get(&mut map, "parts", "1,2,3,4".to_owned());
        let args = Args {
            parts: parts
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().parse().expect("--parts: numbers 1 to 4"))
                .collect(),
            subs: get(&mut map, "subs", 1000usize).max(1),
            sockets: get(&mut map, "sockets", 10usize).max(1),
            latency_jobs: get(&mut map, "latency-jobs", 200usize).max(1),
            rate: get(&mut map, "rate", 10.0f64),
            run_ms: get(&mut map, "run-ms", 500),
            design_subs: get(&mut map, "design-subs", 100),
            design_events: get(&mut map, "design-events", 200.0),
            steady_jobs: get(&mut map, "steady-jobs", 1000usize).max(1),
            steady_secs: get(&mut map, "steady-secs", 60u64).max(1),
            poll_clients: get(&mut map, "poll-clients", 1000usize).max(1),
            poll_secs: get(&mut map, "poll-secs", 10u64).max(1),
            jobs: get(&mut map, "jobs", 100_000usize).max(1),
            fill_minutes: get(&mut map, "fill-minutes", 15),
            clients: get(&mut map, "clients", 32usize).max(1),
            durability: get(&mut map, "durability", "full".to_owned()),
            history: get(&mut map, "history", 200_000usize),
            server_env: get(&mut map, "server-env", String::new())
                .split(';')
                .filter(|s| !s.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("--server-env: NAME=value;NAME=value");
                    (k.to_owned(), v.to_owned())
                })
                .collect(),
        };
        assert!(
            map.is_empty(),
            "unknown options: {:?}",
            map.keys().collect::<Vec<_>>()
        );
        assert!(args.rate > 0.0, "--rate must be positive");
        args
    }
}
