//! A local job's runner: one task per job that starts its runs (each a process group of its
//! own, in the job's directory, with the environment built from nothing), watches them, retries
//! failed ones with back-off (what a failure leads to, and when the retry may start, is
//! `retries`'), enforces the deadline and reports the job's status. It must not write the store
//! or decide phases: it reports what it saw.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use chrono::Utc;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::log_file::{LogWriter, copy_lines};
use super::retries::{FAILED_INDEXES, RetryBook, RunFailure, Verdict};
use super::run_attempts::{self as attempts, RunExit};
use super::{ARCHIVE_GRACE, LocalState, RunRecord, RunnerState, sandbox, user_switch};
use crate::executor::Observation;
use crate::model::{Condition, Job, MAX_RESULT_BYTES, WorkloadStatus, clip};

/// How one run ended.
enum RunOutcome {
    Succeeded {
        result: Option<String>,
    },
    /// `attempt`: the run's number in the job; `exit`: its exit code or signal.
    Failed {
        why: String,
        attempt: i32,
        exit: RunExit,
    },
}

/// One job's runner: starts its runs, retries them and reports its status until the job
/// finishes, is cancelled or jobgate shuts down.
pub(super) struct Runner {
    pub(super) inner: Arc<LocalState>,
    pub(super) job: Arc<Job>,
    pub(super) status: WorkloadStatus,
    pub(super) work_dir: PathBuf,
    pub(super) cancel: CancellationToken,
}

/// Why a runner stopped before the job finished.
enum Stop {
    Cancelled,
    Shutdown,
}

impl Runner {
    pub(super) async fn run(mut self) {
        let id = self.job.id.clone();
        let stopped = self.drive().await;
        match stopped {
            // Finished: `finish` removed the directory, unless the job had ended before.
            Ok(()) => sandbox::remove_work_dir(self.work_dir.clone()).await,
            Err(Stop::Cancelled) => {
                tracing::info!(job = %id, "local job cancelled; its processes are stopped");
                sandbox::remove_work_dir(self.work_dir.clone()).await;
            }
            // The job goes on after a restart, in the same directory.
            Err(Stop::Shutdown) => {}
        }
        self.inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        self.inner.close_log(&id);
    }

    fn state(&self) -> RunnerState {
        serde_json::from_value(self.status.executor_state.clone()).unwrap_or_default()
    }

    fn set_state(&mut self, state: &RunnerState) {
        self.status.executor_state = serde_json::to_value(state).unwrap_or_default();
    }

    /// Reports the status, with the attempts that started or ended since the last report.
    async fn report(&mut self) {
        let observation = Observation::of_status(self.job.id.clone(), self.status.clone());
        self.status.attempts.clear();
        if self.inner.observations.send(observation).await.is_err() {
            tracing::warn!(job = %self.job.id, "job service is gone; observation dropped");
        }
    }

    /// Records the job's outcome and reports it, once its working directory is gone (so
    /// that whoever learns the job finished finds nothing of it left for other jobs).
    async fn finish(&mut self, success: bool, reason: &str, message: &str) {
        let now = Utc::now();
        let (first, second) = if success {
            ("SuccessCriteriaMet", "Complete")
        } else {
            ("FailureTarget", "Failed")
        };
        for type_ in [first, second] {
            self.status
                .conditions
                .push(Condition::truthy(type_, reason, Some(message.to_owned()), now));
        }
        if success {
            self.status.completion_time = Some(now);
        }
        self.status.active = 0;
        self.set_state(&RunnerState::default());
        sandbox::remove_work_dir(self.work_dir.clone()).await;
        // Whoever learns the job finished finds its whole output archived: its runs have
        // ended and their output was copied; wait (a little, the store may be away) for the
        // archive to commit it.
        if let Some(sink) = self.inner.log_sink.get() {
            let _ = tokio::time::timeout(ARCHIVE_GRACE, sink.synced(&self.job.id)).await;
        }
        self.report().await;
    }

