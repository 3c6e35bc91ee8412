//! core/v1 Events as the real Job controller, scheduler and kubelet write them (legacy shape:
//! `involvedObject`, `source`, `firstTimestamp`/`lastTimestamp`, `count`, no `eventTime`), named
//! `<object>.<hex nanoseconds>` like client-go's recorder names them.
//!
//! It only creates events; it does not aggregate repeats (the real recorder patches `count`), and
//! a failure to record is logged, never returned: an event is never a reason to fail a reconcile.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::objects;
use crate::store::{Store, now_timestamp};

/// Who reports an event (`source` / `reportingComponent` / `reportingInstance`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source<'a> {
    pub component: &'a str,
    /// The node, for the kubelet.
    pub host: Option<&'a str>,
}

pub(crate) const JOB_CONTROLLER: Source<'static> = Source {
    component: "job-controller",
    host: None,
};
pub(crate) const SCHEDULER: Source<'static> = Source {
    component: "default-scheduler",
    host: None,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

pub(crate) struct Recorder {
    enabled: bool,
    /// Last suffix handed out: names stay unique even for two events in the same nanosecond.
    last_nanos: AtomicU64,
}

impl Recorder {
    pub(crate) fn new(enabled: bool) -> Self {
        Recorder {
            enabled,
            last_nanos: AtomicU64::new(0),
        }
    }

    fn next_nanos(&self) -> u64 {
        let now = chrono::Utc::now()
            .timestamp_nanos_opt()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or_default();
        let mut last = self.last_nanos.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self
                .last_nanos
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(actual) => last = actual,
            }
        }
    }

    /// Records an event about `object` (which must carry apiVersion, kind and metadata).
    pub(crate) fn record(
        &self,
        store: &Store,
        object: &Value,
        event_type: EventType,
        reason: &str,
        message: &str,
        source: Source<'_>,
    ) {
        if !self.enabled {
            return;
        }
        let namespace = objects::namespace(object).unwrap_or("default").to_owned();
        let now = now_timestamp();
        let mut involved = json!({
            "apiVersion": object.get("apiVersion").cloned().unwrap_or(Value::Null),
            "kind": object.get("kind").cloned().unwrap_or(Value::Null),
            "name": objects::name(object),
            "uid": objects::uid(object),
        });
        if let Some(ns) = objects::namespace(object) {
            involved["namespace"] = json!(ns);
        }
        if let Some(rv) = object.pointer("/metadata/resourceVersion") {
            involved["resourceVersion"] = rv.clone();
        }
        let mut source_json = json!({"component": source.component});
        if let Some(host) = source.host {
            source_json["host"] = json!(host);
        }
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{}.{:x}", objects::name(object), self.next_nanos()),
                "namespace": namespace,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": event_type.as_str(),
            "source": source_json,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": source.component,
            "reportingInstance": source.host.unwrap_or_default(),
        });
        if let Err(e) = store.create("events", Some(&namespace), event) {
            tracing::debug!(object = %objects::display(object), reason, error = %e, "recording an event failed");
        }
    }
}
