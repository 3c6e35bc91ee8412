//! What jobgate answers when its store cannot write: a full disk, a deleted data directory,
//! a truncated database file. A success answer must mean durable; a failed write must answer
//! an error and change nothing; jobgate must go unready while it cannot write, say why in its
//! log, and (for a full disk) recover by itself once there is room again.
//!
//! The full-disk tests spawn the binary on a small disk of its own (`Server::spawn_on`); the
//! others run jobgate in the test's process (`Server::start`); all on SQLite and the local
//! executor.

mod common;

use common::{Server, SmallDisk, scrape};
use serde_json::{Value, json};

#[tokio::test]
async fn a_full_disk_refuses_writes_changes_nothing_and_recovers_without_a_restart() {
    let Some(disk) = SmallDisk::or_skip("4m") else {
        return;
    };
    let mut server = Server::spawn_on(&disk, &[]).await;
    let first = server.try_submit("before").await.expect("accepted");
    server.wait_phase(&first, "SUCCEEDED").await;
    let mut accepted = vec!["before".to_owned()];

    disk.fill();
    // The write-ahead log may still hold room for a few commits: those are accepted, and
    // must be durable. Then the store is full, and every submission is refused.
    let mut refused = Vec::new();
    for i in 0..500 {
        let name = format!("full-{i:03}");
        match server.try_submit(&name).await {
            Ok(_) => accepted.push(name),
            Err(code) => {
                assert_eq!(code, "UNAVAILABLE");
                refused.push(name);
                if refused.len() == 5 {
                    break;
                }
            }
        }
    }
    assert_eq!(refused.len(), 5, "a full disk never refused a submission");
    assert_eq!(server.readyz().await, 503, "unready while the store cannot write");
    server.wait_log("the store cannot write").await;
    assert_eq!(scrape(&server).await["jobgate_store_writable"], 0.0);
    // Nothing refused was created.
    assert_eq!(server.job_names().await, accepted);

    // Room again: jobgate notices by itself, with no restart and no request.
    disk.free();
    server.wait_ready_is(200).await;
    assert_eq!(scrape(&server).await["jobgate_store_writable"], 1.0);
    let after = server
        .try_submit("after")
        .await
        .expect("accepted once there is room");
    server.wait_phase(&after, "SUCCEEDED").await;
    accepted.push("after".to_owned());
    accepted.sort();

    // Everything answered with success survives kill -9; nothing refused appears.
    server.kill9();
    let server = server.start_again(&[]).await;
    assert_eq!(server.job_names().await, accepted);
}

#[tokio::test]
async fn a_deleted_data_directory_makes_jobgate_unready_and_refuse_writes() {
    let server = Server::start(&[]).await;
    let id = server.try_submit("kept").await.expect("accepted");
    server.wait_phase(&id, "SUCCEEDED").await;
    std::fs::remove_dir_all(&server.data_dir).unwrap();
    // Noticed on the writer's timer, with no request.
    server.wait_ready_is(503).await;
    assert_eq!(server.try_submit("lost").await, Err("UNAVAILABLE".to_owned()));
    server.wait_log("is gone").await;
}

#[tokio::test]
async fn a_truncated_database_file_makes_jobgate_unready_and_refuse_writes() {
    let server = Server::start(&[]).await;
    let id = server.try_submit("kept").await.expect("accepted");
    server.wait_phase(&id, "SUCCEEDED").await;
    server.truncate_database(0);
    // The next write is refused, before the timer has looked.
    assert_eq!(server.try_submit("lost").await, Err("UNAVAILABLE".to_owned()));
    assert_eq!(server.readyz().await, 503);
    server.wait_log("was truncated").await;

    // Cut short but with its header: the header's page count tells.
    let server = Server::start(&[]).await;
    let id = server.try_submit("kept").await.expect("accepted");
    server.wait_phase(&id, "SUCCEEDED").await;
    let len = std::fs::metadata(server.database_file()).unwrap().len();
    assert!(len > 4096, "a database of more than one page: {len} bytes");
    server.truncate_database(4096);
    assert_eq!(server.try_submit("lost").await, Err("UNAVAILABLE".to_owned()));
    assert_eq!(server.readyz().await, 503);
    server.wait_log("where its header counts").await;
}

#[tokio::test]
async fn a_cancel_refused_by_a_full_disk_changes_nothing() {
    let Some(disk) = SmallDisk::or_skip("4m") else {
        return;
    };
    let server = Server::spawn_on(&disk, &[]).await;
    let id = server
        .submit(json!({"name": "long", "command": ["sleep", "600"]}))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    disk.fill();
    // Fill what the write-ahead log still has room for, then cancel.
    while server.try_submit("filler").await.is_ok() {}
    let cancel = "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }";
    let refused: Value = server.gql(cancel, json!({"id": id})).await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "UNAVAILABLE",
        "{refused}"
    );
    assert_eq!(server.job(&id).await["phase"], "RUNNING");
    disk.free();
    server.wait_ready_is(200).await;
    let done = server.gql(cancel, json!({"id": id})).await;
    assert_eq!(done["data"]["cancelJob"]["job"]["phase"], "CANCELLED", "{done}");
}
