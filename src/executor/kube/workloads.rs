//! Jobs of workload templates: each runs as one object of its template's kind (a Kubeflow
//! PyTorchJob, an Argo Workflow, …), created from the rendered manifest and observed by one
//! label-selected watcher per kind and scope, through kube-rs' dynamic API.
//!
//! It owns per-kind discovery (a kind whose CRD is missing, or whose watch is forbidden, is
//! reported for that kind while the others keep working), the watchers' handlers (the loop is
//! `watch.rs`'s; what an object means, decoded with its template's status rules, is decided
//! by `tracking.rs`), carrying out those decisions (reporting, finishing with the pods'
//! result and log tail, a vanished workload), cancelling as the template says, and retention: each
//! finished object of a kind without a native TTL gets its own deletion timer. Pods of these
//! objects are followed by the executor's pod watcher like a batch Job's (the templates label
//! their pod templates), which gives runs, logs and the log tail.
//!
//! It must not decide phases beyond what the template's rules decode, nor write the store.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::fence::is_fenced;
use super::kinds::Kind;
use super::launch_cancel::launch_error;
use super::manifest::{
    IDEMPOTENCY_KEY_ANNOTATION, JOB_ID_LABEL, JOB_NAME_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    SUBMITTER_ANNOTATION, TEMPLATE_ANNOTATION, workload_name,
};
use super::priority_classes::KUEUE_PRIORITY_CLASS_LABEL;
use super::status::PodInfo;
use super::tracking::{Action, KindObjects, Tracker, Vanish};
use super::watch::{Handler, WatcherHealth, follow_events, watch_stream};
use super::workload_retention::{TTL_ANNOTATION, retention_seconds};
use super::{KubeShared, label, retry_delays};
use crate::executor::ExecutorError;
use crate::model::{Job, JobPhase, MappedPhase, SHARD_LABEL, WorkloadStatus, shard_of};
use crate::templates::rules::STATUS_UNDERSTOOD;
use crate::templates::{Stamp, WorkloadTemplate};

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl KubeShared {
    pub(super) fn dynamic_api(&self, resource: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.ctx.client.clone(), namespace, resource)
    }

    /// Discovers every workload kind, starts the watchers of those installed, and watches
    /// CustomResourceDefinitions so that a kind installed later starts then. Waits a little
    /// for the first answers, so that `templates` is right as soon as jobgate serves; a kind
    /// the API server has not answered for yet is tried again in the background, and its
    /// jobs are accepted meanwhile (they launch once it is found).
    pub(super) async fn start_workload_kinds(self: &Arc<Self>) {
        if self.kinds.is_empty() {
            return;
        }
        let first = self.kinds.all().map(|kind| async move {
            let settled = tokio::time::timeout(FIRST_DISCOVERY, self.discover_once(kind)).await;
            (kind.clone(), settled.unwrap_or(false))
        });
        for (kind, settled) in futures::future::join_all(first).await {
            if !settled {
                self.ctx.tasks.spawn(self.clone().discover(kind));
            }
        }
        self.ctx.tasks.spawn(self.clone().watch_crds());
    }

    /// Retries discovery of a kind while the API server cannot answer.
    async fn discover(self: Arc<Self>, kind: Arc<Kind>) {
        let mut delays = retry_delays();
        while !self.discover_once(&kind).await {
            let delay = delays.next().unwrap_or(Duration::from_secs(30));
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.ctx.shutdown.cancelled() => return,
            }
        }
    }

    /// One attempt to find the kind's resource: found, it is watched; not served, it is
    /// reported unavailable until its CRD appears. False when the API server gave no answer.
    async fn discover_once(self: &Arc<Self>, kind: &Arc<Kind>) -> bool {
        match kube::discovery::pinned_kind(&self.ctx.client, &kind.gvk).await {
            Ok((resource, _caps)) => {
                *kind.resource.write().unwrap_or_else(PoisonError::into_inner) = Some(resource);
                kind.set_unavailable(None);
                if !kind.watching.swap(true, Ordering::SeqCst) {
                    self.spawn_kind_watchers(kind);
                }
                true
            }
            Err(e) if is_not_found(&e) || matches!(e, kube::Error::Discovery(_)) => {
                kind.set_unavailable(Some(format!(
                    "the cluster does not serve {} (is its CustomResourceDefinition installed?)",
                    kind.name()
                )));
                true // the CRD watch tries again when it appears
            }
            Err(e) => {
                tracing::warn!(kind = %kind.name(), error = %e, "cannot discover a workload kind yet; retrying");
                false
            }
        }
    }

    /// The watchers of a workload kind's objects matching `selector`, one per scope, each
    /// with its health, ending at `stop`.
    pub(super) fn kind_watchers(
        self: &Arc<Self>,
        kind: &Arc<Kind>,
        selector: &str,
        stop: &CancellationToken,
    ) -> Vec<(
        Arc<WatcherHealth>,
        impl std::future::Future<Output = ()> + Send + 'static,
    )> {
        let Some(resource) = kind.resource() else {
            return Vec::new();
        };
        let mut watchers = Vec::new();
        for scope in self.ctx.watch_scopes() {
            let api: Api<DynamicObject> = match &scope {
                Some(ns) => self.dynamic_api(&resource, ns),
                None => Api::all_with(self.ctx.client.clone(), &resource),
            };
            let where_ = scope.as_deref().unwrap_or("all namespaces");
            let health = WatcherHealth::new(
                format!("{} in {where_}", resource.plural),
                &self.ctx.config.metrics,
            );
            let config = watcher::Config::default().labels(selector);
            let events = watch_stream(api, config);
            let mut handler = KindEvents {
                shared: self.clone(),
                tracker: Tracker::new(KindObjects(kind.clone()), scope.clone(), kind.list_epoch.clone()),
                resource: resource.clone(),
                scope,
            };
            let stop = stop.clone();
            let watched = health.clone();
            watchers.push((health, async move {
                follow_events(events, Some(&watched), &stop, &mut handler).await;
            }));
        }
        watchers
    }

    /// Follows CustomResourceDefinitions: a workload kind installed after jobgate started
    /// becomes available without a restart. Without RBAC to watch them, a missing kind is
    /// only found again at the next start (said once, in the log).
    async fn watch_crds(self: Arc<Self>) {
        let api: Api<CustomResourceDefinition> = Api::all(self.ctx.client.clone());
        let events = watch_stream(api, watcher::Config::default());
        let mut handler = CrdEvents {
            shared: self.clone(),
            warned: false,
        };
        follow_events(events, None, &self.ctx.shutdown, &mut handler).await;
    }

    /// A CustomResourceDefinition was added or changed: a missing kind it serves is
    /// discovered again.
    fn on_crd(self: &Arc<Self>, crd: &CustomResourceDefinition) {
        let group = &crd.spec.group;
        let kind_name = &crd.spec.names.kind;
        let served = |v: &str| crd.spec.versions.iter().any(|x| x.name == v && x.served);
        for kind in self.kinds.all() {
            let wanted = &kind.gvk.group == group && &kind.gvk.kind == kind_name && served(&kind.gvk.version);
            if wanted && kind.availability().is_err() && !kind.watching.load(Ordering::SeqCst) {
                self.ctx.tasks.spawn(self.clone().discover(kind.clone()));
            }
        }
    }

    /// A CustomResourceDefinition was deleted: the kinds it served are unavailable.
    fn on_crd_deleted(&self, crd: &CustomResourceDefinition) {
        for kind in self.kinds.all() {
            if kind.gvk.group == crd.spec.group && kind.gvk.kind == crd.spec.names.kind {
                kind.set_unavailable(Some(format!(
                    "the CustomResourceDefinition of {} was deleted",
                    kind.name()
                )));
            }
        }
    }

    /// Carries out what the tracking decided about objects of a workload kind.
    async fn carry_out_kind_actions(
        self: &Arc<Self>,
        kind: &Arc<Kind>,
        resource: &ApiResource,
        actions: Vec<Action<DynamicObject>>,
    ) {
        for action in actions {
            match action {
                Action::Report { job_id, status } => {
                    warn_not_understood(&job_id, kind, &status);
                    self.send(job_id, status).await;
                }
                Action::Finish {
                    job_id,
                    status,
                    object,
                } => {
                    warn_not_understood(&job_id, kind, &status);
                    let retention = self.retention_of(&job_id).map(|r| (r, resource.clone(), object));
                    self.spawn_finish_workload(job_id, status, retention);
                }
                // Only batch Jobs settle after their decision.
                Action::Settled { .. } => {}
                Action::Vanished { job_id, how } => {
                    if how == Vanish::Unlisted {
                        tracing::warn!(job = %job_id, kind = %kind.name(), "its workload is gone though it never finished");
                    }
                    self.spawn_workload_vanished(job_id);
                }
                // Finished (or not ours any more): only retention is left to do.
                Action::Untracked { object } => self.retain_finished(kind, resource, &object),
            }
        }
    }

    fn spawn_workload_vanished(self: &Arc<Self>, id: String) {
        let shared = self.clone();
        self.ctx.tasks.spawn(async move {
            let kind = shared
                .jobs
                .tracked
                .get(&id)
                .and_then(|t| t.decoding.as_ref().map(|d| d.template.kind.clone()))
                .unwrap_or_default();
            let status = WorkloadStatus {
                mapped: Some(MappedPhase {
                    phase: JobPhase::Failed,
                    reason: Some("WorkloadDeleted".into()),
                    message: Some(format!("its {kind} was deleted before it finished")),
                }),
                ..WorkloadStatus::default()
            };
            shared.send(id.clone(), status).await;
            shared.untrack(&id);
        });
    }

    /// Captures a finished workload's pods' result, failure cause and log tail, reports it,
    /// and schedules the object's deletion when its template says so.
    fn spawn_finish_workload(
        self: &Arc<Self>,
        id: String,
        mut status: WorkloadStatus,
        retention: Option<(Duration, ApiResource, DynamicObject)>,
    ) {
        let shared = self.clone();
        self.ctx.tasks.spawn(async move {
            // Pods the watch has seen may still be ending; a kind whose pods jobgate does not
            // see (unlabelled, or none yet) has nothing to wait for.
            if shared.pods.knows(&id)
                && (!shared.wait_for_pods(&id, None).await || !shared.wait_for_archive(&id).await)
            {
                return; // shutting down: the next start re-lists and finishes it
            }
            let Some(namespace) = shared.jobs.namespace(&id) else {
                return;
            };
            let pods: Vec<PodInfo> = shared.pods.infos(&id);
            let succeeded = status
                .mapped
                .as_ref()
                .is_some_and(|m| m.phase == JobPhase::Succeeded);
            if succeeded && status.result.is_none() {
                status.result = super::status::result_of(&pods);
            } else if !succeeded {
                status.message = super::status::failure_of(&pods);
            }
            let lines = shared.capture_logs(&id, &namespace, &pods).await;
            status.executor_state = serde_json::json!({ "logTail": lines });
            let finished = status.completion_time.unwrap_or_else(Utc::now);
            shared.send(id.clone(), status).await;
            shared.untrack(&id);
            if let Some((after, resource, obj)) = retention {
                shared.schedule_deletion(resource, &obj, finished, after);
            }
        });
    }

    /// Creates the job's object. Idempotent: an existing object of the job is adopted.
    pub(super) async fn create_workload(
        &self,
        job: &Job,
        template: &WorkloadTemplate,
        kind: &Kind,
    ) -> Result<(), ExecutorError> {
        let resource = kind.resource().ok_or_else(|| ExecutorError::Unavailable {
            reason: "KindNotInstalled",
            message: kind.availability().err().unwrap_or_default(),
        })?;
        let mut object = template.render(job, &self.stamp(job));
        // Kueue reads the priority-class label on every kind it queues.
        if let Some(class) = job.spec.queue_name.as_ref().and_then(|_| {
            self.ctx
                .config
                .manifest
                .priority_classes
                .workload_class(job.spec.priority)
        }) && template.kueue_suspend_field().is_ok()
        {
            object["metadata"]["labels"][KUEUE_PRIORITY_CLASS_LABEL] = serde_json::json!(class);
        }
        let object: DynamicObject = serde_json::from_value(object).map_err(|e| ExecutorError::Rejected {
            reason: "InvalidWorkload",
            message: format!("template {} renders no valid object: {e}", template.name),
        })?;
        let name = workload_name(&job.id);
        let api = self.dynamic_api(&resource, &job.spec.namespace);
        let main = match api.create(&PostParams::default(), &object).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => match api
                .get(&name)
                .await
            {
                Ok(existing) if label(&existing.metadata, JOB_ID_LABEL) == Some(job.id.as_str()) => existing,
                Ok(_) => {
                    return Err(ExecutorError::Rejected {
                        reason: "WorkloadConflict",
                        message: format!(
                            "a {} named {name} already exists in namespace {} and does not belong to this job",
                            template.kind, job.spec.namespace
                        ),
                    });
                }
                Err(e) => {
                    return Err(launch_error(
                        &format!("reading the existing {}", template.kind),
                        e,
                    ));
                }
            },
            Err(e) => return Err(launch_error(&format!("creating the {}", template.kind), e)),
        };
        if template.children.is_empty() {
            return Ok(());
        }
        match self.create_children(job, template, &main).await {
            Err(ExecutorError::Rejected { reason, message }) => {
                // The job fails: its main object must not run without what it needs. The
                // launcher reports why; the watcher must not report the deletion this
                // causes as the workload vanishing (WorkloadDeleted) before it does.
                if let Some(mut t) = self.jobs.tracked.get_mut(&job.id) {
                    t.finishing = true;
                }
                if let Err(e) = api.delete(&name, &DeleteParams::background()).await
                    && !is_not_found(&e)
                {
                    tracing::warn!(job = %job.id, error = %e, "deleting a workload whose children were refused failed");
                }
                Err(ExecutorError::Rejected { reason, message })
            }
            other => other,
        }
    }

    /// Creates the template's child objects, owned by `main` (so they are deleted with it).
    /// Idempotent: a child of this job that exists already is kept.
    async fn create_children(
        &self,
        job: &Job,
        template: &WorkloadTemplate,
        main: &DynamicObject,
    ) -> Result<(), ExecutorError> {
        let owner = serde_json::json!([{
            "apiVersion": template.api_version,
            "kind": template.kind,
            "name": main.metadata.name,
            "uid": main.metadata.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
        for mut child in template.render_children(job, &self.stamp(job)) {
            child["metadata"]["ownerReferences"] = owner.clone();
            let text = |k: &str| {
                child
                    .get(k)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let (api_version, kind) = (text("apiVersion"), text("kind"));
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version.as_str()));
            let gvk = GroupVersionKind::gvk(group, version, &kind);
            let resource = match kube::discovery::pinned_kind(&self.ctx.client, &gvk).await {
                Ok((resource, _)) => resource,
                Err(e) if is_not_found(&e) || matches!(e, kube::Error::Discovery(_)) => {
                    return Err(ExecutorError::Rejected {
                        reason: "InvalidWorkload",
                        message: format!(
                            "template {} creates a {api_version} {kind}, which the cluster does not serve",
                            template.name
                        ),
                    });
                }
                Err(e) => return Err(launch_error(&format!("discovering {api_version} {kind}"), e)),
            };
            let name = child
                .pointer("/metadata/name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let object: DynamicObject =
                serde_json::from_value(child).map_err(|e| ExecutorError::Rejected {
                    reason: "InvalidWorkload",
                    message: format!("template {} renders no valid {kind}: {e}", template.name),
                })?;
            let api = self.dynamic_api(&resource, &job.spec.namespace);
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                    match api.get(&name).await {
                        Ok(existing) if label(&existing.metadata, JOB_ID_LABEL) == Some(job.id.as_str()) => {}
                        Ok(_) => {
                            return Err(ExecutorError::Rejected {
                                reason: "WorkloadConflict",
                                message: format!(
                                    "a {kind} named {name} already exists in namespace {} and does not belong to this job",
                                    job.spec.namespace
                                ),
                            });
                        }
                        Err(e) => return Err(launch_error(&format!("reading the existing {kind}"), e)),
                    }
                }
                Err(e) => return Err(launch_error(&format!("creating the {kind} {name}"), e)),
            }
        }
        Ok(())
    }

    /// What jobgate stamps on every object of a job.
    fn stamp(&self, job: &Job) -> Stamp {
        let mut labels = BTreeMap::from([
            (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
            (JOB_ID_LABEL.to_owned(), job.id.clone()),
            (SHARD_LABEL.to_owned(), shard_of(&job.id).to_string()),
        ]);
        if let Some(name) = &job.spec.name {
            labels.insert(JOB_NAME_LABEL.to_owned(), name.clone());
        }
        let mut annotations = BTreeMap::from([(TEMPLATE_ANNOTATION.to_owned(), job.spec.template.clone())]);
        if let Some(submitter) = &job.submitter {
            annotations.insert(SUBMITTER_ANNOTATION.to_owned(), submitter.clone());
        }
        if let Some(key) = &job.idempotency_key {
            annotations.insert(IDEMPOTENCY_KEY_ANNOTATION.to_owned(), key.clone());
        }
        let ttl = job
            .spec
            .ttl_seconds_after_finished
            .or(self.ctx.config.manifest.ttl_seconds_after_finished);
        if let Some(ttl) = ttl {
            // Read back by retention after a restart, when the job is no longer tracked.
            annotations.insert(TTL_ANNOTATION.to_owned(), ttl.to_string());
        }
        Stamp {
            name: workload_name(&job.id),
            labels,
            annotations,
            // `${job.env}` carries the job's trace context too, where the job's own `env`
            // does not name the variable.
            env: crate::model::trace_env(job)
                .into_iter()
                .filter(|(name, _)| !job.spec.env.iter().any(|v| &v.name == name))
                .chain([("JOBGATE_JOB_ID".into(), job.id.clone())])
                .collect(),
            default_ttl_seconds: self.ctx.config.manifest.ttl_seconds_after_finished,
        }
    }

    /// Stops the job's workload as its template says: a merge patch (the object stays, and
    /// retention removes it later) or a delete with its dependents. Retried until it lands.
    pub(super) async fn cancel_workload(
        self: &Arc<Self>,
        job_id: &str,
        namespace: &str,
        template: &WorkloadTemplate,
        kind: &Kind,
        ttl_seconds: Option<i32>,
    ) -> Result<(), ExecutorError> {
        let Some(resource) = kind.resource() else {
            return Ok(()); // never created: nothing runs
        };
        let api = self.dynamic_api(&resource, namespace);
        let name = workload_name(job_id);
        let mut delays = retry_delays();
        loop {
            let done = match &template.cancel.patch {
                Some(patch) => api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|obj| {
                        if let Some(seconds) = retention_seconds(template, ttl_seconds) {
                            self.schedule_deletion(
                                resource.clone(),
                                &obj,
                                Utc::now(),
                                Duration::from_secs(seconds),
                            );
                        }
                        obj.metadata.uid
                    }),
                None => api
                    .delete(&name, &DeleteParams::background())
                    .await
                    .map(|d| d.left().and_then(|o| o.metadata.uid)),
            };
            match done {
                Ok(uid) => {
                    let how = if template.cancel.patch.is_some() {
                        "stopped"
                    } else {
                        "deleted"
                    };
                    let message = format!(
                        "jobgate job {job_id} was cancelled; its {} is {how}",
                        template.kind
                    );
                    self.record_event_on(namespace, &name, &resource, uid, "Cancelled", &message)
                        .await;
                    return Ok(());
                }
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_fenced(&e) => return Err(ExecutorError::NotThisReplica),
                Err(e) => {
                    tracing::warn!(job = %job_id, error = %e, "cancelling the job's workload failed; retrying");
                    let delay = delays.next().unwrap_or(Duration::from_secs(30));
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.ctx.shutdown.cancelled() => return Err(ExecutorError::ShuttingDown),
                    }
                }
            }
        }
    }
}

