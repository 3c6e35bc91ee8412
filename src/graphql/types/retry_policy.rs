//! The GraphQL shapes of retry rules: `RetryPolicyInput` (what `SubmitJobInput.retryPolicy`
//! takes) and `RetryPolicy` (what `JobSpec.retryPolicy` shows), with their enums. It maps
//! names only; the domain (`model::RetryPolicyRequest::validate`) checks them.

use async_graphql::{Enum, InputObject, SimpleObject};

use super::FailureCauseView;
use crate::model;

/// What a matching rule does with a failed run.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "RetryAction")]
pub enum RetryActionView {
    /// Fail the job now (reason `PodFailurePolicy`); its other runs are stopped.
    FailJob,
    /// Retry the run without counting it against `backoffLimit` or the index's limit.
    Ignore,
    /// Count the failure as usual.
    Count,
    /// Fail the run's completion index: it is not retried. Needs `backoffLimitPerIndex`.
    FailIndex,
}

impl From<RetryActionView> for model::RetryAction {
    fn from(a: RetryActionView) -> Self {
        match a {
            RetryActionView::FailJob => Self::FailJob,
            RetryActionView::Ignore => Self::Ignore,
            RetryActionView::Count => Self::Count,
            RetryActionView::FailIndex => Self::FailIndex,
        }
    }
}

impl From<model::RetryAction> for RetryActionView {
    fn from(a: model::RetryAction) -> Self {
        match a {
            model::RetryAction::FailJob => Self::FailJob,
            model::RetryAction::Ignore => Self::Ignore,
            model::RetryAction::Count => Self::Count,
            model::RetryAction::FailIndex => Self::FailIndex,
        }
    }
}

/// How a rule's exit codes are compared with a run's non-zero exit code.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "ExitCodeOperator")]
pub enum ExitCodeOperatorView {
    /// The exit code is one of the values.
    In,
    /// The exit code is none of the values.
    NotIn,
}

impl From<ExitCodeOperatorView> for model::ExitCodeOperator {
    fn from(o: ExitCodeOperatorView) -> Self {
        match o {
            ExitCodeOperatorView::In => Self::In,
            ExitCodeOperatorView::NotIn => Self::NotIn,
        }
    }
}

impl From<model::ExitCodeOperator> for ExitCodeOperatorView {
    fn from(o: model::ExitCodeOperator) -> Self {
        match o {
            model::ExitCodeOperator::In => Self::In,
            model::ExitCodeOperator::NotIn => Self::NotIn,
        }
    }
}

/// Exit codes a rule matches: a run's non-zero exit code (a signal N counts as 128 + N) is
/// (`IN`) or is not (`NOT_IN`) one of `values` (1 to 255 of them, each 0 to 255; 0 only with
/// `NOT_IN`).
#[derive(InputObject, Clone, Debug)]
#[graphql(name = "ExitCodesInput")]
pub struct ExitCodesInput {
    pub operator: ExitCodeOperatorView,
    pub values: Vec<i32>,
    /// Only this container's exit code (templates of batch/v1 Jobs with several containers);
    /// the `container` template's one container is `job`. Every container's when omitted.
    pub container_name: Option<String>,
}

/// One rule: an action and exactly one of `exitCodes` or `causes`.
#[derive(InputObject, Clone, Debug)]
pub struct RetryRuleInput {
    pub action: RetryActionView,
    pub exit_codes: Option<ExitCodesInput>,
    /// `OOM_KILLED` (exit code 137), or `EVICTED` and/or `PREEMPTED` (on Kubernetes both
    /// match any pod with the `DisruptionTarget` condition); not both kinds in one rule.
    pub causes: Option<Vec<FailureCauseView>>,
}

/// The delay before a failed run is retried: `initialSeconds × factor^(n−1)` after the n-th
/// failure (of its index, with `backoffLimitPerIndex`; of the job otherwise), at most
/// `maxSeconds`, less a random part of up to `jitter` (0 to 1) of it.
/// Omitted fields take the Job controller's values (10, 360, 2, 0). Local executor only: the
/// Kubernetes Job controller's back-off is fixed.
#[derive(InputObject, Clone, Debug, Default)]
pub struct RetryBackoffInput {
    pub initial_seconds: Option<f64>,
    pub max_seconds: Option<f64>,
    pub factor: Option<f64>,
    pub jitter: Option<f64>,
}

