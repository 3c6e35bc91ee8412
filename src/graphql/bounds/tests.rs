use serde_json::json;

use super::*;

fn nested(open: &str, levels: usize, close: &str) -> String {
    format!(
        "{{ __typename(a: {}1{}) }}",
        open.repeat(levels),
        close.repeat(levels)
    )
}

fn list(items: usize) -> String {
    format!("{{ __typename(a: [{}]) }}", vec!["1"; items].join(","))
}

#[test]
fn nesting_is_bounded_with_its_place() {
    // The operation's `{` and the arguments' `(` are two levels.
    assert!(check_document(&nested("[", MAX_NESTING - 2, "]")).is_ok());
    let e = check_document(&nested("[", MAX_NESTING - 1, "]")).unwrap_err();
    assert_eq!(
        e.message,
        "the query nests `{`, `[` and `(` more than 64 levels deep; at most 64 are allowed"
    );
    assert_eq!(e.locations, [Pos { line: 1, column: 79 }]);
    let e = check_document(&nested("{a: ", 2_000, "}")).unwrap_err();
    assert!(e.message.contains("more than 64 levels"), "{}", e.message);
    let selections = format!("{}a{}", "{ a ".repeat(100), "}".repeat(100));
    assert!(check_document(&selections).is_err());
}

#[test]
fn strings_block_strings_and_comments_hide_their_brackets() {
    let deep = "[".repeat(5_000);
    for hidden in [
        format!("{{ a(s: \"{deep}\") }}"),
        format!("{{ a(s: \"\\\"{deep}\") }}"),
        format!("{{ a(s: \"\"\"{deep}\n\\\"\"\"{deep}\"\"\") }}"),
        format!("{{ a # {deep}\n b }}"),
        format!("{{ a # {deep}\r b }}"),
    ] {
        assert!(check_document(&hidden).is_ok(), "{hidden}");
    }
    // What a string does not hide: after its end, after a line break the parser refuses, or
    // after the end of a comment.
    for seen in [
        format!("{{ a(s: \"x\" t: {deep}) }}"),
        format!("{{ a(s: \"x\n{deep}) }}"),
        format!("{{ a(s: \"\"\"x\"\"\" t: {deep}) }}"),
        format!("{{ a # x\n {deep} }}"),
    ] {
        assert!(check_document(&seen).is_err(), "{seen}");
    }
}

#[test]
fn list_items_are_bounded_per_list() {
    assert!(check_document(&list(MAX_LIST_ITEMS)).is_ok());
    let e = check_document(&list(MAX_LIST_ITEMS + 1)).unwrap_err();
    assert_eq!(
        e.message,
        "a list in the query has more than 1024 items; at most 1024 are allowed"
    );
    // Objects and lists are items too; items of inner lists count for their own list.
    let objects = format!(
        "{{ a(x: [{}]) }}",
        vec!["{b: [1, 2, 3]}"; MAX_LIST_ITEMS + 1].join(" ")
    );
    assert!(
        check_document(&objects)
            .unwrap_err()
            .message
            .starts_with("a list")
    );
    let inner = format!(
        "{{ a(x: [[{}], [{}]]) }}",
        vec!["1"; 1_000].join(","),
        vec!["1"; 1_000].join(",")
    );
    assert!(check_document(&inner).is_ok());
}

#[test]
fn adjacent_tokens_count_apart() {
    // The parser reads `-1-1` as two numbers, `00` as two zeros, `"s""s"` as two strings,
    // and `truenull` as a boolean and a null.
    for item in [
        "-1", "-1e1", "-1.5e-3", "\"s\"", "0", "-0", "true", "false", "null", "nullx ",
    ] {
        let packed = format!("{{ a(x: [{}]) }}", item.repeat(MAX_LIST_ITEMS + 1));
        let e = check_document(&packed).unwrap_err();
        assert!(
            e.message.starts_with("a list in the query"),
            "{item}: {}",
            e.message
        );
    }
}

#[test]
fn the_parser_splits_what_the_scan_counts_apart() {
    // What `adjacent_tokens_count_apart` relies on: eight values, with no space between most.
    use async_graphql::parser::types::{DocumentOperations, Selection};
    use async_graphql_value::Value as GqlValue;
    let doc = async_graphql::parser::parse_query("{ a(x: [truenull 00 -1-1 \"s\"\"s\"]) }").unwrap();
    let DocumentOperations::Single(op) = &doc.operations else {
        panic!("one operation")
    };
    let Selection::Field(field) = &op.node.selection_set.node.items[0].node else {
        panic!("a field")
    };
    let GqlValue::List(items) = &field.node.arguments[0].1.node else {
        panic!("a list")
    };
    assert_eq!(items.len(), 8, "{items:?}");
}

