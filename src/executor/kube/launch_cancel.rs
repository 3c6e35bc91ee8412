//! Launching and cancelling jobs' workloads: what the executor writes to the cluster.
//!
//! It owns the launch of every job: its tracking from "being created" to "known to exist",
//! which lets a cancel arriving meanwhile still stop it, whichever kind its workload is. For
//! jobs of the `container` template it also owns creating the batch Job from its manifest (a
//! retried create that meets our own Job adopts it; anything else under that name is a
//! conflict) and deleting it on cancel (retried until it lands); `workloads.rs` creates and
//! stops the objects of workload templates. It also owns how a refused API call is reported
//! to the launcher ([`launch_error`]), and the Kubernetes Events that tell
//! `kubectl describe` what jobgate did.
//!
//! It must not report observations itself: a Job it creates goes the way of a watched one
//! (`reconcile.rs`), which the watcher will report anyway.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

use super::fence::is_fenced;
use super::manifest::{self, JOB_ID_LABEL, workload_name};
use super::tracking::{self, BatchJobs};
use super::{KubeShared, label, retry_delays};
use crate::executor::ExecutorError;
use crate::model::Job;

/// How a failed API call is reported to the launcher.
pub(super) fn launch_error(action: &str, e: kube::Error) -> ExecutorError {
    if is_fenced(&e) {
        return ExecutorError::NotThisReplica;
    }
    match e {
        kube::Error::Api(s) => {
            let message = format!("{action}: {} ({} {})", s.message, s.code, s.reason);
            match s.code {
                429 => ExecutorError::Unavailable {
                    reason: "ApiServerThrottling",
                    message,
                },
                401 => ExecutorError::Unavailable {
                    reason: "Unauthorized",
                    message,
                },
                // Refused by RBAC or by admission: asking again gets the same answer, so
                // the job fails with the API server's word rather than waiting forever.
                403 => ExecutorError::Rejected {
                    reason: "Forbidden",
                    message,
                },
                404 => ExecutorError::Rejected {
                    reason: "NamespaceNotFound",
                    message,
                },
                400 | 422 => ExecutorError::Rejected {
                    reason: "InvalidWorkload",
                    message,
                },
                // A failing admission webhook (500), a broken or overloaded API server:
                // retried, for a bounded time (the job then fails with this message).
                500 => ExecutorError::ServerError {
                    reason: "ApiServerError",
                    message,
                },
                501..=599 => ExecutorError::ServerError {
                    reason: "ApiServerUnavailable",
                    message,
                },
                _ => ExecutorError::Unavailable {
                    reason: "ApiServerUnavailable",
                    message,
                },
            }
        }
        other => ExecutorError::Unavailable {
            reason: "ApiServerUnreachable",
            message: format!("{action}: {other}"),
        },
    }
}

impl KubeShared {
    /// Creates the job's workload: a batch Job, or its workload template's object (see
    /// `workloads.rs`). Idempotent: a workload of this job that exists already is adopted.
    pub(super) async fn launch(self: &Arc<Self>, job: Arc<Job>) -> Result<(), ExecutorError> {
        if self.ctx.shutdown.is_cancelled() {
            return Err(ExecutorError::ShuttingDown);
        }
        // Fenced: a replica whose shard moved on while it waited must not create a workload
        // the new owner may already have created, run and deleted.
        if !self.acts_for(&job.id) {
            return Err(ExecutorError::NotThisReplica);
        }
        self.track(&job, None);
        // The list epoch is read once the workload exists: every list of its kind that
        // begins later must show it, or it vanished.
        let created = match self.kinds.kind_of(&job.spec.template) {
            Some((template, kind)) => self
                .create_workload(&job, &template, &kind)
                .await
                .map(|()| (kind.list_epoch.load(Ordering::SeqCst), None)),
            None => self
                .create_job(&job)
                .await
                .map(|created| (self.jobs.list_epoch.load(Ordering::SeqCst), Some(created))),
        };
        match created {
            Ok((epoch, created)) => {
                if self.jobs.created(&job.id, epoch) {
                    // Cancelled while being created: the cancel found nothing to delete yet.
                    return self.cancel(&job).await;
                }
                if let Some(created) = created {
                    // The watch reports it too; this only saves waiting for it.
                    let _order = self.jobs.queue_order(Some(&job.id)).await;
                    let actions = tracking::applied(&BatchJobs, &self.jobs.tracked, created);
                    self.carry_out_job_actions(actions).await;
                }
                Ok(())
            }
            Err(e) => {
                // Tracked no more (the launcher retries, or fails the job); a cancel that
                // came meanwhile is forgotten with it.
                self.jobs.not_created(&job.id);
                // Refused by the fence, or failed while the shard moved on: not a failure
                // of the launch, which the replica owning the shard now makes.
                if !self.acts_for(&job.id) {
                    return Err(ExecutorError::NotThisReplica);
                }
                Err(e)
            }
        }
    }

