//! Per-kind create and update rules: Job defaulting, validation and immutability, the Event
//! mapping, Lease fields and validation, CRDs.

use super::*;

fn rt(key: &str) -> ResourceType {
    ResourceType::builtins()
        .into_iter()
        .find(|r| r.key() == key)
        .expect("builtin")
}

fn job() -> Value {
    json!({"metadata": {"name": "pi", "uid": "u-1", "namespace": "default"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
               "containers": [{"name": "main", "image": "busybox:1.36"}]}}},
           "status": {"active": 3}})
}

#[test]
fn job_defaults_like_the_api_server() {
    let mut j = job();
    prepare_create(&rt("jobs.batch"), &mut j).expect("valid");
    assert_eq!(j["status"], json!({}));
    assert_eq!(j["spec"]["completions"], 1);
    assert_eq!(j["spec"]["parallelism"], 1);
    assert_eq!(j["spec"]["backoffLimit"], 6);
    assert_eq!(j["spec"]["completionMode"], "NonIndexed");
    assert_eq!(
        j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        "u-1"
    );
    let labels = &j["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
    assert_eq!(labels["controller-uid"], "u-1");
    assert_eq!(
        j["metadata"]["labels"], *labels,
        "an unlabelled Job takes its template's labels"
    );
    let c = &j["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 30);
}

#[test]
fn job_validation_causes() {
    type Case = (Box<dyn Fn(&mut Value)>, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            Box::new(|j| {
                if let Some(s) = j["spec"]["template"]["spec"].as_object_mut() {
                    s.remove("restartPolicy");
                }
            }),
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
        ),
        (
            Box::new(|j| j["spec"]["parallelism"] = json!(-1)),
            "spec.parallelism",
            "FieldValueInvalid",
        ),
        (
            Box::new(|j| j["spec"]["completionMode"] = json!("Indexed")),
            "spec.completions",
            "FieldValueRequired",
        ),
        (
            Box::new(|j| j["spec"]["template"]["spec"]["containers"][0]["image"] = json!("")),
            "spec.template.spec.containers[0].image",
            "FieldValueRequired",
        ),
        (
            Box::new(|j| {
                if let Some(c) = j["spec"]["template"]["spec"]["containers"][0].as_object_mut() {
                    c.remove("name");
                }
            }),
            "spec.template.spec.containers[0].name",
            "FieldValueRequired",
        ),
        (
            Box::new(|j| j["metadata"]["name"] = json!("Bad_Name")),
            "metadata.name",
            "FieldValueInvalid",
        ),
        (
            Box::new(|j| j["metadata"]["name"] = json!("a".repeat(64))),
            "metadata.name",
            "FieldValueInvalid",
        ),
        (
            Box::new(|j| {
                j["spec"]["manualSelector"] = json!(true);
                j["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
            }),
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
    ];
    for (mutate, field, reason) in cases {
        let mut j = job();
        mutate(&mut j);
        // With parallelism set, completions is not defaulted: Indexed then lacks it.
        if j["spec"]["completionMode"] == "Indexed" {
            j["spec"]["parallelism"] = json!(2);
        }
        let e = prepare_create(&rt("jobs.batch"), &mut j).expect_err(field);
        assert_eq!(e.code, 422);
        let causes = e.details["causes"].as_array().cloned().unwrap_or_default();
        assert!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["reason"] == reason),
            "{field} {reason}: {causes:?}"
        );
    }
}

#[test]
fn per_index_limits_are_validated_like_the_api_server() {
    let indexed = |extra: Value| {
        let mut j = job();
        j["spec"]["completionMode"] = json!("Indexed");
        j["spec"]["completions"] = json!(4);
        j["spec"]["parallelism"] = json!(2);
        if let (Some(spec), Some(extra)) = (j["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        j
    };
    let cause = |mut j: Value| -> (String, String, String) {
        let e = prepare_create(&rt("jobs.batch"), &mut j).expect_err("invalid");
        assert_eq!(e.code, 422);
        let c = &e.details["causes"][0];
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        (s(&c["field"]), s(&c["reason"]), s(&c["message"]))
    };
    let mut ok = indexed(json!({"backoffLimitPerIndex": 1, "maxFailedIndexes": 4,
        "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}}));
    prepare_create(&rt("jobs.batch"), &mut ok).expect("valid");
    assert_eq!(ok["spec"]["backoffLimit"], i64::from(i32::MAX));
    assert_eq!(
        cause(indexed(json!({"maxFailedIndexes": 1}))),
        (
            "spec.backoffLimitPerIndex".into(),
            "FieldValueRequired".into(),
            "Required value: when maxFailedIndexes is specified".into()
        )
    );
    let (field, reason, message) = cause(indexed(json!({"backoffLimitPerIndex": 1, "maxFailedIndexes": 5})));
    assert_eq!(
        (field.as_str(), reason.as_str()),
        ("spec.maxFailedIndexes", "FieldValueInvalid")
    );
    assert!(
        message.ends_with("must be less than or equal to completions"),
        "{message}"
    );
    let big =
        indexed(json!({"completions": 200_000, "backoffLimitPerIndex": 1, "maxFailedIndexes": 150_000}));
    let (field, _, message) = cause(big);
    assert_eq!(field, "spec.maxFailedIndexes");
    assert!(
        message.ends_with("must be less than or equal to 100000"),
        "{message}"
    );
    let (field, reason, message) = cause(indexed(json!({"backoffLimitPerIndex": -1})));
    assert_eq!(
        (field.as_str(), reason.as_str()),
        ("spec.backoffLimitPerIndex", "FieldValueInvalid")
    );
    assert!(
        message.ends_with("must be greater than or equal to 0"),
        "{message}"
    );
    let (field, _, message) = cause(indexed(json!({
        "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}})));
    assert_eq!(field, "spec.podFailurePolicy.rules[0].action");
    assert!(
        message.ends_with("requires the backoffLimitPerIndex to be set"),
        "{message}"
    );
    let mut non_indexed = job();
    non_indexed["spec"]["backoffLimitPerIndex"] = json!(1);
    let (field, reason, message) = cause(non_indexed);
    assert_eq!(
        (field.as_str(), reason.as_str()),
        ("spec.backoffLimitPerIndex", "FieldValueInvalid")
    );
    assert!(message.ends_with("requires indexed completion mode"), "{message}");
}

#[test]
fn pod_failure_policies_are_defaulted_and_validated_like_the_api_server() {
    let with_policy = |rules: Value, extra: Value| {
        let mut j = job();
        j["spec"]["podFailurePolicy"] = json!({"rules": rules});
        if let (Some(spec), Some(extra)) = (j["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        j
    };
    let causes = |mut j: Value| -> Vec<(String, String)> {
        let e = prepare_create(&rt("jobs.batch"), &mut j).expect_err("invalid");
        assert_eq!(e.code, 422);
        e.details["causes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (s(&c["field"]), s(&c["reason"]))
            })
            .collect()
    };
    let pair = |f: &str, r: &str| (f.to_owned(), r.to_owned());
    let mut ok = with_policy(
        json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
               {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [1, 137]}}]),
        json!({}),
    );
    prepare_create(&rt("jobs.batch"), &mut ok).expect("valid");
    assert_eq!(
        ok["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
        "True"
    );
    assert_eq!(ok["spec"]["podReplacementPolicy"], "Failed");
    let bad = with_policy(
        json!([{"action": "FailJob", "onExitCodes": {"containerName": "other", "operator": "In", "values": [137, 0, 1, 1]}},
               {"action": "Retry", "onExitCodes": {"operator": "Is", "values": [3]}},
               {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]}]),
        json!({}),
    );
    assert_eq!(
        causes(bad),
        [
            pair(
                "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
                "FieldValueInvalid"
            ),
            pair(
                "spec.podFailurePolicy.rules[0].onExitCodes.values[1]",
                "FieldValueInvalid"
            ),
            pair(
                "spec.podFailurePolicy.rules[0].onExitCodes.values[3]",
                "FieldValueDuplicate"
            ),
            pair(
                "spec.podFailurePolicy.rules[0].onExitCodes.values",
                "FieldValueInvalid"
            ),
            pair("spec.podFailurePolicy.rules[1].action", "FieldValueNotSupported"),
            pair(
                "spec.podFailurePolicy.rules[1].onExitCodes.operator",
                "FieldValueNotSupported"
            ),
            pair(
                "spec.podFailurePolicy.rules[2].onPodConditions[0].status",
                "FieldValueNotSupported"
            ),
        ]
    );
    let replacement = with_policy(
        json!([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]),
        json!({"podReplacementPolicy": "TerminatingOrFailed"}),
    );
    assert_eq!(
        causes(replacement),
        [pair("spec.podReplacementPolicy", "FieldValueNotSupported")]
    );
}

#[test]
fn job_update_immutability() {
    let mut j = job();
    prepare_create(&rt("jobs.batch"), &mut j).expect("valid");
    let mut changed = j.clone();
    changed["spec"]["parallelism"] = json!(3);
    prepare_update(&rt("jobs.batch"), &j, &mut changed).expect("parallelism is mutable");
    let mut changed = j.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
    let e = prepare_update(&rt("jobs.batch"), &j, &mut changed).expect_err("template immutable");
    assert!(
        e.message.contains("spec.template: Invalid value"),
        "{}",
        e.message
    );
}

#[test]
fn events_map_between_apis() {
    let ev = rt("events.events.k8s.io");
    let wire = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x", "namespace": "default"},
        "regarding": {"name": "pi", "namespace": "default"}, "note": "hi", "reportingController": "c", "reportingInstance": "i",
        "action": "A", "reason": "R", "type": "Normal", "eventTime": "2025-01-01T00:00:01.000000Z"});
    let mut stored = from_wire(&ev, wire.clone());
    assert_eq!(stored["involvedObject"]["name"], "pi");
    assert_eq!(stored["message"], "hi");
    assert_eq!(stored["apiVersion"], "v1");
    prepare_create(&ev, &mut stored).expect("valid event");
    assert_eq!(to_wire(&ev, &stored), wire);
    let mut missing = from_wire(&ev, json!({"metadata": {"name": "y", "namespace": "default"}}));
    let e = prepare_create(&ev, &mut missing).expect_err("invalid");
    assert!(e.message.contains("eventTime: Required value"), "{}", e.message);
}

#[test]
fn lease_strategy_fields_and_validation() {
    let leases = rt("leases.coordination.k8s.io");
    assert!(!allows_unconditional_update(&leases) && allows_create_on_update(&leases));
    assert!(allows_unconditional_update(&rt("jobs.batch")) && !allows_create_on_update(&rt("jobs.batch")));
    let mut l = json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "unknown": 1,
        "renewTime": "2026-01-01T01:00:00.5+01:00", "strategy": "OldestEmulationVersion"}});
    prepare_create(&leases, &mut l).expect("valid");
    assert_eq!(
        l["spec"],
        json!({"holderIdentity": "a", "renewTime": "2026-01-01T00:00:00.500000Z"})
    );
    // A stored lease that has a gated field keeps it on update (the gate's rule).
    let old = json!({"metadata": {"name": "l"}, "spec": {"strategy": "OldestEmulationVersion"}});
    let mut new = json!({"metadata": {"name": "l"}, "spec": {"strategy": "OldestEmulationVersion", "preferredHolder": "b"}});
    prepare_update(&leases, &old, &mut new).expect("valid");
    assert_eq!(new["spec"], json!({"strategy": "OldestEmulationVersion"}));
    let mut bad = json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": "15"}});
    assert_eq!(
        check_shape(&leases, &bad).expect_err("a string duration").code,
        400
    );
    bad["spec"]["leaseDurationSeconds"] = json!(-3);
    let e = prepare_create(&leases, &mut bad).expect_err("negative");
    assert!(
        e.message
            .contains("spec.leaseDurationSeconds: Invalid value: -3: must be greater than 0"),
        "{}",
        e.message
    );
}

#[test]
fn crd_becomes_a_resource_type() {
    let crd = json!({"metadata": {"name": "pytorchjobs.kubeflow.org"}, "spec": {"group": "kubeflow.org", "scope": "Namespaced",
        "names": {"kind": "PyTorchJob", "plural": "pytorchjobs", "singular": "pytorchjob", "shortNames": ["ptj"]},
        "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
    let mut c = crd.clone();
    prepare_create(&rt("customresourcedefinitions.apiextensions.k8s.io"), &mut c).expect("valid");
    let t = crd_resource_type(&crd).expect("type");
    assert_eq!(t.key(), "pytorchjobs.kubeflow.org");
    assert!(t.namespaced && t.status_subresource);
    assert_eq!(t.short_names, ["ptj"]);
}
