//! A `perf record` of the server under test, and the summary of where its CPU went: the top
//! symbols by self time, and the same samples grouped by what the code does (GraphQL
//! resolution, JSON, WebSocket framing, tokio, kernel, SQLite, allocator, ...) and by crate.
//!
//! Opt-in (the load bench's `BENCH_PERF=<dir>`), and only on Linux with `perf` installed. It
//! samples the `cpu-clock` software event, as hardware counters are often missing on virtual
//! machines. Self time needs only the binary's symbol table, which the bench build keeps;
//! call graphs (`-g`, frame pointers by default) are recorded for `perf report` by hand and are
//! only meaningful in a build with frame pointers (`RUSTFLAGS=-C force-frame-pointers=yes`) or
//! with `BENCH_PERF_CALL_GRAPH=dwarf`. It measures nothing else and never fails the benchmark:
//! a `perf` that cannot start or report is said in the summary, and the run goes on.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many symbols the summary lists.
const TOP: usize = 25;

/// A running `perf record` attached to one process.
pub struct Recording {
    child: Option<Child>,
    data: PathBuf,
    name: String,
    dir: PathBuf,
    started: Instant,
    load_before: String,
}

/// Starts sampling `pid` into `<dir>/<name>.data`. `call_graph` is perf's `--call-graph`
/// mode (`fp`, `dwarf`, `lbr`).
pub fn record(pid: u32, dir: &Path, name: &str, call_graph: &str) -> Recording {
    std::fs::create_dir_all(dir).expect("BENCH_PERF: cannot create the directory");
    let data = dir.join(format!("{name}.data"));
    let child = Command::new("perf")
        .args([
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "999",
            "--call-graph",
            call_graph,
        ])
        .arg("-p")
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok();
    Recording {
        child,
        data,
        name: name.to_owned(),
        dir: dir.to_owned(),
        started: Instant::now(),
        load_before: load_average(),
    }
}

