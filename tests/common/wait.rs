//! Waiting in tests, bounded by [`WAIT`]: for what jobgate announces (a job's phases, through
//! a `jobStatus` subscription, and lines of its log: never by polling), and for what a test
//! can only look at again and again (its own API, `/readyz`, a file, a process, the
//! cluster), through [`Polling`]. A wait that gives up says what it waited for and, where
//! there is a jobgate to ask, what it last saw and jobgate's log. A wait only waits: what the
//! test then asserts of what it found is the test's.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{GqlWs, Server, WAIT};

/// One wait of at most [`WAIT`], however many looks it takes: a loop that looks, then calls
/// [`Polling::pause`] while what it waits for is not there yet.
pub struct Polling {
    deadline: Instant,
    every: Duration,
}

impl Polling {
    /// A wait that looks again every 20 ms: soon enough after anything a test waits for.
    pub fn start() -> Polling {
        Self::every(Duration::from_millis(20))
    }

    /// A wait that looks again every `every`.
    pub fn every(every: Duration) -> Polling {
        Polling {
            deadline: Instant::now() + WAIT,
            every,
        }
    }

    /// Between two looks: fails the test with the message `never` makes once the wait limit
    /// has passed; otherwise pauses before the next look.
    pub async fn pause(&self, never: impl FnOnce() -> String) {
        assert!(Instant::now() < self.deadline, "{}", never());
        tokio::time::sleep(self.every).await;
    }
}

/// The phases a subscriber was told, and whether the subscription completed after them.
struct Followed {
    phases: Vec<String>,
    completed: bool,
}

/// The job's fields the archive waits read.
const ARCHIVE: &str = "phase logArchive { lines bytes gaps truncated }";

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "SUCCEEDED" | "FAILED" | "CANCELLED")
}

impl Server {
    /// Asks for the job (with `fields`) until `check` holds of it, and returns it: for states
    /// a subscription does not announce (progress, conditions, another object's effect). The
    /// test polls its own API; jobgate polls nothing.
    pub async fn job_until(
        &self,
        id: &str,
        fields: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let polling = Polling::start();
        loop {
            let job = self.job_with(id, fields).await;
            if check(&job) {
                return job;
            }
            polling
                .pause(|| format!("never: {what}; last {job}; jobgate's log:\n{}", self.log_text()))
                .await;
        }
    }

    /// Waits until the job's archived output holds at least `lines` lines (its log may still
    /// be followed); returns the job's phase and `logArchive`.
    pub async fn wait_archive_reaches(&self, id: &str, lines: i64) -> Value {
        let what = format!("job {id}'s archive reaches {lines} lines");
        self.job_until(id, ARCHIVE, &what, |job| {
            job["logArchive"]["lines"].as_i64().unwrap_or(0) >= lines
        })
        .await
    }

    /// Waits until the job has finished and its archived output holds exactly `lines` lines;
    /// returns the job's phase and `logArchive`.
    pub async fn wait_archived(&self, id: &str, lines: i64) -> Value {
        let what = format!("job {id} finished with {lines} lines archived");
        self.job_until(id, ARCHIVE, &what, |job| {
            job["logArchive"]["lines"] == lines
                && !matches!(job["phase"].as_str(), Some("RUNNING" | "PENDING"))
        })
        .await
    }

    /// Waits (through a jobStatus subscription, never by polling) until the job is terminal
    /// and its subscription completes; returns the phases seen, the first being the state at
    /// subscription time.
    pub async fn wait_terminal(&self, id: &str) -> Vec<String> {
        let followed = self.follow_phases(id, |_| false).await;
        followed.phases
    }

    /// Waits (through jobStatus) until the job reaches `phase`; panics if it ends first.
    pub async fn wait_phase(&self, id: &str, phase: &str) {
        let followed = self.follow_phases(id, |seen| seen == phase).await;
        assert!(
            !followed.completed,
            "jobStatus of job {id} ended before {phase}: it went {:?}; jobgate's log:\n{}",
            followed.phases,
            self.log_text()
        );
    }

