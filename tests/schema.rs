//! `schema.graphql` is generated from the code; this fails when the two drift apart.

#[test]
fn committed_schema_matches_the_code() {
    let generated = jobgate::graphql::schema::sdl();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "schema.graphql is out of date with the code.\n\
         Regenerate it with:  cargo run --quiet -- schema > schema.graphql\n\
         and commit the result."
    );
}

#[test]
fn schema_keeps_every_name_of_the_contract() {
    let generated = jobgate::graphql::schema::sdl();
    for name in [
        "scalar DateTime",
        "scalar JSON",
        "enum JobPhase",
        "input EnvVarInput",
        "input SubmitJobInput",
        "type JobCondition",
        "type JobProgress",
        "type Job ",
        "type JobStatusEvent",
        "type JobEdge",
        "type PageInfo",
        "type JobConnection",
        "input JobFilter",
        "type SubmitJobPayload",
        "type CancelJobPayload",
        "job(id: ID!): Job",
        "jobs(",
        "submitJob(input: SubmitJobInput!): SubmitJobPayload!",
        "cancelJob(id: ID!): CancelJobPayload!",
        "jobStatus(id: ID!): JobStatusEvent!",
        "jobEvents(",
    ] {
        assert!(
            generated.contains(name),
            "the schema lost {name:?} from the contract"
        );
    }
}

/// Runs web/check-documents.mjs (the dashboard's GraphQL documents against a schema file);
/// returns whether it passed, and what it printed.
fn check_dashboard_documents(schema: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("schema.graphql");
    std::fs::write(&path, schema).expect("writing the schema");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/web/check-documents.mjs");
    // Node.js is needed to build jobgate at all (build.rs bundles the dashboard with it), and
    // the build installs web/node_modules, where the checker's `graphql` package lives.
    let out = std::process::Command::new("node")
        .arg(script)
        .arg(&path)
        .output()
        .expect("running node (jobgate's build needs Node.js too)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_dashboards_documents_validate_against_the_schema() {
    let (ok, report) = check_dashboard_documents(&jobgate::graphql::schema::sdl());
    assert!(
        ok,
        "a GraphQL document of the dashboard (web/src/documents.js) does not validate against the server's schema:\n{report}"
    );
    assert!(
        report.contains("ok   JOBS_QUERY"),
        "the checker read the documents:\n{report}"
    );
}

#[test]
fn a_field_the_dashboard_uses_missing_from_the_schema_fails_the_check() {
    let schema = jobgate::graphql::schema::sdl();
    let without: String = schema
        .lines()
        .filter(|line| !line.trim_start().starts_with("lastEventCursor:"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(without, schema, "the schema has Job.lastEventCursor to remove");
    let (ok, report) = check_dashboard_documents(&without);
    assert!(
        !ok,
        "the check passed with Job.lastEventCursor removed:\n{report}"
    );
    assert!(
        report.contains("Cannot query field \"lastEventCursor\""),
        "the check names the missing field:\n{report}"
    );
}
