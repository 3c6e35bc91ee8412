//! Pod logs: the lines the kubelet writes for each pod, with their times, and the wake-up that a
//! following reader (`follow=true`) waits on. A pod's log lives as long as the pod.
//!
//! It must not render the `pods/{name}/log` answer (the API layer's `logs` does).

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{ObjectKey, State, Store};

pub(super) struct PodLog {
    lines: Vec<(DateTime<Utc>, String)>,
    /// Bumped on every new line and every change of the pod; dropped (closing every receiver)
    /// when the pod is deleted.
    notify: tokio::sync::watch::Sender<u64>,
}

impl State {
    pub(super) fn touch_log(&mut self, key: &ObjectKey) {
        if let Some(log) = self.logs.get(key) {
            log.notify.send_modify(|v| *v += 1);
        }
    }
}

impl Store {
    /// Appends a line to a pod's log (written by the kubelet). Ignored if the pod does not exist.
    pub fn append_log(&self, namespace: &str, pod: &str, line: &str) {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
            return;
        }
        let log = st.logs.entry(key).or_insert_with(|| PodLog {
            lines: Vec::new(),
            notify: tokio::sync::watch::Sender::new(0),
        });
        log.lines.push((Utc::now(), line.to_owned()));
        log.notify.send_modify(|v| *v += 1);
    }

    /// A pod's log lines, oldest first; `None` if the pod does not exist.
    pub fn logs(&self, namespace: &str, pod: &str) -> Option<Vec<String>> {
        self.log_entries(namespace, pod)
            .map(|l| l.into_iter().map(|(_, line)| line).collect())
    }

    /// A pod's log lines with the time each was written; `None` if the pod does not exist.
    pub fn log_entries(&self, namespace: &str, pod: &str) -> Option<Vec<(DateTime<Utc>, String)>> {
        let st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
            return None;
        }
        Some(st.logs.get(&key).map(|l| l.lines.clone()).unwrap_or_default())
    }

    /// Resolves when the pod gets new log lines, is modified (e.g. turns terminal) or is deleted
    /// (for `follow=true`). Resolves at once if the pod does not exist.
    pub fn log_changed(&self, namespace: &str, pod: &str) -> impl Future<Output = ()> + Send + 'static {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        let rx = if st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
            let log = st.logs.entry(key).or_insert_with(|| PodLog {
                lines: Vec::new(),
                notify: tokio::sync::watch::Sender::new(0),
            });
            Some(log.notify.subscribe())
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
