//! Retry rules: which failed runs fail the job at once, which are retried without counting
//! against `backoffLimit`, which count as usual and which fail their completion index; the
//! back-off between runs; and the per-index limits of indexed jobs.
//!
//! It owns the policy as submitted (`RetryPolicyRequest`) and as stored in the spec
//! (`RetryPolicy`), its validation, the `podFailurePolicy` it compiles to, and the pure
//! matching of one failed run against the rules (`RetryPolicy::decide`), which the local
//! executor applies itself. Both executors read the same compiled rules, so the same failure
//! meets the same rule everywhere. It must not count runs, wait or know an executor: the
//! runner and the Job controller keep the counts.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::cause::FailureCause;

/// An invalid retry policy: the input path at fault (`input.retryPolicy.rules[0].action`) and
/// why; validation hands it on as its own error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RetryPolicyError {
    pub field: String,
    pub message: String,
}

type ValidationError = RetryPolicyError;

fn invalid(field: impl Into<String>, message: impl Into<String>) -> RetryPolicyError {
    RetryPolicyError {
        field: field.into(),
        message: message.into(),
    }
}

/// A container name: a DNS-1123 label.
fn is_container_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The most rules a policy may have, as Kubernetes allows in `podFailurePolicy`.
pub const MAX_RETRY_RULES: usize = 20;
/// The most exit codes one rule may list, as Kubernetes allows.
pub const MAX_EXIT_CODE_VALUES: usize = 255;
/// The exit code of a container the kernel's OOM killer ended: 128 + SIGKILL. It is all a
/// `podFailurePolicy` can say of an OOM kill, so `OOM_KILLED` matches it on every executor.
pub const OOM_EXIT_CODE: i32 = 137;
/// The pod condition the cluster sets on a pod it evicts or preempts.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The longest back-off a policy may ask for, in seconds.
pub const MAX_BACKOFF_SECONDS: f64 = 86_400.0;
/// The largest growth factor of the back-off.
pub const MAX_BACKOFF_FACTOR: f64 = 10.0;
/// The most indexes `backoffLimitPerIndex` may apply to, as Kubernetes allows.
pub const MAX_PER_INDEX_COMPLETIONS: i32 = 100_000;

/// What a matching rule does with a failed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RetryAction {
    /// Fail the job now; its other runs are stopped.
    FailJob,
    /// Retry the run without counting it against `backoffLimit` (or the index's limit).
    Ignore,
    /// Count the failure as usual.
    Count,
    /// Fail the run's completion index: it is not retried (needs `backoffLimitPerIndex`).
    FailIndex,
}

impl RetryAction {
    /// The name of the action in a `podFailurePolicy` and in the Job controller's messages.
    pub fn kubernetes_name(self) -> &'static str {
        match self {
            Self::FailJob => "FailJob",
            Self::Ignore => "Ignore",
            Self::Count => "Count",
            Self::FailIndex => "FailIndex",
        }
    }
}

/// How a rule's exit codes are compared with a run's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ExitCodeOperator {
    In,
    NotIn,
}

/// A rule's exit codes: a run matches when its container's non-zero exit code is (`IN`) or is
/// not (`NOT_IN`) one of `values`. A run killed by signal N exits with 128 + N, as a
/// container does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitCodeMatch {
    /// Only this container's exit code; every container's when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    pub operator: ExitCodeOperator,
    pub values: Vec<i32>,
}

/// One rule as submitted: an action and what it matches (exit codes or causes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryRuleRequest {
    pub action: RetryAction,
    #[serde(default)]
    pub exit_codes: Option<ExitCodeMatch>,
    #[serde(default)]
    pub causes: Option<Vec<FailureCause>>,
}

/// The back-off as submitted; omitted fields take the Job controller's values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryBackoffRequest {
    pub initial_seconds: Option<f64>,
    pub max_seconds: Option<f64>,
    pub factor: Option<f64>,
    pub jitter: Option<f64>,
}

/// A retry policy as submitted, before validation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicyRequest {
    pub rules: Option<Vec<RetryRuleRequest>>,
    pub backoff: Option<RetryBackoffRequest>,
    pub backoff_limit_per_index: Option<i32>,
    pub max_failed_indexes: Option<i32>,
}

/// What a rule matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RuleMatch {
    ExitCodes(ExitCodeMatch),
    /// `OOM_KILLED`, or `EVICTED` and/or `PREEMPTED` (never both kinds in one rule).
    Causes(Vec<FailureCause>),
}

/// A validated rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryRule {
    pub action: RetryAction,
    #[serde(rename = "on")]
    pub matches: RuleMatch,
}

