//! Admission of submissions inside the writer's transaction: the checks a submission passes
//! (an earlier job with the same idempotency key, its dependencies, the namespace's quota)
//! and its acceptance, alone or in bulk. It must not commit or publish: the writer does, once
//! the whole batch is applied.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;

use super::{Answer, Recorded, Writer};
use crate::jobs::service::ServiceError;
use crate::model::{Job, JobPhase, Scope, Transition, ValidationError};
use crate::store::{Accepted, StoreError, StoreTx};

impl Writer {
    /// A submission's checks in the batch's transaction: an earlier job with the same
    /// idempotency key (in the store, or earlier in this batch) or a refusal (an unknown
    /// dependency, the namespace's quota) is the answer; otherwise the job is to be accepted,
    /// with its dependencies' phases.
    #[allow(clippy::too_many_arguments)]
    async fn check_submission(
        &self,
        tx: &mut dyn StoreTx,
        touched: &HashMap<String, Job>,
        keys: &HashMap<String, (String, String)>,
        context: &mut SubmitContext,
        job: &Job,
        fingerprint: &String,
        scope: &Scope,
    ) -> Result<Checked, StoreError> {
        if let Some(key) = &job.idempotency_key {
            let scoped = crate::store::scoped_key(job.key_scope(), key);
            let existing = match (keys.get(&scoped), &context.stored_keys) {
                (Some(found), _) => Some(found.clone()),
                (None, Some(stored)) => stored.get(&scoped).cloned(),
                (None, None) => tx
                    .find_by_idempotency_key(job.key_scope(), key)
                    .await?
                    .map(|k| (k.fingerprint, k.id)),
            };
            if let Some((fp, id)) = existing {
                if fp != *fingerprint {
                    return Ok(Checked::Answer(Answer::Error(
                        ServiceError::IdempotencyConflict { key: key.clone() },
                    )));
                }
                return Ok(Checked::Answer(
                    match self.current_for_caller(tx, touched, &id, scope).await? {
                        Ok(Some(job)) => Answer::Existing(Arc::new(job)),
                        Ok(None) => Answer::Error(ServiceError::NotFound { id }),
                        Err(unreadable) => Answer::Error(unreadable),
                    },
                ));
            }
        }
        // Every dependency must exist (committed, or accepted earlier in this batch).
        let mut dependencies = Vec::with_capacity(job.spec.depends_on.len());
        for (i, id) in job.spec.depends_on.iter().enumerate() {
            match self.current_readable(tx, touched, id).await? {
                // Another tenant's job is as unknown as a job that never was; so is one
                // whose stored row cannot be read.
                Some(d) if scope.sees(&d) => dependencies.push((id.clone(), d.phase)),
                _ => {
                    return Ok(Checked::Answer(Answer::Error(ServiceError::Invalid(
                        ValidationError {
                            field: format!("input.dependsOn[{i}]"),
                            message: format!("no job with id {id:?}"),
                        },
                    ))));
                }
            }
        }
        // The quota counts in this transaction, so jobs accepted earlier in the same batch
        // count too (and, within one command, those it accepted but has not written yet).
        let limit = self.inner.max_active_per_namespace;
        if limit > 0 {
            let namespace = &job.spec.namespace;
            let active = match context.active.get(namespace) {
                Some(n) => *n,
                None => {
                    let n = tx.active_in_namespace(namespace).await?;
                    context.active.insert(namespace.clone(), n);
                    n
                }
            };
            if active >= limit as i64 {
                return Ok(Checked::Answer(Answer::Error(ServiceError::QuotaExceeded {
                    namespace: namespace.clone(),
                    limit,
                })));
            }
        }
        Ok(Checked::Accept(dependencies))
    }

    /// Counts a job about to be accepted: its key (for later submissions of the batch) and its
    /// namespace's active jobs (for later ones of the command).
    fn count_accepted(
        keys: &mut HashMap<String, (String, String)>,
        context: &mut SubmitContext,
        job: &Job,
        fingerprint: &str,
    ) {
        if let Some(key) = &job.idempotency_key {
            keys.insert(
                crate::store::scoped_key(job.key_scope(), key),
                (fingerprint.to_owned(), job.id.clone()),
            );
        }
        if let Some(n) = context.active.get_mut(&job.spec.namespace) {
            *n += 1;
        }
    }

    /// The transition every accepted job's first event records.
    fn submitted(job: &Job) -> Transition {
        Transition {
            previous_phase: None,
            phase: job.phase,
            reason: Some("Submitted".into()),
            message: Some("accepted by jobgate".into()),
        }
    }

