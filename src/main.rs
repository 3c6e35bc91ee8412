//! The `jobgate` binary: parse configuration, start logging, run.

use clap::Parser;
use jobgate::config::{Command, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    if let Some(Command::Schema) = config.command {
        let sdl = jobgate::graphql::schema::sdl();
        std::io::Write::write_all(&mut std::io::stdout(), sdl.as_bytes())?;
        return Ok(());
    }
    jobgate::telemetry::init(config.log_format, &config.log);
    jobgate::run(config).await
}
