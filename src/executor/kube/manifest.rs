//! The batch/v1 Job that runs a jobgate job: names, labels and the mapping from
//! [`JobSpec`](crate::model::JobSpec).
//!
//! This module owns what jobgate writes into the cluster and how it recognises its objects
//! again (the `jobgate.io/job-id` label). It must not talk to the API server.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job as K8sJob, JobSpec as K8sJobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::priority_classes::{KUEUE_PRIORITY_CLASS_LABEL, PriorityClasses};
use crate::model::{
    DISRUPTION_TARGET, ExitCodeOperator, FailureCause, Job, OOM_EXIT_CODE, ResourceList, RetryPolicy,
    RuleMatch, SHARD_LABEL, shard_of,
};
use crate::templates::{KUEUE_QUEUE_LABEL, TERMINATION_MESSAGE_PATH};

/// The label every object jobgate creates carries, and the one its watchers select on.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "jobgate";
/// The label selector of every watcher.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=jobgate";
/// The label naming the jobgate job an object belongs to.
pub const JOB_ID_LABEL: &str = "jobgate.io/job-id";
/// The label carrying the job's own name, when it has one.
pub const JOB_NAME_LABEL: &str = "jobgate.io/job-name";
pub const SUBMITTER_ANNOTATION: &str = "jobgate.io/submitter";
pub const IDEMPOTENCY_KEY_ANNOTATION: &str = "jobgate.io/idempotency-key";
pub const TEMPLATE_ANNOTATION: &str = "jobgate.io/template";
/// The container that runs the job's command (the name retry rules' `containerName` may give).
pub const CONTAINER_NAME: &str = crate::model::JOB_CONTAINER;

/// The name of the Kubernetes Job of a jobgate job. Derived from the id alone, so that a
/// retried create meets the same name (`AlreadyExists`) instead of making a second Job.
/// 8 + 36 characters: within the 63 allowed, leaving room for pod-name suffixes.
pub fn workload_name(job_id: &str) -> String {
    format!("jobgate-{job_id}")
}

/// The settings that shape every Job, from configuration.
#[derive(Clone, Debug, Default)]
pub struct ManifestDefaults {
    /// `ttlSecondsAfterFinished` for jobs that set none.
    pub ttl_seconds_after_finished: Option<i32>,
    /// Pods carry [`LOG_FINALIZER`]: jobgate archives their log, and lets them go once it
    /// has (a Job's TTL would otherwise take the pods, and their logs, with it).
    pub archive_logs: bool,
    /// The classes jobs' priorities map to (see `priority_classes.rs`).
    pub priority_classes: PriorityClasses,
}

/// The finalizer that keeps a pod until jobgate has archived its whole log.
pub const LOG_FINALIZER: &str = "jobgate.io/log-archive";

