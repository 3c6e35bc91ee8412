//! The dashboard in a real browser: each test runs one file of `web/e2e/` with node's test
//! runner, where Playwright (`playwright-core`) drives Debian's headless Chromium against the
//! jobgate binary cargo just built.
//!
//! A file that needs more than jobgate's local executor gets it from its Rust test here:
//! queue.test.mjs runs against the Kubernetes API emulator with its simulated Kueue, started in
//! this process, and asks this test (through files, see `harness.mjs`'s `askTheRustTest`) for
//! what only the emulator's handle can do; snippets.test.mjs runs against the emulator so that
//! the submit form shows its Kubernetes fields.
//!
//! Chromium (`$CHROMIUM`, else `chromium` on `PATH`) is not on every developer's machine:
//! without it (or without `web/node_modules`) these tests skip through the harness's one skip
//! decision (tests/common/skip.rs), which fails them in CI (`CI=true` or `CI=1`) instead.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kube_emulator::Emulator;

// Only the skip decision of the harness: this binary starts no jobgate through it.
#[path = "common/skip.rs"]
#[allow(dead_code)]
mod skip;

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web")
}

/// The Chromium the browser tests drive: `$CHROMIUM`, else `chromium` on `PATH`.
fn chromium() -> Option<PathBuf> {
    match std::env::var_os("CHROMIUM") {
        Some(path) => Some(PathBuf::from(path)).filter(|path| path.exists()),
        None => skip::tool_on_path("chromium"),
    }
}

/// What is missing to run browser tests here, if anything.
fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    if chromium().is_none() {
        missing.push("Chromium: `chromium` on PATH (`apt-get install chromium`) or $CHROMIUM".to_owned());
    }
    if !web_dir().join("node_modules/playwright-core").exists() {
        missing.push("web/node_modules/playwright-core (`npm ci --prefix web`)".to_owned());
    }
    if Command::new("node").arg("--version").output().is_err() {
        missing.push("Node.js (`node`)".to_owned());
    }
    missing
}

/// The node command that runs `web/e2e/{file}`, or `None` when this machine cannot run
/// browser tests (after [`skip::skip_or_fail`], which fails in CI).
fn e2e_command(file: &str) -> Option<Command> {
    let missing = missing();
    if !missing.is_empty() {
        let what = missing.join("; ");
        skip::skip_or_fail(skip::Skip::Missing(format!(
            "the dashboard's browser test web/e2e/{file} needs: {what}"
        )));
        return None;
    }
    let mut command = Command::new("node");
    command
        .args(["--test", "--test-reporter=spec", "--test-concurrency=1"])
        .arg(format!("e2e/{file}"))
        .current_dir(web_dir())
        .env("CHROMIUM", chromium().expect("checked above"))
        .env("JOBGATE_BIN", env!("CARGO_BIN_EXE_jobgate"));
    Some(command)
}

/// Asserts that node ran every test of `web/e2e/{file}` and that they passed.
fn assert_passed(file: &str, output: &Output) {
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "web/e2e/{file} failed:\n{report}");
    // Every test of the file ran and passed (a file with no test would also "succeed").
    assert!(
        report.contains("ℹ fail 0") && !report.contains("ℹ pass 0"),
        "{report}"
    );
}

fn run_e2e(file: &str) {
    if let Some(mut command) = e2e_command(file) {
        assert_passed(file, &command.output().expect("running node"));
    }
}

#[test]
fn a_search_answered_in_short_pages_asks_on_a_bounded_number_of_times() {
    run_e2e("search.test.mjs");
}

#[test]
fn a_job_submitted_from_the_form_reaches_succeeded_live() {
    run_e2e("submit.test.mjs");
}

#[test]
fn a_job_is_cancelled_from_its_page() {
    run_e2e("cancel.test.mjs");
}

#[test]
fn the_servers_validation_errors_appear_next_to_their_fields() {
    run_e2e("validation.test.mjs");
}

#[test]
fn the_view_catches_up_after_the_server_drops_and_returns() {
    run_e2e("reconnect.test.mjs");
}

#[test]
fn after_retention_deleted_what_it_missed_the_view_starts_again_from_a_snapshot() {
    run_e2e("retention.test.mjs");
}

#[test]
fn every_view_is_accessible_and_keyboard_navigable() {
    run_e2e("usability.test.mjs");
}

#[test]
fn with_an_api_token_the_dashboard_asks_for_it() {
    run_e2e("auth.test.mjs");
}

