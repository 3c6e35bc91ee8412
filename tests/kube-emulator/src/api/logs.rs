//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: the lines the emulated kubelet wrote to the
//! store, as `text/plain`, honouring `container`, `tailLines`, `sinceSeconds`/`sinceTime`,
//! `timestamps`, `limitBytes`, `previous` and `follow` (stream until the container terminates or
//! the pod goes away).
//!
//! As on a node, a read that opens the log sees only its current file (earlier lines were
//! rotated away, see `store::pod_logs`), while an open follow stream goes on across a rotation.
//! Once the kubelet has removed the pod's containers, the answer is the one a real API server
//! relays from the kubelet: `200` with the body `unable to retrieve container logs for
//! <containerID>` (the kubelet has already sent its headers when the runtime says the
//! container is gone, so the error lands in the body). An open follow stream still sends what
//! was written before the removal, as the kubelet's reader drains the files it holds open,
//! then ends.
//!
//! Faults: [`crate::faults::Faults::drop_log_streams`] ends every open stream at once, and
//! [`crate::faults::Faults::cut_log_answers`] ends the next answers after so many lines.
//!
//! The store keeps one log per pod (not per container instance), so `container` only selects
//! and validates, and `previous=true` answers the real 400 when the container never restarted
//! and the pod's log otherwise. Must not write anything.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

use super::status::ApiError;
use super::{ApiState, Query, Target};

struct Options {
    container: String,
    tail: Option<usize>,
    since: Option<DateTime<Utc>>,
    timestamps: bool,
    limit_bytes: Option<usize>,
}

fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .find_map(|list| {
            pod.pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .find(|c| c.get("name").and_then(Value::as_str) == Some(container))
                })
        })
}

/// Whether the container's current instance has stopped (its log will not grow).
fn finished(pod: &Value, container: &str) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) || container_status(pod, container).is_some_and(|c| c.pointer("/state/terminated").is_some())
}

fn format_line(at: &DateTime<Utc>, line: &str, timestamps: bool) -> String {
    if timestamps {
        format!("{} {line}\n", at.to_rfc3339_opts(SecondsFormat::Nanos, true))
    } else {
        format!("{line}\n")
    }
}

