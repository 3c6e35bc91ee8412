//! kubectl against the standalone emulator binary: create a Job from YAML, list it, read it as
//! JSON, follow `get -w`, delete it; the same for a Lease. kubectl is found on `PATH`; without it
//! these tests skip through jobgate's one skip decision (tests/common/skip.rs, included here),
//! which fails them in CI (`CI=true` or `CI=1`) instead.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

// jobgate's skip decision, shared by every test of the workspace.
#[path = "../../common/skip.rs"]
#[allow(dead_code)]
mod skip;

/// Generous: only reached when something is broken.
const WAIT: Duration = Duration::from_secs(60);

const JOB_YAML: &str = "apiVersion: batch/v1
kind: Job
metadata:
  name: NAME
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        command: [echo, hello]
        env:
        - {name: EMULATOR_GATE, value: hold}
";

/// Kills the child process when dropped, so a failing test leaves nothing running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubectl runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn create(&self, dir: &Path, name: &str) -> String {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, JOB_YAML.replace("NAME", name)).expect("write job yaml");
        // The emulator declines OpenAPI, so client-side validation must be off (as documented).
        self.ok(&[
            "create",
            "-f",
            file.to_str().expect("utf-8 path"),
            "--validate=false",
        ])
    }
}

fn scratch_dir() -> PathBuf {
    let unique = format!(
        "kube-emulator-kubectl-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let dir = std::env::temp_dir().join(unique);
    std::fs::create_dir_all(dir.join("cache")).expect("scratch dir");
    dir
}

/// The standalone emulator (killed on drop) and kubectl pointed at it, or `None` (after a loud
/// notice, a failure in CI) where kubectl is not on `PATH`.
fn emulator_and_kubectl(test: &str) -> Option<(Killed, Kubectl, PathBuf)> {
    let Some(program) = skip::tool_on_path("kubectl") else {
        skip::skip_or_fail(skip::Skip::Missing(format!(
            "{test} needs kubectl on PATH (Debian: apt-get install kubernetes-client)"
        )));
        return None;
    };
    let dir = scratch_dir();
    let kubeconfig = dir.join("emulator.kubeconfig");
    let emulator = Killed(
        Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the emulator binary starts"),
    );
    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(
            started.elapsed() < WAIT,
            "the emulator never wrote its kubeconfig"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let kubectl = Kubectl {
        program,
        kubeconfig,
        cache: dir.join("cache"),
    };
    Some((emulator, kubectl, dir))
}

#[test]
fn kubectl_creates_lists_watches_and_deletes_jobs() {
    let Some((_emulator, kubectl, dir)) =
        emulator_and_kubectl("kubectl_creates_lists_watches_and_deletes_jobs")
    else {
        return;
    };

    assert!(kubectl.create(&dir, "pi").contains("job.batch/pi created"));
    let listed = kubectl.ok(&["get", "jobs"]);
    assert!(
        listed.lines().any(|l| l.split_whitespace().next() == Some("pi")),
        "{listed}"
    );
    // Server-side printing: the real Job columns.
    let header: Vec<&str> = listed
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        "{listed}"
    );

    let json: Value = serde_json::from_str(&kubectl.ok(&["get", "job", "pi", "-o", "json"])).expect("JSON");
    assert_eq!(json["kind"], "Job");
    assert_eq!(json["metadata"]["name"], "pi");
    assert!(json["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"].is_string());

    // `get -w`: the current Job first, then a Job created while watching.
    let mut watch = Killed(
        kubectl
            .command(&["get", "jobs", "-w"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("watch"),
    );
    let stdout = watch.0.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |name: &str| loop {
        let line = received
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("no watch line for {name}: {seen:?}"));
        let first = line.split_whitespace().next().map(str::to_owned);
        seen.push(line);
        if first.as_deref() == Some(name) {
            break;
        }
    };
    wait_for("pi");
    assert!(
        kubectl
            .create(&dir, "second")
            .contains("job.batch/second created")
    );
    wait_for("second");
    drop(watch);

    let deleted = kubectl.ok(&["delete", "job", "pi"]);
    assert!(deleted.contains("job.batch \"pi\" deleted"), "{deleted}");
    let gone = kubectl.run(&["get", "job", "pi"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const LEASE_YAML: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: shard-0
spec:
  holderIdentity: replica-a
  leaseDurationSeconds: 15
  renewTime: \"2026-01-01T00:00:00.000000Z\"
";

#[test]
fn kubectl_creates_lists_and_deletes_leases() {
    let Some((_emulator, kubectl, dir)) = emulator_and_kubectl("kubectl_creates_lists_and_deletes_leases")
    else {
        return;
    };
    let file = dir.join("lease.yaml");
    std::fs::write(&file, LEASE_YAML).expect("write lease yaml");
    let created = kubectl.ok(&[
        "create",
        "-f",
        file.to_str().expect("utf-8 path"),
        "--validate=false",
    ]);
    assert!(
        created.contains("lease.coordination.k8s.io/shard-0 created"),
        "{created}"
    );

    // Discovery finds `leases`, and server-side printing gives the real Lease columns.
    let listed = kubectl.ok(&["get", "leases"]);
    let rows: Vec<Vec<&str>> = listed.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows.first().map(|r| &r[..]),
        Some(&["NAME", "HOLDER", "AGE"][..]),
        "{listed}"
    );
    assert!(
        rows.iter()
            .any(|r| r.get(..2) == Some(&["shard-0", "replica-a"][..])),
        "{listed}"
    );

    let json: Value =
        serde_json::from_str(&kubectl.ok(&["get", "lease", "shard-0", "-o", "json"])).expect("JSON");
    assert_eq!(json["kind"], "Lease");
    assert_eq!(json["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(json["spec"]["holderIdentity"], "replica-a");
    assert_eq!(json["spec"]["renewTime"], "2026-01-01T00:00:00.000000Z");

    let deleted = kubectl.ok(&["delete", "lease", "shard-0"]);
    assert!(
        deleted.contains("lease.coordination.k8s.io \"shard-0\" deleted"),
        "{deleted}"
    );
    let gone = kubectl.run(&["get", "lease", "shard-0"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
