//! What an emulated container does, chosen by the test through the container's environment.
//!
//! The kubelet reads these variables from `spec.containers[].env[].value` (plain values only;
//! `valueFrom` is not resolved). A test sets them per job, e.g. through jobgate's `submitJob(env:
//! …)` or in a YAML manifest for kubectl. Every variable is optional:
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `EMULATOR_PENDING_MS` | time the pod stays Pending (ContainerCreating) before it runs | [`SimConfig::pending`] (20 ms) |
//! | `EMULATOR_RUN_MS` | time the container runs before it exits | [`SimConfig::run`] (50 ms) |
//! | `EMULATOR_EXIT_CODE` | exit code of every run not forced to fail below | `0` |
//! | `EMULATOR_FAIL_EXIT_CODE` | exit code of the runs forced to fail below | `EMULATOR_EXIT_CODE` if non-zero, else `1` |
//! | `EMULATOR_FAIL_INDEXES` | completion indexes that always fail, e.g. `1,3-5` (Indexed Jobs) | none |
//! | `EMULATOR_FAIL_ATTEMPTS` | the first N runs of the Job fail, later ones exit normally; counted per completion index for Indexed Jobs, per container; with `restartPolicy: OnFailure` each in-place restart is a run | `0` |
//! | `EMULATOR_OOM_ATTEMPTS` | the first N runs (counted as above) are OOM-killed when their run time ends: `terminated.reason: OOMKilled`, exit code 137 | `0` |
//! | `EMULATOR_EVICT_ATTEMPTS` | the first N runs (counted as above) end in the kubelet's node-pressure eviction when their run time ends: pod `Failed`, `reason: Evicted`, condition `DisruptionTarget` (`TerminationByKubelet`), containers killed (137) | `0` |
//! | `EMULATOR_PREEMPT_ATTEMPTS` | the first N runs (counted as above) are preempted by the scheduler when their run time ends: condition `DisruptionTarget` (`PreemptionByScheduler`), then the pod is deleted and its containers stopped | `0` |
//! | `EMULATOR_LOG` | log lines, separated by newlines (a literal two-character `\n` also separates) | what `echo` would print for the container's command and args: the words joined by spaces, without a leading `echo` |
//! | `EMULATOR_LOG_LINES` | N more log lines after those, `line 1` … `line N` (a big output without a big variable) | `0` |
//! | `EMULATOR_TERMINATION_MESSAGE` | written to `terminated.message` at every exit; `{index}` and `{pod}` are replaced by the completion index and the pod name | none |
//! | `EMULATOR_GATE` | gate name: the container keeps running (after its run time) until the test calls `Simulation::open_gate(name)`; a gate opened earlier lets it pass; `{index}` is replaced by the completion index (a gate per index) | none |
//! | `EMULATOR_IMAGE_PULL_ERROR` | `1`/`true`: the pod stays Pending with `ErrImagePull` | off |
//!
//! When several of these apply to one run, preemption wins over eviction, eviction over the OOM
//! kill, and the OOM kill over a forced failure.
//!
//! A value that does not parse keeps the pod Pending with `CreateContainerConfigError` and a message naming
//! the variable, as the real kubelet does for a broken container config.
//!
//! [`SimConfig::pending`]: super::SimConfig::pending
//! [`SimConfig::run`]: super::SimConfig::run

use std::time::Duration;

use serde_json::Value;

use super::SimConfig;

pub const PENDING_MS: &str = "EMULATOR_PENDING_MS";
pub const RUN_MS: &str = "EMULATOR_RUN_MS";
pub const EXIT_CODE: &str = "EMULATOR_EXIT_CODE";
pub const FAIL_EXIT_CODE: &str = "EMULATOR_FAIL_EXIT_CODE";
pub const FAIL_INDEXES: &str = "EMULATOR_FAIL_INDEXES";
pub const FAIL_ATTEMPTS: &str = "EMULATOR_FAIL_ATTEMPTS";
pub const OOM_ATTEMPTS: &str = "EMULATOR_OOM_ATTEMPTS";
pub const EVICT_ATTEMPTS: &str = "EMULATOR_EVICT_ATTEMPTS";
pub const PREEMPT_ATTEMPTS: &str = "EMULATOR_PREEMPT_ATTEMPTS";
pub const LOG: &str = "EMULATOR_LOG";
pub const LOG_LINES: &str = "EMULATOR_LOG_LINES";
pub const TERMINATION_MESSAGE: &str = "EMULATOR_TERMINATION_MESSAGE";
pub const GATE: &str = "EMULATOR_GATE";
pub const IMAGE_PULL_ERROR: &str = "EMULATOR_IMAGE_PULL_ERROR";

