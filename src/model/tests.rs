//! The model's rules, tested alone: validation, phase derivation and the job's changes.

use chrono::Utc;

use super::*;

fn request() -> SubmitRequest {
    SubmitRequest {
        command: Some(vec!["echo".into(), "hi".into()]),
        ..SubmitRequest::default()
    }
}

fn field_of(r: SubmitRequest) -> String {
    r.validate(&ValidationLimits::default()).unwrap_err().field
}

#[test]
fn quantities_parse_as_kubernetes_writes_them() {
    for (q, v) in [
        ("1", 1.0),
        ("500m", 0.5),
        ("2.5", 2.5),
        ("64Mi", 64.0 * 1024.0 * 1024.0),
        ("1G", 1e9),
        ("1e3", 1e3),
        ("1E-3", 1e-3),
        ("+4k", 4e3),
        (".5", 0.5),
    ] {
        assert_eq!(parse_quantity(q), Some(v), "{q}");
    }
    for bad in ["", "-1", "1.2.3", "abc", "1Zi", "1e", "1 Gi", "m", "."] {
        assert_eq!(parse_quantity(bad), None, "{bad:?}");
    }
}

fn resources(req_cpu: Option<&str>, lim_cpu: Option<&str>, req_mem: Option<&str>) -> SubmitRequest {
    SubmitRequest {
        resources: Some(ResourceRequirements {
            requests: ResourceList {
                cpu: req_cpu.map(Into::into),
                memory: req_mem.map(Into::into),
            },
            limits: ResourceList {
                cpu: lim_cpu.map(Into::into),
                memory: None,
            },
        }),
        ..request()
    }
}

#[test]
fn resources_are_checked_like_the_api_server_does() {
    let ok = resources(Some("250m"), Some("1"), Some("64Mi"))
        .validate(&ValidationLimits::default())
        .unwrap();
    assert_eq!(ok.resources.unwrap().requests.cpu.as_deref(), Some("250m"));
    assert_eq!(
        field_of(resources(Some("lots"), None, None)),
        "input.resources.requests.cpu"
    );
    assert_eq!(
        field_of(resources(None, None, Some("0"))),
        "input.resources.requests.memory"
    );
    assert_eq!(
        field_of(resources(Some("2"), Some("1"), None)),
        "input.resources.requests.cpu",
        "a request above its limit"
    );
    let empty = resources(None, None, None)
        .validate(&ValidationLimits::default())
        .unwrap();
    assert_eq!(empty.resources, None, "nothing asked is nothing kept");
}

#[test]
fn namespaces_service_accounts_ttl_and_image_follow_the_limits() {
    let limits = ValidationLimits {
        allowed_namespaces: vec!["default".into(), "ml".into()],
        service_accounts: vec!["trainer".into()],
        require_image: true,
        ..ValidationLimits::default()
    };
    let with_image = || SubmitRequest {
        image: Some("busybox:1.36".into()),
        ..request()
    };
    let field = |r: SubmitRequest| r.validate(&limits).unwrap_err().field;
    assert_eq!(field(request()), "input.image");
    assert!(with_image().validate(&limits).is_ok());
    assert_eq!(
        field(SubmitRequest {
            namespace: Some("other".into()),
            ..with_image()
        }),
        "input.namespace"
    );
    let spec = SubmitRequest {
        namespace: Some("ml".into()),
        service_account_name: Some("trainer".into()),
        ttl_seconds_after_finished: Some(0),
        ..with_image()
    }
    .validate(&limits)
    .unwrap();
    assert_eq!(spec.namespace, "ml");
    assert_eq!(spec.service_account_name.as_deref(), Some("trainer"));
    assert_eq!(spec.ttl_seconds_after_finished, Some(0));
    assert_eq!(
        field(SubmitRequest {
            service_account_name: Some("admin".into()),
            ..with_image()
        }),
        "input.serviceAccountName"
    );
    assert_eq!(
        field(SubmitRequest {
            ttl_seconds_after_finished: Some(-1),
            ..with_image()
        }),
        "input.ttlSecondsAfterFinished"
    );
    assert_eq!(
        field_of(SubmitRequest {
            service_account_name: Some("trainer".into()),
            ..request()
        }),
        "input.serviceAccountName",
        "no service account is allowed unless listed"
    );
}

