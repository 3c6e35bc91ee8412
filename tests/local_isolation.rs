//! The local executor hands jobs none of jobgate's files, credentials or environment, runs
//! them as an unprivileged user when jobgate is root, and refuses to serve several tenants
//! when it cannot.
//!
//! The tests that need a second uid run jobgate as root: directly when the test is root,
//! otherwise in a user namespace where the test's user is root (`common::root`); where neither
//! can be done they skip loudly, never in CI (CI=true).
//!
//! These tests spawn the binary (`Server::spawn_with_env`, `Server::spawn_as_root`,
//! `CARGO_BIN_EXE_jobgate`): its environment, open files and user are the point.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Polling, Server, token_entry};
use serde_json::{Value, json};

const ALICE: &str = "alice-isolation-token-0123456789";
const BOB: &str = "bob-isolation-token-0123456789";
const ENV_TOKEN: &str = "api-token-in-jobgates-environment-0123456789";
const JWT_SECRET: &str = "an-hs256-secret-no-job-may-ever-read-0123456789";
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A tokens file for alice (team-a) and bob (team-b).
fn two_tenants(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.toml");
    let text = token_entry("alice", ALICE, "namespaces = [\"team-a\"]")
        + &token_entry("bob", BOB, "namespaces = [\"team-b\"]");
    std::fs::write(&path, text).unwrap();
    path
}

