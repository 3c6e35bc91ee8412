//! A job's output as jobgate keeps it: lines, each from a run (a pod, on Kubernetes), and the
//! archive's summary. Plain data shared by the store, the executors and the service.

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
    /// Lines archived, the truncation marker included: the next line's cursor.
    pub lines: i64,
    /// Bytes of those lines, uncompressed (each line's text and its newline).
    pub bytes: i64,
    /// The archive stopped before the output ended (the per-job cap, or lines lost while
    /// the store could not be written); its last line says so.
    pub truncated: bool,
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
