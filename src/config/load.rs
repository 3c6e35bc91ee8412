//! Loading a [`Config`]: flags and `JOBGATE_*` variables, then the TOML file they name,
//! merged so that the file outranks only the defaults, then the database URL resolved and
//! everything validated. It must not read anything else from the environment.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory, FromArgMatches};

use super::{Config, ConfigError, database};

impl Config {
    /// Reads flags and environment, then the config file they name, and validates the result.
    pub fn load() -> Result<Self, ConfigError> {
        Self::load_from(std::env::args_os())
    }

    /// [`Config::load`] over given arguments (the first is the program name).
    pub fn load_from(args: impl IntoIterator<Item = OsString>) -> Result<Self, ConfigError> {
        let args: Vec<OsString> = args.into_iter().collect();
        let command = Self::command();
        let matches = command.clone().try_get_matches_from(&args)?;
        // Where the database URL came from, before the file's settings become flags too.
        let url_source = database::UrlSource::of(&matches);
        let Some(path) = matches.get_one::<PathBuf>("config").cloned() else {
            let mut config = Self::from_arg_matches(&matches)?;
            config.resolve_and_validate(url_source)?;
            return Ok(config);
        };
        let file_error = |message: String| ConfigError::File {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| file_error(e.to_string()))?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| file_error(e.to_string()))?;
        // The file's settings become flags placed before the real ones, for every setting
        // that neither a flag nor a variable gave: so they outrank only the defaults.
        let mut from_file: Vec<OsString> = Vec::new();
        for (key, value) in table {
            let id = key.replace('-', "_");
            let arg = command
                .get_arguments()
                .find(|a| a.get_id() == id.as_str() && a.get_long().is_some() && id != "config")
                .ok_or_else(|| {
                    file_error(format!(
                        "unknown setting {key:?} (settings are the long flag names of `jobgate --help`)"
                    ))
                })?;
            if matches!(
                matches.value_source(&id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            ) {
                continue;
            }
            let long = arg.get_long().unwrap_or_default();
            let text = |v: &toml::Value| -> Result<String, ConfigError> {
                match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    toml::Value::Float(f) => Ok(f.to_string()),
                    toml::Value::Boolean(b) => Ok(b.to_string()),
                    _ => Err(file_error(format!("{key}: expected a string, number or boolean"))),
                }
            };
            match (&value, arg.get_action()) {
                (toml::Value::Boolean(true), ArgAction::SetTrue) => {
                    from_file.push(format!("--{long}").into())
                }
                (toml::Value::Boolean(false), ArgAction::SetTrue) => {}
                (_, ArgAction::SetTrue) => return Err(file_error(format!("{key}: expected true or false"))),
                (toml::Value::Array(items), _) => {
                    if arg.get_value_delimiter().is_none() {
                        return Err(file_error(format!("{key}: takes one value, not a list")));
                    }
                    let items = items.iter().map(text).collect::<Result<Vec<_>, _>>()?;
                    from_file.push(format!("--{long}={}", items.join(",")).into());
                }
                (v, _) => from_file.push(format!("--{long}={}", text(v)?).into()),
            }
        }
        let mut merged = Vec::with_capacity(args.len() + from_file.len());
        merged.extend(args.first().cloned());
        merged.extend(from_file);
        merged.extend(args.iter().skip(1).cloned());
        let matches = command
            .try_get_matches_from(merged)
            .map_err(|e| file_error(e.kind().to_string() + ": " + &e.to_string()))?;
        let mut config = Self::from_arg_matches(&matches).map_err(|e| file_error(e.to_string()))?;
        config.resolve_and_validate(url_source)?;
        Ok(config)
    }

    /// Unless a subcommand (which serves nothing) was asked for: reads the database URL from
    /// where it was given (see [`database::resolve`]), then validates.
    fn resolve_and_validate(&mut self, url_source: database::UrlSource) -> Result<(), ConfigError> {
        if self.command.is_some() {
            return Ok(());
        }
        self.database_url = database::resolve(self, url_source)?;
        self.validate()
    }
}
