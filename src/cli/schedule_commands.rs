//! `jobgate schedule create | list | get | pause | resume | trigger | delete`: the schedule
//! subcommands' arguments, the GraphQL operation each sends, and what it prints.
//!
//! `create` takes a `CreateScheduleInput` from a JSON or TOML file (`--file`), from flags, or
//! both (flags win). It must not talk to the server other than through `client.rs`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value, json};

use super::client::{CliError, Connection};
use super::job_flags::{JobFlags, job_input};
use super::{ClientArgs, EXIT_OK, Output, output};

/// A schedule's fields every subcommand prints.
const SCHEDULE_FIELDS: &str = "fragment ScheduleFields on Schedule { id name namespace cron timeZone \
     concurrencyPolicy startingDeadlineSeconds suspended owner createdAt updatedAt lastFireTime \
     blockedReason nextFireTimes(count: 3) }";

#[derive(Clone, Debug, Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub command: ScheduleCommand,
}

#[derive(Clone, Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule and print its id.
    Create(Box<CreateArgs>),
    /// List schedules, oldest first.
    List(ScheduleListArgs),
    /// Show one schedule with its next fire times and recent runs.
    Get(ScheduleIdArgs),
    /// Pause a schedule: no tick fires until it is resumed.
    Pause(ScheduleIdArgs),
    /// Resume a paused schedule.
    Resume(ScheduleIdArgs),
    /// Run a schedule's job now, outside its ticks; prints the job's id.
    Trigger(ScheduleIdArgs),
    /// Delete a schedule (the jobs it started stay).
    Delete(ScheduleIdArgs),
}

/// `--concurrency-policy`, as GraphQL's `ConcurrencyPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum Policy {
    Allow,
    Forbid,
    Replace,
}

#[derive(Clone, Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// A `CreateScheduleInput` as JSON (`.json`) or TOML (any other name); flags override
    /// its fields.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The schedule's name (unique in its namespace).
    #[arg(long)]
    pub name: Option<String>,
    /// The cron rule: five fields, or six with seconds first (quote it).
    #[arg(long)]
    pub cron: Option<String>,
    /// An IANA time zone (`Europe/Berlin`); the server reads `UTC` when omitted.
    #[arg(long)]
    pub time_zone: Option<String>,
    #[arg(long, value_enum, ignore_case = true)]
    pub concurrency_policy: Option<Policy>,
    /// How late a tick may still start, in seconds.
    #[arg(long)]
    pub starting_deadline_seconds: Option<i64>,
    /// Create it paused.
    #[arg(long)]
    pub suspended: bool,
    // The job each tick submits (its namespace is the schedule's).
    #[command(flatten)]
    pub job: JobFlags,
}

#[derive(Clone, Debug, Args)]
pub struct ScheduleListArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// At most this many schedules.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
}

#[derive(Clone, Debug, Args)]
pub struct ScheduleIdArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The schedule's id.
    pub id: String,
}

fn connect(args: &ClientArgs) -> Result<Connection, CliError> {
    Connection::new(
        &args.server,
        args.token.as_deref(),
        std::time::Duration::from_secs(args.keepalive_secs),
    )
}

pub async fn run(args: ScheduleArgs) -> Result<i32, CliError> {
    match args.command {
        ScheduleCommand::Create(args) => create(*args).await,
        ScheduleCommand::List(args) => list(args).await,
        ScheduleCommand::Get(args) => get(args).await,
        ScheduleCommand::Pause(args) => change(args, "pauseSchedule").await,
        ScheduleCommand::Resume(args) => change(args, "resumeSchedule").await,
        ScheduleCommand::Trigger(args) => trigger(args).await,
        ScheduleCommand::Delete(args) => delete(args).await,
    }
}

