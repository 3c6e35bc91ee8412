//! The suite cannot pass by skipping: the harness's one skip decision (tests/common/skip.rs)
//! skips loudly and records it outside CI, fails under `CI=true` or `CI=1`, and lets a test
//! that needs the API emulator skip on a real cluster; scripts/test-skips, which scripts/test
//! and scripts/test-cluster run after the tests, fails a CI run that recorded a skip; `.ci/run`
//! sets `CI=true` itself. The decision is checked as a function and in a child process (this
//! binary, running that test again as the one that skips); the scripts run as bash processes.

#[path = "common/skip.rs"]
mod skip;

use std::path::Path;
use std::process::{Command, Output};

use skip::{Decision, Skip, decide};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_missing_tool_skips_outside_ci_and_fails_in_ci() {
    let why = Skip::Missing("it needs kubectl on PATH".to_owned());
    for ci in [None, Some("false"), Some(""), Some("0")] {
        assert_eq!(
            decide("t", &why, ci),
            Decision::Skip("JOBGATE-TEST-SKIPPED: t: it needs kubectl on PATH".to_owned()),
            "CI={ci:?}"
        );
    }
    for ci in ["true", "1"] {
        let Decision::Fail(message) = decide("t", &why, Some(ci)) else {
            panic!("CI={ci} must fail a skip");
        };
        assert!(
            message.starts_with("JOBGATE-TEST-SKIPPED: t: it needs kubectl on PATH"),
            "{message}"
        );
    }
}

#[test]
fn a_test_needing_the_emulator_skips_on_a_real_cluster_even_in_ci() {
    let why = Skip::NeedsEmulator("it makes the API server go down".to_owned());
    for ci in [None, Some("true"), Some("1")] {
        assert_eq!(
            decide("t", &why, ci),
            Decision::Skip(
                "JOBGATE-TEST-SKIPPED (needs the emulator): t: it makes the API server go down".to_owned()
            ),
            "CI={ci:?}"
        );
    }
}

/// Set in the child process of [`skipping_is_loud_recorded_and_fails_in_ci`], which then
/// only skips.
const PROBE_VAR: &str = "JOBGATE_SKIP_PROBE";

fn run_probe(ci: Option<&str>, skips: &Path) -> Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "skipping_is_loud_recorded_and_fails_in_ci",
            "--nocapture",
        ])
        .env(PROBE_VAR, "1")
        .env(skip::SKIPS_FILE_VAR, skips)
        .env_remove("CI");
    if let Some(ci) = ci {
        command.env("CI", ci);
    }
    command.output().expect("the test binary runs")
}

#[test]
fn skipping_is_loud_recorded_and_fails_in_ci() {
    if std::env::var_os(PROBE_VAR).is_some() {
        // The child: the skip decision acts, and the parent checks what it did.
        assert!(skip::skip_or_fail(Skip::Missing(
            "the probe lacks everything".to_owned()
        )));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let skips = dir.path().join("skips");
    let line = "JOBGATE-TEST-SKIPPED: skipping_is_loud_recorded_and_fails_in_ci: the probe lacks everything";

    let output = run_probe(None, &skips);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "outside CI a skip passes: {stderr}");
    assert!(stderr.contains(line), "the skip is said: {stderr}");
    assert_eq!(std::fs::read_to_string(&skips).unwrap(), format!("{line}\n"));

    for ci in ["true", "1"] {
        std::fs::remove_file(&skips).unwrap();
        let output = run_probe(Some(ci), &skips);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "CI={ci}: a skip fails the test: {stderr}"
        );
        assert!(stderr.contains(line), "CI={ci}: {stderr}");
        assert!(
            std::fs::read_to_string(&skips).unwrap().starts_with(line),
            "CI={ci}: recorded"
        );
    }
}

fn test_skips(args: &[&str], ci: Option<&str>) -> Output {
    let mut command = Command::new("bash");
    command
        .arg(root().join("scripts/test-skips"))
        .args(args)
        .env_remove("CI");
    if let Some(ci) = ci {
        command.env("CI", ci);
    }
    command.output().expect("bash runs scripts/test-skips")
}

#[test]
fn a_recorded_skip_fails_the_run_in_ci_only() {
    let dir = tempfile::tempdir().unwrap();
    let skips = dir.path().join("skips");
    let file = skips.to_str().unwrap();

    std::fs::write(&skips, "").unwrap();
    assert!(
        test_skips(&[file], Some("true")).status.success(),
        "no skip, no failure"
    );

    std::fs::write(&skips, "JOBGATE-TEST-SKIPPED: a::b: it needs chromium on PATH\n").unwrap();
    let listed = test_skips(&[file], None);
    assert!(listed.status.success(), "outside CI a skip is listed, not failed");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("a::b: it needs chromium"));
    for ci in ["true", "1"] {
        let failed = test_skips(&[file], Some(ci));
        assert!(!failed.status.success(), "CI={ci}: a recorded skip fails the run");
        assert!(String::from_utf8_lossy(&failed.stderr).contains("FAILED: 1 skip(s) in CI"));
        assert!(!test_skips(&["--real-cluster", file], Some(ci)).status.success());
    }
}

#[test]
fn on_a_real_cluster_the_tests_needing_the_emulator_are_listed_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let skips = dir.path().join("skips");
    let file = skips.to_str().unwrap();
    std::fs::write(
        &skips,
        "JOBGATE-TEST-SKIPPED (needs the emulator): kube::faults::x: it makes the API server go down\n",
    )
    .unwrap();
    let listed = test_skips(&["--real-cluster", file], Some("true"));
    assert!(listed.status.success(), "{listed:?}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("kube::faults::x"));
    // scripts/test (the emulator's run) accepts no skip at all in CI.
    assert!(!test_skips(&[file], Some("true")).status.success());
}

#[test]
fn ci_sets_ci_itself_before_running_the_tests() {
    let run = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let export = run.lines().position(|l| l.trim() == "export CI=true");
    let test = run.lines().position(|l| l.trim() == "exec scripts/test");
    assert!(
        export.is_some_and(|e| test.is_some_and(|t| e < t)),
        ".ci/run exports CI=true before it runs scripts/test"
    );
    let script = std::fs::read_to_string(root().join("scripts/test")).unwrap();
    assert!(
        script.contains("scripts/test-skips \"$JOBGATE_TEST_SKIPS\""),
        "scripts/test checks the recorded skips"
    );
}

#[test]
fn tools_are_found_on_path() {
    let sh = skip::tool_on_path("sh").expect("sh is on PATH");
    assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
    assert_eq!(skip::tool_on_path("no-such-tool-on-any-path"), None);
}