    /// Waits (through jobStatus) until the job reports a terminal phase, and returns it. It
    /// reads up to that event rather than to the stream's `complete`, so it does not depend on
    /// when the server ends the subscription.
    pub async fn terminal_phase(&self, id: &str) -> String {
        let followed = self.follow_phases(id, is_terminal).await;
        let last = followed.phases.last().cloned().unwrap_or_default();
        assert!(
            is_terminal(&last),
            "jobStatus of job {id} completed before a terminal phase: it went {:?}",
            followed.phases
        );
        last
    }

    /// Follows the job's jobStatus until a phase for which `enough` holds (`completed` false)
    /// or the subscription completes (`completed` true). Any other message, or nothing within
    /// [`WAIT`], fails the test with jobgate's log.
    async fn follow_phases(&self, id: &str, enough: impl Fn(&str) -> bool) -> Followed {
        let mut ws = GqlWs::connect(self).await;
        ws.subscribe(
            "s",
            "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
            json!({"id": id}),
        )
        .await;
        let mut phases = Vec::new();
        loop {
            let Some(msg) = ws.recv_within(WAIT).await else {
                let job = self.job(id).await;
                panic!(
                    "jobStatus of job {id} said nothing more within {WAIT:?} after {phases:?}; \
                     it is {job}; jobgate's log:\n{}",
                    self.log_text()
                );
            };
            let phase = msg["payload"]["data"]["jobStatus"]["phase"].as_str();
            match (msg["type"].as_str(), phase) {
                (Some("next"), Some(phase)) => {
                    phases.push(phase.to_owned());
                    if enough(phase) {
                        return Followed {
                            phases,
                            completed: false,
                        };
                    }
                }
                (Some("complete"), _) => {
                    return Followed {
                        phases,
                        completed: true,
                    };
                }
                _ => panic!(
                    "unexpected message following job {id}: {msg}; jobgate's log:\n{}",
                    self.log_text()
                ),
            }
        }
    }

    /// Waits until jobgate's log has a line containing `needle` (a spawned jobgate's log is
    /// read from a pipe by a thread of ours, so a line written before an answer may be read
    /// after it).
    pub async fn wait_log(&self, needle: &str) {
        if self
            .logs
            .line_where(|line| line.contains(needle), WAIT)
            .await
            .is_none()
        {
            panic!("jobgate's log never said {needle:?}:\n{}", self.log_text());
        }
    }

    /// Waits until `n` subscriptions have joined their fan-out groups (the metric
    /// `jobgate_subscription_group_members`): a subscription joins once it has its place in
    /// the event stream, so whatever is recorded from then on reaches it. graphql-transport-ws
    /// acknowledges no `subscribe`, and a `jobEvents` without `after` starts from now: a test
    /// that acts for a subscriber to see waits for this first.
    pub async fn wait_subscriptions_live(&self, n: usize) {
        let polling = Polling::start();
        loop {
            let seen = super::scrape(self)
                .await
                .get("jobgate_subscription_group_members")
                .copied()
                .unwrap_or(0.0);
            if seen == n as f64 {
                return;
            }
            polling
                .pause(|| {
                    format!(
                        "{seen} subscriptions live, never {n}; jobgate's log:\n{}",
                        self.log_text()
                    )
                })
                .await;
        }
    }

    /// The status `/readyz` answers.
    pub async fn readyz(&self) -> u16 {
        self.http()
            .get(self.url("/readyz"))
            .send()
            .await
            .expect("GET /readyz")
            .status()
            .as_u16()
    }

    /// Waits until `/readyz` answers `status` (200 ready, 503 not).
    pub async fn wait_ready_is(&self, status: u16) {
        let polling = Polling::start();
        while self.readyz().await != status {
            polling
                .pause(|| format!("/readyz never answered {status}; log:\n{}", self.log_text()))
                .await;
        }
    }
}
