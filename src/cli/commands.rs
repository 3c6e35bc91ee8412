//! The client subcommands: which GraphQL operation each sends, what it prints, and the exit
//! status it returns.
//!
//! It must not talk to the server other than through `client.rs` (queries, mutations) and
//! `follow.rs` (subscriptions), nor format anything itself beyond choosing between
//! `output.rs`'s forms.

use serde_json::{Map, Value, json};

use super::client::{CliError, Connection};
use super::follow::{Flow, Follower, follow};
use super::job_flags::job_input;
use super::{
    ClientArgs, ClientCommand, EXIT_JOB_CANCELLED, EXIT_JOB_FAILED, EXIT_OK, JobArgs, ListArgs, LogsArgs,
    Output, SubmitArgs, WatchArgs, output,
};

/// The job fields `submit`, `get` and `cancel` print.
const JOB_FIELDS: &str = "fragment JobFields on Job { id name namespace template phase submittedAt startedAt \
     finishedAt message result progress { succeeded failed active ready total } \
     spec { image command args env { name value } parameters } \
     queue { name state reason message position localQueuePosition estimatedStartAt estimate } \
     traceId timeline { name endedAt durationSeconds exitCode } }";

/// The event fields `watch` and `submit --wait` read.
const EVENT_FIELDS: &str = "fragment EventFields on JobStatusEvent { cursor phase previousPhase at reason message job { id name namespace } }";

/// How many of a job's recorded events `watch ID` prints before going live.
const HISTORY: u32 = 100;

pub async fn run(command: ClientCommand) -> Result<i32, CliError> {
    match command {
        ClientCommand::Submit(args) => submit(*args).await,
        ClientCommand::Get(args) => get(args).await,
        ClientCommand::List(args) => list(args).await,
        ClientCommand::Watch(args) => watch(args).await,
        ClientCommand::Logs(args) => logs(args).await,
        ClientCommand::Cancel(args) => cancel(args).await,
        ClientCommand::Schedule(args) => super::schedule_commands::run(args).await,
    }
}

fn connect(args: &ClientArgs) -> Result<Connection, CliError> {
    Connection::new(
        &args.server,
        args.token.as_deref(),
        std::time::Duration::from_secs(args.keepalive_secs),
    )
}

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "SUCCEEDED" | "FAILED" | "CANCELLED")
}

async fn submit(args: SubmitArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let mut input = Map::new();
    if let Some(name) = &args.name {
        input.insert("name".into(), json!(name));
    }
    job_input(&args.job, &mut input);
    if let Some(key) = &args.idempotency_key {
        input.insert("idempotencyKey".into(), json!(key));
    }
    if !args.params.is_empty() {
        let params: Map<String, Value> = args
            .params
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::from_str(v).unwrap_or_else(|_| json!(v))))
            .collect();
        input.insert("parameters".into(), Value::Object(params));
    }
    let query = format!(
        "mutation Submit($input: SubmitJobInput!) {{ submitJob(input: $input) {{ job {{ ...JobFields }} }} }} {JOB_FIELDS}"
    );
    let data = conn.query(&query, json!({ "input": input })).await?;
    let job = data["submitJob"]["job"].clone();
    let id = job["id"]
        .as_str()
        .ok_or_else(|| CliError::Protocol(format!("submitJob answered no job id: {data}")))?
        .to_owned();
    let json_output = args.client.output == Output::Json;
    if !args.wait {
        if json_output {
            output::json(&job)?;
        } else {
            output::line(&id)?;
        }
        return Ok(EXIT_OK);
    }
    if !json_output {
        // The id first, so that a script or a person has it while the job runs.
        output::line(&id)?;
    }
    let mut waiter = Waiter {
        id: id.clone(),
        announce: !json_output,
        last_phase: None,
        job,
    };
    follow(&conn, &mut waiter).await?;
    let phase = waiter.job["phase"].as_str().unwrap_or_default().to_owned();
    if !is_terminal(&phase) {
        return Err(CliError::Protocol(format!(
            "jobStatus of {id} completed before the job ended (last seen {phase})"
        )));
    }
    if json_output {
        output::json(&waiter.job)?;
    } else if phase != "SUCCEEDED" {
        let why = waiter.job["message"]
            .as_str()
            .map(|m| format!(": {}", output::printable(m)))
            .unwrap_or_default();
        eprintln!("job {id} ended {phase}{why}");
    }
    Ok(match phase.as_str() {
        "SUCCEEDED" => EXIT_OK,
        "CANCELLED" => EXIT_JOB_CANCELLED,
        _ => EXIT_JOB_FAILED,
    })
}

