//! One endpoint's delivery loop: read the events after its cursor from the store, POST the
//! first that matches its filter, advance the cursor after a 2xx, and otherwise retry with
//! exponential back-off and jitter until the retry window has passed, then park.
//!
//! The store is the only source of events and of the endpoint's state: the loop re-reads the
//! endpoint before each step (so a delete, a replay or a lost claim stops or redirects it
//! within [`RECHECK`]), and uses the event bus only to wake up when something was committed.
//! Every outcome is recorded under the claim and revision it started with, so a replay or a
//! takeover in between is never overwritten. Delivery is at least once: the cursor moves only
//! after the receiver answered 2xx, so a crash or shutdown in between sends the event again.
//! Events go one at a time in cursor order, which keeps each job's events in order. It must
//! not decide who delivers an endpoint (`mod` does, with the store's claims).
//!
//! Each batch read is delivered only as far as the endpoint's owner may read it now: the
//! owner's rights ([`Owners`](super::Owners)) are taken after the batch is read, so an event
//! committed after the rights changed is judged by the new ones; an owner who no longer
//! exists disables the endpoint, with the reason on it.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use ring::rand::SecureRandom as _;

use super::owners::Rights;
use super::signing::sign;
use super::target::{Resolved, Target, TargetError};
use super::{Shared, delivers};
use crate::model::JobEvent;
use crate::store::{StoreError, Webhook, WebhookFailure};

/// Events read from the store at a time.
const PAGE: i64 = 256;

/// The longest the loop waits (idle, or before a retry) before it reads its endpoint again.
pub(super) const RECHECK: Duration = Duration::from_secs(2);

/// The longest a connection may take to open; the whole request has `request_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one attempt failed: the metric's outcome and the message `lastError` shows.
struct Failed {
    outcome: &'static str,
    error: String,
}

/// A client pinned to the address it was built for, reused while the host resolves to it.
type Pinned = Option<(Resolved, reqwest::Client)>;