pub fn get(api: &Arc<ApiState>, t: &Target, q: &Query) -> Result<Response, ApiError> {
    let ns = t.ns().unwrap_or_default().to_owned();
    let name = t.name().to_owned();
    let pod = api
        .store
        .get("pods", Some(&ns), &name)
        .ok_or_else(|| ApiError::not_found(&t.rt, &name))?;
    let names: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(
            pod.pointer("/spec/initContainers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    let main_count = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let container = match q.value("container") {
        Some(c) if names.iter().any(|n| n == c) => c.to_owned(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if main_count == 1 => names[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let status = container_status(&pod, &container);
    if q.flag("previous") {
        let restarts = status
            .and_then(|s| s.get("restartCount"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if restarts == 0 {
            return Err(ApiError::bad_request(format!(
                "previous terminated container {container:?} in pod {name:?} not found"
            )));
        }
    }
    let waiting_reason = match status {
        None => Some("ContainerCreating".to_owned()),
        Some(s) if s.pointer("/state/waiting").is_some() && s.pointer("/lastState/terminated").is_none() => {
            Some(
                s.pointer("/state/waiting/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("ContainerCreating")
                    .to_owned(),
            )
        }
        Some(_) => None,
    };
    if let Some(reason) = waiting_reason
        && !finished(&pod, &container)
    {
        return Err(ApiError::bad_request(format!(
            "container {container:?} in pod {name:?} is waiting to start: {reason}"
        )));
    }
    let since = match (q.int("sinceSeconds")?, q.value("sinceTime")) {
        (Some(secs), _) => Some(Utc::now() - chrono::Duration::seconds(secs)),
        (None, Some(t)) => Some(
            DateTime::parse_from_rfc3339(t)
                .map_err(|e| ApiError::bad_request(format!("invalid sinceTime: {e}")))?
                .with_timezone(&Utc),
        ),
        (None, None) => None,
    };
    let options = Options {
        container,
        tail: q.int("tailLines")?.map(|n| n.max(0) as usize),
        since,
        timestamps: q.flag("timestamps"),
        limit_bytes: q.int("limitBytes")?.filter(|n| *n > 0).map(|n| n as usize),
    };
    let log = api.store.log_view(&ns, &name).unwrap_or_default();
    if log.collected {
        let id = status
            .and_then(|s| s.get("containerID"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut response = Response::new(Body::from(format!("unable to retrieve container logs for {id}")));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        return Ok(response);
    }
    let selected: Vec<&(DateTime<Utc>, String)> = log
        .current()
        .iter()
        .filter(|(at, _)| options.since.is_none_or(|s| *at >= s))
        .collect();
    let skip = options.tail.map_or(0, |n| selected.len().saturating_sub(n));
    let cut = api.faults.take_log_cut();
    let shown = cut.map_or(selected.len() - skip, |c| c.min(selected.len() - skip));
    let mut text: String = selected[skip..skip + shown]
        .iter()
        .map(|(at, line)| format_line(at, line, options.timestamps))
        .collect();
    let cut_short = cut.is_some_and(|c| shown >= c);
    let limit = options.limit_bytes;
    if let Some(limit) = limit
        && text.len() > limit
    {
        let mut cut = limit;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    let mut response = if q.flag("follow") && !finished(&pod, &options.container) && !cut_short {
        follow(
            api.clone(),
            ns,
            name,
            options,
            log.lines.len(),
            text,
            cut.map(|c| c - shown),
        )
    } else {
        Response::new(Body::from(text))
    };
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

/// The lines already known, then every new one until the container stops, the pod is gone or
/// its containers are collected. `sent` counts every line written so far, rotated ones
/// included: the stream goes on from there whatever is rotated meanwhile.
fn follow(
    api: Arc<ApiState>,
    ns: String,
    pod: String,
    options: Options,
    sent: usize,
    first: String,
    cut_after: Option<usize>,
) -> Response {
    struct State {
        /// Lines still to send before the answer is cut, when it is.
        cut_after: Option<usize>,
        dropped: tokio::sync::watch::Receiver<u64>,
        api: Arc<ApiState>,
        ns: String,
        pod: String,
        options: Options,
        sent: usize,
        bytes: usize,
        first: Option<String>,
        done: bool,
    }
    let mut dropped = api.faults.log_dropper();
    dropped.mark_unchanged();
    let state = State {
        cut_after,
        dropped,
        api,
        ns,
        pod,
        bytes: first.len(),
        options,
        sent,
        first: Some(first),
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        if let Some(first) = s.first.take()
            && !first.is_empty()
        {
            return Some((Ok::<_, Infallible>(Bytes::from(first)), s));
        }
        loop {
            // A drop ends the stream now, whatever lines were written since.
            if s.done || s.dropped.has_changed().unwrap_or(true) {
                return None;
            }
            // Subscribe before reading, so a line written in between wakes us.
            let changed = s.api.store.log_changed(&s.ns, &s.pod);
            let pod = s.api.store.get("pods", Some(&s.ns), &s.pod);
            let log = s.api.store.log_view(&s.ns, &s.pod).unwrap_or_default();
            let stopped = log.collected || pod.as_ref().is_none_or(|p| finished(p, &s.options.container));
            let entries = log.lines;
            if entries.len() > s.sent {
                let mut end = entries.len();
                if let Some(left) = s.cut_after {
                    end = end.min(s.sent + left);
                    s.cut_after = Some(left - (end - s.sent));
                    s.done |= s.cut_after == Some(0);
                }
                let mut text: String = entries[s.sent..end]
                    .iter()
                    .map(|(at, line)| format_line(at, line, s.options.timestamps))
                    .collect();
                s.sent = end;
                if let Some(limit) = s.options.limit_bytes {
                    let room = limit.saturating_sub(s.bytes);
                    if text.len() >= room {
                        let mut cut = room;
                        while !text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        text.truncate(cut);
                        s.done = true;
                    }
                }
                s.bytes += text.len();
                s.done |= stopped;
                return Some((Ok(Bytes::from(text)), s));
            }
            if stopped {
                return None;
            }
            tokio::select! {
                _ = changed => {}
                _ = s.dropped.changed() => return None,
            }
        }
    });
    Response::new(Body::from_stream(stream))
}
