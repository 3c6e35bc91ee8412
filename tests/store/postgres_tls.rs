//! The PostgreSQL store over TLS, as managed services require it: the server's certificate is
//! verified against the CA the URL names.

use std::sync::Arc;

use jobgate::store::{PostgresStore, Store};

use crate::common::postgres::Postgres;
use crate::support::{job, stored, submit_one};

/// A PostgreSQL that takes TLS only (as managed services do): jobgate connects over TLS,
/// verifying the server's certificate against the CA its URL names, and refuses a server it
/// cannot verify.
#[tokio::test]
async fn postgres_over_tls_verifies_the_server_and_refuses_one_it_cannot_verify() {
    let Some(pg) = Postgres::start_tls() else {
        return;
    };
    let with = |query: String| format!("{}?{query}", pg.url());
    let verified = with(format!(
        "sslmode=verify-full&sslrootcert={}",
        pg.ca_cert().display()
    ));
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::connect(&verified)
            .await
            .expect("connecting over TLS to a server the CA vouches for"),
    );
    let job = submit_one(&store, job("team-a", "over-tls")).await;
    assert_eq!(stored(&store, &job.id).await.as_ref(), Some(&job));

    let plain = PostgresStore::connect(&with("sslmode=disable".into())).await;
    let error = format!("{:#}", plain.expect_err("the server lets no one in without TLS"));
    assert!(error.contains("pg_hba.conf"), "{error}");

    let untrusted = with(format!(
        "sslmode=verify-full&sslrootcert={}",
        pg.untrusted_ca_cert().display()
    ));
    let refused = PostgresStore::connect(&untrusted).await;
    let error = format!(
        "{:#}",
        refused.expect_err("a server no trusted CA signed is refused")
    );
    assert!(error.to_lowercase().contains("certificate"), "{error}");
}