/// A value of an `EMULATOR_*` variable that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for {name}: {reason}")]
pub struct BehaviourError {
    pub name: &'static str,
    pub value: String,
    pub reason: String,
}

/// How one run of a container ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The process exits with this code.
    Exit(i32),
    /// The kernel's OOM killer ends it: exit code 137, reason `OOMKilled`.
    OomKilled,
    /// The kubelet evicts the whole pod for node pressure.
    Evicted,
    /// The scheduler preempts the whole pod (marks it, then deletes it).
    Preempted,
}

/// One container's script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    pub pending: Duration,
    pub run: Duration,
    pub exit_code: i32,
    /// Exit code of forced failures (never 0).
    pub fail_exit_code: i32,
    /// Inclusive ranges of completion indexes that always fail.
    pub fail_indexes: Vec<(u64, u64)>,
    pub fail_attempts: u32,
    /// Runs that are OOM-killed, evicted by the kubelet, preempted by the scheduler.
    pub oom_attempts: u32,
    pub evict_attempts: u32,
    pub preempt_attempts: u32,
    pub log: Vec<String>,
    pub termination_message: Option<String>,
    pub gate: Option<String>,
    pub image_pull_error: bool,
}

impl Behaviour {
    /// Reads the script of `container` (a `spec.containers[]` entry).
    pub fn from_container(container: &Value, config: &SimConfig) -> Result<Behaviour, BehaviourError> {
        let env = |name: &str| -> Option<&str> {
            container.get("env")?.as_array()?.iter().rev().find_map(|e| {
                (e.get("name")?.as_str()? == name)
                    .then(|| e.get("value").and_then(Value::as_str).unwrap_or_default())
            })
        };
        let invalid = |name: &'static str, value: &str, reason: &str| BehaviourError {
            name,
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        let millis = |name: &'static str, default: Duration| -> Result<Duration, BehaviourError> {
            match env(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| invalid(name, v, "expected a whole number of milliseconds")),
            }
        };
        let exit_code = match env(EXIT_CODE) {
            None => 0,
            Some(v) => v
                .trim()
                .parse::<i32>()
                .map_err(|_| invalid(EXIT_CODE, v, "expected an integer"))?,
        };
        let fail_exit_code = match env(FAIL_EXIT_CODE) {
            None if exit_code != 0 => exit_code,
            None => 1,
            Some(v) => match v.trim().parse::<i32>() {
                Ok(0) => return Err(invalid(FAIL_EXIT_CODE, v, "a failure needs a non-zero exit code")),
                Ok(code) => code,
                Err(_) => return Err(invalid(FAIL_EXIT_CODE, v, "expected an integer")),
            },
        };
        let count = |name: &'static str| -> Result<u32, BehaviourError> {
            match env(name) {
                None => Ok(0),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| invalid(name, v, "expected a count")),
            }
        };
        let fail_attempts = count(FAIL_ATTEMPTS)?;
        let fail_indexes = match env(FAIL_INDEXES) {
            None => Vec::new(),
            Some(v) => parse_indexes(v).map_err(|reason| invalid(FAIL_INDEXES, v, &reason))?,
        };
        let image_pull_error = match env(IMAGE_PULL_ERROR).map(str::trim) {
            None | Some("" | "0" | "false") => false,
            Some("1" | "true") => true,
            Some(v) => return Err(invalid(IMAGE_PULL_ERROR, v, "expected 1 or 0")),
        };
        let mut log = match env(LOG) {
            Some(v) => split_lines(v),
            None => echo_output(container),
        };
        if let Some(v) = env(LOG_LINES) {
            let n = v
                .trim()
                .parse::<u32>()
                .map_err(|_| invalid(LOG_LINES, v, "expected a count"))?;
            log.extend((1..=n).map(|i| format!("line {i}")));
        }
        Ok(Behaviour {
            pending: millis(PENDING_MS, config.pending)?,
            run: millis(RUN_MS, config.run)?,
            exit_code,
            fail_exit_code,
            fail_indexes,
            fail_attempts,
            oom_attempts: count(OOM_ATTEMPTS)?,
            evict_attempts: count(EVICT_ATTEMPTS)?,
            preempt_attempts: count(PREEMPT_ATTEMPTS)?,
            log,
            termination_message: env(TERMINATION_MESSAGE).map(str::to_owned),
            gate: env(GATE)
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
            image_pull_error,
        })
    }

    /// Whether run number `attempt` (1-based) of completion index `index` must fail.
    pub fn fails(&self, index: Option<u64>, attempt: u32) -> bool {
        let failing_index =
            index.is_some_and(|i| self.fail_indexes.iter().any(|&(lo, hi)| lo <= i && i <= hi));
        failing_index || attempt <= self.fail_attempts
    }

    /// The exit code of run number `attempt` of completion index `index`.
    pub fn exit_code_for(&self, index: Option<u64>, attempt: u32) -> i32 {
        if self.fails(index, attempt) {
            self.fail_exit_code
        } else {
            self.exit_code
        }
    }

    /// How run number `attempt` of completion index `index` ends once its run time is over.
    pub fn run_end(&self, index: Option<u64>, attempt: u32) -> RunEnd {
        if attempt <= self.preempt_attempts {
            RunEnd::Preempted
        } else if attempt <= self.evict_attempts {
            RunEnd::Evicted
        } else if attempt <= self.oom_attempts {
            RunEnd::OomKilled
        } else {
            RunEnd::Exit(self.exit_code_for(index, attempt))
        }
    }

    /// The gate of completion index `index`: `EMULATOR_GATE` with `{index}` replaced.
    pub fn gate_for(&self, index: Option<u64>) -> Option<String> {
        let index = index.map(|i| i.to_string()).unwrap_or_default();
        self.gate.as_ref().map(|g| g.replace("{index}", &index))
    }

    /// The termination message with `{index}` and `{pod}` replaced.
    pub fn termination_message_for(&self, index: Option<u64>, pod: &str) -> Option<String> {
        let index = index.map(|i| i.to_string()).unwrap_or_default();
        self.termination_message
            .as_ref()
            .map(|m| m.replace("{index}", &index).replace("{pod}", pod))
    }
}

