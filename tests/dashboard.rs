//! The dashboard in a real browser: each test runs one file of `web/e2e/` with node's test
//! runner, where Playwright (`playwright-core`) drives Debian's headless Chromium against the
//! jobgate binary cargo just built.
//!
//! Chromium is not on every developer's machine: without it (or without `web/node_modules`)
//! these tests say so loudly and pass, except in CI (`CI=true`), where they fail instead.

use std::path::{Path, PathBuf};
use std::process::Command;

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web")
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// What is missing to run browser tests here, if anything.
fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    if !chromium().exists() {
        missing.push(format!(
            "Chromium at {} (`apt-get install chromium`, or set CHROMIUM)",
            chromium().display()
        ));
    }
    if !web_dir().join("node_modules/playwright-core").exists() {
        missing.push("web/node_modules/playwright-core (`npm ci --prefix web`)".to_owned());
    }
    if Command::new("node").arg("--version").output().is_err() {
        missing.push("Node.js (`node`)".to_owned());
    }
    missing
}

fn run_e2e(file: &str) {
    let missing = missing();
    if !missing.is_empty() {
        let what = missing.join("\n  - ");
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("the dashboard's browser tests must run in CI, but these are missing:\n  - {what}");
        }
        eprintln!(
            "\n{bar}\nSKIPPED: the dashboard's browser test web/e2e/{file} did not run.\nMissing:\n  - {what}\nInstall them to run it; CI (CI=true) never skips it.\n{bar}\n",
            bar = "!".repeat(78)
        );
        return;
    }
    let output = Command::new("node")
        .args(["--test", "--test-reporter=spec", "--test-concurrency=1"])
        .arg(format!("e2e/{file}"))
        .current_dir(web_dir())
        .env("JOBGATE_BIN", env!("CARGO_BIN_EXE_jobgate"))
        .output()
        .expect("running node");
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
