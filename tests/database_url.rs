//! The PostgreSQL database URL, through the real binary on a throwaway PostgreSQL: taken from
//! the environment or a file (`--database-url-file`), never with a password on the command
//! line (every local user reads `/proc/<pid>/cmdline`), and only as a postgres:// or
//! postgresql:// URL. No refusal quotes the URL.
//!
//! Every test runs the binary (`Server::spawn`, `CARGO_BIN_EXE_jobgate`): what it reads from its
//! environment and command line is the point.

mod common;

use common::Server;
use common::postgres::Postgres;
use serde_json::json;

/// A password PostgreSQL never checks (the test server trusts local clients) but jobgate
/// must keep out of its command line and its messages.
const PASSWORD: &str = "hunter2-not-for-argv";

/// `url` with [`PASSWORD`] as its user's password.
fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://jobgate@",
        &format!("postgres://jobgate:{PASSWORD}@"),
        1,
    )
}

/// A job submitted to `server` succeeds, and the password is nowhere in its process's
/// command line.
async fn serves_jobs_with_the_password_out_of_its_command_line(server: &Server) {
    let id = server.submit(json!({"command": ["true"]})).await;
    server.wait_phase(&id, "SUCCEEDED").await;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid())).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(PASSWORD),
        "{cmdline:?}"
    );
    assert!(!server.log_text().contains(PASSWORD));
}

#[tokio::test]
async fn the_url_with_its_password_is_taken_from_a_file_or_the_environment() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    // A Secret mounted as a file ends with a newline, which is not part of the URL.
    let secret = tempfile::tempdir().unwrap();
    let file = secret.path().join("url");
    std::fs::write(&file, format!("{}\n", with_password(&pg.url()))).unwrap();
    let from_file = Server::spawn(&["--database-url-file", file.to_str().unwrap()]).await;
    serves_jobs_with_the_password_out_of_its_command_line(&from_file).await;

    // The local executor runs on one replica per database: the other source gets its own.
    let url = with_password(&pg.create_database("from_env"));
    let from_env = Server::spawn_with_env(&[], &[("JOBGATE_DATABASE_URL", &url)]).await;
    serves_jobs_with_the_password_out_of_its_command_line(&from_env).await;

    // The file's name can come from the environment too.
    let file = secret.path().join("other-url");
    std::fs::write(&file, with_password(&pg.create_database("from_env_file"))).unwrap();
    let from_env_file =
        Server::spawn_with_env(&[], &[("JOBGATE_DATABASE_URL_FILE", file.to_str().unwrap())]).await;
    serves_jobs_with_the_password_out_of_its_command_line(&from_env_file).await;

    // And from the configuration file, whose keys are the flags' names.
    let file = secret.path().join("config-url");
    std::fs::write(&file, with_password(&pg.create_database("from_config"))).unwrap();
    let config = secret.path().join("jobgate.toml");
    std::fs::write(
        &config,
        format!("database_url_file = {:?}\n", file.to_str().unwrap()),
    )
    .unwrap();
    let from_config = Server::spawn(&["--config", config.to_str().unwrap()]).await;
    serves_jobs_with_the_password_out_of_its_command_line(&from_config).await;
}

#[tokio::test]
async fn a_password_on_the_command_line_is_refused_without_being_printed() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let passwordless = pg.url();
    for url in [
        with_password(&passwordless),
        format!("{passwordless}?sslmode=prefer&password={PASSWORD}"),
    ] {
        let (code, stderr) = common::run_to_exit(&["--database-url", &url], &[]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("--database-url holds a password"), "{stderr}");
        assert!(
            stderr.contains("JOBGATE_DATABASE_URL") && stderr.contains("--database-url-file"),
            "the refusal says where to put it instead: {stderr}"
        );
        assert!(!stderr.contains(PASSWORD), "{stderr}");
    }
}

#[tokio::test]
async fn a_url_that_is_not_postgresql_is_refused_without_being_printed() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    // The server answering on that port is PostgreSQL: the scheme alone must refuse it.
    let mysql = pg.url().replacen("postgres://", "mysql://", 1);
    let with_password = with_password(&pg.url()).replacen("postgres://", "mysql://", 1);
    let secret = tempfile::tempdir().unwrap();
    let file = secret.path().join("url");
    std::fs::write(&file, &with_password).unwrap();
    for (args, env, named) in [
        (vec!["--database-url", mysql.as_str()], vec![], "--database-url"),
        (
            vec![],
            vec![("JOBGATE_DATABASE_URL", with_password.as_str())],
            "JOBGATE_DATABASE_URL",
        ),
        (
            vec!["--database-url-file", file.to_str().unwrap()],
            vec![],
            "--database-url-file",
        ),
    ] {
        let (code, stderr) = common::run_to_exit(&args, &env);
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(named) && stderr.contains("is not a PostgreSQL URL"),
            "{stderr}"
        );
        assert!(stderr.contains("postgres://"), "{stderr}");
        assert!(
            !stderr.contains(PASSWORD) && !stderr.contains("mysql"),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn the_url_is_given_once() {
    let secret = tempfile::tempdir().unwrap();
    let file = secret.path().join("url");
    std::fs::write(
        &file,
        format!("postgres://jobgate:{PASSWORD}@127.0.0.1:9/jobgate"),
    )
    .unwrap();
    let (code, stderr) = common::run_to_exit(
        &["--database-url-file", file.to_str().unwrap()],
        &[("JOBGATE_DATABASE_URL", "postgres://jobgate@127.0.0.1:9/jobgate")],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("give it once"), "{stderr}");
    std::fs::write(&file, "\n").unwrap();
    let (code, stderr) = common::run_to_exit(&["--database-url-file", file.to_str().unwrap()], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("the file is empty"), "{stderr}");
}
