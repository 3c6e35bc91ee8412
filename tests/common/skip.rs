//! The one place that decides whether a test may skip, and the tools a test finds on `PATH`.
//!
//! A test that cannot run here (a tool missing, no root, no mount namespace) calls
//! [`skip_or_fail`] and returns when it answers `true`. That prints one grep-able line,
//! `JOBGATE-TEST-SKIPPED: <test>: <why>`, appends it to the file named by
//! `JOBGATE_TEST_SKIPS` (scripts/test sets it, and fails a CI run that recorded any), and under
//! `CI=true` or `CI=1` panics instead: CI must run every test. A test that needs the API
//! emulator's fault injection and runs against a real cluster (`JOBGATE_TEST_KUBECONFIG`)
//! skips as [`Skip::NeedsEmulator`]: a real cluster can never do that, so the skip is expected
//! there and never a failure, CI or not; scripts/test-cluster lists those skips at its end.
//!
//! It must not decide anything else: no test checks `CI` or prints a skip by itself.
//! tests/kube-emulator's tests include this file by path, so it uses only the standard library.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming the file every skip is appended to.
pub const SKIPS_FILE_VAR: &str = "JOBGATE_TEST_SKIPS";

/// Why a test does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// This machine lacks what the test needs (a tool, root, a mount namespace): CI fails.
    Missing(String),
    /// The test injects faults only the API emulator can (going down, throttling, dropping
    /// watches, evicting a Kueue workload, scripted pod outcomes), and the cluster is real.
    NeedsEmulator(String),
}

/// What [`decide`] says a test does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Skip, after printing and recording this line.
    Skip(String),
    /// Fail with this message (CI never skips for a missing tool).
    Fail(String),
}

/// Whether `CI` (its value, if set) means a CI run: `true` or `1`.
pub fn is_ci(ci: Option<&str>) -> bool {
    matches!(ci.map(str::trim), Some("true" | "1"))
}

/// The decision for `test` skipping for `why`, given the value of `CI`; [`skip_or_fail`] acts
/// on it. A pure function, so the policy is tested without touching the environment.
pub fn decide(test: &str, why: &Skip, ci: Option<&str>) -> Decision {
    match why {
        Skip::Missing(what) if is_ci(ci) => Decision::Fail(format!(
            "JOBGATE-TEST-SKIPPED: {test}: {what} (CI={}: CI runs every test, so this is a failure)",
            ci.unwrap_or_default()
        )),
        Skip::Missing(what) => Decision::Skip(format!("JOBGATE-TEST-SKIPPED: {test}: {what}")),
        Skip::NeedsEmulator(what) => Decision::Skip(format!(
            "JOBGATE-TEST-SKIPPED (needs the emulator): {test}: {what}"
        )),
    }
}

/// The running test's name: libtest names the thread that runs each test after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .map_or_else(|| "<unnamed test>".to_owned(), str::to_owned)
}

/// Whether the calling test must return now without testing anything: `true` after a loud
/// `JOBGATE-TEST-SKIPPED` line on stderr (and in `$JOBGATE_TEST_SKIPS`); under `CI=true` or
/// `CI=1` a [`Skip::Missing`] panics instead.
pub fn skip_or_fail(why: Skip) -> bool {
    let ci = std::env::var("CI").ok();
    match decide(&test_name(), &why, ci.as_deref()) {
        Decision::Skip(line) => {
            let bar = "!".repeat(78);
            eprintln!("\n{bar}\n{line}\n{bar}\n");
            record(&line);
            true
        }
        Decision::Fail(line) => {
            record(&line);
            panic!("{line}");
        }
    }
}

/// Appends `line` to `$JOBGATE_TEST_SKIPS`, if set (tests of one run append to one file; each
/// line is one write, so lines of parallel tests do not interleave).
fn record(line: &str) {
    let Some(path) = std::env::var_os(SKIPS_FILE_VAR) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        panic!("cannot record the skip in {}: {e}", Path::new(&path).display());
    }
}

/// The first executable file named `name` in the directories of `PATH`.
pub fn tool_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
