//! The archive of jobs' output, as both backends store it: what an append asks
//! ([`LogAppend`]) and what came of it ([`LogAppended`]), the per-job cap and its marker, a
//! gap's marker (archived in order, before the lines read after it), and the chunk format (each append becomes one chunk of lines, `source \t text \n` each,
//! deflate-compressed).
//!
//! Used by the statements both backends share (`sql/log_tables.rs`), so that both keep the same rules: an append lands
//! whole or not at all, a follower's position moves with its lines in the same transaction,
//! an archive past its cap is closed with a marker line and takes nothing more, a gap is
//! counted with its marker so that the archive never reads as whole. It must not
//! know SQL, nor who follows what.

use std::io::{Read as _, Write as _};

use crate::model::{LogArchive, LogGap, LogLine, LogLoss, LogRange};

use super::{Result, StoreError};

/// Lines to add at the end of a job's archive, in one transaction with whatever else the
/// batch holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogAppend {
    pub job_id: String,
    /// Who read these lines (a pod's name on Kubernetes; empty for a source with no
    /// position to resume from).
    pub source: String,
    /// `(expected, new)`: the source's stored position must still be `expected` (`None`:
    /// none stored yet), and becomes `new`. A follower that resumed from a position
    /// others have moved past since (another replica, an older follower) writes nothing:
    /// [`LogAppended::Stale`]. `None`: no position is kept for this source.
    pub position: Option<(Option<String>, String)>,
    pub lines: Vec<LogLine>,
    /// Lines after these were lost (jobgate could not keep them while the store refused
    /// writes): the archive is closed after them, with a marker saying so.
    pub lost: bool,
    /// Lines before these could not be read: the gap's marker is archived first, and the
    /// archive counts it (it is no longer complete).
    pub gap: Option<LogGap>,
}

/// What came of one [`LogAppend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogAppended {
    /// Every line was archived.
    Appended,
    /// Some or all lines were archived, then the archive was closed (its cap, or `lost`): it
    /// takes nothing more.
    Truncated,
    /// The archive was already closed: nothing was written.
    Closed,
    /// The source's position is no longer the one expected: nothing was written.
    Stale,
}

/// The marker that ends an archive cut at its cap.
pub fn cap_marker(cap_bytes: i64) -> String {
    format!(
        "[jobgate: output truncated: the archive keeps at most {cap_bytes} bytes of a job's output (--log-archive-max-bytes)]"
    )
}

/// The marker that ends an archive after lines were lost.
pub const LOST_MARKER: &str =
    "[jobgate: output truncated: lines were lost while the store could not be written]";

/// One line's size in the archive's count: its text and its newline.
pub fn line_bytes(line: &LogLine) -> i64 {
    line.text.len() as i64 + 1
}

/// What to write for `append` on an archive that holds `archive`: the lines (markers
/// included), the outcome, and what the archive holds after them. Nothing to write on a
/// closed archive.
pub(super) fn plan(
    archive: LogArchive,
    append: &LogAppend,
    cap_bytes: i64,
) -> (Vec<LogLine>, LogAppended, LogArchive) {
    if archive.truncated {
        return (Vec::new(), LogAppended::Closed, archive);
    }
    let mut after = archive.clone();
    let mut lines = Vec::with_capacity(append.lines.len() + 2);
    let gap = append.gap.as_ref().map(|gap| LogLine {
        source: gap.source.clone(),
        text: gap.marker(),
    });
    let mut outcome = LogAppended::Appended;
    for (i, line) in gap.iter().chain(&append.lines).enumerate() {
        if after.bytes + line_bytes(line) > cap_bytes {
            lines.push(LogLine {
                source: None,
                text: cap_marker(cap_bytes),
            });
            after.truncated = true;
            after.loss = after.loss.or(Some(LogLoss::Capped));
            outcome = LogAppended::Truncated;
            break;
        }
        if i == 0
            && let Some(gap) = &append.gap
        {
            after.gaps += 1;
            if after.loss.is_none() {
                after.loss = Some(gap.cause);
                after.loss_detail = gap.detail.clone();
            }
        }
        after.bytes += line_bytes(line);
        lines.push(line.clone());
    }
    if append.lost && outcome == LogAppended::Appended {
        lines.push(LogLine {
            source: None,
            text: LOST_MARKER.to_owned(),
        });
        after.truncated = true;
        after.loss = after.loss.or(Some(LogLoss::Unwritten));
        outcome = LogAppended::Truncated;
    }
    // Markers count as lines (they have cursors) and bytes, as the cap's always has.
    after.bytes = archive.bytes + lines.iter().map(line_bytes).sum::<i64>();
    after.lines = archive.lines + lines.len() as i64;
    (lines, outcome, after)
}