#[test]
fn new_spec_fields_do_not_change_old_fingerprints() {
    let spec = request().validate(&ValidationLimits::default()).unwrap();
    let json = serde_json::to_value(&spec).unwrap();
    for key in ["resources", "serviceAccountName", "ttlSecondsAfterFinished"] {
        assert!(json.get(key).is_none(), "{key} is skipped when unset");
    }
}

#[test]
fn launch_conditions_record_only_changes() {
    let spec = request().validate(&ValidationLimits::default()).unwrap();
    let mut job = Job::accepted("j".into(), spec, None, Utc::now());
    let now = Utc::now();
    assert!(
        job.launch_succeeded(now).is_none(),
        "a first-time launch records nothing"
    );
    let t = job
        .launch_delayed("ApiServerUnreachable", "connection refused", now)
        .unwrap();
    assert_eq!(t.phase, JobPhase::Pending);
    assert_eq!(t.reason.as_deref(), Some("ApiServerUnreachable"));
    assert!(job.launch_delayed("ApiServerUnreachable", "again", now).is_none());
    assert!(job.launch_delayed("ApiServerThrottling", "429", now).is_some());
    let c = job
        .conditions
        .iter()
        .find(|c| c.type_ == WORKLOAD_CREATED)
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("ApiServerThrottling"))
    );
    assert!(job.launch_succeeded(now).is_some());
    let c = job
        .conditions
        .iter()
        .find(|c| c.type_ == WORKLOAD_CREATED)
        .unwrap();
    assert_eq!(c.status, "True");
    assert_eq!(job.phase, JobPhase::Pending);
    let t = job.launch_failed("InvalidWorkload", "422", now).unwrap();
    assert_eq!(t.phase, JobPhase::Failed);
    assert!(
        job.launch_delayed("X", "y", now).is_none(),
        "a finished job never changes"
    );
}

#[test]
fn defaults_follow_batch_v1() {
    let spec = request().validate(&ValidationLimits::default()).unwrap();
    assert_eq!(
        (spec.parallelism, spec.completions, spec.backoff_limit),
        (1, 1, 6)
    );
    assert_eq!(spec.namespace, "default");
    assert_eq!(spec.template, "container");
}

#[test]
fn each_invalid_field_is_named() {
    assert_eq!(field_of(SubmitRequest::default()), "input.command");
    assert_eq!(
        field_of(SubmitRequest {
            command: Some(vec!["".into()]),
            ..request()
        }),
        "input.command"
    );
    assert_eq!(
        field_of(SubmitRequest {
            parallelism: Some(0),
            ..request()
        }),
        "input.parallelism"
    );
    assert_eq!(
        field_of(SubmitRequest {
            parallelism: Some(65),
            ..request()
        }),
        "input.parallelism"
    );
    assert_eq!(
        field_of(SubmitRequest {
            completions: Some(-1),
            ..request()
        }),
        "input.completions"
    );
    assert_eq!(
        field_of(SubmitRequest {
            backoff_limit: Some(-1),
            ..request()
        }),
        "input.backoffLimit"
    );
    assert_eq!(
        field_of(SubmitRequest {
            active_deadline_seconds: Some(0),
            ..request()
        }),
        "input.activeDeadlineSeconds"
    );
    assert_eq!(
        field_of(SubmitRequest {
            template: Some("spark".into()),
            ..request()
        }),
        "input.template"
    );
    assert_eq!(
        field_of(SubmitRequest {
            name: Some("Not_A_Label".into()),
            ..request()
        }),
        "input.name"
    );
    for bad in ["1X", "A-B", "", "has space", "JOB_COMPLETION_INDEX"] {
        let r = SubmitRequest {
            env: Some(vec![
                EnvVar {
                    name: "OK".into(),
                    value: "1".into(),
                },
                EnvVar {
                    name: bad.into(),
                    value: "x".into(),
                },
            ]),
            ..request()
        };
        assert_eq!(field_of(r), "input.env[1].name", "{bad:?} must be refused");
    }
}

#[test]
fn fingerprint_tells_inputs_apart() {
    let a = request().validate(&ValidationLimits::default()).unwrap();
    let b = SubmitRequest {
        args: Some(vec!["x".into()]),
        ..request()
    }
    .validate(&ValidationLimits::default())
    .unwrap();
    assert_eq!(a.fingerprint(), a.clone().fingerprint());
    assert_ne!(a.fingerprint(), b.fingerprint());
}

