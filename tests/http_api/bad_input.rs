//! Bad input changes nothing: an invalid submission is refused, naming the field, and creates
//! no job.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::Server;
use crate::support::{GQL_RESPONSE, JSON, SUBMIT, code_of, post_gql, total_count};

#[tokio::test]
async fn invalid_submissions_are_refused_with_the_field_and_create_nothing() {
    let server = Server::start(&["--max-parallelism", "4"]).await;
    let env = |name: &str| json!({ "command": ["true"], "env": [{ "name": name, "value": "x" }] });
    let cases: Vec<(Value, &str)> = vec![
        (json!({ "command": [] }), "input.command"),
        (json!({ "command": [""] }), "input.command"),
        (json!({ "command": ["  "] }), "input.command"),
        (json!({}), "input.command"),
        (json!({ "args": ["x"] }), "input.command"),
        (
            json!({ "command": ["true"], "parallelism": 0 }),
            "input.parallelism",
        ),
        (
            json!({ "command": ["true"], "parallelism": 5 }),
            "input.parallelism",
        ),
        (
            json!({ "command": ["true"], "completions": 0 }),
            "input.completions",
        ),
        (
            json!({ "command": ["true"], "completions": -1 }),
            "input.completions",
        ),
        (
            json!({ "command": ["true"], "backoffLimit": -1 }),
            "input.backoffLimit",
        ),
        (
            json!({ "command": ["true"], "activeDeadlineSeconds": 0 }),
            "input.activeDeadlineSeconds",
        ),
        (
            json!({ "command": ["true"], "template": "spark" }),
            "input.template",
        ),
        (env("1BAD"), "input.env[0].name"),
        (env("A-B"), "input.env[0].name"),
        (env(""), "input.env[0].name"),
        (env("JOB_COMPLETION_INDEX"), "input.env[0].name"),
        (
            json!({ "command": ["true"], "env": [{ "name": "OK", "value": "1" }, { "name": "OK", "value": "2" }] }),
            "input.env[1].name",
        ),
        (
            json!({ "command": ["true"], "name": "Not_A_Label" }),
            "input.name",
        ),
        (json!({ "command": ["true"], "name": "-leading" }), "input.name"),
        (json!({ "command": ["true"], "name": "" }), "input.name"),
        (
            json!({ "command": ["true"], "namespace": "UPPER" }),
            "input.namespace",
        ),
        (
            json!({ "command": ["true"], "idempotencyKey": "" }),
            "input.idempotencyKey",
        ),
    ];
    for (input, field) in cases {
        for accept in [GQL_RESPONSE, JSON] {
            let reply = post_gql(&server, accept, SUBMIT, json!({ "input": input })).await;
            // Well-formed and valid GraphQL: the field's resolver refused it.
            assert_eq!(reply.status, StatusCode::OK, "{input}: {}", reply.text);
            let errors = reply.errors();
            assert_eq!(errors.len(), 1, "{input}: {}", reply.text);
            assert_eq!(code_of(&errors[0]), "BAD_USER_INPUT", "{input}: {}", reply.text);
            assert_eq!(errors[0]["extensions"]["field"], field, "{input}: {}", reply.text);
            assert_eq!(errors[0]["path"], json!(["submitJob"]), "{input}: {}", reply.text);
            assert!(reply.json()["data"].is_null(), "{input}: {}", reply.text);
        }
    }
    assert_eq!(total_count(&server).await, 0);
    // The server still takes valid work afterwards.
    server
        .submit(json!({ "command": ["true"], "parallelism": 4 }))
        .await;
    assert_eq!(total_count(&server).await, 1);
}