#[test]
fn webhooks_are_created_followed_and_deleted_from_their_page() {
    run_e2e("webhooks.test.mjs");
}

#[test]
fn schedules_are_created_paused_run_now_and_deleted_from_their_page() {
    run_e2e("schedules.test.mjs");
}

#[test]
fn the_log_view_pages_its_history_and_resumes_after_a_reconnect() {
    run_e2e("logs.test.mjs");
}

#[test]
fn a_waiting_jobs_row_shows_its_reason_and_place_in_the_local_queue() {
    run_e2e("local-queue.test.mjs");
}

#[test]
fn a_retried_jobs_page_lists_its_attempts_each_with_its_own_log() {
    run_e2e("attempts.test.mjs");
}

/// queue.test.mjs, against the emulator with Kueue: a ClusterQueue admitting one pod at a time
/// behind LocalQueue `team-a`. The file asks for `open-gate-<name>` to let the emulated pods
/// started with `EMULATOR_GATE=<name>` finish (the way tests/kueue.rs ends a job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_jobs_detail_says_why_it_waits_and_when_it_is_admitted() {
    const FILE: &str = "queue.test.mjs";
    let Some(mut command) = e2e_command(FILE) else {
        return;
    };
    let emu = Emulator::start().await.expect("emulator");
    emu.register_kueue().unwrap();
    emu.create_kueue_queue("default", "team-a", "cluster-queue", 1)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    emu.write_kubeconfig(&kubeconfig, "default").unwrap();
    let requests = dir.path().join("requests");
    std::fs::create_dir(&requests).unwrap();
    let extra = serde_json::json!(["--executor", "kubernetes", "--kubeconfig", kubeconfig, "--kueue"]);
    command
        .env("JOBGATE_EXTRA_ARGS", extra.to_string())
        .env("JOBGATE_E2E_REQUESTS", &requests);
    let mut node = tokio::task::spawn_blocking(move || command.output());

    // The file's requests, taken each once until node is done (node's own waits bound it).
    let mut taken = HashSet::new();
    let mut unknown = Vec::new();
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    let output = loop {
        tokio::select! {
            output = &mut node => break output.unwrap().expect("running node"),
            _ = poll.tick() => {}
        }
        for entry in std::fs::read_dir(&requests).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !taken.insert(name.clone()) {
                continue;
            }
            match name.strip_prefix("open-gate-") {
                Some(gate) => emu.simulation().open_gate(gate),
                // Said once node is done: a panic here would leave it running.
                None => unknown.push(name),
            }
        }
    };
    assert!(
        unknown.is_empty(),
        "web/e2e/{FILE} asked for {unknown:?}, which this test does not do"
    );
    assert_passed(FILE, &output);
    emu.shutdown().await;
}

/// snippets.test.mjs, against the emulator with the RayJob CRD (a template with parameters) and
/// service account `trainer` allowed, so that the form has every field it can show. The file
/// runs the command line the page shows with the jobgate binary of `$JOBGATE_BIN`, and its
/// Python call with the Python of `$JOBGATE_TEST_PYTHON` (one with the client's requirements,
/// which scripts/test provides) and the client's sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_call_and_command_line_under_the_form_submit_the_forms_job() {
    const FILE: &str = "snippets.test.mjs";
    let Some(python) = std::env::var_os("JOBGATE_TEST_PYTHON").filter(|p| Path::new(p).exists()) else {
        skip::skip_or_fail(skip::Skip::Missing(
            "a Python with clients/python/requirements-dev.txt installed, as $JOBGATE_TEST_PYTHON (scripts/test sets it to the venv of `scripts/test-python --venv`)".into(),
        ));
        return;
    };
    let Some(mut command) = e2e_command(FILE) else {
        return;
    };
    command.env("JOBGATE_TEST_PYTHON", python).env(
        "PYTHONPATH",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/src"),
    );
    let emu = Emulator::start().await.expect("emulator");
    emu.register_workload_crds(&["RayJob"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    emu.write_kubeconfig(&kubeconfig, "default").unwrap();
    let extra = serde_json::json!([
        "--executor",
        "kubernetes",
        "--kubeconfig",
        kubeconfig,
        "--service-accounts",
        "trainer"
    ]);
    command.env("JOBGATE_EXTRA_ARGS", extra.to_string());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("running node");
    assert_passed(FILE, &output);
    emu.shutdown().await;
}
