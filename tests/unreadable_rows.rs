//! Stored rows that cannot be read back: jobgate refuses at the door what it could not read
//! (a `parameters` value nested deeper than every reader allows), and a row damaged in the
//! store itself (here: written directly into SQLite or PostgreSQL while jobgate is stopped)
//! never stops the service. jobgate starts, serves and runs every other job, answers the
//! damaged job alone with DATA_LOSS, and reports it to administrators (`unreadableRecords`),
//! in `/metrics` and in its log. Each test runs jobgate in-process over real HTTP.

mod common;

use common::postgres::Postgres;
use common::{Polling, Server, scrape};
use jobgate::model::Scope;
use jobgate::store::{Durability, PostgresStore, SqliteStore, Store};
use serde_json::{Value, json};
use sqlx::Connection as _;

/// A JSON object nested `levels` deep: `{"a": {"a": … 1 …}}`.
fn nested(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

const SUBMIT: &str = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }";

fn code_of(answer: &Value) -> Option<&str> {
    answer["errors"][0]["extensions"]["code"].as_str()
}

#[tokio::test]
async fn parameters_nested_deeper_than_readers_allow_are_refused_and_the_deepest_allowed_read_back_after_a_restart()
 {
    let mut server = Server::start(&[]).await;
    // The shape that once poisoned the store: about 600 bytes, 130 levels, as a literal (in
    // variables, the request's own JSON would be refused first). The document's nesting is
    // refused before it is parsed; 40 levels pass that and meet the bound on stored values.
    for (levels, refusal) in [
        (130, "the query nests `{`, `[` and `(` more than 64 levels deep"),
        (40, "input.parameters: nests deeper than 32 levels"),
    ] {
        let literal = format!("{}1{}", "{a: ".repeat(levels), "}".repeat(levels));
        let answer = server
            .gql(
                &format!(r#"mutation {{ submitJob(input: {{command: ["true"], parameters: {literal}}}) {{ job {{ id }} }} }}"#),
                json!({}),
            )
            .await;
        assert_eq!(code_of(&answer), Some("BAD_USER_INPUT"), "{answer}");
        let message = answer["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(refusal), "{levels} levels: {message}");
    }
    // One level over, in an array this time, is refused too; nothing was stored.
    let mut over = json!(1);
    for _ in 0..33 {
        over = json!([over]);
    }
    let answer = server
        .gql(
            SUBMIT,
            json!({"input": {"command": ["true"], "parameters": {"x": over}}}),
        )
        .await;
    assert_eq!(code_of(&answer), Some("BAD_USER_INPUT"), "{answer}");
    let listed = server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    assert_eq!(listed["jobs"]["totalCount"], 0, "{listed}");

    // The deepest value allowed, and one near the size limit, are kept exactly.
    let deepest = nested(32);
    let wide =
        json!({ "s": "x".repeat(60 * 1024), "n": [u64::MAX, -1, 0.5, null, true], "k\u{1}\"": "é\u{0}" });
    let mut ids = Vec::new();
    for parameters in [&deepest, &wide] {
        ids.push(
            server
                .submit(json!({"command": ["true"], "parameters": parameters}))
                .await,
        );
    }
    server.stop().await;
    let server = server.start_again(&[]).await;
    for (id, parameters) in ids.iter().zip([&deepest, &wide]) {
        let job = server
            .gql_ok(
                "query($id: ID!) { job(id: $id) { spec { parameters } } }",
                json!({"id": id}),
            )
            .await;
        assert_eq!(&job["job"]["spec"]["parameters"], parameters);
    }
}

/// A stored job's body with its parameters nested past what serde_json reads.
fn damage(body: &str) -> String {
    // The job as jobgate wrote it, with its parameters now nested past what serde_json reads
    // (a value written before the bound existed, or edited by hand).
    let mut job: Value = serde_json::from_str(body).expect("a stored job is JSON");
    job["spec"]["parameters"] = nested(130);
    serde_json::to_string(&job).unwrap()
}

/// A store to damage rows in directly, while jobgate is stopped.
enum Direct {
    /// The SQLite database file.
    Sqlite(std::path::PathBuf),
    /// The PostgreSQL database's URL.
    Postgres(String),
}

/// jobgate's arguments for its store: PostgreSQL at `url`, or SQLite in its data directory.
fn store_args(url: Option<&str>) -> Vec<&str> {
    url.map_or_else(Vec::new, |url| vec!["--database-url", url])
}

impl Direct {
    /// The store `server` ran on: PostgreSQL at `url`, or its SQLite file.
    fn of(server: &Server, url: Option<&str>) -> Self {
        match url {
            Some(url) => Direct::Postgres(url.to_owned()),
            None => Direct::Sqlite(server.database_file()),
        }
    }

    /// Runs `sql` with its `?`/`$n` binds (all text) against the store, which must change
    /// one row.
    async fn execute(&self, sqlite: &'static str, postgres: &'static str, binds: &[&str]) {
        assert_eq!(self.execute_rows(sqlite, postgres, binds).await, 1, "{sqlite}");
    }

    /// Runs `sql` with its `?`/`$n` binds (all text) against the store; the rows it changed.
    async fn execute_rows(&self, sqlite: &'static str, postgres: &'static str, binds: &[&str]) -> u64 {
        match self {
            Direct::Sqlite(file) => {
                let url = format!("sqlite://{}", file.display());
                let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                let mut query = sqlx::query(sqlite);
                for b in binds {
                    query = query.bind(*b);
                }
                let done = query.execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
                done.rows_affected()
            }
            Direct::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                let mut query = sqlx::query(postgres);
                for b in binds {
                    query = query.bind(*b);
                }
                let done = query.execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
                done.rows_affected()
            }
        }
    }

    async fn body(&self, id: &str) -> String {
        match self {
            Direct::Sqlite(file) => {
                let url = format!("sqlite://{}", file.display());
                let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                let body: String = sqlx::query_scalar("SELECT body FROM jobs WHERE id = ?")
                    .bind(id)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
                conn.close().await.unwrap();
                body
            }
            Direct::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                let body: String = sqlx::query_scalar("SELECT body FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
                conn.close().await.unwrap();
                body
            }
        }
    }
}

/// Three finished jobs; then, jobgate stopped: the second's row is damaged and put back in
/// the launch outbox as PENDING (what an accepted poison looks like), and the first event of
/// the first job gets a snapshot that is not a job. jobgate must start, serve and run
/// everything else, and report both rows.
async fn one_bad_row_never_stops_the_service(pg: Option<&Postgres>) {
    let url = pg.map(Postgres::url);
    let args = store_args(url.as_deref());
    let args = args.as_slice();
    let mut server = Server::start(args).await;
    let mut ids = Vec::new();
    for name in ["first", "poisoned", "third"] {
        ids.push(server.submit(json!({"name": name, "command": ["true"]})).await);
    }
    for id in &ids {
        assert_eq!(server.terminal_phase(id).await, "SUCCEEDED");
    }
    server.stop().await;
    let store = Direct::of(&server, url.as_deref());
    let poisoned = &ids[1];
    let body = damage(&store.body(poisoned).await);
    store
        .execute(
            "UPDATE jobs SET body = ?, phase = 'PENDING', launched = 0 WHERE id = ?",
            "UPDATE jobs SET body = $1, phase = 'PENDING', launched = 0 WHERE id = $2",
            &[&body, poisoned],
        )
        .await;
    store
        .execute(
            "UPDATE events SET job = '{\"not\": \"a job\"}' WHERE seq = (SELECT min(seq) FROM events WHERE job_id = ?)",
            "UPDATE events SET job = '{\"not\": \"a job\"}' WHERE seq = (SELECT min(seq) FROM events WHERE job_id = $1)",
            &[&ids[0]],
        )
        .await;
    drop(store);

    // It starts, and is ready.
    let server = server.start_again(args).await;
    assert_eq!(server.readyz().await, 200, "{}", server.log_text());

    // Every other job is listed; the page says nothing is wrong with them.
    let page = server
        .gql_ok(
            "{ jobs(first: 10) { edges { node { id name phase } } } }",
            json!({}),
        )
        .await;
    let names: Vec<&str> = page["jobs"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["third", "first"], "{page}");

    // The damaged job alone answers DATA_LOSS; the one with a damaged event is whole, its
    // history without that event.
    let answer = server
        .gql("query($id: ID!) { job(id: $id) { id } }", json!({"id": poisoned}))
        .await;
    assert_eq!(code_of(&answer), Some("DATA_LOSS"), "{answer}");
    assert!(
        answer["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains(poisoned.as_str()),
        "{answer}"
    );
    let first = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { phase events { phase } } }",
            json!({"id": ids[0]}),
        )
        .await;
    assert_eq!(first["job"]["phase"], "SUCCEEDED");
    let phases: Vec<&str> = first["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["phase"].as_str().unwrap())
        .collect();
    assert!(!phases.is_empty() && !phases.contains(&"PENDING"), "{first}");

    // A cancel of the damaged job is answered on its own, and changes nothing else.
    let cancel = server
        .gql(
            "mutation($id: ID!) { cancelJob(id: $id) { job { id } } }",
            json!({"id": poisoned}),
        )
        .await;
    assert_eq!(code_of(&cancel), Some("DATA_LOSS"), "{cancel}");

    // New work is accepted and runs, past the damaged job in the launch outbox.
    let fresh = server.submit(json!({"name": "fresh", "command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&fresh).await, "SUCCEEDED");

    // Administrators see both rows, with why; so do the metrics and the log.
    let records = server
        .gql_ok(
            "{ unreadableRecords { kind key jobId error firstSeen } }",
            json!({}),
        )
        .await;
    let records = records["unreadableRecords"].as_array().unwrap().clone();
    let job_record = records
        .iter()
        .find(|r| r["kind"] == "job")
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(job_record["key"], json!(poisoned));
    assert_eq!(job_record["jobId"], json!(poisoned));
    assert!(
        job_record["error"].as_str().unwrap().contains("recursion limit"),
        "{job_record}"
    );
    let event_record = records
        .iter()
        .find(|r| r["kind"] == "event")
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(event_record["jobId"], json!(ids[0]));
    let polling = Polling::start();
    loop {
        let counted = scrape(&server)
            .await
            .get("jobgate_store_unreadable_rows")
            .copied();
        if counted == Some(2.0) {
            break;
        }
        polling
            .pause(|| format!("jobgate_store_unreadable_rows is {counted:?}, not 2"))
            .await;
    }
    assert!(
        server.log_text().contains("a stored row cannot be read"),
        "{}",
        server.log_text()
    );

    // A page of events that meets the damaged one reads on past it: a page shorter than
    // asked still means "nothing more yet" to subscribers, followers and webhooks.
    let mut server = server;
    server.stop().await;
    let store: Box<dyn Store> = match &url {
        Some(url) => Box::new(PostgresStore::connect(url).await.unwrap()),
        None => Box::new(
            SqliteStore::open(&server.data_dir, Durability::Normal)
                .await
                .unwrap(),
        ),
    };
    let page = store
        .events_after(0, 1, Some(&ids[0]), &Scope::All)
        .await
        .unwrap();
    assert_eq!(page.len(), 1, "{page:?}");
    assert_eq!(page[0].job_id, ids[0]);
    assert_eq!(store.unreadable().list().len(), 1);
    store.close().await;
}

#[tokio::test]
async fn one_bad_row_never_stops_the_service_on_sqlite() {
    one_bad_row_never_stops_the_service(None).await;
}

#[tokio::test]
async fn one_bad_row_never_stops_the_service_on_postgres() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    one_bad_row_never_stops_the_service(Some(&pg)).await;
}

/// More unreadable rows at the head of the launch outbox than the launcher reads at once:
/// the jobs after them are still handed over.
async fn unreadable_rows_leading_the_outbox_do_not_hold_up_the_jobs_after_them(pg: Option<&Postgres>) {
    const BAD: usize = 70;
    let url = pg.map(Postgres::url);
    let args = store_args(url.as_deref());
    let args = args.as_slice();
    let mut server = Server::start(args).await;
    let inputs: Vec<Value> = (0..BAD).map(|_| json!({"command": ["true"]})).collect();
    server
        .gql_ok(
            "mutation($inputs: [SubmitJobInput!]!) { submitJobs(inputs: $inputs) { created } }",
            json!({"inputs": inputs}),
        )
        .await;
    let polling = Polling::start();
    loop {
        let page = server
            .gql_ok(
                "{ jobs(filter: {phases: [SUCCEEDED]}) { totalCount } }",
                json!({}),
            )
            .await;
        if page["jobs"]["totalCount"] == BAD {
            break;
        }
        polling.pause(|| format!("not every job succeeded: {page}")).await;
    }
    server.stop().await;
    let store = Direct::of(&server, url.as_deref());
    let changed = store
        .execute_rows(
            "UPDATE jobs SET body = '{\"not\": \"a job\"}', phase = 'PENDING', launched = 0",
            "UPDATE jobs SET body = '{\"not\": \"a job\"}', phase = 'PENDING', launched = 0",
            &[],
        )
        .await;
    assert_eq!(changed, BAD as u64);
    let server = server.start_again(args).await;
    let fresh = server.submit(json!({"name": "fresh", "command": ["true"]})).await;
    assert_eq!(server.terminal_phase(&fresh).await, "SUCCEEDED");
}

#[tokio::test]
async fn unreadable_rows_leading_the_outbox_do_not_hold_up_the_jobs_after_them_on_sqlite() {
    unreadable_rows_leading_the_outbox_do_not_hold_up_the_jobs_after_them(None).await;
}

#[tokio::test]
async fn unreadable_rows_leading_the_outbox_do_not_hold_up_the_jobs_after_them_on_postgres() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    unreadable_rows_leading_the_outbox_do_not_hold_up_the_jobs_after_them(Some(&pg)).await;
}

#[tokio::test]
async fn only_administrators_see_unreadable_rows() {
    let (server, _dir) = common::tenants_server(&[
        common::token_entry("admin", "admin-token", "admin = true"),
        common::token_entry("alice", "alice-token", "namespaces = [\"team-a\"]"),
    ])
    .await;
    let (_, answer) = server
        .gql_as(Some("alice-token"), "{ unreadableRecords { key } }", json!({}))
        .await;
    assert_eq!(code_of(&answer), Some("FORBIDDEN"), "{answer}");
    let (_, answer) = server
        .gql_as(Some("admin-token"), "{ unreadableRecords { key } }", json!({}))
        .await;
    assert_eq!(answer["data"]["unreadableRecords"], json!([]), "{answer}");
}
