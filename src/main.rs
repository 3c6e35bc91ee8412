//! The `jobgate` binary: read configuration, start logging, run.

use jobgate::config::{Config, ConfigError, JobgateSubcommand};

fn main() -> anyhow::Result<()> {
    // First, while this process has one thread: it may be the launcher of a local job.
    jobgate::executor::local::user_switch::run_if_asked();
    start()
}

#[tokio::main]
async fn start() -> anyhow::Result<()> {
    let config = match Config::load() {
        Ok(config) => config,
        Err(ConfigError::Cli(e)) => e.exit(),
        Err(e) => {
            eprintln!("jobgate: {e}");
            std::process::exit(2);
        }
    };
    match config.command {
        Some(JobgateSubcommand::Schema) => {
            let sdl = jobgate::graphql::schema::sdl();
            std::io::Write::write_all(&mut std::io::stdout(), sdl.as_bytes())?;
            return Ok(());
        }
        Some(JobgateSubcommand::HashToken) => {
            let mut token = String::new();
            std::io::stdin().read_line(&mut token)?;
            anyhow::ensure!(!token.trim().is_empty(), "no token on standard input");
            let line = format!("{}\n", jobgate::auth::hash_token(&token));
            std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes())?;
            return Ok(());
        }
        Some(JobgateSubcommand::Client(command)) => {
            let code = jobgate::cli::run(command).await;
            std::process::exit(code);
        }
        None => {}
    }
    jobgate::telemetry::init(config.log_format, &config.log);
    jobgate::run(config).await
}
