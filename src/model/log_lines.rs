//! A job's output as jobgate keeps it: lines, each from a run (a pod, on Kubernetes), the
//! stretches it could not read (gaps, each marked by a line where it is), where each run's
//! lines are in it, and the archive's summary. Plain data shared by the store, the executors and the service.

/// One line of a job's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Which run wrote it (a pod name on Kubernetes), when the executor knows.
    pub source: Option<String>,
    pub text: String,
}

/// Where one source's lines (a run's) are in a job's archive: the cursors of its first and
/// last archived line. Lines of other runs may lie between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRange {
    pub first: i64,
    pub last: i64,
}

/// What the archive holds of a job's output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// What the source said of that loss, when it said something ([`LogGap::detail`]: the
    /// API server's refusal).
    pub loss_detail: Option<String>,
}

impl LogArchive {
    /// Whether the archive holds every line the job wrote, as far as jobgate can know.
    pub fn complete(&self) -> bool {
        !self.truncated && self.gaps == 0
    }

    /// Why the archive is not whole, in words; `None` when it is.
    pub fn incomplete_reason(&self) -> Option<String> {
        if self.complete() {
            return None;
        }
        Some(match (self.loss, self.loss_detail.as_deref()) {
            (Some(LogLoss::Forbidden), Some(detail)) => format!(
                "the API server refused jobgate a pod's log ({detail}); a marker line stands where lines are missing"
            ),
            (Some(loss), _) => loss.reason().to_owned(),
            (None, _) => "the archive stopped before the output ended; its last line says why".to_owned(),
        })
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
    /// The API server refused jobgate the pod's log (RBAC without `get` on `pods/log`) until
    /// the pod had ended.
    Forbidden,
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
            Self::Forbidden => "forbidden",
        }
    }

    /// How the store keeps it with what the source said of it ([`LogArchive::loss_detail`]):
    /// its code, then `: ` and the detail.
    pub fn stored(self, detail: Option<&str>) -> String {
        match detail {
            Some(detail) => format!("{}: {detail}", self.code()),
            None => self.code().to_owned(),
        }
    }

    /// The loss and detail [`LogLoss::stored`] wrote; no loss for a code this version does
    /// not know.
    pub fn from_stored(stored: &str) -> (Option<Self>, Option<String>) {
        match stored.split_once(": ") {
            Some((code, detail)) => (Self::from_code(code), Some(detail.to_owned())),
            None => (Self::from_code(stored), None),
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
            Self::Forbidden,
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
            Self::Forbidden => {
                "the API server refused jobgate a pod's log; a marker line stands where lines are missing"
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
    /// Why they are missing: [`LogLoss::Rotated`], [`LogLoss::Collected`],
    /// [`LogLoss::PodGone`] or [`LogLoss::Forbidden`].
    pub cause: LogLoss,
    /// What the source said, when it said why (the API server's message for a refusal).
    pub detail: Option<String>,
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
            LogLoss::Forbidden => format!(
                "the API server refused jobgate the log of pod {pod}: {}",
                self.detail.as_deref().unwrap_or("forbidden")
            ),
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
            detail: None,
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
            LogLoss::Forbidden,
        ] {
            assert_eq!(LogLoss::from_code(loss.code()), Some(loss));
            assert_eq!(LogLoss::from_stored(&loss.stored(None)), (Some(loss), None));
        }
    }

    #[test]
    fn a_refusal_is_quoted_by_its_marker_and_the_archives_reason() {
        let refusal = "pods \"p\" is forbidden: User \"u\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"n\" (403 Forbidden)";
        let gap = LogGap {
            source: Some("p".into()),
            lines: None,
            cause: LogLoss::Forbidden,
            detail: Some(refusal.into()),
        };
        assert_eq!(
            gap.marker(),
            format!("[jobgate: lines lost: the API server refused jobgate the log of pod p: {refusal}]")
        );
        let stored = LogLoss::Forbidden.stored(Some(refusal));
        let (loss, loss_detail) = LogLoss::from_stored(&stored);
        assert_eq!(loss_detail.as_deref(), Some(refusal));
        let archive = LogArchive {
            lines: 1,
            bytes: 1,
            gaps: 1,
            loss,
            loss_detail,
            ..LogArchive::default()
        };
        let reason = archive.incomplete_reason().unwrap();
        assert!(reason.contains(refusal), "{reason}");
        // A code a later version wrote is no known loss.
        assert_eq!(
            LogLoss::from_stored("later: something"),
            (None, Some("something".into()))
        );
    }
}
