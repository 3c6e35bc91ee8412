//! The throwaway PostgreSQL server of the test harness (`tests/common/postgres.rs`), checked
//! on its own: the store's PostgreSQL tests and failure tests rely on it starting a server
//! that answers, on its databases being separate, and on kill -9, pause and resume doing to
//! the server what they say. As root, this runs the server as an unprivileged user.

mod common;

use common::postgres::Postgres;
use sqlx::{Connection as _, PgConnection, PgPool};

async fn select_one(url: &str) -> Result<i32, sqlx::Error> {
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query_scalar("SELECT 1").fetch_one(&mut conn).await
}

#[tokio::test]
async fn a_started_server_answers_queries() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let pool = PgPool::connect(&pg.url())
        .await
        .expect("connecting to the server");
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.unwrap();
    assert_eq!(one, 1);
    let encoding: String = sqlx::query_scalar("SHOW server_encoding")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(encoding, "UTF8");
    pool.close().await;
}

#[tokio::test]
async fn databases_on_one_server_are_separate() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let other = pg.create_database("other");
    assert_ne!(other, pg.url());
    let mut first = PgConnection::connect(&pg.url()).await.unwrap();
    let mut second = PgConnection::connect(&other).await.unwrap();
    sqlx::query("CREATE TABLE t (x int)")
        .execute(&mut first)
        .await
        .unwrap();
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename = 't'")
        .fetch_one(&mut second)
        .await
        .unwrap();
    assert_eq!(seen, 0, "a table of one database showed in another");
}

#[tokio::test]
async fn kill9_breaks_open_connections_and_refuses_new_ones() {
    let Some(mut pg) = Postgres::start_or_skip() else {
        return;
    };
    let url = pg.url();
    let mut open = PgConnection::connect(&url).await.unwrap();
    assert_eq!(select_one(&url).await.unwrap(), 1);
    pg.kill9();
    assert!(
        select_one(&url).await.is_err(),
        "a new connection worked after kill -9"
    );
    let answer: Result<i32, _> = sqlx::query_scalar("SELECT 1").fetch_one(&mut open).await;
    assert!(answer.is_err(), "an open connection answered after kill -9");
}

#[tokio::test]
async fn a_paused_server_answers_once_resumed() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    pg.pause();
    let query = tokio::spawn(async move {
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut conn).await.unwrap();
        one
    });
    // Nothing answers a paused server; it cannot have answered by now however slow we are.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!query.is_finished(), "a paused server answered a query");
    pg.resume();
    assert_eq!(query.await.unwrap(), 1);
    assert_eq!(select_one(&pg.url()).await.unwrap(), 1);
}

#[tokio::test]
async fn parallel_servers_each_get_a_port_of_their_own() {
    // Started together (as nextest runs test processes), none may take another's port.
    let servers: Vec<Postgres> = std::thread::scope(|scope| {
        let started: Vec<_> = (0..4).map(|_| scope.spawn(Postgres::start_or_skip)).collect();
        started.into_iter().filter_map(|s| s.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), servers.len());
    for server in &servers {
        assert_eq!(select_one(&server.url()).await.unwrap(), 1);
    }
}
