//! `jobgate schedule create | list | get | pause | resume | trigger | delete`, run as the real
//! binary against a jobgate served in the test's process: what each prints and its exit
//! status, a schedule created from flags and one from a TOML file.

mod common;

use std::process::Stdio;

use tokio::process::Command;

use common::{Server, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_jobgate");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn run(server: &Server, args: &[&str]) -> Run {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("JOBGATE_SERVER", server.url(""))
        .env_remove("JOBGATE_TOKEN")
        .env_remove("JOBGATE_CONFIG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("jobgate {args:?} did not end within {WAIT:?}"))
        .expect("the client runs");
    Run {
        code: output.status.code().expect("the client exits"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 errors"),
    }
}

async fn ok(server: &Server, args: &[&str]) -> String {
    let run = run(server, args).await;
    assert_eq!(
        run.code, 0,
        "jobgate {args:?} failed: {}{}",
        run.stdout, run.stderr
    );
    run.stdout
}

#[tokio::test]
async fn schedules_are_managed_from_the_command_line() {
    let server = Server::start(&[]).await;
    let id = ok(
        &server,
        &[
            "schedule",
            "create",
            "--name",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--time-zone",
            "Europe/Berlin",
            "--concurrency-policy",
            "forbid",
            "--",
            "echo",
            "hi",
        ],
    )
    .await
    .trim()
    .to_owned();
    assert_eq!(id.len(), 36, "an id: {id}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hourly.toml");
    std::fs::write(
        &file,
        "name = \"hourly\"\ncron = \"0 * * * *\"\nstartingDeadlineSeconds = 120\n[job]\ncommand = [\"true\"]\n",
    )
    .unwrap();
    let from_file = ok(
        &server,
        &[
            "schedule",
            "create",
            "--file",
            file.to_str().unwrap(),
            "--output",
            "json",
        ],
    )
    .await;
    let created: serde_json::Value = serde_json::from_str(&from_file).unwrap();
    assert_eq!(created["name"], "hourly");
    assert_eq!(created["startingDeadlineSeconds"], 120);

    let list = ok(&server, &["schedule", "list"]).await;
    assert!(list.starts_with("ID"), "{list}");
    assert!(
        list.contains("nightly") && list.contains("hourly") && list.contains("Europe/Berlin"),
        "{list}"
    );

    let get = ok(&server, &["schedule", "get", &id]).await;
    assert!(get.contains("FORBID") && get.contains("next fire"), "{get}");

    assert_eq!(
        ok(&server, &["schedule", "pause", &id]).await.trim(),
        format!("{id} paused")
    );
    assert_eq!(
        ok(&server, &["schedule", "resume", &id]).await.trim(),
        format!("{id} active")
    );

    let job = ok(&server, &["schedule", "trigger", &id]).await.trim().to_owned();
    server.wait_phase(&job, "SUCCEEDED").await;
    let get = ok(&server, &["schedule", "get", &id, "--output", "json"]).await;
    let shown: serde_json::Value = serde_json::from_str(&get).unwrap();
    assert_eq!(shown["recentRuns"][0]["job"]["id"], job.as_str());

    assert_eq!(ok(&server, &["schedule", "delete", &id]).await.trim(), id);
    let gone = run(&server, &["schedule", "get", &id]).await;
    assert_eq!(gone.code, 1);
    assert!(gone.stderr.starts_with("error: NOT_FOUND"), "{}", gone.stderr);

    // A refused input says the server's code and the field.
    let bad = run(
        &server,
        &[
            "schedule", "create", "--name", "x", "--cron", "* * *", "--", "true",
        ],
    )
    .await;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("BAD_USER_INPUT"), "{}", bad.stderr);
}
