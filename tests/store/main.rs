//! The store's contract (`jobgate::store::{Store, StoreTx}`), tested once for every backend:
//! what the service relies on and a user sees through it. A committed transaction is visible
//! to every read, a dropped one changed nothing; event cursors grow with commit order, so a
//! subscriber resuming after one misses nothing; idempotency keys are per submitter; the
//! launch outbox, dependencies and pending cancellations survive as written; reads filter,
//! scope and page as asked.
//!
//! Each contract test is an `async fn(Arc<dyn Store>)`; its module's `backend_tests!` runs it
//! against each backend's fresh, empty store (`<module>::sqlite::<test>`,
//! `<module>::postgres::<test>`). The modules are the store's concepts (`transactions`,
//! `events`, `listing`, `counts`, `submissions`, `outbox`, `retention`, `webhooks`,
//! `log_archive`, `schedule_records`), the read plans (`query_plans`) and PostgreSQL over TLS (`postgres_tls`);
//! `support` writes jobs as the service does. SQLite's own concerns (its file lock,
//! durability settings, a deleted database file) are tested elsewhere, not here.

// The harness: a throwaway PostgreSQL server for that backend (`common::postgres`).
#[path = "../common/mod.rs"]
mod common;

use std::any::Any;
use std::sync::Arc;

use common::postgres::Postgres;
use jobgate::store::{Durability, PostgresStore, SqliteStore, Store};

/// A fresh store, and what must live as long as it does (its directory, its server).
type Opened = (Arc<dyn Store>, Box<dyn Any + Send>);

/// A SQLite store in a temporary directory.
async fn open_sqlite() -> Option<Opened> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(dir.path(), Durability::Normal)
        .await
        .expect("opening the SQLite store");
    Some((Arc::new(store), Box::new(dir)))
}

/// A PostgreSQL store on a throwaway server of its own (`None`, after a loud notice, where
/// PostgreSQL is not installed and CI is not set).
async fn open_postgres() -> Option<Opened> {
    let pg = Postgres::start_or_skip()?;
    let store = PostgresStore::connect(&pg.url())
        .await
        .expect("connecting the PostgreSQL store");
    Some((Arc::new(store), Box::new(pg)))
}

/// The contract tests of one module against every backend, as `<backend>::<test>` in that
/// module: each opens a fresh, empty store (`open_sqlite`, `open_postgres`), or returns when
/// the backend cannot run here (after its opener said why).
macro_rules! backend_tests {
    (@each $backend:ident, $open:path; $($test:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    let Some((store, _alive)) = $open().await else { return };
                    super::$test(store).await;
                }
            )*
        }
    };
    ($($test:ident),* $(,)?) => {
        backend_tests!(@each sqlite, crate::open_sqlite; $($test),*);
        backend_tests!(@each postgres, crate::open_postgres; $($test),*);
    };
}

// Declared after `backend_tests!`, which they use.
mod counts;
mod events;
mod listing;
mod log_archive;
mod outbox;
mod postgres_tls;
mod query_plans;
mod retention;
mod schedule_records;
mod submissions;
mod support;
mod transactions;
mod webhooks;
