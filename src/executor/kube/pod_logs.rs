//! Reading jobs' output from their pods' logs: the last lines of a running job, following
//! them as new pods start, and the tail kept in jobgate when a job finishes.
//!
//! A finished job's lines come from what was captured as it finished (its `logTail`), since
//! its pods may be deleted by then; a running job's are read from its pods, in index then
//! creation order. Following streams every started pod's log until the job finishes and
//! each pod stream has ended.
//!
//! It must not decide which pods a job has: the pod watcher does (`pods.rs`).

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{AsyncBufReadExt, FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use tokio::sync::mpsc;

use super::KubeShared;
use super::manifest::CONTAINER_NAME;
use super::pods::CAPTURED_PODS;
use super::status::PodInfo;
use crate::executor::{ExecutorError, LogLine, lines_once};
use crate::model::{Job, WorkloadStatus};

impl KubeShared {
    /// The last `tail_lines` lines of the job: those kept when it finished, else read from
    /// its started pods now.
    pub(super) async fn tail_logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError> {
        if job.phase.is_terminal() {
            return Ok(captured_lines(&job.workload, tail_lines));
        }
        let mut lines = Vec::new();
        for pod in self.pods.started_pods(&job.id) {
            match self
                .pod_log(&job.spec.namespace, &pod.name, pod.container.clone(), tail_lines)
                .await
            {
                Ok(mut more) => lines.append(&mut more),
                // Gone or not yet readable: nothing to show from it.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 400 => {}
                Err(e) => {
                    return Err(ExecutorError::Cluster(format!(
                        "reading the log of pod {}: {e}",
                        pod.name
                    )));
                }
            }
        }
        let cut = lines.len().saturating_sub(tail_lines);
        Ok(lines.split_off(cut))
    }

    /// The job's output as a stream: its tail, then, when following, every new line until
    /// `follow_until` resolves.
    pub(super) fn log_stream(
        self: &Arc<Self>,
        job: Arc<Job>,
        tail_lines: usize,
        follow_until: Option<BoxFuture<'static, ()>>,
    ) -> BoxStream<'static, Result<LogLine, ExecutorError>> {
        match follow_until {
            Some(until) if !job.phase.is_terminal() => {
                let (tx, rx) = mpsc::channel(256);
                self.ctx
                    .tasks
                    .spawn(self.clone().follow_logs(job, tail_lines, until, tx));
                tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
            }
            _ => {
                let shared = self.clone();
                lines_once(async move { shared.tail_logs(&job, tail_lines).await })
            }
        }
    }

    /// The last lines of the job's most recent runs, kept in jobgate once it has finished:
    /// those captured as each pod ended, else read now.
    pub(super) async fn capture_logs(&self, id: &str, namespace: &str, pods: &[PodInfo]) -> Vec<String> {
        let limit = self.ctx.config.captured_log_lines;
        let mut started: Vec<&PodInfo> = pods.iter().filter(|p| p.started).collect();
        started.sort_by_key(|p| (p.index, p.finished_at, p.created_at));
        let recent = &started[started.len().saturating_sub(CAPTURED_PODS)..];
        let mut lines = Vec::new();
        for pod in recent {
            let captured = self.pods.captured_log(id, &pod.name);
            match captured {
                Some(mut more) => lines.append(&mut more),
                None => match self
                    .pod_log(namespace, &pod.name, pod.container.clone(), limit)
                    .await
                {
                    Ok(mut more) => lines.append(&mut more),
                    Err(e) => tracing::debug!(pod = %pod.name, error = %e, "no log to capture"),
                },
            }
        }
        let cut = lines.len().saturating_sub(limit);
        lines.split_off(cut)
    }

    pub(super) async fn pod_log(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<String>,
        tail: usize,
    ) -> Result<Vec<String>, kube::Error> {
        let params = LogParams {
            container: container.or_else(|| Some(CONTAINER_NAME.into())),
            tail_lines: Some(tail as i64),
            ..LogParams::default()
        };
        let text = self.ctx.pods_api(namespace).logs(pod, &params).await?;
        // The kubelet's word that the containers are gone ends without a newline; a log line
        // saying the same would end with one.
        if !text.ends_with('\n') && super::archive::is_collected_notice(&text) {
            return Ok(Vec::new());
        }
        Ok(text.lines().map(str::to_owned).collect())
    }

    /// Streams every line of the job's pods as they come, pod after pod as the controller
    /// creates them, until `until` resolves and every pod stream has ended.
    async fn follow_logs(
        self: Arc<Self>,
        job: Arc<Job>,
        tail_lines: usize,
        until: BoxFuture<'static, ()>,
        lines: mpsc::Sender<Result<LogLine, ExecutorError>>,
    ) {
        let namespace = job.spec.namespace.clone();
        let mut streamed = HashSet::new();
        let mut streams = tokio::task::JoinSet::new();
        let mut changes = self.pods.subscribe();
        let mut until = std::pin::pin!(until.fuse());
        let mut finished = false;
        loop {
            for pod in self.pods.started_pods(&job.id) {
                if streamed.insert(pod.name.clone()) {
                    streams.spawn(stream_pod_log(
                        self.ctx.pods_api(&namespace),
                        pod.name,
                        pod.container,
                        tail_lines,
                        lines.clone(),
                    ));
                }
            }
            if finished && streams.is_empty() {
                return;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = &mut until, if !finished => finished = true,
                Some(_) = streams.join_next() => {}
                _ = lines.closed() => return,
                _ = self.ctx.shutdown.cancelled() => return,
            }
        }
    }
}

/// Streams one pod's log until the pod ends (the API server closes a followed log then).
async fn stream_pod_log(
    api: Api<Pod>,
    pod: String,
    container: Option<String>,
    tail_lines: usize,
    lines: mpsc::Sender<Result<LogLine, ExecutorError>>,
) {
    let params = LogParams {
        container: container.or_else(|| Some(CONTAINER_NAME.into())),
        follow: true,
        tail_lines: Some(tail_lines as i64),
        ..LogParams::default()
    };
    let reader = match api.log_stream(&pod, &params).await {
        Ok(reader) => reader,
        Err(e) => {
            tracing::debug!(%pod, error = %e, "cannot follow the pod's log");
            return;
        }
    };
    let mut reader = std::pin::pin!(reader.lines());
    while let Some(line) = reader.next().await {
        let item = line
            .map(|text| LogLine {
                source: Some(pod.clone()),
                text,
            })
            .map_err(|e| ExecutorError::Cluster(format!("reading the log of pod {pod}: {e}")));
        let failed = item.is_err();
        if lines.send(item).await.is_err() || failed {
            return;
        }
    }
}

/// The log tail kept when the job finished.
fn captured_lines(workload: &WorkloadStatus, tail_lines: usize) -> Vec<String> {
    let lines: Vec<String> = workload
        .executor_state
        .get("logTail")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let cut = lines.len().saturating_sub(tail_lines);
    lines[cut..].to_vec()
}
