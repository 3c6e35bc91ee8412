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
