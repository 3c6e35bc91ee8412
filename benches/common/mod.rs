//! What the benchmarks (`load`, `kube`, `replicas`, `scale`) share: the jobgate process under test
//! (`jobgate`), the `submitJob` clients (`submissions`), the `jobEvents` subscribers
//! (`subscribers`), CPU and memory read from /proc (`procfs`), a `perf` profile of the server
//! (`perf`), and a throwaway PostgreSQL
//! server (`postgres`, the tests' own harness, included as it is). It measures nothing by
//! itself and prints nothing: what to measure, and how to report it, is each benchmark's.
// Each benchmark uses a part of what is shared; the rest is unused there, not dead.
#![allow(dead_code)]
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

pub mod jobgate;
#[path = "../../tests/common/listening.rs"]
mod listening;
pub mod perf;
// The PostgreSQL harness reads its server's log through the tests' `Log` (`super::log`) and
// bounds its waits by `super::WAIT`, both found here as in tests/common.
#[path = "../../tests/common/log.rs"]
mod log;
#[path = "../../tests/common/postgres.rs"]
pub mod postgres;
pub mod procfs;
// The PostgreSQL harness's skip decision and tool lookup (`super::skip`), as in tests/common.
#[path = "../../tests/common/skip.rs"]
#[allow(dead_code)]
mod skip;
pub mod submissions;
pub mod subscribers;
// The PostgreSQL harness's certificates (`super::tls`), as in tests/common.
#[path = "../../tests/common/tls.rs"]
mod tls;

use std::future::Future;
use std::time::Duration;

/// The longest any single wait may take; a bench must end even against a stuck server.
pub const WAIT: Duration = Duration::from_secs(60);

/// A benchmark's `main`: when cargo runs it as a benchmark (`cargo bench` passes `--bench`),
/// the future `run` makes, on a multi-threaded runtime; otherwise (`cargo test --benches`)
/// only how to run it. `run` is called after that check, so its options are read only then.
pub fn main<F: Future<Output = ()>>(name: &str, run: impl FnOnce() -> F) {
    if !std::env::args().any(|a| a == "--bench") {
        println!("{name}: skipped; run it with `cargo bench --bench {name}`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run());
}

/// Rows of a benchmark's final table: (what was measured, figure, value).
pub type Table = Vec<(String, String, String)>;

/// Prints the final table under `headers`, in columns of `widths`, each measurement named on
/// its first row only.
pub fn print_table(table: &Table, headers: [&str; 3], widths: [usize; 3]) {
    let [w0, w1, w2] = widths;
    println!();
    println!("{:<w0$} {:<w1$} {:>w2$}", headers[0], headers[1], headers[2]);
    println!("{}", "-".repeat(w0 + w1 + w2 + 2));
    let mut previous = String::new();
    for (what, figure, value) in table {
        let label = if *what == previous { "" } else { what.as_str() };
        println!("{label:<w0$} {figure:<w1$} {value:>w2$}");
        previous.clone_from(what);
    }
}

/// Nearest-rank percentile of sorted values.
pub fn pct<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}