/// How failed runs are retried. On Kubernetes it becomes the Job's `podFailurePolicy`,
/// `backoffLimitPerIndex` and `maxFailedIndexes`; the local executor applies the same rules.
#[derive(InputObject, Clone, Debug, Default)]
pub struct RetryPolicyInput {
    /// Ordered rules (at most 20); the first that matches a failed run decides. A failure
    /// no rule matches counts against `backoffLimit`.
    pub rules: Option<Vec<RetryRuleInput>>,
    pub backoff: Option<RetryBackoffInput>,
    /// Indexed jobs (completions of 2 or more): failures each index may have before it fails;
    /// the job's `backoffLimit` is then unbounded unless given.
    pub backoff_limit_per_index: Option<i32>,
    /// With `backoffLimitPerIndex`: the job fails (`MaxFailedIndexesExceeded`) once more
    /// indexes than this have failed.
    pub max_failed_indexes: Option<i32>,
}

impl From<RetryPolicyInput> for model::RetryPolicyRequest {
    fn from(p: RetryPolicyInput) -> Self {
        Self {
            rules: p.rules.map(|rules| {
                rules
                    .into_iter()
                    .map(|r| model::RetryRuleRequest {
                        action: r.action.into(),
                        exit_codes: r.exit_codes.map(|c| model::ExitCodeMatch {
                            container_name: c.container_name,
                            operator: c.operator.into(),
                            values: c.values,
                        }),
                        causes: r.causes.map(|c| c.into_iter().map(Into::into).collect()),
                    })
                    .collect()
            }),
            backoff: p.backoff.map(|b| model::RetryBackoffRequest {
                initial_seconds: b.initial_seconds,
                max_seconds: b.max_seconds,
                factor: b.factor,
                jitter: b.jitter,
            }),
            backoff_limit_per_index: p.backoff_limit_per_index,
            max_failed_indexes: p.max_failed_indexes,
        }
    }
}

/// A rule's exit codes, as stored (values in ascending order).
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "ExitCodes")]
pub struct ExitCodesView {
    pub operator: ExitCodeOperatorView,
    pub values: Vec<i32>,
    pub container_name: Option<String>,
}

/// One rule of a job's retry policy.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "RetryRule")]
pub struct RetryRuleView {
    pub action: RetryActionView,
    pub exit_codes: Option<ExitCodesView>,
    pub causes: Option<Vec<FailureCauseView>>,
}

/// A job's retry back-off, with defaults applied.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "RetryBackoff")]
pub struct RetryBackoffView {
    pub initial_seconds: f64,
    pub max_seconds: f64,
    pub factor: f64,
    pub jitter: f64,
}

/// A job's retry policy, as validated.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "RetryPolicy")]
pub struct RetryPolicyView {
    pub rules: Vec<RetryRuleView>,
    pub backoff: Option<RetryBackoffView>,
    pub backoff_limit_per_index: Option<i32>,
    pub max_failed_indexes: Option<i32>,
}

impl From<&model::RetryPolicy> for RetryPolicyView {
    fn from(p: &model::RetryPolicy) -> Self {
        Self {
            rules: p
                .rules
                .iter()
                .map(|r| {
                    let (exit_codes, causes) = match &r.matches {
                        model::RuleMatch::ExitCodes(c) => (
                            Some(ExitCodesView {
                                operator: c.operator.into(),
                                values: c.values.clone(),
                                container_name: c.container_name.clone(),
                            }),
                            None,
                        ),
                        model::RuleMatch::Causes(c) => (None, Some(c.iter().map(|&c| c.into()).collect())),
                    };
                    RetryRuleView {
                        action: r.action.into(),
                        exit_codes,
                        causes,
                    }
                })
                .collect(),
            backoff: p.backoff.as_ref().map(|b| RetryBackoffView {
                initial_seconds: b.initial_seconds,
                max_seconds: b.max_seconds,
                factor: b.factor,
                jitter: b.jitter,
            }),
            backoff_limit_per_index: p.backoff_limit_per_index,
            max_failed_indexes: p.max_failed_indexes,
        }
    }
}