/// Delivers endpoint `id` while this process holds its claim and jobgate runs.
pub(super) async fn run(shared: Arc<Shared>, id: String) {
    // Taken before the first read: whatever is committed after it wakes the loop.
    let mut wake = shared.bus.subscribe();
    let mut client: Pinned = None;
    loop {
        if shared.stop.is_cancelled() {
            break;
        }
        let endpoint = match shared.store.webhook(&id).await {
            Ok(Some(w))
                if !w.parked
                    && w.disabled_at.is_none()
                    && w.claimed_by.as_deref() == Some(shared.claimant.as_str()) =>
            {
                w
            }
            // Deleted, parked, disabled, or delivered by another process now.
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(webhook = %id, error = %e, "reading a webhook endpoint failed; retrying");
                pause(&shared, RECHECK).await;
                continue;
            }
        };
        let now = now_ms();
        if let Some(next) = endpoint.next_attempt_at.filter(|next| *next > now) {
            let wait = Duration::from_millis((next - now) as u64);
            pause(&shared, wait.min(RECHECK)).await;
            continue;
        }
        let page = match shared
            .store
            .events_after(endpoint.cursor, PAGE, None, &endpoint.scope)
            .await
        {
            Ok(page) => page,
            Err(StoreError::CursorExpired { after, oldest }) => {
                // Retention deleted events the endpoint had not been sent: delivering on would
                // skip them silently. Parked, saying so; a replay from `oldest` goes on.
                let at = now_ms();
                let failure = WebhookFailure {
                    attempts: endpoint.attempts + 1,
                    failing_since: endpoint.failing_since.unwrap_or(at),
                    error: format!(
                        "events after cursor {after} were deleted by retention before they were delivered; \
                         replayWebhook(after: \"{oldest}\") delivers from the oldest event kept"
                    ),
                    at,
                    next_attempt_at: None,
                };
                tracing::warn!(webhook = %id, url = %endpoint.url, after, oldest, "webhook cursor older than retention; endpoint parked");
                let parked = shared
                    .store
                    .webhook_failed(&id, &shared.claimant, endpoint.revision, &failure);
                if record(&shared, &id, parked).await {
                    shared.metrics.webhook_parked.inc();
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(webhook = %id, error = %e, "reading events for a webhook failed; retrying");
                pause(&shared, RECHECK).await;
                continue;
            }
        };
        let rights = shared.owners.rights(&endpoint.owner);
        if let Rights::Gone(reason) = &rights {
            match shared.store.disable_webhook(&id, reason, now_ms()).await {
                Ok(_) => {
                    tracing::warn!(webhook = %id, owner = %endpoint.owner, reason = %reason, "webhook endpoint disabled: its owner no longer exists");
                    break;
                }
                Err(e) => {
                    tracing::warn!(webhook = %id, error = %e, "disabling a webhook endpoint failed; retrying");
                    pause(&shared, RECHECK).await;
                    continue;
                }
            }
        }
        let matching: Vec<&JobEvent> = page.iter().filter(|e| delivers(&endpoint, &rights, e)).collect();
        let oldest = matching
            .first()
            .map_or(0, |e| (Utc::now() - e.at).num_seconds().max(0));
        shared
            .metrics
            .webhook_lag(&id, Some((matching.len() as i64, oldest)));
        let Some(event) = matching.first() else {
            match page.last() {
                // Nothing of this page is for the endpoint: pass over it.
                Some(last) => {
                    let passed = shared.store.webhook_delivered(
                        &id,
                        &shared.claimant,
                        endpoint.revision,
                        last.seq,
                        None,
                    );
                    record(&shared, &id, passed).await;
                }
                None => {
                    tokio::select! {
                        _ = wake.published() => {}
                        _ = tokio::time::sleep(RECHECK) => {}
                        _ = shared.stop.cancelled() => {}
                    }
                }
            }
            continue;
        };
        let attempt = tokio::select! {
            outcome = attempt(&shared, &endpoint, event, &mut client) => outcome,
            // Not recorded: the event is sent again by whoever delivers the endpoint next.
            _ = shared.stop.cancelled() => break,
        };
        let at = now_ms();
        match attempt {
            Ok(()) => {
                shared.metrics.webhook_delivery("delivered");
                let delivered = shared.store.webhook_delivered(
                    &id,
                    &shared.claimant,
                    endpoint.revision,
                    event.seq,
                    Some(at),
                );
                record(&shared, &id, delivered).await;
            }
            Err(failed) => {
                shared.metrics.webhook_delivery(failed.outcome);
                let failure = failure(&shared, &endpoint, failed.error, at);
                if failure.next_attempt_at.is_none() {
                    tracing::warn!(webhook = %id, url = %endpoint.url, error = %failure.error, attempts = failure.attempts, "webhook deliveries kept failing for the whole retry window; endpoint parked");
                } else {
                    tracing::info!(webhook = %id, url = %endpoint.url, error = %failure.error, attempts = failure.attempts, "webhook delivery failed; will retry");
                }
                let parks = failure.next_attempt_at.is_none();
                let failed = shared
                    .store
                    .webhook_failed(&id, &shared.claimant, endpoint.revision, &failure);
                if record(&shared, &id, failed).await && parks {
                    shared.metrics.webhook_parked.inc();
                }
            }
        }
    }
    shared.metrics.webhook_lag(&id, None);
}

/// Records an outcome under this process's claim; whether it landed (a store error is
/// logged: the loop reads the endpoint again and repeats the step).
async fn record(
    shared: &Shared,
    id: &str,
    write: impl std::future::Future<Output = crate::store::Result<bool>>,
) -> bool {
    match write.await {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(webhook = %id, error = %e, "recording a webhook delivery failed; it will be repeated");
            pause(shared, RECHECK).await;
            false
        }
    }
}

/// Waits `wait`, or less if jobgate stops.
async fn pause(shared: &Shared, wait: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = shared.stop.cancelled() => {}
    }
}