/// The input of `--file`: JSON when its name ends in `.json`, TOML otherwise.
fn read_file(path: &PathBuf) -> Result<Map<String, Value>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("reading {}: {e}", path.display())))?;
    let value: Value = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?
    } else {
        let table: toml::Value =
            toml::from_str(&text).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
        serde_json::to_value(table).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(CliError::Usage(format!("{}: expected an object", path.display()))),
    }
}

/// The `CreateScheduleInput` of the file and flags.
fn create_input(args: &CreateArgs) -> Result<Map<String, Value>, CliError> {
    let mut input = match &args.file {
        Some(path) => read_file(path)?,
        None => Map::new(),
    };
    for (key, value) in [
        ("name", &args.name),
        ("cron", &args.cron),
        ("timeZone", &args.time_zone),
    ] {
        if let Some(value) = value {
            input.insert(key.into(), json!(value));
        }
    }
    if let Some(policy) = args.concurrency_policy {
        let name = format!("{policy:?}").to_uppercase();
        input.insert("concurrencyPolicy".into(), json!(name));
    }
    if let Some(deadline) = args.starting_deadline_seconds {
        input.insert("startingDeadlineSeconds".into(), json!(deadline));
    }
    if args.suspended {
        input.insert("suspended".into(), json!(true));
    }
    let job = input.entry("job").or_insert_with(|| json!({}));
    let Value::Object(job) = job else {
        return Err(CliError::Usage("`job` must be an object".into()));
    };
    job_input(&args.job, job);
    Ok(input)
}

async fn create(args: CreateArgs) -> Result<i32, CliError> {
    let input = create_input(&args)?;
    let conn = connect(&args.client)?;
    let query = format!(
        "mutation Create($input: CreateScheduleInput!) {{ createSchedule(input: $input) {{ schedule {{ ...ScheduleFields }} }} }} {SCHEDULE_FIELDS}"
    );
    let data = conn.query(&query, json!({ "input": input })).await?;
    let schedule = &data["createSchedule"]["schedule"];
    match args.client.output {
        Output::Json => output::json(schedule)?,
        Output::Table => output::line(&output::text(&schedule["id"]))?,
    }
    Ok(EXIT_OK)
}

async fn list(args: ScheduleListArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let query = format!(
        "query List($first: Int!, $after: String) {{ schedules(first: $first, after: $after) {{ \
         pageInfo {{ hasNextPage endCursor }} edges {{ node {{ ...ScheduleFields }} }} }} }} {SCHEDULE_FIELDS}"
    );
    let limit = args.limit as usize;
    let mut schedules: Vec<Value> = Vec::new();
    let mut after = Value::Null;
    loop {
        let first = (limit - schedules.len()).min(500);
        let data = conn
            .query(&query, json!({ "first": first, "after": after }))
            .await?;
        let page = &data["schedules"];
        schedules.extend(
            page["edges"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["node"].clone()),
        );
        if page["pageInfo"]["hasNextPage"].as_bool() != Some(true) || schedules.len() >= limit {
            break;
        }
        after = page["pageInfo"]["endCursor"].clone();
    }
    match args.client.output {
        Output::Json => output::json(&json!({ "schedules": schedules }))?,
        Output::Table => {
            let rows: Vec<Vec<String>> = schedules
                .iter()
                .map(|s| {
                    vec![
                        output::text(&s["id"]),
                        output::text(&s["name"]),
                        output::text(&s["namespace"]),
                        output::text(&s["cron"]),
                        output::text(&s["timeZone"]),
                        output::text(&s["concurrencyPolicy"]),
                        if s["suspended"].as_bool() == Some(true) {
                            "yes"
                        } else {
                            "no"
                        }
                        .to_owned(),
                        output::time(&s["nextFireTimes"][0]),
                        output::time(&s["lastFireTime"]),
                    ]
                })
                .collect();
            output::line(&output::table(
                &[
                    "ID",
                    "NAME",
                    "NAMESPACE",
                    "CRON",
                    "TIME ZONE",
                    "POLICY",
                    "PAUSED",
                    "NEXT",
                    "LAST",
                ],
                &rows,
            ))?;
        }
    }
    Ok(EXIT_OK)
}