impl Recording {
    /// Stops the recording (SIGINT, as perf expects), writes `<name>.report.txt` (perf's own
    /// report) and `<name>.summary.md`, and returns the summary.
    pub fn finish(mut self) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        // Who else was busy, seen from the end of the run (other builds share these cores).
        let top = Command::new("top")
            .args(["-b", "-n", "1", "-w", "200"])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .take(17)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let load_after = load_average();
        let Some(mut child) = self.child.take() else {
            return self.write("perf could not be started (is it installed?)");
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let stopped = Instant::now();
        while stopped.elapsed() < super::WAIT {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if child.try_wait().ok().flatten().is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let report = Command::new("perf")
            .args([
                "report",
                "--no-children",
                "--sort",
                "dso,sym",
                "--stdio",
                "-g",
                "none",
            ])
            .args(["--percent-limit", "0"])
            .arg("-i")
            .arg(&self.data)
            .stderr(Stdio::null())
            .output();
        let report = match report {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
            Ok(out) => return self.write(&format!("perf report failed: {}", out.status)),
            Err(e) => return self.write(&format!("perf report could not run: {e}")),
        };
        let _ = std::fs::write(self.dir.join(format!("{}.report.txt", self.name)), &report);
        let rows = parse(&report);
        let mut text = String::new();
        let _ = writeln!(
            text,
            "perf record -e cpu-clock -F 999 over {secs:.1} s ({} samples in the report); \
             load average before: {}; after: {}\n",
            samples(&report).map_or("?".into(), |n| n.to_string()),
            self.load_before,
            load_after
        );
        text.push_str(&grouped(&rows, "What the code does", group));
        text.push('\n');
        text.push_str(&grouped(
            &rows,
            "By crate (of the symbol's own code)",
            |_, sym| crate_of(sym),
        ));
        text.push('\n');
        let _ = writeln!(
            text,
            "Top {TOP} symbols by self time:\n\n| % | dso | symbol |\n|---:|---|---|"
        );
        for (pct, dso, sym) in rows.iter().take(TOP) {
            let _ = writeln!(text, "| {pct:.2} | {dso} | `{}` |", shorten(sym));
        }
        let _ = writeln!(text, "\n`top` at the end of the run:\n\n```\n{top}\n```");
        self.write(&text)
    }

    fn write(&self, text: &str) -> String {
        let _ = std::fs::write(self.dir.join(format!("{}.summary.md", self.name)), text);
        text.to_owned()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The sample count perf's report header states ("# Samples: 123K of event ...").
fn samples(report: &str) -> Option<String> {
    report
        .lines()
        .find_map(|l| l.strip_prefix("# Samples: "))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned)
}

/// (self %, dso, symbol) rows of `perf report --sort dso,sym --stdio`, highest first.
fn parse(report: &str) -> Vec<(f64, String, String)> {
    let mut rows = Vec::new();
    for line in report.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((pct, rest)) = line.split_once('%') else {
            continue;
        };
        let Ok(pct) = pct.trim().parse::<f64>() else {
            continue;
        };
        let rest = rest.trim_start();
        let (dso, sym) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        // "[.] user symbol" or "[k] kernel symbol"; the kernel's keep their mark.
        let sym = sym.trim();
        let sym = match sym.strip_prefix("[.]") {
            Some(user) => user.trim().to_owned(),
            None => sym.to_owned(),
        };
        rows.push((pct, dso.to_owned(), sym));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows
}

/// A markdown table of the rows' percentages summed by `key`, largest first.
fn grouped(rows: &[(f64, String, String)], title: &str, key: impl Fn(&str, &str) -> String) -> String {
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for (pct, dso, sym) in rows {
        *sums.entry(key(dso, sym)).or_default() += pct;
    }
    let mut sums: Vec<(String, f64)> = sums.into_iter().collect();
    sums.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut text = format!("{title}:\n\n| % | group |\n|---:|---|\n");
    for (name, pct) in sums.iter().filter(|(_, p)| *p >= 0.1).take(20) {
        let _ = writeln!(text, "| {pct:.1} | {name} |");
    }
    text
}

/// The group a symbol's self time counts in. Inlined code counts where it was inlined: a
/// serde_json serializer inlined into an async-graphql function is async-graphql's.
fn group(dso: &str, sym: &str) -> String {
    let krate = crate_of(sym);
    let any = |needles: &[&str]| needles.iter().any(|n| sym.contains(n));
    let name = if sym.starts_with("[k] ") || dso.starts_with("[kernel") {
        kernel_group(sym)
    } else if any(&[
        "malloc", "free", "realloc", "calloc", "_int_", "tcache", "arena_", "sdallocx",
    ]) && !any(&["::"])
    {
        "allocator (malloc/free)"
    } else if any(&["memcpy", "memmove", "memset", "memcmp", "strlen"]) && !any(&["::"]) {
        "libc memcpy/memset/memcmp"
    } else if dso.contains("sqlite") || sym.starts_with("sqlite3") || krate.starts_with("sqlx") {
        "SQLite and sqlx"
    } else if krate.starts_with("async_graphql") {
        "async-graphql (parsing, validation, resolution)"
    } else if krate == "__rustc" {
        // The global allocator's Rust shims (`__rust_alloc`, `__rdl_*`).
        "allocator (malloc/free)"
    } else if ["serde", "serde_core", "serde_json", "ryu", "itoa"].contains(&krate.as_str()) {
        "serde / JSON"
    } else if krate.contains("tungstenite") || sym.contains("::ws::") || krate == "sha1" {
        "tungstenite / WebSocket framing, jobgate's ws module"
    } else if krate == "tokio" || krate == "tokio_util" || krate == "mio" || krate == "parking_lot" {
        "tokio (scheduling, timers, IO driver, sync)"
    } else if krate == "indexmap" || krate == "hashbrown" {
        "indexmap / hashbrown (maps: GraphQL response objects, registries)"
    } else if krate.starts_with("futures")
        || ["async_stream", "asynk_strim", "tokio_stream", "pin_project_lite"].contains(&krate.as_str())
    {
        "futures / streams plumbing"
    } else if krate == "hyper" || krate == "axum" || krate == "http" || krate.starts_with("tower") {
        "hyper / axum (HTTP)"
    } else if krate == "jobgate" {
        "jobgate (other than ws)"
    } else if krate == "core" || krate == "alloc" || krate == "std" {
        "Rust std (core/alloc/std: fmt, hashing, Arc, strings)"
    } else if krate == "chrono" {
        "chrono (timestamps)"
    } else if krate == "tracing" || krate.starts_with("tracing_") {
        "tracing"
    } else if dso.starts_with("libc") || dso.starts_with("ld-") {
        "libc (other)"
    } else {
        "other"
    };
    name.to_owned()
}

/// Kernel time split by cause. The local executor forks the server to start each job, so
/// copying and tearing down its page tables (and the copy-on-write faults that follow in the
/// parent) grow with the server's memory. On a VM, `cpu-clock` samples taken while interrupts
/// were off land where they are turned back on (`_raw_spin_unlock_irqrestore`,
/// `finish_task_switch`), so the scheduler's share also holds time spent elsewhere.
fn kernel_group(sym: &str) -> &'static str {
    let any = |needles: &[&str]| needles.iter().any(|n| sym.contains(n));
    if any(&[
        "page_range",
        "page_fault",
        "wp_page",
        "mm_fault",
        "dup_mmap",
        "pages_and_swap",
        "rmap",
        "folio",
        "clear_page",
        "copy_mc",
        "vm_normal_page",
        "mas_",
        "pte",
        "pmd",
        "mmap",
        "exit_mmap",
    ]) {
        "kernel: memory (fork/exec/exit page tables, copy-on-write and page faults)"
    } else if any(&[
        "tcp", "inet", "sock", "skb", "ip_", "net_", "_sendto", "recvfrom", "loopback", "softirq",
    ]) {
        "kernel: network (TCP over loopback)"
    } else if any(&[
        "irqrestore",
        "task_switch",
        "schedule",
        "futex",
        "wake",
        "_raw_spin",
        "enqueue",
        "dequeue",
        "irq",
        "msr",
    ]) {
        "kernel: scheduling, wake-ups, futexes, interrupts"
    } else if any(&["epoll", "ep_"]) {
        "kernel: epoll"
    } else {
        "kernel: other (syscall entry, files, ...)"
    }
}

/// The crate a demangled Rust symbol's code belongs to: `tokio::runtime::...` is tokio's,
/// `<hyper::X as Future>::poll` is hyper's, `core::ptr::drop_in_place<async_graphql::Y>` is
/// async-graphql's (the drop glue of its type). Anything else is named by its first word.
fn crate_of(sym: &str) -> String {
    let mut s = sym.trim_start_matches("[k] ");
    for prefix in ["core::ptr::drop_in_place<", "core::ptr::drop_in_place::<"] {
        if let Some(inner) = s.strip_prefix(prefix) {
            s = inner;
        }
    }
    let s = s.trim_start_matches(['<', '&', '(', '*']);
    let s = s
        .trim_start_matches("mut ")
        .trim_start_matches("dyn ")
        .trim_start_matches("const ");
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    if end == 0 || !s[end..].starts_with("::") {
        return if sym.starts_with("[k] ") {
            "[kernel]".into()
        } else {
            "(C or unknown)".into()
        };
    }
    s[..end].to_owned()
}

/// A symbol cut to a readable length for the summary table (perf's report keeps it whole).
fn shorten(sym: &str) -> String {
    const MAX: usize = 140;
    let sym = sym.replace('`', "'");
    if sym.chars().count() <= MAX {
        sym
    } else {
        let cut: String = sym.chars().take(MAX).collect();
        format!("{cut}…")
    }
}