/// The batch/v1 Job for `job`.
pub fn build(job: &Job, defaults: &ManifestDefaults) -> K8sJob {
    let spec = &job.spec;
    let retry = spec.retry_policy.as_ref();
    let mut labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (JOB_ID_LABEL.to_owned(), job.id.clone()),
        (SHARD_LABEL.to_owned(), shard_of(&job.id).to_string()),
    ]);
    if let Some(name) = &spec.name {
        labels.insert(JOB_NAME_LABEL.to_owned(), name.clone());
    }
    // Kueue finds queued Jobs by this label on the Job itself (not its pods) and admits them
    // by unsuspending them.
    let mut job_labels = labels.clone();
    if let Some(queue) = &spec.queue_name {
        job_labels.insert(KUEUE_QUEUE_LABEL.to_owned(), queue.clone());
        if let Some(class) = defaults.priority_classes.workload_class(spec.priority) {
            job_labels.insert(KUEUE_PRIORITY_CLASS_LABEL.to_owned(), class.to_owned());
        }
    }
    let mut annotations = BTreeMap::from([(TEMPLATE_ANNOTATION.to_owned(), spec.template.clone())]);
    if let Some(submitter) = &job.submitter {
        annotations.insert(SUBMITTER_ANNOTATION.to_owned(), submitter.clone());
    }
    if let Some(key) = &job.idempotency_key {
        annotations.insert(IDEMPOTENCY_KEY_ANNOTATION.to_owned(), key.clone());
    }
    // The job's trace context first, unless the job's own `env` names the variable: then
    // the job's value is the one the container gets (Kubernetes takes duplicates' last, with
    // a warning; none is sent).
    let mut env: Vec<EnvVar> = crate::model::trace_env(job)
        .into_iter()
        .filter(|(name, _)| !spec.env.iter().any(|v| &v.name == name))
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            ..EnvVar::default()
        })
        .collect();
    env.extend(spec.env.iter().map(|v| EnvVar {
        name: v.name.clone(),
        value: Some(v.value.clone()),
        ..EnvVar::default()
    }));
    env.push(EnvVar {
        name: "JOBGATE_JOB_ID".into(),
        value: Some(job.id.clone()),
        ..EnvVar::default()
    });
    env.push(EnvVar {
        name: "JOBGATE_RESULT_FILE".into(),
        value: Some(TERMINATION_MESSAGE_PATH.into()),
        ..EnvVar::default()
    });
    if spec.completions == 1 {
        // Indexed Jobs get JOB_COMPLETION_INDEX from the controller; a single run is index
        // 0, as on the local executor.
        env.push(EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value: Some("0".into()),
            ..EnvVar::default()
        });
    }
    let container = Container {
        name: CONTAINER_NAME.into(),
        image: spec.image.clone(),
        command: Some(spec.command.clone()),
        args: (!spec.args.is_empty()).then(|| spec.args.clone()),
        env: Some(env),
        resources: spec.resources.as_ref().map(|r| ResourceRequirements {
            requests: quantities(&r.requests),
            limits: quantities(&r.limits),
            ..ResourceRequirements::default()
        }),
        termination_message_path: Some(TERMINATION_MESSAGE_PATH.into()),
        // A failed run without a result still explains itself with its last lines.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    K8sJob {
        metadata: ObjectMeta {
            name: Some(workload_name(&job.id)),
            namespace: Some(spec.namespace.clone()),
            labels: Some(job_labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(K8sJobSpec {
            parallelism: Some(spec.parallelism),
            completions: Some(spec.completions),
            completion_mode: Some(
                if spec.completions > 1 {
                    "Indexed"
                } else {
                    "NonIndexed"
                }
                .into(),
            ),
            backoff_limit: Some(spec.backoff_limit),
            // The retry policy, for the Job controller to enforce (restartPolicy is Never and
            // jobs of more than one completion are Indexed, as both fields need).
            pod_failure_policy: retry.and_then(pod_failure_policy),
            backoff_limit_per_index: retry.and_then(|p| p.backoff_limit_per_index),
            max_failed_indexes: retry.and_then(|p| p.max_failed_indexes),
            active_deadline_seconds: spec.active_deadline_seconds.map(i64::from),
            ttl_seconds_after_finished: spec
                .ttl_seconds_after_finished
                .or(defaults.ttl_seconds_after_finished),
            suspend: spec.queue_name.as_ref().map(|_| true),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    finalizers: defaults.archive_logs.then(|| vec![LOG_FINALIZER.to_owned()]),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    // Failed runs are new pods, counted against backoffLimit, as on the
                    // local executor.
                    restart_policy: Some("Never".into()),
                    service_account_name: spec.service_account_name.clone(),
                    priority_class_name: defaults
                        .priority_classes
                        .pod_class(spec.priority)
                        .map(str::to_owned),
                    ..PodSpec::default()
                }),
            },
            ..K8sJobSpec::default()
        }),
        status: None,
    }
}

/// The Job's `podFailurePolicy` for the retry policy's rules (`None` without rules), built as
/// the typed field: the same rules [`RetryPolicy::pod_failure_policy`] writes as JSON for
/// templates.
fn pod_failure_policy(policy: &RetryPolicy) -> Option<PodFailurePolicy> {
    if policy.rules.is_empty() {
        return None;
    }
    let exit_codes = |operator: &str, values: Vec<i32>, container_name: Option<String>| {
        Some(PodFailurePolicyOnExitCodesRequirement {
            container_name,
            operator: operator.to_owned(),
            values,
        })
    };
    let rules = policy
        .rules
        .iter()
        .map(|rule| {
            let action = rule.action.kubernetes_name().to_owned();
            match &rule.matches {
                RuleMatch::ExitCodes(codes) => PodFailurePolicyRule {
                    action,
                    on_exit_codes: exit_codes(
                        match codes.operator {
                            ExitCodeOperator::In => "In",
                            ExitCodeOperator::NotIn => "NotIn",
                        },
                        codes.values.clone(),
                        codes.container_name.clone(),
                    ),
                    on_pod_conditions: None,
                },
                // A podFailurePolicy cannot see the kubelet's OOMKilled: its exit code.
                RuleMatch::Causes(causes) if causes.contains(&FailureCause::OomKilled) => {
                    PodFailurePolicyRule {
                        action,
                        on_exit_codes: exit_codes("In", vec![OOM_EXIT_CODE], None),
                        on_pod_conditions: None,
                    }
                }
                RuleMatch::Causes(_) => PodFailurePolicyRule {
                    action,
                    on_exit_codes: None,
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: DISRUPTION_TARGET.to_owned(),
                        status: Some("True".to_owned()),
                    }]),
                },
            }
        })
        .collect();
    Some(PodFailurePolicy { rules })
}