async fn submit_as(server: &Server, token: Option<&str>, input: Value) -> String {
    let (_, body) = server
        .gql_as(
            token,
            "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }",
            json!({ "input": input }),
        )
        .await;
    body["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("submit failed: {body}"))
        .to_owned()
}

/// Asks for the job until it has finished (the test polls its own API; jobgate polls
/// nothing); returns its phase, result and whole log.
async fn finished(server: &Server, token: Option<&str>, id: &str) -> Value {
    let polling = Polling::start();
    loop {
        let (_, body) = server
            .gql_as(
                token,
                "query($id: ID!) { job(id: $id) { phase message result logs(tailLines: 2000) } }",
                json!({ "id": id }),
            )
            .await;
        let job = &body["data"]["job"];
        if matches!(job["phase"].as_str(), Some("SUCCEEDED" | "FAILED" | "CANCELLED")) {
            return job.clone();
        }
        polling.pause(|| format!("job {id} never finished: {body}")).await;
    }
}

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

/// Every file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The variables a job may see: the documented ones, its own, and those `sh` sets itself.
fn check_env(log: &str, own: &[&str], forbidden_values: &[&str]) {
    let env: Vec<&str> = log
        .lines()
        .skip_while(|l| *l != "ENV-BEGIN")
        .skip(1)
        .take_while(|l| *l != "ENV-END")
        .collect();
    assert!(
        env.iter().any(|l| l.starts_with("PATH=")),
        "no environment printed: {log}"
    );
    let allowed = [
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "JOB_COMPLETION_INDEX",
        "JOBGATE_JOB_ID",
        "JOBGATE_RESULT_FILE",
        // The job's trace context (docs/TRACING.md).
        "TRACEPARENT",
        "TRACESTATE",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
    ];
    for line in &env {
        let name = line.split('=').next().unwrap();
        assert!(
            allowed.contains(&name) || own.contains(&name),
            "the job saw {line:?}, which jobgate's environment must not pass on:\n{log}"
        );
        for value in forbidden_values {
            assert!(
                !line.contains(value),
                "the job's environment holds {value:?}: {line}"
            );
        }
    }
}

#[tokio::test]
async fn a_tenants_job_can_read_none_of_jobgates_files_nor_another_tenants() {
    // Credentials kept as an operator should: readable by jobgate's user only (jobgate
    // cannot hide a world-readable file; docs/CONFIG.md says so).
    let secrets = tempfile::tempdir().unwrap();
    std::fs::set_permissions(secrets.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let tokens = two_tenants(secrets.path());
    let jwt_secret = secrets.path().join("jwt.secret");
    std::fs::write(&jwt_secret, JWT_SECRET).unwrap();
    // As an operator would: the secret file named in jobgate's environment, with a token.
    let Some(server) = Server::spawn_as_root(
        &[],
        &[
            "--api-tokens-file",
            tokens.to_str().unwrap(),
            "--allowed-namespaces",
            "team-a,team-b",
        ],
        &[
            ("JOBGATE_API_TOKEN", ENV_TOKEN),
            ("JOBGATE_JWT_HS256_SECRET_FILE", jwt_secret.to_str().unwrap()),
            // Explicitly, though it is the default as root.
            ("JOBGATE_RUN_AS_USER", "65534:65534"),
        ],
    )
    .await
    else {
        return;
    };

    // Alice's job leaves a mark in its log, its directory and its result.
    let alice = submit_as(
        &server,
        Some(ALICE),
        json!({"namespace": "team-a", "command": sh(
            "echo alice-log-marker; echo alice-file-marker > note.txt; \
             echo alice-result-marker > \"$JOBGATE_RESULT_FILE\"; echo \"workdir $PWD\""
        )}),
    )
    .await;
    let done = finished(&server, Some(ALICE), &alice).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    assert_eq!(
        done["result"], "alice-result-marker\n",
        "results come back: {done}"
    );
    let alice_log = done["logs"].as_str().unwrap();
    let alice_dir = alice_log
        .lines()
        .find_map(|l| l.strip_prefix("workdir "))
        .unwrap_or_else(|| panic!("no working directory in {alice_log}"))
        .to_owned();

    // Bob's job tries every file jobgate keeps, alice's directory, jobgate's credentials and
    // its process's environment, then points its result file at the JWT secret.
    let mut targets: Vec<String> = files_under(&server.data_dir)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        targets.iter().any(|t| t.contains(&alice)),
        "alice's log is among jobgate's files: {targets:?}"
    );
    targets.extend([
        server
            .data_dir
            .join("logs")
            .join(format!("{alice}.log"))
            .display()
            .to_string(),
        format!("{alice_dir}/note.txt"),
        tokens.display().to_string(),
        jwt_secret.display().to_string(),
        format!("/proc/{}/environ", server.pid()),
    ]);
    let mut script = String::new();
    for target in &targets {
        script.push_str(&format!(
            "if cat '{target}' > /dev/null 2>&1; then echo 'READ {target}'; else echo 'DENIED {target}'; fi\n"
        ));
    }
    script.push_str(&format!(
        "if ls '{alice_dir}' > /dev/null 2>&1; then echo 'READ {alice_dir}'; else echo 'DENIED {alice_dir}'; fi\n\
         echo \"uid $(id -u)\"\n\
         grep '^Groups:' /proc/self/status\n\
         echo ENV-BEGIN; env; echo ENV-END\n\
         ln -s '{}' \"$JOBGATE_RESULT_FILE\"\n",
        jwt_secret.display()
    ));
    let bob = submit_as(
        &server,
        Some(BOB),
        json!({"namespace": "team-b", "command": sh(&script)}),
    )
    .await;
    let done = finished(&server, Some(BOB), &bob).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    let log = done["logs"].as_str().unwrap();

    let read: Vec<&str> = log.lines().filter(|l| l.starts_with("READ ")).collect();
    assert!(
        read.is_empty(),
        "bob's job read what it must not:\n{}\n\nits log:\n{log}",
        read.join("\n")
    );
    assert_eq!(
        log.lines().filter(|l| l.starts_with("DENIED ")).count(),
        targets.len() + 1,
        "{log}"
    );
    for secret in ["alice-log-marker", "alice-file-marker", JWT_SECRET, ENV_TOKEN] {
        assert!(!log.contains(secret), "bob's log holds {secret:?}:\n{log}");
    }
    assert_ne!(
        done["result"].as_str(),
        Some(JWT_SECRET),
        "a link as result file is followed"
    );
    assert!(done["result"].is_null(), "{done}");
    assert_eq!(
        log.lines().find(|l| l.starts_with("uid ")),
        Some(format!("uid {NOBODY}").as_str()),
        "{log}"
    );
    let groups = log.lines().find(|l| l.starts_with("Groups:")).unwrap_or_default();
    assert_eq!(
        groups.trim(),
        "Groups:",
        "supplementary groups are dropped: {log}"
    );
    let data_dir = server.data_dir.display().to_string();
    let secrets_dir = secrets.path().display().to_string();
    check_env(log, &[], &[ENV_TOKEN, JWT_SECRET, &data_dir, &secrets_dir]);
    // Alice's directory went with her job.
    assert!(!Path::new(&alice_dir).exists(), "{alice_dir} is left behind");
}

#[tokio::test]
async fn a_job_runs_in_a_directory_of_its_own_outside_the_data_directory_with_a_private_environment() {
    let secret_value = "postgres://jobgate:hunter2@db/jobgate";
    let server = Server::spawn_with_env(
        &[],
        &[
            ("PGPASSWORD", secret_value),
            ("AWS_SECRET_ACCESS_KEY", secret_value),
        ],
    )
    .await;
    let id = server
        .submit(json!({
            "command": sh("echo \"pwd $PWD\"; echo \"home $HOME\"; echo \"tmp $TMPDIR\"; \
                           echo \"dir $(stat -c '%a %u' .)\"; touch \"$TMPDIR/x\" && echo tmp-writable; \
                           echo ENV-BEGIN; env; echo ENV-END"),
            "env": [{"name": "MY_SETTING", "value": "mine"}],
        }))
        .await;
    let done = finished(&server, None, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    let log = done["logs"].as_str().unwrap();
    let field = |name: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {log}"))
            .to_owned()
    };
    let pwd = PathBuf::from(field("pwd"));
    let data_dir = server.data_dir.canonicalize().unwrap();
    assert!(
        !pwd.starts_with(&data_dir),
        "the job ran inside the data directory: {log}"
    );
    assert!(pwd.ends_with(&id), "{log}");
    assert_eq!(field("home"), pwd.display().to_string());
    assert_eq!(field("tmp"), pwd.join("tmp").display().to_string());
    let uid = if is_root() {
        NOBODY
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert_eq!(field("dir"), format!("700 {uid}"), "{log}");
    assert!(log.lines().any(|l| l == "tmp-writable"), "{log}");
    check_env(
        log,
        &["MY_SETTING"],
        &[secret_value, &server.data_dir.display().to_string()],
    );
    // jobgate's own files are its alone.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&server.data_dir), 0o700);
    assert_eq!(mode(&server.data_dir.join("logs")), 0o700);
    assert_eq!(
        mode(&server.data_dir.join("logs").join(format!("{id}.log"))),
        0o600
    );
    assert!(!pwd.exists(), "the job's directory is removed when it ends");
}

/// The jobgate binary (as a user runs it, not the tests' in-process server) starts a job of
/// another user through its launcher (`executor/local/user_switch.rs`: this binary again, exec'd
/// without forking jobgate, which drops to the user and execs the program in place).
#[tokio::test]
async fn the_binary_starts_jobs_through_its_launcher_with_no_privilege_left() {
    // jobgate inherits descriptor 7, open without close-on-exec, from the shell that starts
    // it: the job must not.
    let wrapper = ["sh", "-c", "exec 7</dev/null; exec \"$@\"", "sh"];
    let Some(server) = Server::spawn_as_root(&wrapper, &[], &[]).await else {
        return;
    };
    let id = server
        .submit(json!({
            "command": sh("echo \"ids $(id -u) $(id -g) $(id -G)\"; \
                           if [ -e /proc/self/fd/7 ]; then echo fd7-open; else echo fd7-closed; fi; \
                           grep -E '^(Uid|Gid|CapEff|CapPrm|SigIgn|SigBlk):' /proc/self/status; \
                           echo \"stdin $(readlink /proc/self/fd/0)\"; cat; echo stdin-empty"),
        }))
        .await;
    let done = finished(&server, None, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    let log = done["logs"].as_str().unwrap();
    let nogroup = nix::unistd::User::from_uid(NOBODY.into())
        .unwrap()
        .expect("the user nobody")
        .gid
        .as_raw();
    // No supplementary group of jobgate's is left, and root can't be had back.
    let expected = [
        format!("ids {NOBODY} {nogroup} {nogroup}"),
        format!("Uid:\t{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}"),
        format!("Gid:\t{nogroup}\t{nogroup}\t{nogroup}\t{nogroup}"),
        "CapPrm:\t0000000000000000".to_owned(),
        "CapEff:\t0000000000000000".to_owned(),
        // The launcher's report pipe is gone; the job reads /dev/null, as before.
        "stdin /dev/null".to_owned(),
        "stdin-empty".to_owned(),
        "fd7-closed".to_owned(),
    ];
    for line in expected {
        assert!(log.lines().any(|l| l == line), "no {line:?} in:\n{log}");
    }
    // The Rust runtime ignores SIGPIPE in the launcher; the job must not inherit that (a
    // pipeline's writer would get EPIPE errors instead of ending quietly), nor a signal mask.
    let signals = |name: &str| {
        let hex = log
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{log}"));
        u64::from_str_radix(hex.trim(), 16).unwrap()
    };
    let sigpipe = 1u64 << (nix::sys::signal::Signal::SIGPIPE as i32 - 1);
    assert_eq!(
        signals("SigIgn:") & sigpipe,
        0,
        "SIGPIPE is ignored in the job:\n{log}"
    );
    assert_eq!(
        signals("SigBlk:"),
        0,
        "the job starts with signals blocked:\n{log}"
    );

    // A program that cannot start is a run that could not start, with the reason, as
    // without the launcher (not a run that exits 127).
    let id = server
        .submit(json!({"command": ["/no/such/program"], "backoffLimit": 0}))
        .await;
    let done = finished(&server, None, &id).await;
    assert_eq!(done["phase"], "FAILED", "{done}");
    let message = done["message"].as_str().unwrap();
    assert!(
        message.contains("could not start \"/no/such/program\": No such file or directory"),
        "{message}"
    );
}

/// Starts jobgate until it listens (then stops it: `Ok`) or exits (`Err` with its exit code
/// and standard error).
fn start_or_exit(mut command: Command) -> Result<(), (Option<i32>, String)> {
    use std::io::BufRead;
    let mut child = command
        .env_remove("JOBGATE_API_TOKEN")
        .env_remove("JOBGATE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if common::listening::listening_address(&line).is_some() {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(());
        }
        stderr.push_str(&line);
        stderr.push('\n');
    }
    Err((child.wait().unwrap().code(), stderr))
}

#[tokio::test]
async fn jobgate_refuses_to_serve_several_tenants_when_every_job_would_run_as_itself() {
    // An ordinary user cannot switch users; as root, jobgate is made one (nobody).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tokens = two_tenants(dir.path());
    let one_tenant = dir.path().join("one-tenant.toml");
    std::fs::write(
        &one_tenant,
        token_entry("alice", ALICE, "namespaces = [\"team-a\"]")
            + &token_entry("alice-ci", BOB, "namespaces = [\"team-a\"]"),
    )
    .unwrap();
    let secret = dir.path().join("jwt.secret");
    std::fs::write(&secret, JWT_SECRET).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    if is_root() {
        for owned in [&data, &work] {
            std::os::unix::fs::chown(owned, Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }
    // nobody may be unable to reach the binary where it was built (a checkout under a 0700
    // directory, such as root's home): it runs a copy in this test's directory.
    let binary = dir.path().join("jobgate");
    std::fs::copy(env!("CARGO_BIN_EXE_jobgate"), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |args: &[&str]| {
        let mut command = Command::new(&binary);
        command.args(["--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()]);
        command.args(["--local-work-dir", work.to_str().unwrap()]);
        command.args(args);
        if is_root() {
            std::os::unix::process::CommandExt::uid(&mut command, NOBODY);
            std::os::unix::process::CommandExt::gid(&mut command, NOBODY);
        }
        start_or_exit(command)
    };

    let (code, stderr) = run(&["--api-tokens-file", tokens.to_str().unwrap()]).unwrap_err();
    assert_eq!(code, Some(2), "{stderr}");
    for expected in [
        "alice may use team-a, bob may use team-b",
        "--run-as-user",
        "--executor kubernetes",
    ] {
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
    let (code, stderr) = run(&["--jwt-hs256-secret-file", secret.to_str().unwrap()]).unwrap_err();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("JWTs are accepted"), "{stderr}");
    // An admin and a restricted token are two tenants as well.
    let (code, stderr) = run(&[
        "--api-tokens-file",
        one_tenant.to_str().unwrap(),
        "--anonymous",
        "true",
    ])
    .unwrap_err();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("anonymous callers may use every namespace"),
        "{stderr}"
    );

    // One scope, however many tokens: one tenant. Or tenants that trust each other.
    run(&["--api-tokens-file", one_tenant.to_str().unwrap()]).expect("one tenant is served");
    run(&[
        "--api-tokens-file",
        tokens.to_str().unwrap(),
        "--local-trusted-tenants",
    ])
    .expect("trusted tenants are served");
}

#[tokio::test]
async fn the_run_as_user_must_exist_must_not_be_root_and_needs_jobgate_to_be_root() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let refused = |args: &[&str], expected: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_jobgate"));
        command.args(["--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()]);
        command.args(args);
        let (code, stderr) = start_or_exit(command).expect_err("refused");
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {expected:?} in {stderr}");
    };
    // From the config file too.
    let file = dir.path().join("jobgate.toml");
    let (user, expected) = if is_root() {
        ("root", "is root")
    } else {
        ("nobody", "not root")
    };
    std::fs::write(&file, format!("run_as_user = \"{user}\"\n")).unwrap();
    refused(&["--config", file.to_str().unwrap()], expected);
    if is_root() {
        refused(&["--run-as-user", "root"], "is root");
        refused(&["--run-as-user", "0:0"], "is root");
        refused(&["--run-as-user", "nobody:root"], "is root");
        refused(&["--run-as-user", "no-such-user-for-jobgate"], "no user");
    } else {
        refused(&["--run-as-user", "nobody"], "not root");
    }
    // The jobs' directories cannot live in jobgate's.
    let inside = data.join("work");
    refused(
        &["--local-work-dir", inside.to_str().unwrap()],
        "must not contain one another",
    );
}
