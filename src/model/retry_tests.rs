use super::*;

fn context() -> RetryContext<'static> {
    RetryContext {
        completions: 3,
        max_backoff_limit: 100,
        containers: Some(&["job"]),
        fixed_backoff: None,
    }
}

fn exit_rule(action: RetryAction, operator: ExitCodeOperator, values: &[i32]) -> RetryRuleRequest {
    RetryRuleRequest {
        action,
        exit_codes: Some(ExitCodeMatch {
            container_name: None,
            operator,
            values: values.to_vec(),
        }),
        causes: None,
    }
}

fn policy(rules: Vec<RetryRuleRequest>) -> RetryPolicyRequest {
    RetryPolicyRequest {
        rules: Some(rules),
        ..Default::default()
    }
}

#[test]
fn the_first_matching_rule_decides() {
    let p = policy(vec![
        exit_rule(RetryAction::Ignore, ExitCodeOperator::In, &[42]),
        exit_rule(RetryAction::FailJob, ExitCodeOperator::NotIn, &[1, 42]),
        RetryRuleRequest {
            action: RetryAction::Ignore,
            exit_codes: None,
            causes: Some(vec![FailureCause::OomKilled]),
        },
    ])
    .validate(&context())
    .unwrap();
    let decide = |code: i32| {
        let codes = [("job", code)];
        let run = FailedRun {
            exit_codes: &codes,
            disrupted: false,
        };
        p.decide(&run, "run 1 (index 0)")
    };
    let d = decide(42).unwrap();
    assert_eq!((d.rule, d.action), (0, RetryAction::Ignore));
    let d = decide(137).unwrap();
    assert_eq!(
        (d.rule, d.action),
        (1, RetryAction::FailJob),
        "NOT_IN [1, 42] comes first"
    );
    assert_eq!(
        d.message,
        "Container job for run 1 (index 0) failed with exit code 137 matching FailJob rule at index 1"
    );
    assert_eq!(decide(1), None);
    let none = FailedRun {
        exit_codes: &[],
        disrupted: false,
    };
    assert_eq!(
        p.decide(&none, "x"),
        None,
        "a run that never exited matches no exit code"
    );
}

#[test]
fn causes_compile_to_what_pod_failure_policy_can_express() {
    let p = policy(vec![
        RetryRuleRequest {
            action: RetryAction::Ignore,
            exit_codes: None,
            causes: Some(vec![FailureCause::Evicted, FailureCause::Preempted]),
        },
        RetryRuleRequest {
            action: RetryAction::FailJob,
            exit_codes: None,
            causes: Some(vec![FailureCause::OomKilled]),
        },
        exit_rule(RetryAction::Count, ExitCodeOperator::In, &[9, 3]),
    ])
    .validate(&context())
    .unwrap();
    assert_eq!(
        p.pod_failure_policy().unwrap(),
        json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}},
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [3, 9]}},
        ]})
    );
    let evicted = FailedRun {
        exit_codes: &[("job", 137)],
        disrupted: true,
    };
    let d = p.decide(&evicted, "pod ns/p").unwrap();
    assert_eq!(
        d.message,
        "Pod ns/p has condition DisruptionTarget matching Ignore rule at index 0"
    );
}

#[test]
fn bounds_name_the_input_path() {
    let field = |p: RetryPolicyRequest| p.validate(&context()).unwrap_err().field;
    let many = (0..21)
        .map(|_| exit_rule(RetryAction::Count, ExitCodeOperator::In, &[1]))
        .collect();
    assert_eq!(field(policy(many)), "input.retryPolicy.rules");
    assert_eq!(
        field(policy(vec![exit_rule(
            RetryAction::Count,
            ExitCodeOperator::In,
            &[1, 0]
        )])),
        "input.retryPolicy.rules[0].exitCodes.values[1]"
    );
    assert_eq!(
        field(policy(vec![exit_rule(
            RetryAction::Count,
            ExitCodeOperator::NotIn,
            &[256]
        )])),
        "input.retryPolicy.rules[0].exitCodes.values[0]"
    );
    let codes: Vec<i32> = (1..=255).chain([0]).collect();
    assert_eq!(
        field(policy(vec![exit_rule(
            RetryAction::Count,
            ExitCodeOperator::NotIn,
            &codes
        )])),
        "input.retryPolicy.rules[0].exitCodes.values"
    );
    assert_eq!(
        field(policy(vec![exit_rule(
            RetryAction::FailIndex,
            ExitCodeOperator::In,
            &[1]
        )])),
        "input.retryPolicy.rules[0].action"
    );
    let both = RetryRuleRequest {
        causes: Some(vec![FailureCause::OomKilled]),
        ..exit_rule(RetryAction::Count, ExitCodeOperator::In, &[1])
    };
    assert_eq!(field(policy(vec![both])), "input.retryPolicy.rules[0]");
    let deadline = RetryRuleRequest {
        action: RetryAction::Count,
        exit_codes: None,
        causes: Some(vec![FailureCause::DeadlineExceeded]),
    };
    assert_eq!(
        field(policy(vec![deadline])),
        "input.retryPolicy.rules[0].causes[0]"
    );
    let limits = RetryPolicyRequest {
        max_failed_indexes: Some(1),
        ..Default::default()
    };
    assert_eq!(field(limits), "input.retryPolicy.maxFailedIndexes");
    let backoff = RetryPolicyRequest {
        backoff: Some(RetryBackoffRequest {
            initial_seconds: Some(20.0),
            max_seconds: Some(10.0),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(field(backoff), "input.retryPolicy.backoff.maxSeconds");
}

#[test]
fn the_backoff_grows_to_its_cap_and_jitter_only_shortens_it() {
    let b = RetryBackoff {
        initial_seconds: 1.0,
        max_seconds: 5.0,
        factor: 2.0,
        jitter: 0.5,
    };
    assert_eq!(b.delay_seconds(1, 0.0), 1.0);
    assert_eq!(b.delay_seconds(3, 0.0), 4.0);
    assert_eq!(b.delay_seconds(4, 0.0), 5.0);
    assert_eq!(b.delay_seconds(1000, 0.0), 5.0);
    assert_eq!(b.delay_seconds(3, 1.0), 2.0);
}