fn cond(type_: &str, reason: &str) -> Condition {
    Condition::truthy(type_, reason, None, Utc::now())
}

#[test]
fn phase_derives_from_conditions_first() {
    let mut s = WorkloadStatus::default();
    assert_eq!(s.derive_phase().phase, JobPhase::Pending);
    s.active = 1;
    assert_eq!(s.derive_phase().phase, JobPhase::Running);
    s.conditions.push(cond("FailureTarget", "DeadlineExceeded"));
    let d = s.derive_phase();
    assert_eq!(
        (d.phase, d.reason.as_deref()),
        (JobPhase::Failed, Some("DeadlineExceeded"))
    );
    let mut s = WorkloadStatus {
        start_time: Some(Utc::now()),
        ..Default::default()
    };
    assert_eq!(s.derive_phase().phase, JobPhase::Running);
    s.conditions
        .push(cond("SuccessCriteriaMet", "CompletionsReached"));
    assert_eq!(s.derive_phase().phase, JobPhase::Succeeded);
    let suspended = WorkloadStatus {
        conditions: vec![cond("Suspended", "JobSuspended")],
        ..Default::default()
    };
    assert_eq!(suspended.derive_phase().phase, JobPhase::Pending);
    let false_condition = WorkloadStatus {
        conditions: vec![Condition {
            status: "False".into(),
            ..cond("Complete", "x")
        }],
        ..Default::default()
    };
    assert_eq!(false_condition.derive_phase().phase, JobPhase::Pending);
}

#[test]
fn phases_only_move_forward() {
    use JobPhase::*;
    assert!(Pending.can_advance_to(Running));
    assert!(Pending.can_advance_to(Cancelled));
    assert!(Running.can_advance_to(Succeeded));
    assert!(!Running.can_advance_to(Pending));
    assert!(!Running.can_advance_to(Running));
    for terminal in [Succeeded, Failed, Cancelled] {
        for next in JobPhase::ALL {
            assert!(!terminal.can_advance_to(next));
        }
    }
}

#[test]
fn stale_status_never_revives_a_job() {
    let spec = request().validate(&ValidationLimits::default()).unwrap();
    let mut job = Job::accepted("j".into(), spec, None, Utc::now());
    let running = WorkloadStatus {
        active: 1,
        start_time: Some(Utc::now()),
        ..Default::default()
    };
    let t = job.observe(running.clone(), Utc::now()).unwrap();
    assert_eq!(
        (t.previous_phase, t.phase),
        (Some(JobPhase::Pending), JobPhase::Running)
    );
    // An older status (nothing started) does not move it back.
    assert!(
        job.observe(WorkloadStatus::default(), Utc::now())
            .is_some_and(|t| t.phase == JobPhase::Running)
    );
    assert_eq!(job.phase, JobPhase::Running);
    job.cancel(Utc::now()).unwrap();
    assert_eq!(job.phase, JobPhase::Cancelled);
    let done = WorkloadStatus {
        conditions: vec![cond("Complete", "CompletionsReached")],
        ..running
    };
    assert!(job.observe(done, Utc::now()).is_none());
    assert_eq!(job.phase, JobPhase::Cancelled);
    assert!(job.cancel(Utc::now()).is_none());
}

#[test]
fn queue_names_need_kueue_a_queueable_kind_and_a_valid_name() {
    let queued = SubmitRequest {
        queue_name: Some("team-a".into()),
        ..request()
    };
    let off = queued.validate(&ValidationLimits::default()).unwrap_err();
    assert_eq!(off.field, "input.queueName");
    assert!(off.message.contains("--kueue"), "{off}");
    let mut limits = ValidationLimits {
        kueue: KueueLimits {
            enabled: true,
            default_queue: Some("shared".into()),
        },
        ..ValidationLimits::default()
    };
    assert_eq!(
        queued.validate(&limits).unwrap().queue_name.as_deref(),
        Some("team-a")
    );
    assert_eq!(
        request().validate(&limits).unwrap().queue_name.as_deref(),
        Some("shared"),
        "the default queue"
    );
    let bad = SubmitRequest {
        queue_name: Some("Team A".into()),
        ..request()
    };
    assert_eq!(bad.validate(&limits).unwrap_err().field, "input.queueName");
    limits.templates.push("argo".into());
    limits.template_inputs.insert(
        "argo".into(),
        TemplateInputs {
            fields: vec!["command".into()],
            required: vec![],
            not_queueable: Some("Kueue has no Argo Workflows integration".into()),
            retry_refusal: None,
        },
    );
    let argo = SubmitRequest {
        template: Some("argo".into()),
        ..queued.clone()
    };
    let refused = argo.validate(&limits).unwrap_err();
    assert!(
        refused
            .message
            .contains("cannot be queued in Kueue: Kueue has no Argo"),
        "{refused}"
    );
    let argo_default = SubmitRequest {
        template: Some("argo".into()),
        ..request()
    };
    assert_eq!(
        argo_default.validate(&limits).unwrap().queue_name,
        None,
        "the default queue skips kinds Kueue cannot queue"
    );
}