    /// Creates the job's batch Job from its manifest, or adopts the one that exists already.
    async fn create_job(&self, job: &Job) -> Result<K8sJob, ExecutorError> {
        let name = workload_name(&job.id);
        let namespace = &job.spec.namespace;
        let api = self.ctx.jobs_api(namespace);
        let manifest = manifest::build(job, &self.ctx.config.manifest);
        match api.create(&PostParams::default(), &manifest).await {
            Ok(created) => Ok(created),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                // A create retried after a crash or a lost answer: the Job is ours if it
                // carries our id; anything else under that name is a conflict.
                match api.get(&name).await {
                    Ok(existing) if label(&existing.metadata, JOB_ID_LABEL) == Some(job.id.as_str()) => {
                        tracing::info!(job = %job.id, %name, "Job already exists; adopting it");
                        Ok(existing)
                    }
                    Ok(_) => Err(ExecutorError::Rejected {
                        reason: "WorkloadConflict",
                        message: format!(
                            "a Job named {name} already exists in namespace {namespace} and does not belong to this job"
                        ),
                    }),
                    Err(e) => Err(launch_error("reading the existing Job", e)),
                }
            }
            Err(e) => Err(launch_error("creating the Job", e)),
        }
    }

    /// Stops the job's workload, whether or not this process tracks it, retrying until it
    /// lands or the executor shuts down.
    pub(super) async fn cancel(self: &Arc<Self>, job: &Job) -> Result<(), ExecutorError> {
        let job_id = &job.id;
        if !self.acts_for(job_id) {
            return Err(ExecutorError::NotThisReplica);
        }
        // Untracked first, so the deletion is not reported as a vanished workload.
        self.jobs.cancelled(job_id);
        self.pods.forget_job(job_id);
        // The job, not the tracking, says where its workload is: after a restart a cancelled
        // job is tracked by no one, and its workload must still be stopped (a workload never
        // created answers 404, which is stopped too).
        let namespace = &job.spec.namespace;
        if let Some((template, kind)) = self.kinds.kind_of(&job.spec.template) {
            return self
                .cancel_workload(job_id, namespace, &template, &kind, self.ctx.ttl_seconds(job))
                .await;
        }
        let api = self.ctx.jobs_api(namespace);
        let name = workload_name(job_id);
        // Retried until it lands: a cancelled job must not keep running in the cluster.
        let mut delays = retry_delays();
        loop {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(deleted) => {
                    // The API answers with the object, or a Status once it is gone already.
                    let uid = deleted.left().and_then(|job| job.metadata.uid);
                    let message = format!("jobgate job {job_id} was cancelled; its Job is deleted");
                    self.record_event(namespace, &name, uid, "Cancelled", &message)
                        .await;
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                // Its shard moved on: the replica that owns it now stops it.
                Err(e) if is_fenced(&e) => return Err(ExecutorError::NotThisReplica),
                Err(e) => {
                    tracing::warn!(job = %job_id, error = %e, "deleting the cancelled job's Job failed; retrying");
                    let delay = delays.next().unwrap_or(Duration::from_secs(30));
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.ctx.shutdown.cancelled() => return Err(ExecutorError::ShuttingDown),
                    }
                }
            }
        }
    }

    /// Records a Kubernetes Event on `job`, so that `kubectl describe` tells what jobgate did
    /// to it. Best effort: an Event that cannot be written is only logged.
    async fn record_event(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<String>,
        reason: &str,
        message: &str,
    ) {
        self.record_event_about(namespace, name, ("batch/v1", "Job"), uid, reason, message)
            .await;
    }

    /// [`KubeShared::record_event`] on an object of a workload kind.
    pub(super) async fn record_event_on(
        &self,
        namespace: &str,
        name: &str,
        resource: &kube::api::ApiResource,
        uid: Option<String>,
        reason: &str,
        message: &str,
    ) {
        let kind = (resource.api_version.as_str(), resource.kind.as_str());
        self.record_event_about(namespace, name, kind, uid, reason, message)
            .await;
    }

    async fn record_event_about(
        &self,
        namespace: &str,
        name: &str,
        (api_version, kind): (&str, &str),
        uid: Option<String>,
        reason: &str,
        message: &str,
    ) {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                uid,
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some("jobgate".into()),
                ..EventSource::default()
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        let events: Api<Event> = Api::namespaced(self.ctx.client.clone(), namespace);
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            tracing::warn!(error = %e, "could not record a Kubernetes Event");
        }
    }
}
