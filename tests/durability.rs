//! What jobgate answers when its store cannot write: a full disk, a deleted data directory,
//! a truncated database file, a write lock held past the time limit. A success answer must
//! mean durable; a failed write must answer an error and change nothing; jobgate must go
//! unready while it cannot write, say why in its log, and recover by itself once writes work
//! again. And what is no failure: a database file behind its write-ahead log.
//!
//! The full-disk, checkpoint and write-lock tests spawn the binary (on a small disk of its own
//! for the full disk, `Server::spawn_on`; against PostgreSQL for one write-lock test); the
//! others run jobgate in the test's process (`Server::start`); the local executor throughout.

mod common;

use common::postgres::Postgres;
use common::{Server, SmallDisk, scrape};
use serde_json::{Value, json};
use sqlx::{Connection as _, Executor as _};

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

    // Cut short but with its header: shorter than it has been.
    let server = Server::start(&[]).await;
    let id = server.try_submit("kept").await.expect("accepted");
    server.wait_phase(&id, "SUCCEEDED").await;
    let len = std::fs::metadata(server.database_file()).unwrap().len();
    assert!(len > 4096, "a database of more than one page: {len} bytes");
    server.truncate_database(4096);
    assert_eq!(server.try_submit("lost").await, Err("UNAVAILABLE".to_owned()));
    assert_eq!(server.readyz().await, 503);
    server.wait_log("bytes where it had").await;
}

/// The latest copy of page 1 in the write-ahead log, as SQLite would check it back into the
/// database file, and the database size (in pages) it records.
fn newest_first_page_in_wal(server: &Server) -> (Vec<u8>, u64) {
    let wal = std::fs::read(server.database_file().with_extension("db-wal")).unwrap();
    let page_size = u32::from_be_bytes(wal[8..12].try_into().unwrap()) as usize;
    let mut newest = None;
    for frame in wal[32..].chunks_exact(24 + page_size) {
        if u32::from_be_bytes(frame[0..4].try_into().unwrap()) == 1 {
            newest = Some(frame[24..].to_vec());
        }
    }
    let page = newest.expect("page 1 in the write-ahead log");
    let pages = u32::from_be_bytes(page[28..32].try_into().unwrap());
    (page, u64::from(pages) * page_size as u64)
}

#[tokio::test]
async fn a_checkpoint_that_has_not_finished_is_no_truncation() {
    let mut server = Server::spawn(&[]).await;
    let gate = server
        .submit(json!({"name": "gate", "command": ["sleep", "600"]}))
        .await;
    // One commit that grows the database by many pages, all of them in the write-ahead log.
    let inputs: Vec<Value> = (0..300)
        .map(|i| json!({"name": format!("held-{i:03}"), "command": ["true"], "dependsOn": [gate]}))
        .collect();
    let submitted = server
        .gql_ok(
            "mutation($inputs: [SubmitJobInput!]!) { submitJobs(inputs: $inputs) { jobs { id } } }",
            json!({"inputs": inputs}),
        )
        .await;
    assert_eq!(submitted["submitJobs"]["jobs"].as_array().unwrap().len(), 300);
    // A checkpoint copies page 1 first; stopped there, the file's header counts pages that are
    // still only in the write-ahead log, where SQLite reads them from.
    let (page, counted) = newest_first_page_in_wal(&server);
    let file = server.database_file();
    let len = std::fs::metadata(&file).unwrap().len();
    assert!(
        counted > len,
        "the log holds pages beyond the file: {counted} > {len}"
    );
    {
        use std::os::unix::fs::FileExt as _;
        let db = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        db.write_all_at(&page, 0).unwrap();
        db.sync_all().unwrap();
    }

    let after = server
        .try_submit("after")
        .await
        .expect("a healthy store takes writes");
    assert_eq!(server.readyz().await, 200);
    let mut names = server.job_names().await;
    assert!(names.contains(&"after".to_owned()), "{names:?}");
    names.sort();

    // Everything is there after kill -9, and the database is whole.
    server.kill9();
    let server = server.start_again(&[]).await;
    let mut again = server.job_names().await;
    again.sort();
    assert_eq!(again, names);
    assert_eq!(server.job(&after).await["name"], "after");
}

/// While the test holds the store's write lock past jobgate's write time limit (SQLite's
/// busy timeout, PostgreSQL's lock and write step limits), jobgate answers an error
/// (UNAVAILABLE, or DEADLINE_EXCEEDED when the request's own deadline comes first), changes
/// nothing and is unready; once the lock is let go, it is writable again by itself.
async fn refuses_while_held_and_recovers(mut server: Server, again: &[&str], release: impl AsyncFnOnce()) {
    assert_eq!(server.readyz().await, 200);
    let refused = server.try_submit("held").await.expect_err("no write while held");
    assert!(
        ["UNAVAILABLE", "DEADLINE_EXCEEDED"].contains(&refused.as_str()),
        "{refused}"
    );
    server.wait_ready_is(503).await;
    assert_eq!(scrape(&server).await["jobgate_store_writable"], 0.0);
    release().await;
    // The writer's probe notices, with no request and no restart.
    server.wait_ready_is(200).await;
    assert_eq!(scrape(&server).await["jobgate_store_writable"], 1.0);
    let after = server.try_submit("after").await.expect("writable again");
    server.wait_phase(&after, "SUCCEEDED").await;
    assert_eq!(server.job_names().await, ["after", "before"]);
    server.kill9();
    let server = server.start_again(again).await;
    assert_eq!(server.job_names().await, ["after", "before"]);
}

#[tokio::test]
async fn an_sqlite_store_locked_past_its_busy_timeout_refuses_then_recovers_by_itself() {
    let server = Server::spawn(&[]).await;
    let before = server.try_submit("before").await.expect("accepted");
    server.wait_phase(&before, "SUCCEEDED").await;
    let mut holder =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", server.database_file().display()))
            .await
            .unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    refuses_while_held_and_recovers(server, &[], async || {
        holder.execute("ROLLBACK").await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_postgres_store_locked_past_its_write_limit_refuses_then_recovers_by_itself() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let server = Server::spawn(&["--database-url", &pg.url()]).await;
    let before = server.try_submit("before").await.expect("accepted");
    server.wait_phase(&before, "SUCCEEDED").await;
    let mut holder = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
    holder.execute("BEGIN").await.unwrap();
    holder
        .execute("LOCK TABLE jobs, events, store_probe IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    refuses_while_held_and_recovers(server, &["--database-url", &pg.url()], async || {
        holder.execute("ROLLBACK").await.unwrap();
    })
    .await;
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
