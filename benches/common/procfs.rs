//! CPU time and memory of processes and of the whole machine, read from /proc (Linux only):
//! the raw seconds and KiB a benchmark turns into its figures. An unreadable file reads as
//! zero (a process that has exited used no more), never as a failure of the benchmark.

use std::collections::BTreeMap;
use std::process::Command;

/// Clock ticks per second, the unit of /proc's CPU times.
fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds used so far by a process or thread (`self`, a pid, or `PID/task/TID`): user,
/// system, waited children's user and system.
pub fn cpu_split(pid: &str) -> [f64; 4] {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0) / clk_tck();
    // After "(comm)": state is field 3, so utime (14) is index 11.
    [tick(11), tick(12), tick(13), tick(14)]
}

/// CPU seconds used so far by a process: (its own, its waited children's), user + system.
pub fn cpu_secs(pid: &str) -> (f64, f64) {
    let [user, sys, child_user, child_sys] = cpu_split(pid);
    (user + sys, child_user + child_sys)
}

/// CPU seconds per kind of thread of a process (tokio workers, SQLite connections, …), by
/// the thread's name with its trailing digits dropped. Threads that exited are not counted.
pub fn thread_cpu(pid: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let name = name
            .trim()
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
        let tid = task.file_name().to_string_lossy().into_owned();
        *out.entry(name.to_owned()).or_insert(0.0) += cpu_secs(&format!("{pid}/task/{tid}")).0;
    }
    out
}

/// The whole machine's CPU time so far, in seconds of one core: (busy, all).
pub fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (0.0, 0.0);
    };
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    let all: f64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    ((all - idle) / clk_tck(), all / clk_tck())
}

/// A field of /proc/PID/status in KiB (`VmRSS:`, `RssAnon:`, …); 0 when it is missing.
pub fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes a process has caused to be written to storage (`/proc/PID/io`).
pub fn io_write_bytes(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The pid of the PostgreSQL server listening on `port`: the `postgres` process started with
/// `-p <port>` (the harness's command line), if there is one.
pub fn postmaster_pid(port: u16) -> Option<String> {
    let port = port.to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid = entry.file_name().into_string().ok()?;
        pid.parse::<u32>().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_postgres = args.first()?.ends_with(b"/postgres");
        let on_port = args.windows(2).any(|w| w[0] == b"-p" && w[1] == port.as_bytes());
        (is_postgres && on_port).then_some(pid)
    })
}

/// CPU seconds used so far by a process, its live children and the children it has waited
/// for: a PostgreSQL server's, whose work is done in one backend process per connection.
pub fn tree_cpu_secs(pid: &str) -> f64 {
    let (own, waited) = cpu_secs(pid);
    let children: f64 = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().into_string().ok())
                .filter(|child| parent_of(child).as_deref() == Some(pid))
                .map(|child| cpu_secs(&child).0)
                .sum()
        })
        .unwrap_or(0.0);
    own + waited + children
}

/// A process's parent pid, from `/proc/PID/stat`.
fn parent_of(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "(comm)": state, then the parent's pid.
    Some(stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.to_owned())
}