/// Where each source's lines are among `lines`, archived from the cursor `first_line`: one
/// range a source, in the order the sources first appear (lines with no source have none).
pub(super) fn source_ranges(first_line: i64, lines: &[LogLine]) -> Vec<(&str, LogRange)> {
    let mut ranges: Vec<(&str, LogRange)> = Vec::new();
    for (at, line) in (first_line..).zip(lines) {
        let Some(source) = line.source.as_deref() else {
            continue;
        };
        match ranges.iter_mut().find(|(s, _)| *s == source) {
            Some((_, range)) => range.last = at,
            None => ranges.push((source, LogRange { first: at, last: at })),
        }
    }
    ranges
}

/// A chunk's stored form.
pub(super) fn encode(lines: &[LogLine]) -> Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(lines.iter().map(|l| l.text.len() + 16).sum());
    for line in lines {
        raw.extend_from_slice(line.source.as_deref().unwrap_or_default().as_bytes());
        raw.push(b'\t');
        raw.extend_from_slice(line.text.as_bytes());
        raw.push(b'\n');
    }
    let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(&raw)
        .and_then(|()| encoder.finish())
        .map_err(|e| StoreError::Write(format!("compressing log lines: {e}")))
}

/// The lines of a stored chunk.
pub(super) fn decode(data: &[u8]) -> Result<Vec<LogLine>> {
    let mut raw = String::new();
    flate2::read::DeflateDecoder::new(data)
        .read_to_string(&mut raw)
        .map_err(|e| StoreError::Write(format!("reading a stored log chunk: {e}")))?;
    Ok(raw
        .lines()
        .map(|l| {
            let (source, text) = l.split_once('\t').unwrap_or(("", l));
            LogLine {
                source: (!source.is_empty()).then(|| source.to_owned()),
                text: text.to_owned(),
            }
        })
        .collect())
}

/// The lines from `from` on out of chunks read in order (`(first_line, data)`), at most
/// `max_lines` of them and `max_bytes` (at least one line, however long).
pub(super) fn select(
    chunks: Vec<(i64, Vec<u8>)>,
    from: i64,
    max_lines: usize,
    max_bytes: usize,
    out: &mut Vec<(i64, LogLine)>,
    bytes: &mut usize,
) -> Result<bool> {
    for (first, data) in chunks {
        for (i, line) in decode(&data)?.into_iter().enumerate() {
            let at = first + i as i64;
            if at < from {
                continue;
            }
            let size = line.text.len() + 1;
            if out.len() >= max_lines || (!out.is_empty() && *bytes + size > max_bytes) {
                return Ok(true);
            }
            *bytes += size;
            out.push((at, line));
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> LogLine {
        LogLine {
            source: Some("pod-a".into()),
            text: text.into(),
        }
    }

    #[test]
    fn each_source_ranges_from_its_first_line_to_its_last() {
        let lines = [
            line("a"),
            LogLine {
                source: Some("pod-b".into()),
                text: "b".into(),
            },
            LogLine {
                source: None,
                text: "marker".into(),
            },
            line("a again"),
        ];
        assert_eq!(
            source_ranges(10, &lines),
            [
                ("pod-a", LogRange { first: 10, last: 13 }),
                ("pod-b", LogRange { first: 11, last: 11 })
            ]
        );
    }

    #[test]
    fn chunks_round_trip_sources_tabs_and_empty_lines() {
        let lines = vec![
            line("a\tb"),
            LogLine {
                source: None,
                text: String::new(),
            },
            line("ünïcode"),
        ];
        assert_eq!(decode(&encode(&lines).unwrap()).unwrap(), lines);
    }

    #[test]
    fn the_cap_keeps_whole_lines_then_a_marker() {
        let append = LogAppend {
            job_id: "j".into(),
            source: String::new(),
            position: None,
            lines: vec![line("12345"), line("12345"), line("12345")],
            lost: false,
            gap: None,
        };
        let (lines, outcome, after) = plan(LogArchive::default(), &append, 13);
        assert_eq!(outcome, LogAppended::Truncated);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2].text, cap_marker(13));
        assert_eq!(
            (after.lines, after.truncated, after.loss),
            (3, true, Some(LogLoss::Capped))
        );
        let closed = LogArchive {
            truncated: true,
            ..LogArchive::default()
        };
        assert_eq!(plan(closed, &append, 13).1, LogAppended::Closed);
    }

    #[test]
    fn a_gap_is_archived_before_its_lines_and_counted() {
        let gap = LogGap {
            source: Some("pod-a".into()),
            lines: None,
            cause: LogLoss::Rotated,
            detail: None,
        };
        let append = LogAppend {
            job_id: "j".into(),
            source: "pod-a".into(),
            position: None,
            lines: vec![line("after")],
            lost: false,
            gap: Some(gap.clone()),
        };
        let (lines, outcome, after) = plan(LogArchive::default(), &append, 1 << 20);
        assert_eq!(outcome, LogAppended::Appended);
        assert_eq!(
            lines,
            [
                LogLine {
                    source: gap.source.clone(),
                    text: gap.marker()
                },
                line("after")
            ]
        );
        assert_eq!(
            (after.lines, after.gaps, after.loss),
            (2, 1, Some(LogLoss::Rotated))
        );
        assert!(!after.complete() && !after.truncated);
    }
}