/// The failure to record after an attempt failed at `at`: the next attempt after an
/// exponential back-off with jitter, or none (park) once the retry window has passed.
fn failure(shared: &Shared, endpoint: &Webhook, error: String, at: i64) -> WebhookFailure {
    let attempts = endpoint.attempts + 1;
    let failing_since = endpoint.failing_since.unwrap_or(at);
    let window = shared.settings.retry_window.as_millis() as i64;
    let next_attempt_at = (at - failing_since < window).then(|| {
        let delay = backoff(
            attempts,
            shared.settings.backoff_min,
            shared.settings.backoff_max,
            jitter(),
        );
        // The last retry comes when the window ends, so that parking is not late by a
        // whole back-off.
        (at + delay.as_millis() as i64).min(failing_since + window)
    });
    WebhookFailure {
        attempts,
        failing_since,
        error,
        at,
        next_attempt_at,
    }
}

/// The delay before retry number `attempts`: `min` doubled per failed attempt up to `max`,
/// of which a random part (`jitter`, 0 to 1) of the upper half is taken, so that endpoints
/// failing together do not retry in lockstep.
pub(super) fn backoff(attempts: i64, min: Duration, max: Duration, jitter: f64) -> Duration {
    let doublings = (attempts - 1).clamp(0, 30) as u32;
    let full = min.saturating_mul(1 << doublings).min(max).max(min);
    full / 2 + full.mul_f64(jitter.clamp(0.0, 1.0) / 2.0)
}

fn jitter() -> f64 {
    let mut bytes = [0u8; 4];
    // Randomness that fails leaves no jitter, which only makes the retry less spread.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX)
}

/// One attempt to deliver `event`: check the target's address again, then POST the signed
/// message to that address.
async fn attempt(
    shared: &Shared,
    endpoint: &Webhook,
    event: &JobEvent,
    client: &mut Pinned,
) -> Result<(), Failed> {
    let refused = |e: TargetError| Failed {
        outcome: match e {
            TargetError::Unresolvable { .. } => "unreachable",
            _ => "refused_target",
        },
        error: e.to_string(),
    };
    let target = Target::parse(&endpoint.url).map_err(refused)?;
    let resolved = target
        .resolve(shared.settings.allow_private_targets)
        .await
        .map_err(refused)?;
    let http = match client {
        Some((pinned, http)) if *pinned == resolved => http.clone(),
        _ => {
            let builder = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(CONNECT_TIMEOUT.min(shared.settings.request_timeout))
                .timeout(shared.settings.request_timeout)
                .user_agent(concat!("jobgate-webhooks/", env!("CARGO_PKG_VERSION")));
            let http = resolved.pin(builder).build().map_err(|e| Failed {
                outcome: "unreachable",
                error: format!("preparing the HTTP client: {e}"),
            })?;
            *client = Some((resolved, http.clone()));
            http
        }
    };
    let body = super::payload(event).to_string();
    let message_id = format!("{}-{}", endpoint.id, event.seq);
    let timestamp = Utc::now().timestamp();
    let signature = sign(&endpoint.secret, &message_id, timestamp, body.as_bytes());
    let mut request = http
        .post(target.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", &message_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature);
    // The job's trace, so that the receiver's spans join it (its root span is the parent).
    if let Some(trace) = &event.job.trace {
        request = request.header("traceparent", trace.traceparent());
        if let Some(state) = &trace.trace_state {
            request = request.header("tracestate", state);
        }
    }
    let response = request.body(body).send().await.map_err(|e| Failed {
        outcome: "unreachable",
        error: describe(&e),
    })?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(Failed {
            outcome: "rejected",
            error: format!("the endpoint answered HTTP {}", status.as_u16()),
        })
    }
}

/// A request error with its causes, without the URL (the caller's own, shown elsewhere).
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "the request timed out".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(super) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum_with_jitter_in_the_upper_half() {
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(backoff(1, min, max, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(1, min, max, 0.0), Duration::from_millis(500));
        assert_eq!(backoff(3, min, max, 1.0), Duration::from_secs(4));
        assert_eq!(backoff(40, min, max, 1.0), Duration::from_secs(60));
        assert_eq!(backoff(40, min, max, 0.0), Duration::from_secs(30));
    }
}
