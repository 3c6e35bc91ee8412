//! A job's output as jobgate keeps it: lines, each from a run (a pod, on Kubernetes), the
//! stretches it could not read (gaps, each marked by a line where it is), and the archive's
//! summary. Plain data shared by the store, the executors and the service.

/// One line of a job's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Which run wrote it (a pod name on Kubernetes), when the executor knows.
    pub source: Option<String>,
    pub text: String,
}

/// What the archive holds of a job's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogArchive {
    /// Lines archived, markers included: the next line's cursor.
    pub lines: i64,
    /// Bytes of those lines, uncompressed (each line's text and its newline).
    pub bytes: i64,
    /// The archive stopped before the output ended (the per-job cap, or lines lost while
    /// the store could not be written); its last line says so.
    pub truncated: bool,
    /// Stretches of output jobgate could not read, each marked by a line where it was.
    pub gaps: i64,
    /// The first reason lines are missing, when known (gaps and truncation both count).
    pub loss: Option<LogLoss>,
}

impl LogArchive {
    /// Whether the archive holds every line the job wrote, as far as jobgate can know.
    pub fn complete(&self) -> bool {
        !self.truncated && self.gaps == 0
    }

    /// Why the archive is not whole, in words; `None` when it is.
    pub fn incomplete_reason(&self) -> Option<&'static str> {
        if self.complete() {
            return None;
        }
        Some(self.loss.map_or(
            "the archive stopped before the output ended; its last line says why",
            LogLoss::reason,
        ))
    }
}

/// Why lines of a job's output are missing from its archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLoss {
    /// The kubelet rotated a pod's log file before jobgate read these lines: reads serve only
    /// the current file.
    Rotated,
    /// The kubelet removed a deleted pod's containers, and their log, before jobgate read all
    /// of it.
    Collected,
    /// The pod was deleted before jobgate read all of its log.
    PodGone,
    /// The archive reached its per-job cap (`--log-archive-max-bytes`).
    Capped,
    /// Lines were lost while the store could not be written.
    Unwritten,
}

impl LogLoss {
    /// How the store keeps it.
    pub fn code(self) -> &'static str {
        match self {
            Self::Rotated => "rotated",
            Self::Collected => "collected",
            Self::PodGone => "pod-gone",
            Self::Capped => "capped",
            Self::Unwritten => "unwritten",
        }
    }

    /// The loss a stored code stands for; `None` for a code this version does not know.
    pub fn from_code(code: &str) -> Option<Self> {
        [
            Self::Rotated,
            Self::Collected,
            Self::PodGone,
            Self::Capped,
            Self::Unwritten,
        ]
        .into_iter()
        .find(|l| l.code() == code)
    }

    /// Why the archive is not whole, as `Job.logIncompleteReason` says it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Rotated => {
                "the kubelet rotated a pod's log before jobgate read all of it; a marker line stands where lines are missing"
            }
            Self::Collected => {
                "the kubelet removed a deleted pod's containers before jobgate read all of its log; a marker line stands where lines are missing"
            }
            Self::PodGone => {
                "a pod was deleted before jobgate read all of its log; a marker line stands where lines are missing"
            }
            Self::Capped => {
                "the archive reached its per-job cap (--log-archive-max-bytes); its last line says where it stopped"
            }
            Self::Unwritten => {
                "lines were lost while the store could not be written; the archive's last line says where"
            }
        }
    }
}

/// A stretch of a run's output jobgate could not read: it stands in the archive, in order, as
/// a marker line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogGap {
    /// The run whose lines are missing (a pod's name on Kubernetes).
    pub source: Option<String>,
    /// How many lines are missing, when known (the kubelet does not say how many lines it no
    /// longer serves).
    pub lines: Option<u64>,
    /// Why they are missing: [`LogLoss::Rotated`], [`LogLoss::Collected`] or
    /// [`LogLoss::PodGone`].
    pub cause: LogLoss,
}

impl LogGap {
    /// The line that stands where the missing lines were.
    pub fn marker(&self) -> String {
        let lost = match self.lines {
            Some(1) => "1 line lost".to_owned(),
            Some(n) => format!("{n} lines lost"),
            None => "lines lost".to_owned(),
        };
        let pod = self.source.as_deref().unwrap_or("?");
        let why = match self.cause {
            LogLoss::Rotated => format!("the kubelet rotated the log of pod {pod} before jobgate read them"),
            LogLoss::Collected => {
                format!(
                    "the kubelet removed the containers of pod {pod}, and their log, before jobgate read all of it"
                )
            }
            LogLoss::PodGone => format!("pod {pod} was deleted before jobgate read all of its log"),
            LogLoss::Capped | LogLoss::Unwritten => "the archive could not keep them".to_owned(),
        };
        format!("[jobgate: {lost}: {why}]")
    }
}

/// Longest line kept, in bytes; longer ones are cut (at a character boundary).
pub const MAX_LOG_LINE: usize = 16 * 1024;

/// `text` cut to at most [`MAX_LOG_LINE`] bytes, at a character boundary, without line breaks.
pub fn clip_log_line(text: &str) -> String {
    let text = text.trim_end_matches(['\n', '\r']);
    let mut end = text.len().min(MAX_LOG_LINE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_marker_counts_its_lines_when_known() {
        let gap = LogGap {
            source: Some("pod-a".into()),
            lines: Some(12),
            cause: LogLoss::Rotated,
        };
        assert_eq!(
            gap.marker(),
            "[jobgate: 12 lines lost: the kubelet rotated the log of pod pod-a before jobgate read them]"
        );
        let unknown = LogGap { lines: None, ..gap };
        assert!(unknown.marker().starts_with("[jobgate: lines lost: "));
        for loss in [
            LogLoss::Rotated,
            LogLoss::Collected,
            LogLoss::PodGone,
            LogLoss::Capped,
            LogLoss::Unwritten,
        ] {
            assert_eq!(LogLoss::from_code(loss.code()), Some(loss));
        }
    }
}