/// `submit --wait`: follows `jobStatus`, which sends the job's state at once on every
/// (re)subscription, so a reconnect needs no cursor; announces each new phase on standard
/// error.
struct Waiter {
    id: String,
    announce: bool,
    last_phase: Option<String>,
    /// The job as the latest event had it.
    job: Value,
}

impl Follower for Waiter {
    fn subscription(&self) -> (String, Value) {
        let query = format!(
            "subscription Wait($id: ID!) {{ jobStatus(id: $id) {{ phase job {{ ...JobFields }} }} }} {JOB_FIELDS}"
        );
        (query, json!({ "id": self.id }))
    }

    fn on_data(&mut self, data: Value) -> Result<Flow, CliError> {
        let event = &data["jobStatus"];
        let phase = event["phase"].as_str().unwrap_or_default().to_owned();
        self.job = event["job"].clone();
        if self.announce && self.last_phase.as_deref() != Some(phase.as_str()) {
            eprintln!("job {} {phase}", self.id);
        }
        self.last_phase = Some(phase.clone());
        Ok(if is_terminal(&phase) {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
    /// `jobStatus` completes only after the terminal phase, where the waiter has already
    /// stopped: an earlier end is the server letting go.
    fn complete_ends(&self) -> bool {
        false
    }
}

/// `job(id)` with `fields`, or `NOT_FOUND` when the server has none this caller may see.
async fn fetch_job(conn: &Connection, id: &str, selection: &str, fragments: &str) -> Result<Value, CliError> {
    let query = format!("query Job($id: ID!) {{ job(id: $id) {{ {selection} }} }} {fragments}");
    let data = conn.query(&query, json!({ "id": id })).await?;
    match &data["job"] {
        Value::Null => Err(CliError::server("NOT_FOUND", format!("no job {id}"))),
        job => Ok(job.clone()),
    }
}

async fn get(args: JobArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let job = fetch_job(&conn, &args.id, "...JobFields", JOB_FIELDS).await?;
    match args.client.output {
        Output::Json => output::json(&job)?,
        Output::Table => output::line(&output::job_details(&job))?,
    }
    Ok(EXIT_OK)
}

async fn list(args: ListArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let mut filter = Map::new();
    if !args.phase.is_empty() {
        let phases: Vec<&str> = args.phase.iter().map(|p| p.as_str()).collect();
        filter.insert("phases".into(), json!(phases));
    }
    if let Some(namespace) = &args.namespace {
        filter.insert("namespace".into(), json!(namespace));
    }
    let query = "query List($first: Int!, $after: String, $filter: JobFilter) { \
                 jobs(first: $first, after: $after, filter: $filter) { totalCount \
                 pageInfo { hasNextPage endCursor } \
                 edges { node { id name namespace template phase submittedAt startedAt finishedAt message } } } }";
    let limit = args.limit as usize;
    let mut jobs: Vec<Value> = Vec::new();
    let mut after = Value::Null;
    let total = loop {
        let first = (limit - jobs.len()).min(500);
        let data = conn
            .query(query, json!({ "first": first, "after": after, "filter": filter }))
            .await?;
        let page = &data["jobs"];
        jobs.extend(
            page["edges"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|edge| edge["node"].clone()),
        );
        // A page may be short, or empty, and still have a next one (it stopped at the
        // server's budget of candidates, see `Query.jobs`): go on from its endCursor, which is
        // where it stopped, until the server says there is no more or the limit is reached.
        // Each page is bounded work for the server, and there are at most as many as the
        // jobs the filter reads divided by that budget.
        let more = page["pageInfo"]["hasNextPage"].as_bool() == Some(true);
        if !more || jobs.len() >= limit {
            break page["totalCount"].clone();
        }
        after = page["pageInfo"]["endCursor"].clone();
    };
    match args.client.output {
        Output::Json => output::json(&json!({ "totalCount": total, "jobs": jobs }))?,
        Output::Table => {
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|job| {
                    vec![
                        output::text(&job["id"]),
                        output::text(&job["name"]),
                        output::text(&job["namespace"]),
                        output::text(&job["phase"]),
                        output::time(&job["submittedAt"]),
                        output::time(&job["finishedAt"]),
                    ]
                })
                .collect();
            output::line(&output::table(
                &["ID", "NAME", "NAMESPACE", "PHASE", "SUBMITTED", "FINISHED"],
                &rows,
            ))?;
            if let Some(total) = total.as_u64().filter(|t| *t as usize > jobs.len()) {
                eprintln!("({} of {total} jobs; --limit shows more)", jobs.len());
            }
        }
    }
    Ok(EXIT_OK)
}

async fn cancel(args: JobArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let query = format!(
        "mutation Cancel($id: ID!) {{ cancelJob(id: $id) {{ job {{ ...JobFields }} }} }} {JOB_FIELDS}"
    );
    let data = conn.query(&query, json!({ "id": args.id })).await?;
    let job = &data["cancelJob"]["job"];
    match args.client.output {
        Output::Json => output::json(job)?,
        Output::Table => output::line(&format!(
            "{}  {}",
            output::text(&job["id"]),
            output::text(&job["phase"])
        ))?,
    }
    Ok(EXIT_OK)
}

async fn logs(args: LogsArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let mut printer = LogPrinter {
        args,
        after: None,
        first_source: None,
        several_sources: false,
    };
    // Each line carries its cursor: a dropped connection resumes right after the last line
    // printed, none twice, none skipped.
    follow(&conn, &mut printer).await?;
    Ok(EXIT_OK)
}

struct LogPrinter {
    args: LogsArgs,
    /// The cursor of the last line printed.
    after: Option<String>,
    /// The source of the first line printed, and whether another has been seen since.
    first_source: Option<String>,
    several_sources: bool,
}

impl LogPrinter {
    /// Whether a line from `source` is printed with it: always a pod's; a local run's
    /// (`index-<i>-run-<n>`) once the output has shown another source, so that the output of a
    /// job run once reads as the program wrote it.
    fn shows_source(&mut self, source: &str) -> bool {
        match &self.first_source {
            None => self.first_source = Some(source.to_owned()),
            Some(first) if first != source => self.several_sources = true,
            Some(_) => {}
        }
        self.several_sources || !is_local_run(source)
    }
}

/// Whether `source` names a local run (`index-<i>-run-<n>`) rather than a pod.
fn is_local_run(source: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    source
        .strip_prefix("index-")
        .and_then(|rest| rest.split_once("-run-"))
        .is_some_and(|(index, run)| digits(index) && digits(run))
}

impl Follower for LogPrinter {
    fn subscription(&self) -> (String, Value) {
        let query = "subscription Logs($id: ID!, $follow: Boolean!, $tail: Int!, $after: String) { \
                     jobLogs(id: $id, follow: $follow, tailLines: $tail, after: $after) { text source cursor } }";
        let variables = json!({
            "id": self.args.id,
            "follow": self.args.follow,
            "tail": self.args.tail,
            "after": self.after,
        });
        (query.to_owned(), variables)
    }

    fn on_data(&mut self, data: Value) -> Result<Flow, CliError> {
        let line = &data["jobLogs"];
        if let Some(cursor) = line["cursor"].as_str() {
            self.after = Some(cursor.to_owned());
        }
        match self.args.client.output {
            Output::Json => output::json(line)?,
            Output::Table => match line["source"].as_str().filter(|s| self.shows_source(s)) {
                // A job's output as it is, as `kubectl logs` prints it (docs/CLI.md).
                Some(source) => output::line(&format!(
                    "[{}] {}",
                    output::printable(source),
                    output::raw(&line["text"])
                ))?,
                None => output::line(&output::raw(&line["text"]))?,
            },
        }
        Ok(Flow::Continue)
    }
}

async fn watch(args: WatchArgs) -> Result<i32, CliError> {
    let conn = connect(&args.client)?;
    let mut watcher = match &args.id {
        Some(id) => {
            let selection =
                format!("id namespace lastEventCursor events(last: {HISTORY}) {{ ...EventFields }}");
            let job = fetch_job(&conn, id, &selection, EVENT_FIELDS).await?;
            let mut watcher = Watcher {
                output: args.client.output,
                after: output::raw(&job["lastEventCursor"]),
                job: Some((id.clone(), job["namespace"].clone())),
                ended: false,
            };
            for event in job["events"].as_array().into_iter().flatten() {
                watcher.print(event)?;
            }
            if watcher.ended {
                return Ok(EXIT_OK);
            }
            watcher
        }
        None => {
            let after = match &args.after {
                Some(after) => after.clone(),
                None => {
                    // Start from the newest event there is, not from whenever the socket
                    // opens: nothing between the two is lost, and every reconnect resumes
                    // from a cursor.
                    let data = conn
                        .query(
                            "query Now { jobStats(windowMinutes: 1, bucketSeconds: 60) { cursor } }",
                            json!({}),
                        )
                        .await?;
                    output::raw(&data["jobStats"]["cursor"])
                }
            };
            Watcher {
                output: args.client.output,
                after,
                job: None,
                ended: false,
            }
        }
    };
    follow(&conn, &mut watcher).await?;
    Ok(EXIT_OK)
}

/// `watch`: `jobEvents(after: <the last cursor seen>)`, so that a resubscription after a
/// dropped connection replays exactly what was missed. With a job, only its events (within
/// its namespace), until its terminal phase.
struct Watcher {
    output: Output,
    /// The cursor of the last event seen (or the starting point).
    after: String,
    /// The followed job's id and namespace.
    job: Option<(String, Value)>,
    ended: bool,
}

impl Watcher {
    fn print(&mut self, event: &Value) -> Result<(), CliError> {
        if let Some(cursor) = event["cursor"].as_str() {
            self.after = cursor.to_owned();
        }
        if let Some((id, _)) = &self.job {
            if event["job"]["id"].as_str() != Some(id.as_str()) {
                return Ok(());
            }
            self.ended = event["phase"].as_str().is_some_and(is_terminal);
        }
        match self.output {
            Output::Json => output::json(&output::event_json(event)),
            Output::Table => output::line(&output::event_line(event)),
        }
    }
}

impl Follower for Watcher {
    fn subscription(&self) -> (String, Value) {
        let query = format!(
            "subscription Watch($filter: JobFilter, $after: String) {{ \
             jobEvents(filter: $filter, after: $after) {{ ...EventFields }} }} {EVENT_FIELDS}"
        );
        let filter = match &self.job {
            Some((_, namespace)) => json!({ "namespace": namespace }),
            None => Value::Null,
        };
        (query, json!({ "filter": filter, "after": self.after }))
    }

    fn on_data(&mut self, data: Value) -> Result<Flow, CliError> {
        self.print(&data["jobEvents"])?;
        Ok(if self.ended { Flow::Stop } else { Flow::Continue })
    }
    /// `jobEvents` never ends by itself: an end is the server letting go (shutting down).
    fn complete_ends(&self) -> bool {
        false
    }
}
