//! A webhook receiver for tests: an axum server on 127.0.0.1 that checks every Standard
//! Webhooks signature with its own HMAC-SHA256 (built here on SHA-256, not jobgate's code) and
//! records what it accepted, and the check that one job's events arrived whole and in order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Polling, Server};

/// HMAC-SHA256 (RFC 2104), written out: the receiver's own check of jobgate's signatures.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

/// One message the receiver accepted.
#[derive(Clone, Debug)]
pub struct Received {
    pub id: String,
    pub body: Value,
    /// Its `traceparent` header, when it had one.
    pub traceparent: Option<String>,
}

#[derive(Default)]
pub struct ReceiverState {
    /// The endpoint's secret, once the test knows it; until then every message is refused
    /// (500), so jobgate retries it.
    secret: Mutex<Option<String>>,
    /// Answer 500 to everything.
    failing: AtomicBool,
    accepted: Mutex<Vec<Received>>,
    /// Requests answered 500 on purpose.
    refused: AtomicUsize,
    /// Requests whose signature (or headers) did not verify.
    pub forged: AtomicUsize,
}

/// A webhook receiver on 127.0.0.1 that verifies each message as the specification says.
pub struct Receiver {
    pub url: String,
    pub state: Arc<ReceiverState>,
    _server: tokio::task::JoinHandle<()>,
}

async fn receive(State(state): State<Arc<ReceiverState>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let secret = state.secret.lock().unwrap().clone();
    if state.failing.load(Ordering::SeqCst) || secret.is_none() {
        state.refused.fetch_add(1, Ordering::SeqCst);
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (Some(id), Some(timestamp), Some(signatures)) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ) else {
        state.forged.fetch_add(1, Ordering::SeqCst);
        return StatusCode::BAD_REQUEST;
    };
    let secret = secret.unwrap();
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("a base64 secret");
    let signed = format!("{id}.{timestamp}.");
    let mut message = signed.into_bytes();
    message.extend_from_slice(&body);
    let expected = format!("v1,{}", STANDARD.encode(hmac_sha256(&key, &message)));
    let valid = timestamp.parse::<i64>().is_ok() && signatures.split(' ').any(|s| s == expected);
    if !valid {
        state.forged.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED;
    }
    let body: Value = serde_json::from_slice(&body).expect("a JSON body");
    let traceparent = header("traceparent");
    state.accepted.lock().unwrap().push(Received {
        id,
        body,
        traceparent,
    });
    StatusCode::NO_CONTENT
}

impl Receiver {
    pub async fn start() -> Receiver {
        let state = Arc::new(ReceiverState::default());
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            url,
            state,
            _server: server,
        }
    }

    pub fn trust(&self, secret: &str) {
        *self.state.secret.lock().unwrap() = Some(secret.to_owned());
    }

    pub fn fail(&self, failing: bool) {
        self.state.failing.store(failing, Ordering::SeqCst);
    }

    pub fn accepted(&self) -> Vec<Received> {
        self.state.accepted.lock().unwrap().clone()
    }

    pub fn refused(&self) -> usize {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// The events accepted for `job`, in arrival order.
    pub fn events_of(&self, job: &str) -> Vec<Value> {
        self.accepted()
            .into_iter()
            .map(|r| r.body["data"].clone())
            .filter(|d| d["jobId"] == job)
            .collect()
    }

    /// Waits until the receiver has accepted `job`'s terminal event; returns `job`'s events.
    pub async fn wait_terminal_of(&self, server: &Server, job: &str) -> Vec<Value> {
        let polling = Polling::start();
        loop {
            let events = self.events_of(job);
            if events
                .iter()
                .any(|e| matches!(e["phase"].as_str(), Some("SUCCEEDED" | "FAILED" | "CANCELLED")))
            {
                return events;
            }
            polling
                .pause(|| {
                    format!(
                        "the receiver never got job {job}'s last event; it has {:?}; jobgate's log:\n{}",
                        self.accepted(),
                        server.log_text()
                    )
                })
                .await;
        }
    }
}

/// Every event of one job, as delivered: each exactly once, in cursor order, each phase
/// following the one before (so none is missing), from submission to a terminal phase.
pub fn assert_whole_history(events: &[Value]) {
    assert!(!events.is_empty(), "no events");
    let mut unique: Vec<&Value> = Vec::new();
    for e in events {
        // At least once: a repeat must be the same message as its first delivery.
        if let Some(first) = unique.iter().find(|u| u["cursor"] == e["cursor"]) {
            assert_eq!(*first, e, "a repeated delivery differs from the first");
        } else {
            unique.push(e);
        }
    }
    let cursors: Vec<i64> = unique
        .iter()
        .map(|e| e["cursor"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        cursors.windows(2).all(|w| w[0] < w[1]),
        "out of order: {cursors:?}"
    );
    assert_eq!(unique[0]["phase"], "PENDING", "{events:?}");
    assert_eq!(unique[0]["previousPhase"], Value::Null, "{events:?}");
    for pair in unique.windows(2) {
        assert_eq!(
            pair[1]["previousPhase"], pair[0]["phase"],
            "an event is missing between {} and {}",
            pair[0], pair[1]
        );
    }
    assert_eq!(unique.last().unwrap()["phase"], "SUCCEEDED", "{events:?}");
}