/// Says once that a kind's object has a status its template's rules do not understand.
fn warn_not_understood(job_id: &str, kind: &Kind, status: &WorkloadStatus) {
    if let Some(c) = status.conditions.iter().find(|c| c.type_ == STATUS_UNDERSTOOD) {
        tracing::warn!(job = %job_id, kind = %kind.name(), message = ?c.message, "status not understood");
    }
}

/// Whether a watch failed because jobgate may not list or watch what it watches.
fn is_forbidden(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) if s.code == 403)
}

/// The watcher of one workload kind in one scope.
struct KindEvents {
    shared: Arc<KubeShared>,
    tracker: Tracker<KindObjects>,
    resource: ApiResource,
    scope: Option<String>,
}

impl Handler<DynamicObject> for KindEvents {
    async fn event(&mut self, event: watcher::Event<DynamicObject>) {
        let kind = self.tracker.follow().0.clone();
        // An answer after a refusal: the kind is watched again.
        if !matches!(event, watcher::Event::Init) && kind.availability().is_err() && kind.resource().is_some()
        {
            kind.set_unavailable(None);
        }
        let _order = self
            .shared
            .jobs
            .queue_order(super::tracking::event_job_id(&event).as_deref())
            .await;
        let actions = self.tracker.apply(&self.shared.jobs.tracked, event);
        self.shared
            .carry_out_kind_actions(&kind, &self.resource, actions)
            .await;
    }