    /// One submission in the batch's transaction: its checks, then the job accepted with its
    /// first event (and held, or failed, for its dependencies).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn submit_in(
        &self,
        tx: &mut dyn StoreTx,
        touched: &mut HashMap<String, Job>,
        keys: &mut HashMap<String, (String, String)>,
        recorded: &mut Vec<Recorded>,
        context: &mut SubmitContext,
        job: &Job,
        fingerprint: &String,
        scope: &Scope,
    ) -> Result<Answer, StoreError> {
        let dependencies = match self
            .check_submission(tx, touched, keys, context, job, fingerprint, scope)
            .await?
        {
            Checked::Answer(answer) => return Ok(answer),
            Checked::Accept(dependencies) => dependencies,
        };
        Self::count_accepted(keys, context, job, fingerprint);
        let mut job = job.clone();
        let transition = Self::submitted(&job);
        let at = Utc::now();
        let seq = tx.accept_job(&job, fingerprint, &transition, at).await?;
        job.last_event_seq = seq;
        recorded.push(Recorded::of(&job, &transition, seq, at));
        if !dependencies.is_empty() {
            Self::await_dependencies(tx, &mut job, &dependencies, recorded).await?;
        }
        let answer = Answer::Created(Arc::new(job.clone()));
        touched.insert(job.id.clone(), job);
        Ok(answer)
    }

    /// A bulk submission's jobs, each checked and answered on its own, in order. Their keys
    /// are read in one statement, and the jobs without dependencies are written together
    /// ([`StoreTx::accept_jobs`]: a few statements for hundreds of jobs, where one each would
    /// cost a round trip to the database's thread each), in input order (a job with
    /// dependencies writes those before it first).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn submit_many_in(
        &self,
        tx: &mut dyn StoreTx,
        touched: &mut HashMap<String, Job>,
        keys: &mut HashMap<String, (String, String)>,
        recorded: &mut Vec<Recorded>,
        jobs: &[(Job, String)],
        scope: &Scope,
    ) -> Result<Vec<Answer>, StoreError> {
        let wanted: Vec<(Option<&str>, &str)> = jobs
            .iter()
            .filter_map(|(job, _)| Some((job.key_scope(), job.idempotency_key.as_deref()?)))
            .collect();
        let stored_keys = if wanted.is_empty() {
            HashMap::new()
        } else {
            tx.find_by_idempotency_keys(&wanted)
                .await?
                .into_iter()
                .map(|(scoped, k)| (scoped, (k.fingerprint, k.id)))
                .collect()
        };
        let mut context = SubmitContext {
            stored_keys: Some(stored_keys),
            active: HashMap::new(),
        };
        let mut answers: Vec<Option<Answer>> = (0..jobs.len()).map(|_| None).collect();
        let mut pending: Vec<(usize, Job)> = Vec::new();
        for (i, (job, fingerprint)) in jobs.iter().enumerate() {
            // A key repeated in this bulk whose first job is accepted but not yet written: the
            // repeat is answered with that job, so it is written first.
            if let Some(key) = &job.idempotency_key
                && let Some((_, first)) = keys.get(&crate::store::scoped_key(job.key_scope(), key))
                && pending.iter().any(|(_, p)| &p.id == first)
            {
                Self::accept_pending(tx, touched, recorded, &mut answers, &mut pending, jobs).await?;
            }
            match self
                .check_submission(tx, touched, keys, &mut context, job, fingerprint, scope)
                .await?
            {
                Checked::Answer(answer) => answers[i] = Some(answer),
                Checked::Accept(dependencies) if dependencies.is_empty() => {
                    Self::count_accepted(keys, &mut context, job, fingerprint);
                    pending.push((i, job.clone()));
                }
                Checked::Accept(_) => {
                    Self::accept_pending(tx, touched, recorded, &mut answers, &mut pending, jobs).await?;
                    // Checked again, on the path of a single submission (nothing changed).
                    let answer = self
                        .submit_in(tx, touched, keys, recorded, &mut context, job, fingerprint, scope)
                        .await?;
                    answers[i] = Some(answer);
                }
            }
        }
        Self::accept_pending(tx, touched, recorded, &mut answers, &mut pending, jobs).await?;
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(Answer::Error(ServiceError::ShuttingDown)))
            .collect())
    }

    /// Writes the jobs a bulk accepted so far, with their first events, in one go.
    async fn accept_pending(
        tx: &mut dyn StoreTx,
        touched: &mut HashMap<String, Job>,
        recorded: &mut Vec<Recorded>,
        answers: &mut [Option<Answer>],
        pending: &mut Vec<(usize, Job)>,
        jobs: &[(Job, String)],
    ) -> Result<(), StoreError> {
        if pending.is_empty() {
            return Ok(());
        }
        let at = Utc::now();
        let transitions: Vec<Transition> = pending.iter().map(|(_, job)| Self::submitted(job)).collect();
        let accepted: Vec<Accepted<'_>> = pending
            .iter()
            .zip(&transitions)
            .map(|((i, job), transition)| Accepted {
                job,
                fingerprint: &jobs[*i].1,
                transition,
                at,
            })
            .collect();
        let seqs = tx.accept_jobs(&accepted).await?;
        drop(accepted);
        for (((i, mut job), transition), seq) in pending.drain(..).zip(&transitions).zip(seqs) {
            job.last_event_seq = seq;
            recorded.push(Recorded::of(&job, transition, seq, at));
            answers[i] = Some(Answer::Created(Arc::new(job.clone())));
            touched.insert(job.id.clone(), job);
        }
        Ok(())
    }
}

/// What a submission's checks decided (see [`Writer::check_submission`]).
enum Checked {
    Answer(Answer),
    /// To be accepted; its dependencies and their phases.
    Accept(Vec<(String, JobPhase)>),
}

/// What the submissions of one command share as they are checked.
#[derive(Default)]
pub(super) struct SubmitContext {
    /// The stored jobs of the command's idempotency keys, read ahead (scoped key →
    /// (fingerprint, id)); `None`: each key is looked up when checked.
    stored_keys: Option<HashMap<String, (String, String)>>,
    /// Each namespace's active jobs, read once, with those the command accepted since.
    active: HashMap<String, i64>,
}