#[test]
fn nodes_are_bounded_per_document() {
    let wide = format!("{{ {} }}", vec!["a"; MAX_NODES].join(" "));
    assert_eq!(
        check_document(&wide).unwrap_err().message,
        "the query is made of more than 100000 names, values and selection sets; at most 100000 are allowed"
    );
    let lists = format!(
        "{{ a(x: [{}]) }}",
        vec![format!("[{}]", vec!["{}"; 1_000].join(",")); 110].join(",")
    );
    assert!(check_document(&lists).unwrap_err().message.contains("100000"));
}

#[test]
fn ordinary_documents_pass() {
    for query in [
        include_str!("../../../tests/fixtures/introspection.graphql"),
        "query($a: [String!]! = [\"x\"], $b: JobFilter) @d(x: 1) { jobs(filter: $b) { edges { node { id ... on Job { name } ...F } } } }
         fragment F on Job { spec { command args env { name value } } }",
        "mutation { submitJob(input: {command: [\"sh\", \"-c\", \"echo '}}}]]]'\"], parameters: {a: {b: [1.5e-3, -2, null, true]}}}) { job { id } } }",
    ] {
        check_document(query).unwrap_or_else(|e| panic!("{query}: {}", e.message));
    }
}

#[test]
fn what_the_bounds_let_through_parses_on_a_small_stack() {
    // A quarter of a runtime thread's 2 MiB, in an unoptimised build.
    let deepest = [
        nested("[", MAX_NESTING - 2, "]"),
        nested("{a: ", MAX_NESTING - 2, "}"),
        format!(
            "{}a{}",
            "{ a ".repeat(MAX_NESTING - 1),
            "}".repeat(MAX_NESTING - 1)
        ),
    ];
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(move || {
            for query in deepest {
                let mut request = Request::new(query.clone());
                assert!(parse(&mut request).is_ok(), "{query}");
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn variables_are_bounded() {
    let deep = (0..MAX_NESTING).fold(json!(1), |v, _| json!([v]));
    // `variables` itself is a level.
    assert!(check_variables([("variables", &json!({ "a": deep.clone() }))]).is_err());
    assert!(check_variables([("variables", &json!({ "a": deep[0].clone() }))]).is_ok());
    let e = check_variables([("variables", &json!({ "a": deep }))]).unwrap_err();
    assert_eq!(
        e.message,
        "the request's variables nest lists and objects more than 64 levels deep; at most 64 are allowed"
    );

    let long = json!({ "inputs": vec![json!({}); MAX_LIST_ITEMS + 1] });
    assert_eq!(
        check_variables([("variables", &long)]).unwrap_err().message,
        "a list in the request's variables has 1025 items; at most 1024 are allowed"
    );
    let many = json!({ "inputs": vec![json!({ "command": vec!["x"; 100] }); 1_000] });
    assert!(
        check_variables([("variables", &many)])
            .unwrap_err()
            .message
            .contains("more than 100000 values")
    );
    // Counted across variables and extensions together.
    let half = json!(vec![json!(vec![1; 59]); 1_000]);
    assert!(check_variables([("variables", &half), ("extensions", &Value::Null)]).is_ok());
    assert_eq!(
        check_variables([("variables", &half), ("extensions", &half)])
            .unwrap_err()
            .message,
        "the request's extensions hold more than 100000 values (keys included); at most 100000 are allowed"
    );
    let keys: serde_json::Map<String, Value> = (0..MAX_NODES).map(|i| (i.to_string(), json!(1))).collect();
    assert!(check_variables([("extensions", &Value::Object(keys))]).is_err());

    let ordinary = json!({ "input": { "command": ["true"], "env": [{ "name": "A", "value": "b" }], "parameters": { "a": { "b": [1, 2] } } } });
    assert!(check_variables([("variables", &ordinary), ("extensions", &Value::Null)]).is_ok());
}

#[test]
fn a_thousand_inputs_with_ten_variables_each_pass() {
    let env = |i: usize| {
        (0..10)
            .map(|e| json!({ "name": format!("E{e}"), "value": format!("v{i}") }))
            .collect::<Vec<_>>()
    };
    let inputs: Vec<Value> = (0..1_000)
        .map(|i| json!({ "name": format!("job-{i}"), "command": ["true"], "env": env(i) }))
        .collect();
    check_variables([("variables", &json!({ "inputs": inputs }))]).unwrap();
    // The same as a literal: GraphQL's object syntax is JSON's without quoted keys.
    let literal = serde_json::to_string(&inputs)
        .unwrap()
        .replace("\"name\":", "name: ")
        .replace("\"command\":", "command: ")
        .replace("\"env\":", "env: ")
        .replace("\"value\":", "value: ");
    check_document(&format!(
        "mutation {{ submitJobs(inputs: {literal}) {{ created }} }}"
    ))
    .unwrap();
}