    fn failed(&mut self, error: &watcher::Error) -> ControlFlow<()> {
        if is_forbidden(error) {
            self.tracker.follow().0.set_unavailable(Some(format!(
                "jobgate may not watch {} in {}: {error}",
                self.resource.plural,
                self.scope.as_deref().unwrap_or("all namespaces")
            )));
        }
        ControlFlow::Continue(())
    }
}

/// The watcher of CustomResourceDefinitions.
struct CrdEvents {
    shared: Arc<KubeShared>,
    /// That the watch fails has been logged.
    warned: bool,
}

impl Handler<CustomResourceDefinition> for CrdEvents {
    async fn event(&mut self, event: watcher::Event<CustomResourceDefinition>) {
        match event {
            watcher::Event::Apply(crd) | watcher::Event::InitApply(crd) => self.shared.on_crd(&crd),
            watcher::Event::Delete(crd) => self.shared.on_crd_deleted(&crd),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    fn failed(&mut self, error: &watcher::Error) -> ControlFlow<()> {
        if !self.warned {
            self.warned = true;
            tracing::warn!(%error, "cannot watch CustomResourceDefinitions; a workload kind installed later is found at the next start");
        }
        // Forbidden stays forbidden: no point in retrying until the next start.
        let forbidden = matches!(error, watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 403);
        if forbidden {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// How long start waits for the API server to say which workload kinds it serves.
const FIRST_DISCOVERY: Duration = Duration::from_secs(5);
