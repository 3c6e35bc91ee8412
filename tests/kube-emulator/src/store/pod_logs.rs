//! Pod logs as a node keeps them: the lines the kubelet writes for each pod, with their times,
//! split into rotated files and the current one, the wake-up that a following reader
//! (`follow=true`) waits on, and whether the kubelet has removed the pod's containers. A pod's
//! log lives as long as the pod object, but may be unreadable sooner (rotated away, or
//! collected).
//!
//! - **Rotation** ([`StoreOptions::log_max_bytes`](super::StoreOptions::log_max_bytes), the
//!   kubelet's `containerLogMaxSize`): when a line would take the current file past the limit,
//!   the file is rotated first and the line starts a new one. Every line is kept here (an open
//!   follow stream goes on across a rotation, as the kubelet's does), but a read that opens the
//!   log sees only the current file.
//! - **Collection** ([`Store::collect_log`]): the kubelet removed the containers (a deleted,
//!   terminated pod, whatever finalizers hold the object); no read serves any line.
//!
//! It must not render the `pods/{name}/log` answer (the API layer's `logs` does), nor decide
//! when a pod's containers go (the kubelet does).

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{ObjectKey, State, Store};

pub(super) struct PodLog {
    lines: Vec<(DateTime<Utc>, String)>,
    /// Lines before this index are in rotated files.
    rotated: usize,
    /// Bytes of the current file: its lines and their newlines.
    current_bytes: usize,
    collected: bool,
    /// Bumped on every new line, every change of the pod and the collection; dropped (closing
    /// every receiver) when the pod is deleted.
    notify: tokio::sync::watch::Sender<u64>,
}

impl PodLog {
    fn new() -> Self {
        PodLog {
            lines: Vec::new(),
            rotated: 0,
            current_bytes: 0,
            collected: false,
            notify: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// A pod's log as the node holds it now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLogView {
    /// Every line the pod's containers wrote, oldest first, with the time it was written.
    pub lines: Vec<(DateTime<Utc>, String)>,
    /// How many of `lines` are in rotated files: a read that opens the log sees
    /// `lines[rotated..]`, the current file.
    pub rotated: usize,
    /// The kubelet removed the pod's containers: no read serves any line.
    pub collected: bool,
}

impl PodLogView {
    /// The current file's lines: what a read that opens the log sees.
    pub fn current(&self) -> &[(DateTime<Utc>, String)] {
        &self.lines[self.rotated.min(self.lines.len())..]
    }
}

impl State {
    pub(super) fn touch_log(&mut self, key: &ObjectKey) {
        if let Some(log) = self.logs.get(key) {
            log.notify.send_modify(|v| *v += 1);
        }
    }

    fn pod_exists(&self, key: &ObjectKey) -> bool {
        self.objects.get("pods").is_some_and(|m| m.contains_key(key))
    }
}

impl Store {
    /// Appends a line to a pod's log (written by the kubelet), rotating the current file first
    /// if the line would take it past [`StoreOptions::log_max_bytes`](super::StoreOptions).
    /// Ignored if the pod does not exist or its containers were collected.
    pub fn append_log(&self, namespace: &str, pod: &str, line: &str) {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.pod_exists(&key) {
            return;
        }
        let max = st.log_max_bytes;
        let log = st.logs.entry(key).or_insert_with(PodLog::new);
        if log.collected {
            return;
        }
        let size = line.len() + 1;
        if let Some(max) = max
            && log.current_bytes > 0
            && log.current_bytes + size > max
        {
            log.rotated = log.lines.len();
            log.current_bytes = 0;
        }
        log.lines.push((Utc::now(), line.to_owned()));
        log.current_bytes += size;
        log.notify.send_modify(|v| *v += 1);
    }

    /// A pod's log lines, oldest first, rotated ones included; `None` if the pod does not exist.
    pub fn logs(&self, namespace: &str, pod: &str) -> Option<Vec<String>> {
        self.log_entries(namespace, pod)
            .map(|l| l.into_iter().map(|(_, line)| line).collect())
    }

    /// A pod's log lines with the time each was written, rotated ones included; `None` if the
    /// pod does not exist.
    pub fn log_entries(&self, namespace: &str, pod: &str) -> Option<Vec<(DateTime<Utc>, String)>> {
        self.log_view(namespace, pod).map(|v| v.lines)
    }

    /// A pod's log as the node holds it (lines, rotation, collection); `None` if the pod does
    /// not exist.
    pub fn log_view(&self, namespace: &str, pod: &str) -> Option<PodLogView> {
        let st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.pod_exists(&key) {
            return None;
        }
        Some(
            st.logs
                .get(&key)
                .map_or_else(PodLogView::default, |l| PodLogView {
                    lines: l.lines.clone(),
                    rotated: l.rotated,
                    collected: l.collected,
                }),
        )
    }

    /// The kubelet removed the pod's containers: from now on no read serves its log, and open
    /// follow streams end. Ignored if the pod does not exist.
    pub fn collect_log(&self, namespace: &str, pod: &str) {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.pod_exists(&key) {
            return;
        }
        let log = st.logs.entry(key).or_insert_with(PodLog::new);
        log.collected = true;
        log.notify.send_modify(|v| *v += 1);
    }

    /// Whether the pod exists and its containers (and so its log) were collected.
    pub fn log_collected(&self, namespace: &str, pod: &str) -> bool {
        self.log_view(namespace, pod).is_some_and(|v| v.collected)
    }

    /// Resolves when the pod gets new log lines, is modified (e.g. turns terminal), is
    /// collected or is deleted (for `follow=true`). Resolves at once if the pod does not exist.
    pub fn log_changed(&self, namespace: &str, pod: &str) -> impl Future<Output = ()> + Send + 'static {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        let rx = if st.pod_exists(&key) {
            Some(st.logs.entry(key).or_insert_with(PodLog::new).notify.subscribe())
        } else {
            None
        };
        async move {
            if let Some(mut rx) = rx {
                // Err means the pod was deleted (sender dropped): resolve as well.
                let _ = rx.changed().await;
            }
        }
    }
}