/// The delay before a failed run is retried: `initial × factor^(n−1)` after the n-th failure,
/// at most `max`, less a random part of up to `jitter` of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryBackoff {
    pub initial_seconds: f64,
    pub max_seconds: f64,
    pub factor: f64,
    pub jitter: f64,
}

impl RetryBackoff {
    /// The Job controller's back-off: 10 s, doubling, at most 6 minutes, no jitter.
    pub const JOB_CONTROLLER: RetryBackoff = RetryBackoff {
        initial_seconds: 10.0,
        max_seconds: 360.0,
        factor: 2.0,
        jitter: 0.0,
    };

    /// The delay after the `failures`-th failure (from 1), with `random` in [0, 1) taking the
    /// jitter's share off.
    pub fn delay_seconds(&self, failures: u32, random: f64) -> f64 {
        let exponent = failures.max(1).saturating_sub(1).min(64) as i32;
        let grown = self.initial_seconds * self.factor.powi(exponent);
        let capped = if grown.is_finite() {
            grown.min(self.max_seconds)
        } else {
            self.max_seconds
        };
        capped * (1.0 - self.jitter * random.clamp(0.0, 1.0))
    }
}

/// A validated retry policy, part of the job's spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RetryRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<RetryBackoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit_per_index: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failed_indexes: Option<i32>,
}

/// What the validation of a policy needs to know of the job and the server.
#[derive(Clone, Debug)]
pub struct RetryContext<'a> {
    pub completions: i32,
    pub max_backoff_limit: i32,
    /// The container names a rule may name (`None`: any DNS-1123 label, for templates whose
    /// containers jobgate does not know).
    pub containers: Option<&'a [&'a str]>,
    /// Why a back-off cannot be set on this server, if it cannot.
    pub fixed_backoff: Option<&'a str>,
}

/// A failed run, as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedRun<'a> {
    /// Each container's non-zero exit code (a signal N as 128 + N); none when no container
    /// ran to an exit (the program could not start).
    pub exit_codes: &'a [(&'a str, i32)],
    /// The run was evicted or preempted (Kubernetes: the `DisruptionTarget` condition).
    pub disrupted: bool,
}

/// The rule a failed run matched: its index, its action, and the Job controller's words for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleDecision {
    pub rule: usize,
    pub action: RetryAction,
    /// `Container job for <subject> failed with exit code 3 matching FailJob rule at index 0`
    /// (or `<Subject> has condition DisruptionTarget matching …`), as the Job controller says.
    pub message: String,
}

impl RetryPolicyRequest {
    /// Checks every part of the policy (paths under `input.retryPolicy`) and returns the
    /// policy to store.
    pub fn validate(&self, context: &RetryContext<'_>) -> Result<RetryPolicy, ValidationError> {
        const AT: &str = "input.retryPolicy";
        let requests = self.rules.as_deref().unwrap_or_default();
        if requests.len() > MAX_RETRY_RULES {
            return Err(invalid(
                format!("{AT}.rules"),
                format!(
                    "must have at most {MAX_RETRY_RULES} rules (as podFailurePolicy), got {}",
                    requests.len()
                ),
            ));
        }
        let per_index = self.per_index_limits(context)?;
        let mut rules = Vec::with_capacity(requests.len());
        for (i, rule) in requests.iter().enumerate() {
            let at = format!("{AT}.rules[{i}]");
            rules.push(validate_rule(rule, &at, context)?);
            if rule.action == RetryAction::FailIndex && per_index.0.is_none() {
                return Err(invalid(
                    format!("{at}.action"),
                    "FAIL_INDEX needs retryPolicy.backoffLimitPerIndex (an index fails only where indexes have limits of their own)",
                ));
            }
        }
        let backoff = match &self.backoff {
            None => None,
            Some(b) => Some(validate_backoff(b, context)?),
        };
        Ok(RetryPolicy {
            rules,
            backoff,
            backoff_limit_per_index: per_index.0,
            max_failed_indexes: per_index.1,
        })
    }

    fn per_index_limits(
        &self,
        context: &RetryContext<'_>,
    ) -> Result<(Option<i32>, Option<i32>), ValidationError> {
        let per_index = self.backoff_limit_per_index;
        if let Some(limit) = per_index {
            let at = "input.retryPolicy.backoffLimitPerIndex";
            if limit < 0 || limit > context.max_backoff_limit {
                return Err(invalid(
                    at,
                    format!("must be 0 to {}, got {limit}", context.max_backoff_limit),
                ));
            }
            if context.completions < 2 {
                return Err(invalid(
                    at,
                    "needs an indexed job (completions of 2 or more); with one completion, backoffLimit is the limit",
                ));
            }
            if context.completions > MAX_PER_INDEX_COMPLETIONS {
                return Err(invalid(
                    at,
                    format!("applies to at most {MAX_PER_INDEX_COMPLETIONS} completions"),
                ));
            }
        }
        if let Some(max) = self.max_failed_indexes {
            let at = "input.retryPolicy.maxFailedIndexes";
            if per_index.is_none() {
                return Err(invalid(at, "needs retryPolicy.backoffLimitPerIndex"));
            }
            if max < 0 || max > context.completions {
                return Err(invalid(
                    at,
                    format!("must be 0 to completions ({}), got {max}", context.completions),
                ));
            }
        }
        Ok((per_index, self.max_failed_indexes))
    }
}

