//! The feed of schedule events a subscription reads: every event in the caller's scope after
//! a cursor, from the store, then each new one as it is stored, in cursor order.
//!
//! It reads the store only: the events this process stores wake it at once; with replicas
//! sharing the store, so do theirs, through the store's commit wake-ups (PostgreSQL's
//! `LISTEN`/`NOTIFY`, the job event follower's mechanism), and, as the follower does, it also
//! looks now and then for a wake-up lost while the listener reconnected. It must not filter
//! beyond the caller's scope nor build events.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};

use super::{Schedules, State};
use crate::jobs::service::ServiceError;
use crate::model::{ScheduleEvent, Scope};

/// Events read from the store at a time.
const BATCH: i64 = 200;

/// With replicas: how often the store is looked at without a wake-up (a safety net: a lost
/// notification only delays an event).
const SHARED_POLL: Duration = Duration::from_secs(5);

/// With replicas: wakes the feeds at every commit of events by any replica, until shutdown.
pub(super) async fn wake_on_commits(inner: Arc<State>, mut wakeups: BoxStream<'static, ()>) {
    loop {
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            woken = wakeups.next() => match woken {
                Some(()) => inner.appended.send_modify(|n| *n += 1),
                None => return,
            },
        }
    }
}

impl Schedules {
    /// The newest schedule event's cursor.
    pub async fn events_head(&self) -> Result<i64, ServiceError> {
        Ok(self.inner.store.last_schedule_event_seq().await?)
    }

    /// Every schedule event in `scope` after `after` (`None`: from now on), then live.
    pub async fn events(
        &self,
        scope: Scope,
        after: Option<i64>,
    ) -> Result<impl Stream<Item = Result<ScheduleEvent, ServiceError>> + Send + 'static, ServiceError> {
        let head = self.events_head().await?;
        if let Some(after) = after
            && after > head
        {
            return Err(ServiceError::Invalid(crate::model::ValidationError {
                field: "after".into(),
                message: format!("cursor {after} is past the newest schedule event ({head})"),
            }));
        }
        let cursor = after.unwrap_or(head);
        let inner = self.inner.clone();
        let wakeups = inner.appended.subscribe();
        let state = (
            cursor,
            std::collections::VecDeque::<ScheduleEvent>::new(),
            wakeups,
        );
        Ok(futures::stream::unfold(
            state,
            move |(mut cursor, mut queue, mut wakeups)| {
                let inner = inner.clone();
                let scope = scope.clone();
                async move {
                    loop {
                        if let Some(event) = queue.pop_front() {
                            return Some((Ok(event), (cursor, queue, wakeups)));
                        }
                        // Marked seen before reading, so that an event stored during the read wakes
                        // the next wait.
                        wakeups.borrow_and_update();
                        match inner.store.schedule_events(&scope, cursor, BATCH).await {
                            Ok(events) if !events.is_empty() => {
                                cursor = events.last().map_or(cursor, |e| e.seq);
                                queue.extend(events);
                                continue;
                            }
                            Ok(_) => {}
                            Err(e) => return Some((Err(e.into()), (cursor, queue, wakeups))),
                        }
                        let poll = async {
                            if inner.shared {
                                tokio::time::sleep(SHARED_POLL).await;
                            } else {
                                std::future::pending::<()>().await;
                            }
                        };
                        tokio::select! {
                            changed = wakeups.changed() => if changed.is_err() { return None },
                            () = poll => {}
                            () = inner.shutdown.cancelled() => return None,
                        }
                    }
                }
            },
        ))
    }
}