async fn get(args: ScheduleIdArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let query = format!(
        "query Get($id: ID!) {{ schedule(id: $id) {{ ...ScheduleFields \
         recentRuns(last: 10) {{ tick startedAt job {{ id phase }} }} }} }} {SCHEDULE_FIELDS}"
    );
    let data = conn.query(&query, json!({ "id": args.id })).await?;
    let schedule = &data["schedule"];
    if schedule.is_null() {
        return Err(CliError::server("NOT_FOUND", format!("no schedule {}", args.id)));
    }
    match args.client.output {
        Output::Json => output::json(schedule)?,
        Output::Table => output::line(&details(schedule))?,
    }
    Ok(EXIT_OK)
}

/// A schedule, field by field, for `get`.
fn details(s: &Value) -> String {
    let mut lines = Vec::new();
    for (label, key) in [
        ("id", "id"),
        ("name", "name"),
        ("namespace", "namespace"),
        ("cron", "cron"),
        ("time zone", "timeZone"),
        ("policy", "concurrencyPolicy"),
        ("deadline", "startingDeadlineSeconds"),
        ("owner", "owner"),
        ("blocked", "blockedReason"),
    ] {
        lines.push(vec![label.to_owned(), output::text(&s[key])]);
    }
    let paused = if s["suspended"].as_bool() == Some(true) {
        "yes"
    } else {
        "no"
    };
    lines.push(vec!["paused".to_owned(), paused.to_owned()]);
    lines.push(vec!["last fire".to_owned(), output::time(&s["lastFireTime"])]);
    for next in s["nextFireTimes"].as_array().into_iter().flatten() {
        lines.push(vec!["next fire".to_owned(), output::time(next)]);
    }
    for run in s["recentRuns"].as_array().into_iter().flatten() {
        let run_text = format!(
            "{} {} (tick {})",
            output::text(&run["job"]["id"]),
            output::text(&run["job"]["phase"]),
            output::time(&run["tick"])
        );
        lines.push(vec!["run".to_owned(), run_text]);
    }
    output::table(&["FIELD", "VALUE"], &lines)
}

async fn change(args: ScheduleIdArgs, mutation: &str) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let query = format!(
        "mutation Change($id: ID!) {{ {mutation}(id: $id) {{ ...ScheduleFields }} }} {SCHEDULE_FIELDS}"
    );
    let data = conn.query(&query, json!({ "id": args.id })).await?;
    let schedule = &data[mutation];
    match args.client.output {
        Output::Json => output::json(schedule)?,
        Output::Table => {
            let state = if schedule["suspended"].as_bool() == Some(true) {
                "paused"
            } else {
                "active"
            };
            output::line(&format!("{} {state}", output::text(&schedule["id"])))?;
        }
    }
    Ok(EXIT_OK)
}

async fn trigger(args: ScheduleIdArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let query = "mutation Trigger($id: ID!) { triggerSchedule(id: $id) { job { id name namespace phase } } }";
    let data = conn.query(query, json!({ "id": args.id })).await?;
    let job = &data["triggerSchedule"]["job"];
    match args.client.output {
        Output::Json => output::json(job)?,
        Output::Table => output::line(&output::text(&job["id"]))?,
    }
    Ok(EXIT_OK)
}

async fn delete(args: ScheduleIdArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let query = "mutation Delete($id: ID!) { deleteSchedule(id: $id) { schedule { id name } } }";
    let data = conn.query(query, json!({ "id": args.id })).await?;
    let schedule = &data["deleteSchedule"]["schedule"];
    match args.client.output {
        Output::Json => output::json(schedule)?,
        Output::Table => output::line(&output::text(&schedule["id"]))?,
    }
    Ok(EXIT_OK)
}