fn queue(state: QueueState, reason: &str, message: &str) -> Option<Box<QueueStatus>> {
    Some(Box::new(QueueStatus {
        name: "team-a".into(),
        state,
        reason: Some(reason.into()),
        message: Some(message.into()),
        cluster_queue: None,
        since: None,
        conditions: vec![],
    }))
}

#[test]
fn kueue_changes_are_events_and_an_eviction_sends_a_running_job_back_to_pending() {
    let now = Utc::now();
    let spec = request().validate(&ValidationLimits::default()).unwrap();
    let mut job = Job::accepted("j".into(), spec, None, now);
    let suspended = WorkloadStatus {
        conditions: vec![Condition::truthy(
            "Suspended",
            "JobSuspended",
            Some("Job suspended".into()),
            now,
        )],
        ..WorkloadStatus::default()
    };
    let pending = job
        .observe(
            WorkloadStatus {
                queue: queue(QueueState::Pending, "Pending", "insufficient unused quota"),
                ..suspended.clone()
            },
            now,
        )
        .expect("an event");
    assert_eq!(
        (pending.phase, pending.reason.as_deref()),
        (JobPhase::Pending, Some("QueuedPending"))
    );
    assert!(
        job.message
            .as_deref()
            .unwrap()
            .contains("insufficient unused quota")
    );
    let admitted = WorkloadStatus {
        queue: queue(QueueState::Admitted, "Admitted", "The workload is admitted"),
        ..suspended.clone()
    };
    let t = job.observe(admitted.clone(), now).expect("an event");
    assert_eq!(t.reason.as_deref(), Some("Admitted"));
    assert_eq!(job.observe(admitted, now), None, "no change, no event");
    let running = WorkloadStatus {
        active: 1,
        start_time: Some(now),
        queue: queue(QueueState::Admitted, "Admitted", "The workload is admitted"),
        ..WorkloadStatus::default()
    };
    assert_eq!(job.observe(running, now).unwrap().phase, JobPhase::Running);
    let preempted = job
        .observe(
            WorkloadStatus {
                active: 1,
                start_time: Some(now),
                queue: queue(
                    QueueState::Preempted,
                    "Preempted",
                    "Preempted to accommodate a workload",
                ),
                ..WorkloadStatus::default()
            },
            now,
        )
        .unwrap();
    assert_eq!(
        (preempted.phase, preempted.reason.as_deref()),
        (JobPhase::Running, Some("Preempted"))
    );
    let back = job
        .observe(
            WorkloadStatus {
                queue: queue(
                    QueueState::Preempted,
                    "Preempted",
                    "Preempted to accommodate a workload",
                ),
                ..suspended
            },
            now,
        )
        .unwrap();
    assert_eq!(
        (back.previous_phase, back.phase, back.reason.as_deref()),
        (Some(JobPhase::Running), JobPhase::Pending, Some("Preempted"))
    );
    assert_eq!(job.phase, JobPhase::Pending);
}

#[test]
fn scopes_intersect_and_unite() {
    let ab = Scope::namespaces(["a", "b"]);
    let bc = Scope::namespaces(["b", "c"]);
    assert_eq!(ab.intersection(&bc), Scope::namespaces(["b"]));
    assert_eq!(ab.intersection(&Scope::All), ab);
    assert_eq!(Scope::All.intersection(&bc), bc);
    assert_eq!(
        ab.intersection(&Scope::namespaces(["z"])),
        Scope::namespaces(Vec::<String>::new())
    );
    assert_eq!(ab.union(&bc), Scope::namespaces(["a", "b", "c"]));
    assert_eq!(ab.union(&Scope::All), Scope::All);
}