    /// Runs the job to its end; `Err` when it was stopped from outside.
    async fn drive(&mut self) -> Result<(), Stop> {
        let spec = self.job.spec.clone();
        if self.status.derive_phase().phase.is_terminal() {
            return Ok(());
        }
        // Runs that were in progress when jobgate stopped: their outcome is unknown, so like
        // a pod lost with its node they count as failed attempts.
        let RunnerState {
            runs: leftovers,
            retries,
        } = self.state();
        let mut book = retries;
        let interrupted = self.status.active.max(leftovers.len() as i32);
        if interrupted > 0 {
            for run in &leftovers {
                kill_leftover(run);
                let message = "jobgate restarted while it ran; its outcome is unknown";
                (self.status.attempts).push(attempts::stopped(run, "GatewayRestarted", message));
            }
            let lost = leftovers
                .iter()
                .map(|run| Some(run.index))
                .chain(std::iter::repeat(None));
            for index in lost.take(interrupted as usize) {
                if let Verdict::FailJob { reason, message } =
                    book.after_lost_run(&spec, &mut self.status.failed, index)
                {
                    self.finish(false, reason, &message).await;
                    return Ok(());
                }
            }
            self.status.active = 0;
            self.set_state(&RunnerState {
                runs: Vec::new(),
                retries: book.clone(),
            });
            self.status.message = Some(format!(
                "{interrupted} run(s) were in progress when jobgate stopped and count as failed (GatewayRestarted)"
            ));
            self.report().await;
        }

        let mut pending: VecDeque<i32> = (0..spec.completions)
            .filter(|i| !self.status.completed_indexes.contains(i) && !book.failed_indexes.contains(i))
            .collect();
        let deadline = spec.active_deadline_seconds.map(|secs| {
            let started = self.status.start_time.unwrap_or_else(Utc::now);
            let left = (started + chrono::Duration::seconds(secs.into()) - Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            Instant::now() + left
        });
        let mut runs: JoinSet<(i32, RunOutcome)> = JoinSet::new();
        let mut groups: HashMap<i32, RunRecord> = HashMap::new();

        loop {
            // Start runs up to `parallelism`, of the indexes not backing off.
            book.forget_past_back_offs(Utc::now());
            let mut changed = false;
            while (runs.len() as i32) < spec.parallelism {
                let now = Utc::now();
                let Some(next) = pending.iter().position(|i| book.may_start(*i, now)) else {
                    break;
                };
                let Some(index) = pending.remove(next) else { break };
                match self.spawn_run(index, &mut runs).await {
                    Ok(record) => {
                        self.status.attempts.push(attempts::started(&record));
                        groups.insert(index, record);
                        changed = true;
                    }
                    Err(why) => {
                        // A program that cannot start is a failed run, as a container that
                        // fails to start is.
                        let attempt = self.status.failed + self.status.succeeded + 1;
                        (self.status.attempts).push(attempts::not_started(index, attempt, &why, Utc::now()));
                        self.status.message = Some(why);
                        changed = true;
                        let subject = format!("run {attempt} (index {index})");
                        let failure = RunFailure {
                            index,
                            exit_code: None,
                            subject: &subject,
                        };
                        match book.after_failure(&spec, &mut self.status.failed, &failure) {
                            Verdict::FailJob { reason, message } => {
                                return self.fail_all(&mut runs, &groups, reason, &message).await;
                            }
                            Verdict::IndexFailed => continue,
                            Verdict::Retry => {}
                        }
                        pending.push_back(index);
                        book.back_off(&spec, index, self.retry_delay(&book, index), Utc::now());
                    }
                }
            }
            if changed {
                if self.status.start_time.is_none() {
                    self.status.start_time = Some(Utc::now());
                }
                self.status.active = runs.len() as i32;
                let state = RunnerState {
                    runs: groups.values().cloned().collect(),
                    retries: book.clone(),
                };
                self.set_state(&state);
                self.report().await;
            }
            if runs.is_empty() && pending.is_empty() && !book.failed_indexes.is_empty() {
                let (reason, message) = FAILED_INDEXES;
                self.finish(false, reason, message).await;
                return Ok(());
            }
            if runs.is_empty() && pending.is_empty() {
                let message = "Reached expected number of succeeded pods";
                self.finish(true, "CompletionsReached", message).await;
                return Ok(());
            }

            // The end of a back-off, on the monotonic clock.
            let wake = book.next_back_off_end().map(|t| {
                let left = (t - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                Instant::now().checked_add(left).unwrap_or_else(far_future)
            });
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    let stop = if self.inner.shutdown.is_cancelled() { Stop::Shutdown } else { Stop::Cancelled };
                    self.stop_all(&mut runs, &groups).await;
                    return Err(stop);
                }
                _ = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    return self.fail_all(&mut runs, &groups, "DeadlineExceeded", "Job was active longer than specified deadline").await;
                }
                _ = sleep_until(wake.unwrap_or_else(far_future)), if wake.is_some() => {}
                Some(joined) = runs.join_next() => {
                    let Ok((index, outcome)) = joined else { continue };
                    if let Some(record) = groups.remove(&index) {
                        // As when a container's main process exits: whatever it left
                        // behind in its group goes too.
                        let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGKILL);
                        let ended = match &outcome {
                            RunOutcome::Succeeded { .. } => attempts::ended(&record, true, RunExit { code: Some(0), signal: None }, None),
                            RunOutcome::Failed { why, exit, .. } => attempts::ended(&record, false, *exit, Some(why.clone())),
                        };
                        self.status.attempts.push(ended);
                    }
                    self.status.active = runs.len() as i32;
                    self.set_state(&RunnerState { runs: groups.values().cloned().collect(), retries: book.clone() });
                    match outcome {
                        RunOutcome::Succeeded { result } => {
                            self.status.succeeded += 1;
                            self.status.completed_indexes.insert(index);
                            if result.is_some() {
                                self.status.result = result;
                            }
                        }
                        RunOutcome::Failed { why, attempt, exit } => {
                            let exit_code = exit.code.or(exit.signal.map(|sig| 128 + sig));
                            self.status.message = Some(why);
                            let subject = format!("run {attempt} (index {index})");
                            let failure = RunFailure { index, exit_code, subject: &subject };
                            match book.after_failure(&spec, &mut self.status.failed, &failure) {
                                Verdict::FailJob { reason, message } => {
                                    return self.fail_all(&mut runs, &groups, reason, &message).await;
                                }
                                Verdict::IndexFailed => {}
                                Verdict::Retry => {
                                    pending.push_back(index);
                                    book.back_off(&spec, index, self.retry_delay(&book, index), Utc::now());
                                }
                            }
                            // With the back-off: a restart resumes it.
                            self.set_state(&RunnerState { runs: groups.values().cloned().collect(), retries: book.clone() });
                        }
                    }
                    self.report().await;
                }
            }
        }
    }

    fn retry_delay(&self, book: &RetryBook, index: i32) -> Duration {
        let config = &self.inner.config;
        book.delay(
            &self.job.spec,
            index,
            self.status.failed,
            config.retry_delay,
            config.retry_delay_cap,
        )
    }

    async fn fail_all(
        &mut self,
        runs: &mut JoinSet<(i32, RunOutcome)>,
        groups: &HashMap<i32, RunRecord>,
        reason: &str,
        message: &str,
    ) -> Result<(), Stop> {
        self.stop_all(runs, groups).await;
        for record in groups.values() {
            (self.status.attempts).push(attempts::stopped(record, reason, message));
        }
        self.finish(false, reason, message).await;
        Ok(())
    }

    /// SIGTERM to every run's process group, SIGKILL after the grace period.
    async fn stop_all(&self, runs: &mut JoinSet<(i32, RunOutcome)>, groups: &HashMap<i32, RunRecord>) {
        for record in groups.values() {
            let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGTERM);
        }
        let grace = tokio::time::sleep(self.inner.config.kill_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                _ = &mut grace => break,
                next = runs.join_next() => if next.is_none() { break },
            }
        }
        // Children that ignored SIGTERM, or outlived their group leader.
        for record in groups.values() {
            let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGKILL);
        }
        runs.shutdown().await;
    }

    async fn spawn_run(
        &self,
        index: i32,
        runs: &mut JoinSet<(i32, RunOutcome)>,
    ) -> Result<RunRecord, String> {
        let spec = &self.job.spec;
        let attempt = self.status.failed + self.status.succeeded + 1;
        let result_file = self.work_dir.join(format!("result-{index}-{attempt}"));
        let _ = std::fs::remove_file(&result_file);
        // One pipe for stdout and stderr, as `2>&1` does, so that the log keeps the order in
        // which the program wrote its lines; two pipes read concurrently would not.
        let (output, output_writer) =
            std::io::pipe().map_err(|e| format!("run {attempt} (index {index}): creating a pipe: {e}"))?;
        let error_writer = output_writer
            .try_clone()
            .map_err(|e| format!("run {attempt} (index {index}): duplicating a pipe: {e}"))?;
        let program = resolve_program(&spec.command[0], &self.inner.config.path);
        let could_not_start = |e: &dyn std::fmt::Display| {
            format!(
                "run {attempt} (index {index}) could not start {:?}: {e}",
                spec.command[0]
            )
        };
        let config = &self.inner.config;
        let (mut command, launch) = match (&config.run_as, &config.launcher) {
            (Some(user), Some(launcher)) => {
                let (command, launch) =
                    user_switch::command(launcher, user, &program).map_err(|e| could_not_start(&e))?;
                (command, Some(launch))
            }
            (run_as, _) => {
                let mut command = Command::new(&program);
                command.stdin(Stdio::null());
                if let Some(user) = run_as {
                    // With a uid set, the standard library also drops every supplementary
                    // group (setgroups(0)) before setuid; it forks jobgate to do so (see
                    // `user_switch`).
                    command.uid(user.uid).gid(user.gid);
                }
                (command, None)
            }
        };
        command
            .args(&spec.command[1..])
            .args(&spec.args)
            .current_dir(&self.work_dir)
            // The job sees only what it was given plus a minimal base, never jobgate's own
            // environment (which may hold credentials) nor a path into the data directory.
            .env_clear()
            .env("PATH", &config.path)
            .env("HOME", &self.work_dir)
            .env("TMPDIR", self.work_dir.join("tmp"))
            .env("LANG", "C.UTF-8")
            // The job's trace context, which the job's own `env` may override.
            .envs(crate::model::trace_env(&self.job))
            .envs(spec.env.iter().map(|v| (&v.name, &v.value)))
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("JOBGATE_JOB_ID", &self.job.id)
            .env("JOBGATE_RESULT_FILE", &result_file)
            .stdout(output_writer)
            .stderr(error_writer)
            .process_group(0)
            .kill_on_drop(false);
        let spawned = command.spawn();
        // Our copies of the write ends must close, or the pipes never reach end of file.
        drop(command);
        let child = spawned.map_err(|e| could_not_start(&e))?;
        if let Some(launch) = launch {
            // The launcher exits once it has said why; tokio reaps it.
            launch.started().await.map_err(|why| could_not_start(&why))?;
        }
        let output = tokio::net::unix::pipe::Receiver::from_owned_fd(output.into())
            .map_err(|e| format!("run {attempt} (index {index}): reading its output: {e}"));
        let pid = child.id().ok_or("process exited before it could be tracked")? as i32;
        let record = RunRecord {
            index,
            run: attempt,
            started_at: Some(Utc::now()),
            pgid: pid,
            proc_start: proc_start_time(pid),
        };
        let log = self.inner.log_writer(&self.job.id);
        runs.spawn(watch_run(
            output
                .map_err(|e| tracing::warn!(job = %self.job.id, error = %e, "output not captured"))
                .ok(),
            child,
            index,
            attempt,
            result_file,
            self.inner.config.run_as.as_ref().map(|user| user.uid),
            log,
        ));
        Ok(record)
    }
}