fn quantities(list: &ResourceList) -> Option<BTreeMap<String, Quantity>> {
    let map: BTreeMap<String, Quantity> = [("cpu", &list.cpu), ("memory", &list.memory)]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_owned(), Quantity(v.clone()))))
        .collect();
    (!map.is_empty()).then_some(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        EnvVar as ModelEnv, ResourceRequirements as ModelResources, SubmitRequest, ValidationLimits,
    };

    fn job(request: SubmitRequest) -> Job {
        let spec = request.validate(&ValidationLimits::default()).expect("valid");
        let mut job = Job::accepted(
            "0190a6d2-0000-7000-8000-000000000001".into(),
            spec,
            Some("k-1".into()),
            chrono::Utc::now(),
        );
        job.submitter = Some("api-token".into());
        job
    }

    #[test]
    fn maps_every_field_of_the_spec() {
        let j = job(SubmitRequest {
            name: Some("train".into()),
            namespace: Some("ml".into()),
            image: Some("busybox:1.36".into()),
            command: Some(vec!["sh".into(), "-c".into()]),
            args: Some(vec!["echo hi".into()]),
            env: Some(vec![ModelEnv {
                name: "A".into(),
                value: "1".into(),
            }]),
            parallelism: Some(2),
            completions: Some(4),
            backoff_limit: Some(3),
            active_deadline_seconds: Some(60),
            resources: Some(ModelResources {
                requests: ResourceList {
                    cpu: Some("250m".into()),
                    memory: Some("64Mi".into()),
                },
                limits: ResourceList {
                    cpu: Some("1".into()),
                    memory: None,
                },
            }),
            ttl_seconds_after_finished: Some(30),
            ..SubmitRequest::default()
        });
        let k = build(
            &j,
            &ManifestDefaults {
                ttl_seconds_after_finished: Some(3600),
                archive_logs: true,
                ..ManifestDefaults::default()
            },
        );
        let finalizers = k
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.finalizers.clone());
        assert_eq!(
            finalizers,
            Some(vec![LOG_FINALIZER.to_owned()]),
            "pods are held until their log is archived"
        );
        let meta = &k.metadata;
        assert_eq!(
            meta.name.as_deref(),
            Some("jobgate-0190a6d2-0000-7000-8000-000000000001")
        );
        assert_eq!(meta.namespace.as_deref(), Some("ml"));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels[MANAGED_BY_LABEL], "jobgate");
        assert_eq!(labels[JOB_ID_LABEL], j.id);
        assert_eq!(labels[JOB_NAME_LABEL], "train");
        assert_eq!(labels[SHARD_LABEL], crate::model::shard_of(&j.id).to_string());
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations[SUBMITTER_ANNOTATION], "api-token");
        assert_eq!(annotations[IDEMPOTENCY_KEY_ANNOTATION], "k-1");
        let spec = k.spec.unwrap();
        assert_eq!(spec.parallelism, Some(2));
        assert_eq!(spec.completions, Some(4));
        assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!(spec.backoff_limit, Some(3));
        assert_eq!(spec.active_deadline_seconds, Some(60));
        assert_eq!(
            spec.ttl_seconds_after_finished,
            Some(30),
            "the job's own TTL wins"
        );
        let template_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(
            template_labels[JOB_ID_LABEL], j.id,
            "pods are found by the same label"
        );
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("busybox:1.36"));
        assert_eq!(
            c.command.as_deref(),
            Some(&["sh".to_owned(), "-c".to_owned()][..])
        );
        assert_eq!(c.args.as_deref(), Some(&["echo hi".to_owned()][..]));
        assert_eq!(
            c.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
        let env = c.env.as_ref().unwrap();
        assert!(
            env.iter()
                .any(|e| e.name == "A" && e.value.as_deref() == Some("1"))
        );
        assert!(
            env.iter()
                .any(|e| e.name == "JOBGATE_RESULT_FILE"
                    && e.value.as_deref() == Some(TERMINATION_MESSAGE_PATH))
        );
        assert!(
            !env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"),
            "Indexed pods get it from the controller"
        );
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.requests.as_ref().unwrap()["cpu"], Quantity("250m".into()));
        assert_eq!(r.requests.as_ref().unwrap()["memory"], Quantity("64Mi".into()));
        assert_eq!(r.limits.as_ref().unwrap()["cpu"], Quantity("1".into()));
        assert!(!r.limits.as_ref().unwrap().contains_key("memory"));
    }

    #[test]
    fn single_runs_are_non_indexed_with_the_default_ttl() {
        let j = job(SubmitRequest {
            image: Some("busybox".into()),
            command: Some(vec!["true".into()]),
            ..SubmitRequest::default()
        });
        let k = build(
            &j,
            &ManifestDefaults {
                ttl_seconds_after_finished: Some(3600),
                ..ManifestDefaults::default()
            },
        );
        let spec = k.spec.unwrap();
        assert_eq!(spec.completion_mode.as_deref(), Some("NonIndexed"));
        assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
        let c = &spec.template.spec.unwrap().containers[0];
        assert!(c.args.is_none());
        assert!(c.resources.is_none());
        assert!(
            c.env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == "JOB_COMPLETION_INDEX" && e.value.as_deref() == Some("0"))
        );
    }

    #[test]
    fn a_queued_job_is_created_suspended_with_kueues_label() {
        let mut j = job(SubmitRequest {
            image: Some("busybox".into()),
            command: Some(vec!["true".into()]),
            ..SubmitRequest::default()
        });
        let plain = build(&j, &ManifestDefaults::default());
        assert_eq!(plain.spec.as_ref().unwrap().suspend, None);
        j.spec.queue_name = Some("team-a".into());
        let k = build(&j, &ManifestDefaults::default());
        assert_eq!(k.metadata.labels.as_ref().unwrap()[KUEUE_QUEUE_LABEL], "team-a");
        let spec = k.spec.unwrap();
        assert_eq!(spec.suspend, Some(true), "Kueue unsuspends it once admitted");
        assert!(
            !spec
                .template
                .metadata
                .unwrap()
                .labels
                .unwrap()
                .contains_key(KUEUE_QUEUE_LABEL),
            "the label is the Job's, not its pods'"
        );
    }

    #[test]
    fn the_typed_pod_failure_policy_is_the_one_templates_get() {
        let policy = serde_json::json!({"rules": [
            {"action": "FAIL_JOB", "exitCodes": {"operator": "NOT_IN", "values": [4, 0], "containerName": "job"}},
            {"action": "IGNORE", "causes": ["EVICTED", "PREEMPTED"]},
            {"action": "FAIL_INDEX", "causes": ["OOM_KILLED"]},
            {"action": "COUNT", "exitCodes": {"operator": "IN", "values": [3]}},
        ], "backoffLimitPerIndex": 1});
        let j = job(SubmitRequest {
            image: Some("busybox".into()),
            command: Some(vec!["true".into()]),
            completions: Some(2),
            retry_policy: Some(serde_json::from_value(policy).unwrap()),
            ..SubmitRequest::default()
        });
        let model = j.spec.retry_policy.as_ref().unwrap();
        let typed = build(&j, &ManifestDefaults::default())
            .spec
            .unwrap()
            .pod_failure_policy;
        assert_eq!(
            serde_json::to_value(typed).unwrap(),
            model.pod_failure_policy().unwrap()
        );
        let mut none = j.clone();
        none.spec.retry_policy.as_mut().unwrap().rules.clear();
        let spec = build(&none, &ManifestDefaults::default()).spec.unwrap();
        assert_eq!(spec.pod_failure_policy, None, "no rules, no podFailurePolicy");
        assert_eq!(spec.backoff_limit_per_index, Some(1));
    }
}
