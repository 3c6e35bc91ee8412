//! Retention: deletes finished jobs, with their events and everything else of theirs, once
//! they have been finished for longer than configured (`--retention-days`, with
//! per-namespace overrides), in the background.
//!
//! It owns the sweep: every `interval`, each rule walks the finished jobs in (finish time,
//! cursor) order from where it last stopped and deletes, in small batches of one short write
//! transaction each, those it expires. Between batches it pauses, so submissions and
//! observations never wait behind more than one batch. A failed batch (the store cannot
//! write) is counted and logged, changes nothing, and is retried at the next sweep.
//!
//! The store keeps, per namespace, the newest cursor retention deleted (its horizon): replays
//! from an older cursor answer CURSOR_EXPIRED instead of silently skipping what is gone (see
//! [`crate::store::Store::expire_jobs`]).
//!
//! Once a batch has committed, the executor lets go of what it keeps of those jobs (the local
//! executor's log files).
//!
//! It must not delete an unfinished job (the store's query takes only finished ones), hold a
//! write transaction for more than one batch, or know about GraphQL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::executor::Executor;
use crate::metrics::Metrics;
use crate::store::{ExpiryPosition, ExpiryRule, RuleNamespaces, Store};

/// How long finished jobs are kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RetentionPolicy {
    /// For namespaces without an override; `None` keeps them forever.
    pub default: Option<Duration>,
    /// Per-namespace overrides; `None` keeps that namespace's jobs forever.
    pub namespaces: BTreeMap<String, Option<Duration>>,
    /// How often a sweep starts.
    pub interval: Duration,
    /// The most finished jobs one batch (one write transaction) looks at.
    pub batch: i64,
    /// The pause between two batches, which lets writers in.
    pub pause: Duration,
}

impl RetentionPolicy {
    /// Whether anything is ever deleted.
    pub fn enabled(&self) -> bool {
        self.default.is_some() || self.namespaces.values().any(Option::is_some)
    }

    /// Each rule that deletes, with how long it keeps jobs.
    fn rules(&self) -> Vec<(RuleNamespaces, Duration)> {
        let mut rules: Vec<(RuleNamespaces, Duration)> = self
            .namespaces
            .iter()
            .filter_map(|(ns, keep)| keep.map(|keep| (RuleNamespaces::Only(ns.clone()), keep)))
            .collect();
        if let Some(keep) = self.default {
            let overridden = self.namespaces.keys().cloned().collect();
            rules.push((RuleNamespaces::AllBut(overridden), keep));
        }
        rules
    }
}

/// The running sweeper; [`RetentionSweeper::shutdown`] stops it.
pub struct RetentionSweeper {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl RetentionSweeper {
    /// Starts sweeping, unless the policy never deletes anything.
    pub fn start(
        store: Arc<dyn Store>,
        executor: Arc<dyn Executor>,
        policy: RetentionPolicy,
        metrics: Arc<Metrics>,
    ) -> Self {
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        if policy.enabled() {
            tracing::info!(
                default_days = policy.default.map(|d| d.as_secs_f64() / 86_400.0),
                overrides = policy.namespaces.len(),
                "retention: finished jobs are deleted after their retention"
            );
            tasks.spawn(sweep_loop(store, executor, policy, metrics, stop.clone()));
        }
        tasks.close();
        Self { stop, tasks }
    }

    /// Stops after the batch in flight (whose transaction commits or rolls back whole).
    pub async fn shutdown(&self, grace: Duration) {
        self.stop.cancel();
        if tokio::time::timeout(grace, self.tasks.wait()).await.is_err() {
            tracing::warn!("retention did not stop within {grace:?}");
        }
    }
}

async fn sweep_loop(
    store: Arc<dyn Store>,
    executor: Arc<dyn Executor>,
    policy: RetentionPolicy,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let rules = policy.rules();
    // Where each rule's walk stands. Kept in memory: after a restart a rule walks again
    // from the oldest finished job, once.
    let mut positions: Vec<Option<ExpiryPosition>> = vec![None; rules.len()];
    loop {
        for ((namespaces, keep), position) in rules.iter().zip(positions.iter_mut()) {
            let Ok(keep) = chrono::Duration::from_std(*keep) else {
                continue;
            };
            let rule = ExpiryRule {
                before: Utc::now() - keep,
                namespaces: namespaces.clone(),
            };
            loop {
                if stop.is_cancelled() {
                    return;
                }
                match store.expire_jobs(&rule, *position, policy.batch).await {
                    Ok(batch) => {
                        if batch.jobs > 0 {
                            tracing::debug!(
                                jobs = batch.jobs,
                                events = batch.events,
                                "retention deleted finished jobs"
                            );
                        }
                        // After the commit: files of a job the store still had would be
                        // missed by its `logs`.
                        executor.forget(&batch.ids).await;
                        metrics.retention_deleted_jobs.inc_by(batch.jobs);
                        metrics.retention_deleted_events.inc_by(batch.events);
                        if batch.position.is_some() {
                            *position = batch.position;
                        }
                        if (batch.scanned as i64) < policy.batch {
                            break;
                        }
                    }
                    Err(e) => {
                        metrics.retention_failures.inc();
                        tracing::warn!(error = %e, "retention could not delete a batch; the next sweep retries");
                        break;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(policy.pause) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(policy.interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(d: u64) -> Option<Duration> {
        Some(Duration::from_secs(d * 86_400))
    }

    #[test]
    fn overrides_take_their_namespaces_out_of_the_default_rule() {
        let policy = RetentionPolicy {
            default: days(30),
            namespaces: BTreeMap::from([("audit".to_owned(), None), ("ci".to_owned(), days(1))]),
            ..RetentionPolicy::default()
        };
        assert!(policy.enabled());
        let rules = policy.rules();
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert_eq!(rules[0], (RuleNamespaces::Only("ci".into()), days(1).unwrap()));
        let (default, keep) = &rules[1];
        assert_eq!(*keep, days(30).unwrap());
        assert!(default.covers("team-a"));
        assert!(!default.covers("audit"), "kept forever by its override");
        assert!(!default.covers("ci"), "its own rule expires it");
    }

    #[test]
    fn only_overrides_delete_when_there_is_no_default() {
        let policy = RetentionPolicy {
            namespaces: BTreeMap::from([("ci".to_owned(), days(7))]),
            ..RetentionPolicy::default()
        };
        assert_eq!(
            policy.rules(),
            vec![(RuleNamespaces::Only("ci".into()), days(7).unwrap())]
        );
        assert!(!RetentionPolicy::default().enabled());
    }
}