/// The program's path, looked up in the jobs' PATH when it names no directory. Handing the
/// standard library an absolute path lets it use posix_spawn instead of fork+exec, which
/// grows costlier as jobgate's memory does (see BENCHMARKS.md).
fn resolve_program(program: &str, path: &str) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| {
                m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
        .unwrap_or_else(|| PathBuf::from(program))
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

/// Waits for one run: copies its output into the job's log and reads its result file.
async fn watch_run(
    output: Option<tokio::net::unix::pipe::Receiver>,
    mut child: Child,
    index: i32,
    attempt: i32,
    result_file: PathBuf,
    result_owner: Option<u32>,
    log: Arc<LogWriter>,
) -> (i32, RunOutcome) {
    let source = attempts::run_name(index, attempt);
    let copy = output.map(|s| tokio::spawn(copy_lines(s, log.clone(), source)));
    let status = child.wait().await;
    // Output written by children still holding the pipe ends when the group is killed.
    if let Some(copy) = copy {
        let _ = tokio::time::timeout(Duration::from_secs(2), copy).await;
    }
    let result = sandbox::read_result(&result_file, result_owner).await;
    let outcome = match status {
        Ok(s) if s.success() => RunOutcome::Succeeded { result },
        Ok(s) => {
            let exit = RunExit {
                code: s.code(),
                signal: std::os::unix::process::ExitStatusExt::signal(&s),
            };
            let how = match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                _ => "ended".to_owned(),
            };
            // As terminationMessagePolicy FallbackToLogsOnError: the result file, else the
            // last lines of output.
            let detail = match result {
                Some(r) => r,
                None => log.last_lines(5).await.join("\n"),
            };
            let mut why = format!("run {attempt} (index {index}) {how}");
            if !detail.is_empty() {
                why.push_str(": ");
                why.push_str(&detail);
            }
            RunOutcome::Failed {
                why: clip(why, MAX_RESULT_BYTES),
                attempt,
                exit,
            }
        }
        Err(e) => RunOutcome::Failed {
            why: format!("run {attempt} (index {index}) could not be awaited: {e}"),
            attempt,
            exit: RunExit::default(),
        },
    };
    (index, outcome)
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot.
fn proc_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields resume after the
    // last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Kills a process group left by a previous jobgate, if it is still the same one.
pub(super) fn kill_leftover(run: &RunRecord) {
    let alive_and_ours = match (run.proc_start, proc_start_time(run.pgid)) {
        (Some(recorded), Some(now)) => recorded == now,
        (None, Some(_)) => false, // cannot prove it is ours: leave it
        // The leader is gone: its pgid could now name someone else's group, so leave it.
        (_, None) => false,
    };
    if alive_and_ours {
        let _ = killpg(Pid::from_raw(run.pgid), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_resolved_in_the_jobs_path() {
        assert_eq!(
            resolve_program("sh", "/nonexistent:/bin:/usr/bin"),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(resolve_program("./x", "/bin"), PathBuf::from("./x"));
        assert_eq!(
            resolve_program("no-such-program", "/bin"),
            PathBuf::from("no-such-program")
        );
    }

    #[test]
    fn clip_respects_char_boundaries() {
        let s = "é".repeat(3000);
        let clipped = clip(s, MAX_RESULT_BYTES);
        assert!(clipped.len() <= MAX_RESULT_BYTES);
        assert_eq!(clipped.len() % 2, 0);
    }

    #[test]
    fn proc_start_time_reads_our_own_process() {
        let me = std::process::id() as i32;
        assert!(proc_start_time(me).is_some());
        assert_eq!(proc_start_time(me), proc_start_time(me));
    }
}