/// `"1,3-5"` → `[(1,1),(3,5)]`.
fn parse_indexes(s: &str) -> Result<Vec<(u64, u64)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => (part, part),
        };
        let lo: u64 = lo
            .parse()
            .map_err(|_| format!("{part:?} is not an index or a range like 2-4"))?;
        let hi: u64 = hi
            .parse()
            .map_err(|_| format!("{part:?} is not an index or a range like 2-4"))?;
        if hi < lo {
            return Err(format!("range {part:?} ends before it starts"));
        }
        out.push((lo, hi));
    }
    Ok(out)
}

fn split_lines(s: &str) -> Vec<String> {
    let s = s.replace("\\n", "\n");
    let s = s.strip_suffix('\n').unwrap_or(&s);
    if s.is_empty() {
        Vec::new()
    } else {
        s.split('\n').map(str::to_owned).collect()
    }
}

/// What `echo` prints for the container's command and args: the words joined by spaces, with a
/// leading `echo` (or `/bin/echo`) dropped.
fn echo_output(container: &Value) -> Vec<String> {
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|k| container.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let words = match words.first() {
        Some(first) if first.rsplit('/').next() == Some("echo") => &words[1..],
        _ => &words[..],
    };
    if words.is_empty() {
        Vec::new()
    } else {
        split_lines(&words.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container(env: &[(&str, &str)]) -> Value {
        let env: Vec<Value> = env.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
        json!({"name": "main", "image": "busybox", "command": ["echo", "hello", "world"], "env": env})
    }

    #[test]
    fn defaults_come_from_the_config_and_the_command() {
        let config = SimConfig::default();
        let b = Behaviour::from_container(&container(&[]), &config).expect("parse");
        assert_eq!(b.run, config.run);
        assert_eq!(b.pending, config.pending);
        assert_eq!(b.exit_code, 0);
        assert_eq!(b.log, ["hello world"]);
        assert!(!b.fails(Some(0), 1));
        let sh = json!({"name": "main", "image": "busybox", "command": ["sh", "-c"], "args": ["exit 0"]});
        assert_eq!(
            Behaviour::from_container(&sh, &config).expect("parse").log,
            ["sh -c exit 0"]
        );
    }

    #[test]
    fn variables_script_the_container() {
        let b = Behaviour::from_container(
            &container(&[
                (RUN_MS, "5"),
                (PENDING_MS, "7"),
                (FAIL_INDEXES, "1, 3-4"),
                (FAIL_ATTEMPTS, "2"),
                (LOG, "a\\nb\nc\n"),
                (TERMINATION_MESSAGE, "index {index} of {pod}"),
                (GATE, "g"),
            ]),
            &SimConfig::default(),
        )
        .expect("parse");
        assert_eq!(b.run, Duration::from_millis(5));
        assert_eq!(b.pending, Duration::from_millis(7));
        assert_eq!(b.log, ["a", "b", "c"]);
        assert_eq!(b.gate.as_deref(), Some("g"));
        let per_index = Behaviour::from_container(&container(&[(GATE, "g-{index}")]), &SimConfig::default())
            .expect("parse");
        assert_eq!(per_index.gate_for(Some(3)).as_deref(), Some("g-3"));
        assert!(b.fails(Some(3), 9) && b.fails(Some(1), 9) && !b.fails(Some(2), 9));
        assert!(b.fails(None, 2) && !b.fails(None, 3));
        assert_eq!(b.exit_code_for(None, 1), 1);
        assert_eq!(b.exit_code_for(None, 3), 0);
        assert_eq!(
            b.termination_message_for(Some(4), "p-4-x").as_deref(),
            Some("index 4 of p-4-x")
        );
    }

    #[test]
    fn a_non_zero_exit_code_is_used_for_forced_failures_too() {
        let b = Behaviour::from_container(
            &container(&[(EXIT_CODE, "3"), (FAIL_ATTEMPTS, "1")]),
            &SimConfig::default(),
        )
        .expect("parse");
        assert_eq!(b.exit_code_for(None, 1), 3);
        assert_eq!(b.exit_code_for(None, 2), 3);
        let b = Behaviour::from_container(
            &container(&[(FAIL_EXIT_CODE, "7"), (FAIL_ATTEMPTS, "1")]),
            &SimConfig::default(),
        )
        .expect("parse");
        assert_eq!((b.exit_code_for(None, 1), b.exit_code_for(None, 2)), (7, 0));
        assert!(
            Behaviour::from_container(&container(&[(FAIL_EXIT_CODE, "0")]), &SimConfig::default()).is_err()
        );
    }

    #[test]
    fn disruptions_take_the_first_runs_in_their_order() {
        let b = Behaviour::from_container(
            &container(&[
                (PREEMPT_ATTEMPTS, "1"),
                (EVICT_ATTEMPTS, "2"),
                (OOM_ATTEMPTS, "3"),
                (FAIL_ATTEMPTS, "4"),
            ]),
            &SimConfig::default(),
        )
        .expect("parse");
        let ends: Vec<RunEnd> = (1..=5).map(|a| b.run_end(None, a)).collect();
        assert_eq!(
            ends,
            [
                RunEnd::Preempted,
                RunEnd::Evicted,
                RunEnd::OomKilled,
                RunEnd::Exit(1),
                RunEnd::Exit(0)
            ]
        );
        assert!(
            Behaviour::from_container(&container(&[(OOM_ATTEMPTS, "x")]), &SimConfig::default())
                .is_err_and(|e| e.name == OOM_ATTEMPTS)
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = Behaviour::from_container(&container(&[(RUN_MS, "soon")]), &SimConfig::default())
            .expect_err("invalid");
        assert_eq!(err.name, RUN_MS);
        assert!(err.to_string().contains("EMULATOR_RUN_MS"), "{err}");
        assert!(
            Behaviour::from_container(&container(&[(FAIL_INDEXES, "4-2")]), &SimConfig::default()).is_err()
        );
    }
}