fn validate_rule(
    rule: &RetryRuleRequest,
    at: &str,
    context: &RetryContext<'_>,
) -> Result<RetryRule, ValidationError> {
    let matches = match (&rule.exit_codes, &rule.causes) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(invalid(
                at,
                "a rule matches exitCodes or causes, exactly one of them (as a podFailurePolicy rule matches exit codes or pod conditions)",
            ));
        }
        (Some(codes), None) => {
            RuleMatch::ExitCodes(validate_exit_codes(codes, &format!("{at}.exitCodes"), context)?)
        }
        (None, Some(causes)) => RuleMatch::Causes(validate_causes(causes, &format!("{at}.causes"))?),
    };
    Ok(RetryRule {
        action: rule.action,
        matches,
    })
}

fn validate_exit_codes(
    codes: &ExitCodeMatch,
    at: &str,
    context: &RetryContext<'_>,
) -> Result<ExitCodeMatch, ValidationError> {
    if let Some(name) = &codes.container_name {
        let field = format!("{at}.containerName");
        match context.containers {
            Some(known) if !known.contains(&name.as_str()) => {
                return Err(invalid(
                    field,
                    format!(
                        "{name:?} is not a container of the job's pods; they have {}",
                        known.join(", ")
                    ),
                ));
            }
            None if !is_container_name(name) => {
                return Err(invalid(field, "must be a container name (a DNS-1123 label)"));
            }
            _ => {}
        }
    }
    let values_at = format!("{at}.values");
    if codes.values.is_empty() {
        return Err(invalid(values_at, "must list at least one exit code"));
    }
    if codes.values.len() > MAX_EXIT_CODE_VALUES {
        return Err(invalid(
            values_at,
            format!(
                "must list at most {MAX_EXIT_CODE_VALUES} exit codes, got {}",
                codes.values.len()
            ),
        ));
    }
    for (i, &v) in codes.values.iter().enumerate() {
        let field = format!("{values_at}[{i}]");
        if !(0..=255).contains(&v) {
            return Err(invalid(field, format!("exit codes are 0 to 255, got {v}")));
        }
        if v == 0 && codes.operator == ExitCodeOperator::In {
            return Err(invalid(
                field,
                "0 cannot be used with IN: a run that exits 0 succeeded, and no rule sees it",
            ));
        }
        if codes.values[..i].contains(&v) {
            return Err(invalid(field, format!("{v} is listed twice")));
        }
    }
    let mut values = codes.values.clone();
    // Kubernetes requires them in order; the order means nothing to the rule.
    values.sort_unstable();
    Ok(ExitCodeMatch {
        container_name: codes.container_name.clone(),
        operator: codes.operator,
        values,
    })
}

fn validate_causes(causes: &[FailureCause], at: &str) -> Result<Vec<FailureCause>, ValidationError> {
    if causes.is_empty() {
        return Err(invalid(at, "must list at least one cause"));
    }
    for (i, cause) in causes.iter().enumerate() {
        let field = format!("{at}[{i}]");
        let refusal = match cause {
            FailureCause::OomKilled | FailureCause::Evicted | FailureCause::Preempted => None,
            FailureCause::Error => Some("ERROR is any failure of the program: match it by exitCodes"),
            FailureCause::DeadlineExceeded => Some(
                "DEADLINE_EXCEEDED ends the whole job (activeDeadlineSeconds): no run is retried after it, whatever the rules say",
            ),
            FailureCause::GatewayRestarted => Some(
                "GATEWAY_RESTARTED cannot be matched: no podFailurePolicy can see it, and runs lost in a restart count as failed runs",
            ),
            FailureCause::Cancelled => Some("CANCELLED ends the whole job: no run is retried after it"),
        };
        if let Some(why) = refusal {
            return Err(invalid(field, why));
        }
        if causes[..i].contains(cause) {
            return Err(invalid(field, format!("{} is listed twice", cause.as_str())));
        }
    }
    let oom = causes.contains(&FailureCause::OomKilled);
    if oom && causes.len() > 1 {
        return Err(invalid(
            at,
            "OOM_KILLED (exit code 137) and EVICTED/PREEMPTED (the DisruptionTarget condition) need a rule each, as podFailurePolicy rules match exit codes or pod conditions",
        ));
    }
    Ok(causes.to_vec())
}

