//! `jobgate schedule create | list | get | pause | resume | trigger | delete`, run as the real
//! binary against a jobgate served in the test's process: what each prints and its exit
//! status, a schedule created from flags and one from a TOML file.

mod common;

use common::Server;
use common::cli::{ok, run};

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
