//! Pages of jobs and of log lines: connections, edges and page info, the log archive's
//! summary, and the one reading of a cursor a client sends back. They carry what a resolver
//! read; they must not read anything themselves.

use async_graphql::SimpleObject;

use super::JobObject;
use crate::graphql::error::bad_input;
use crate::model;

/// The cursor a client passed as `field` (one this server issued: a non-negative integer),
/// or a `BAD_USER_INPUT` error naming the field.
pub(crate) fn parse_cursor(field: &str, cursor: &str) -> async_graphql::Result<i64> {
    cursor
        .parse::<i64>()
        .ok()
        .filter(|c| *c >= 0)
        .ok_or_else(|| bad_input(field, format!("{cursor:?} is not a cursor this server issued")))
}

/// An optional `after` cursor of a page, read by [`parse_cursor`].
pub(crate) fn parse_after(after: Option<&str>) -> async_graphql::Result<Option<i64>> {
    after.map(|c| parse_cursor("after", c)).transpose()
}

/// One line of a job's output.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "LogLine")]
pub struct LogLineView {
    pub text: String,
    /// Which run wrote it (its attempt's `name`): the pod's name on Kubernetes, `index-<i>-run-<n>`
    /// on the local executor; null where jobgate cannot tell (its own marker lines, a local
    /// job's output read from its log file rather than the archive).
    pub source: Option<String>,
    /// Where the line is in the job's archived output (its offset, from 0): `jobLogs(after:)`
    /// and `Job.logLines(after:)` resume right after it. Null only for output of a job
    /// that finished before jobgate archived output, read from its executor.
    pub cursor: Option<String>,
}

impl LogLineView {
    pub fn of(cursor: Option<i64>, line: model::LogLine) -> Self {
        Self {
            text: line.text,
            source: line.source,
            cursor: cursor.map(|c| c.to_string()),
        }
    }
}

#[derive(SimpleObject)]
pub struct LogLineEdge {
    pub cursor: String,
    pub node: LogLineView,
}

impl LogLineEdge {
    /// The edges of archived lines, `(cursor, line)` each.
    pub fn all(lines: Vec<(i64, model::LogLine)>) -> Vec<Self> {
        lines
            .into_iter()
            .map(|(at, line)| Self {
                cursor: at.to_string(),
                node: LogLineView::of(Some(at), line),
            })
            .collect()
    }
}

/// A page of a job's archived output, oldest line first.
#[derive(SimpleObject)]
pub struct LogLineConnection {
    pub edges: Vec<LogLineEdge>,
    pub page_info: PageInfo,
}

/// What jobgate's archive holds of a job's output.
#[derive(SimpleObject)]
#[graphql(name = "LogArchive")]
pub struct LogArchiveView {
    /// Lines archived (markers included): the next line's cursor.
    pub lines: i64,
    /// Bytes of those lines, uncompressed (each line and its newline).
    pub bytes: i64,
    /// The archive stopped before the output ended: at the per-job cap
    /// (`--log-archive-max-bytes`), or after lines were lost while the store could not be
    /// written. Its last line says which.
    pub truncated: bool,
    /// Stretches of output jobgate could not read (a pod's log rotated or removed by the
    /// kubelet first, or refused by the API server), each marked by a line where it was; see
    /// `Job.logComplete`.
    pub gaps: i64,
}

impl From<model::LogArchive> for LogArchiveView {
    fn from(a: model::LogArchive) -> Self {
        Self {
            lines: a.lines,
            bytes: a.bytes,
            truncated: a.truncated,
            gaps: a.gaps,
        }
    }
}

#[derive(SimpleObject)]
pub struct JobEdge {
    pub cursor: String,
    pub node: JobObject,
}

#[derive(SimpleObject)]
pub struct PageInfo {
    pub has_next_page: bool,
    pub has_previous_page: bool,
    pub start_cursor: Option<String>,
    pub end_cursor: Option<String>,
}

#[derive(SimpleObject)]
pub struct JobConnection {
    pub edges: Vec<JobEdge>,
    pub page_info: PageInfo,
    /// How many jobs match the filter, across all pages. Exact without `nameContains` (read
    /// from counts jobgate keeps per namespace and phase, so asking costs nothing however many
    /// jobs there are). With `nameContains` it is a lower bound: matches are counted among at
    /// most the 5,000 newest candidates, so it is exact below that and may be lower above
    /// it. The pages themselves (`edges`, `hasNextPage`) are always exact.
    pub total_count: i32,
    /// True when this page stopped at its budget of candidates (see `Query.jobs`) before
    /// finding `first` jobs: it may hold fewer, or none, yet `hasNextPage` is true and the
    /// next page, after `pageInfo.endCursor`, goes on where this one stopped.
    pub partial: bool,
}