fn validate_backoff(
    b: &RetryBackoffRequest,
    context: &RetryContext<'_>,
) -> Result<RetryBackoff, ValidationError> {
    const AT: &str = "input.retryPolicy.backoff";
    if let Some(why) = context.fixed_backoff {
        return Err(invalid(AT, why));
    }
    let defaults = RetryBackoff::JOB_CONTROLLER;
    let check = |name: &str, value: Option<f64>, default: f64, min: f64, max: f64| match value {
        None => Ok(default),
        Some(v) if v.is_finite() && (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(invalid(
            format!("{AT}.{name}"),
            format!("must be {min} to {max}, got {v}"),
        )),
    };
    let initial_seconds = check(
        "initialSeconds",
        b.initial_seconds,
        defaults.initial_seconds,
        0.0,
        MAX_BACKOFF_SECONDS,
    )?;
    let max_default = defaults.max_seconds.max(initial_seconds);
    let max_seconds = check("maxSeconds", b.max_seconds, max_default, 0.0, MAX_BACKOFF_SECONDS)?;
    if max_seconds < initial_seconds {
        return Err(invalid(
            format!("{AT}.maxSeconds"),
            format!("must not be below initialSeconds ({initial_seconds})"),
        ));
    }
    let factor = check("factor", b.factor, defaults.factor, 1.0, MAX_BACKOFF_FACTOR)?;
    let jitter = check("jitter", b.jitter, defaults.jitter, 0.0, 1.0)?;
    Ok(RetryBackoff {
        initial_seconds,
        max_seconds,
        factor,
        jitter,
    })
}

impl RetryPolicy {
    /// The first rule `run` matches, as the Job controller matches a failed pod; `subject`
    /// names the run in the message (`pod ns/name`, `run 3 (index 0)`).
    pub fn decide(&self, run: &FailedRun<'_>, subject: &str) -> Option<RuleDecision> {
        self.rules.iter().enumerate().find_map(|(i, rule)| {
            let action = rule.action;
            let name = action.kubernetes_name();
            let message = match &rule.matches {
                RuleMatch::ExitCodes(codes) => matching_exit(codes, run).map(|(container, code)| {
                    format!("Container {container} for {subject} failed with exit code {code} matching {name} rule at index {i}")
                }),
                RuleMatch::Causes(causes) if causes.contains(&FailureCause::OomKilled) => {
                    run.exit_codes.iter().find(|(_, code)| *code == OOM_EXIT_CODE).map(|(container, code)| {
                        format!("Container {container} for {subject} failed with exit code {code} matching {name} rule at index {i}")
                    })
                }
                RuleMatch::Causes(_) => run.disrupted.then(|| {
                    format!("{} has condition {DISRUPTION_TARGET} matching {name} rule at index {i}", capitalised(subject))
                }),
            }?;
            Some(RuleDecision { rule: i, action, message })
        })
    }

    /// `spec.podFailurePolicy` of a batch/v1 Job, or `None` without rules.
    pub fn pod_failure_policy(&self) -> Option<Value> {
        if self.rules.is_empty() {
            return None;
        }
        let rules: Vec<Value> = self
            .rules
            .iter()
            .map(|rule| {
                let action = rule.action.kubernetes_name();
                match &rule.matches {
                    RuleMatch::ExitCodes(codes) => {
                        let mut on = json!({
                            "operator": match codes.operator {
                                ExitCodeOperator::In => "In",
                                ExitCodeOperator::NotIn => "NotIn",
                            },
                            "values": codes.values,
                        });
                        if let Some(name) = &codes.container_name {
                            on["containerName"] = json!(name);
                        }
                        json!({"action": action, "onExitCodes": on})
                    }
                    RuleMatch::Causes(causes) if causes.contains(&FailureCause::OomKilled) => json!({
                        "action": action,
                        "onExitCodes": {"operator": "In", "values": [OOM_EXIT_CODE]},
                    }),
                    RuleMatch::Causes(_) => json!({
                        "action": action,
                        "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}],
                    }),
                }
            })
            .collect();
        Some(json!({ "rules": rules }))
    }
}

fn matching_exit<'a>(codes: &ExitCodeMatch, run: &FailedRun<'a>) -> Option<(&'a str, i32)> {
    run.exit_codes
        .iter()
        .filter(|(container, code)| {
            *code != 0 && codes.container_name.as_deref().is_none_or(|n| n == *container)
        })
        .find(|(_, code)| match codes.operator {
            ExitCodeOperator::In => codes.values.contains(code),
            ExitCodeOperator::NotIn => !codes.values.contains(code),
        })
        .copied()
}

fn capitalised(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
