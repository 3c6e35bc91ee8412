//! The PostgreSQL database URL: read from where it was given (`--database-url`,
//! `JOBGATE_DATABASE_URL`, the config file's `database_url`, or the file `--database-url-file`
//! names) and checked before anything starts.
//!
//! The URL may hold the password, so no message here ever contains the URL or any part of
//! it, and a password on the command line is refused: a process's arguments are readable by
//! every local user (`/proc/<pid>/cmdline`, `ps`), local jobs included, while its environment
//! and a file of mode 0600 are not.

use std::path::Path;

use clap::ArgMatches;
use clap::parser::ValueSource;

use super::{Config, ConfigError};

/// Where `--database-url`'s value came from, read before the config file's settings are
/// merged in as flags (which would make them look like the command line's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UrlSource {
    CommandLine,
    Environment,
    /// The config file, or nowhere.
    Other,
}

impl UrlSource {
    pub(super) fn of(matches: &ArgMatches) -> Self {
        match matches.value_source("database_url") {
            Some(ValueSource::CommandLine) => Self::CommandLine,
            Some(ValueSource::EnvVariable) => Self::Environment,
            _ => Self::Other,
        }
    }

    /// How a message names the setting.
    fn name(self) -> &'static str {
        match self {
            Self::CommandLine => "--database-url",
            Self::Environment => "JOBGATE_DATABASE_URL",
            Self::Other => "database_url (in the config file)",
        }
    }
}

/// The database URL to use, if any: `--database-url`'s (flag, variable or config file) or the
/// contents of `--database-url-file`; `None` for SQLite. Refuses both at once, a file that
/// cannot be read or is empty, a URL that is not PostgreSQL's, and a password on the command
/// line.
pub(super) fn resolve(config: &Config, source: UrlSource) -> Result<Option<String>, ConfigError> {
    let given = config.database_url.as_deref().filter(|u| !u.trim().is_empty());
    let (url, name) = match (given, &config.database_url_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid(format!(
                "{} and --database-url-file both give the database URL: give it once",
                source.name()
            )));
        }
        (Some(url), None) => (url.trim().to_owned(), source.name().to_owned()),
        (None, Some(path)) => (
            read_file(path)?,
            format!("--database-url-file {}", path.display()),
        ),
        (None, None) => return Ok(None),
    };
    check(&url, &name)?;
    if source == UrlSource::CommandLine && given.is_some() && has_password(&url) {
        return Err(ConfigError::Invalid(
            "--database-url holds a password, and a command line is readable by every local user and process (/proc/<pid>/cmdline, ps): put the URL in the environment variable JOBGATE_DATABASE_URL or in a file named by --database-url-file (mode 0600, e.g. a mounted Kubernetes Secret) instead".into(),
        ));
    }
    Ok(Some(url))
}

/// The file's contents without the whitespace around them (a trailing newline).
fn read_file(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::Invalid(format!(
            "--database-url-file {}: {}",
            path.display(),
            // The OS's error: reading quotes nothing of the contents.
            e
        ))
    })?;
    let url = text.trim();
    if url.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "--database-url-file {}: the file is empty; it must hold the database URL (postgres://USER:PASSWORD@HOST:5432/DB)",
            path.display()
        )));
    }
    Ok(url.to_owned())
}

/// A PostgreSQL URL, or an error naming where it came from but quoting nothing of it.
fn check(url: &str, name: &str) -> Result<(), ConfigError> {
    let parsed = url::Url::parse(url).map_err(|_| {
        ConfigError::Invalid(format!(
            "{name} is not a URL: jobgate expects postgres://USER:PASSWORD@HOST:5432/DB (the value is not shown: it may hold a password)"
        ))
    })?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(ConfigError::Invalid(format!(
            "{name} is not a PostgreSQL URL: jobgate keeps jobs in PostgreSQL (a postgres:// or postgresql:// URL) or, without one, in SQLite in --data-dir (the value is not shown: it may hold a password)"
        )));
    }
    Ok(())
}

/// Whether the URL carries a password, in its user information or as a `password` parameter
/// (both of which libpq and sqlx read).
fn has_password(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| {
        u.password().is_some_and(|p| !p.is_empty())
            || u.query_pairs().any(|(k, v)| k == "password" && !v.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_in_user_information_and_parameters() {
        assert!(has_password("postgres://u:pw@h/db"));
        assert!(has_password("postgresql://u:p%40w@h:5432/db?sslmode=require"));
        assert!(has_password("postgres://u@h/db?password=pw"));
        assert!(has_password("postgres://u@h/db?sslmode=prefer&password=pw"));
        assert!(!has_password("postgres://u@h/db"));
        assert!(!has_password("postgres://u:@h/db"));
        assert!(!has_password("postgres://h/db?sslmode=verify-full"));
    }

    #[test]
    fn only_postgres_urls_pass_and_no_message_quotes_the_url() {
        for ok in ["postgres://u:pw@h/db", "postgresql://u@h:5432/db?sslmode=require"] {
            assert!(check(ok, "x").is_ok(), "{ok}");
        }
        for bad in [
            "mysql://u:secretpw@h/db",
            "sqlite:///tmp/secretpw.db",
            "http://u:secretpw@h/db",
            "u:secretpw@h/db",
            "secretpw",
            "",
        ] {
            let message = check(bad, "--database-url").unwrap_err().to_string();
            assert!(message.starts_with("--database-url is not a"), "{bad}: {message}");
            assert!(!message.contains("secretpw"), "{bad}: {message}");
        }
    }
}
