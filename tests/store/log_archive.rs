//! The archive of jobs' output: lines archived in order and paged by cursor, appends that
//! land only from the stored position, and an archive closed at its cap (with a marker) or
//! after lost lines; a gap (lines that could not be read) kept in order with its marker and
//! counted, so that the archive never reads as whole; where each source's lines are
//! (`log_range`), kept with every append.

use std::sync::Arc;

use jobgate::model::{LogGap, LogLine, LogLoss, LogRange};
use jobgate::store::{LogAppend, LogAppended, Store};

use crate::support::{CAP, log_line, plain_append};

backend_tests!(
    log_lines_are_archived_in_order_and_paged_by_cursor,
    a_log_append_lands_only_from_the_stored_position,
    a_log_archive_is_closed_at_its_cap_with_a_marker,
    a_log_archive_closed_after_lost_lines_takes_nothing_more,
    a_gap_is_kept_in_order_and_the_archive_is_no_longer_complete,
    each_source_ranges_from_its_first_archived_line_to_its_last,
);

async fn each_source_ranges_from_its_first_archived_line_to_its_last(store: Arc<dyn Store>) {
    assert_eq!(store.log_range("j1", "run-1").await.unwrap(), None);
    // Two runs interleaved across appends (chunks), a line with no source between them,
    // another job's lines in the same transaction.
    let first = vec![
        log_line(Some("run-1"), "a".into()),
        log_line(Some("run-2"), "b".into()),
        log_line(None, "marker".into()),
    ];
    let second = vec![
        log_line(Some("run-1"), "c".into()),
        log_line(Some("run-1"), "d".into()),
    ];
    let third = vec![log_line(Some("run-2"), "e".into())];
    let other = plain_append("j2", vec![log_line(Some("run-1"), "other".into())]);
    store
        .append_logs(&[plain_append("j1", first), other], CAP)
        .await
        .unwrap();
    store
        .append_logs(&[plain_append("j1", second)], CAP)
        .await
        .unwrap();
    store
        .append_logs(&[plain_append("j1", third)], CAP)
        .await
        .unwrap();
    assert_eq!(
        store.log_range("j1", "run-1").await.unwrap(),
        Some(LogRange { first: 0, last: 4 })
    );
    assert_eq!(
        store.log_range("j1", "run-2").await.unwrap(),
        Some(LogRange { first: 1, last: 5 })
    );
    assert_eq!(
        store.log_range("j2", "run-1").await.unwrap(),
        Some(LogRange { first: 0, last: 0 })
    );
    assert_eq!(store.log_range("j1", "run-3").await.unwrap(), None);
    // A stale append writes nothing, its range included.
    let mut stale = plain_append("j1", vec![log_line(Some("run-3"), "late".into())]);
    stale.position = Some((Some("gone".into()), "next".into()));
    assert_eq!(
        store.append_logs(&[stale], CAP).await.unwrap(),
        [LogAppended::Stale]
    );
    assert_eq!(store.log_range("j1", "run-3").await.unwrap(), None);
}

async fn log_lines_are_archived_in_order_and_paged_by_cursor(store: Arc<dyn Store>) {
    assert_eq!(
        store.log_archive("j1").await.unwrap(),
        None,
        "nothing archived yet"
    );
    assert!(store.log_lines("j1", 0, 10, 1 << 20).await.unwrap().is_empty());
    // Several appends (chunks), of two jobs, in one transaction and in several.
    let mut expected = Vec::new();
    for batch in 0..5 {
        let lines: Vec<LogLine> = (0..700)
            .map(|i| log_line(Some("pod-a"), format!("line {}", batch * 700 + i)))
            .collect();
        expected.extend(lines.clone());
        let other = plain_append("j2", vec![log_line(None, format!("other {batch}"))]);
        let outcomes = store
            .append_logs(&[plain_append("j1", lines), other], CAP)
            .await
            .unwrap();
        assert_eq!(outcomes, [LogAppended::Appended, LogAppended::Appended]);
    }
    let archive = store.log_archive("j1").await.unwrap().expect("an archive");
    assert_eq!(archive.lines, 3500);
    assert!(!archive.truncated);
    let bytes: i64 = expected.iter().map(|l| l.text.len() as i64 + 1).sum();
    assert_eq!(archive.bytes, bytes);
    // Paged by cursor, across chunk boundaries: every line once, in order.
    let mut read = Vec::new();
    let mut from = 0;
    loop {
        let page = store.log_lines("j1", from, 333, 1 << 20).await.unwrap();
        let Some((last, _)) = page.last() else { break };
        from = last + 1;
        for (at, line) in page {
            assert_eq!(at, read.len() as i64, "cursors are line offsets");
            read.push(line);
        }
    }
    assert_eq!(read, expected);
    // A page stops at its byte bound, one line at least.
    let small = store.log_lines("j1", 10, 100, 20).await.unwrap();
    assert_eq!(small.len(), 2, "line 10 and line 11: 8 bytes each");
    assert_eq!(store.log_lines("j1", 10, 100, 1).await.unwrap().len(), 1);
    assert!(store.log_lines("j1", 3500, 10, 1 << 20).await.unwrap().is_empty());
    let other = store.log_lines("j2", 0, 100, 1 << 20).await.unwrap();
    let texts: Vec<&str> = other.iter().map(|(_, l)| l.text.as_str()).collect();
    assert_eq!(texts, ["other 0", "other 1", "other 2", "other 3", "other 4"]);
    assert_eq!(other[0].1.source, None);
}

async fn a_log_append_lands_only_from_the_stored_position(store: Arc<dyn Store>) {
    let append = |expected: Option<&str>, now: &str, text: &str| LogAppend {
        job_id: "j".into(),
        source: "pod-a".into(),
        position: Some((expected.map(str::to_owned), now.to_owned())),
        lines: vec![log_line(Some("pod-a"), text.to_owned())],
        lost: false,
        gap: None,
    };
    let first = store
        .append_logs(&[append(None, "p1", "one")], CAP)
        .await
        .unwrap();
    assert_eq!(first, [LogAppended::Appended]);
    assert_eq!(
        store.log_position("j", "pod-a").await.unwrap().as_deref(),
        Some("p1")
    );
    // A second follower that read no position (or an older one) writes nothing.
    let stale = store
        .append_logs(
            &[append(None, "p1", "one again"), append(Some("p0"), "p2", "x")],
            CAP,
        )
        .await
        .unwrap();
    assert_eq!(stale, [LogAppended::Stale, LogAppended::Stale]);
    let next = store
        .append_logs(&[append(Some("p1"), "p2", "two")], CAP)
        .await
        .unwrap();
    assert_eq!(next, [LogAppended::Appended]);
    let texts: Vec<String> = store
        .log_lines("j", 0, 10, 1 << 20)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, l)| l.text)
        .collect();
    assert_eq!(texts, ["one", "two"], "nothing twice, nothing out of order");
    assert_eq!(
        store.log_position("j", "pod-a").await.unwrap().as_deref(),
        Some("p2")
    );
    assert_eq!(store.log_position("j", "pod-b").await.unwrap(), None);
}

async fn a_log_archive_is_closed_at_its_cap_with_a_marker(store: Arc<dyn Store>) {
    let lines = |n: usize| {
        (0..n)
            .map(|i| log_line(None, format!("{i:09}")))
            .collect::<Vec<_>>()
    };
    // 10 bytes a line: 25 fit in 250.
    let outcomes = store
        .append_logs(&[plain_append("j", lines(20)), plain_append("j", lines(20))], 250)
        .await
        .unwrap();
    assert_eq!(outcomes, [LogAppended::Appended, LogAppended::Truncated]);
    let later = store
        .append_logs(&[plain_append("j", lines(1))], 250)
        .await
        .unwrap();
    assert_eq!(
        later,
        [LogAppended::Closed],
        "a closed archive takes nothing more"
    );
    let archive = store.log_archive("j").await.unwrap().unwrap();
    assert!(archive.truncated);
    assert_eq!(archive.lines, 26, "the 25 lines that fit, then the marker");
    let all = store.log_lines("j", 0, 100, 1 << 20).await.unwrap();
    assert_eq!(all.len(), 26);
    assert!(all[24].1.text.starts_with("000000004"));
    assert!(all[25].1.text.contains("output truncated"), "{:?}", all[25]);
}

async fn a_log_archive_closed_after_lost_lines_takes_nothing_more(store: Arc<dyn Store>) {
    let lost = LogAppend {
        lost: true,
        ..plain_append("j", vec![log_line(None, "last kept".into())])
    };
    assert_eq!(
        store.append_logs(&[lost], CAP).await.unwrap(),
        [LogAppended::Truncated]
    );
    let texts: Vec<String> = store
        .log_lines("j", 0, 10, 1 << 20)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, l)| l.text)
        .collect();
    assert_eq!(texts.len(), 2);
    assert_eq!(texts[0], "last kept");
    assert!(texts[1].contains("lines were lost"), "{texts:?}");
    assert!(store.log_archive("j").await.unwrap().unwrap().truncated);
    let later = store
        .append_logs(&[plain_append("j", vec![log_line(None, "more".into())])], CAP)
        .await
        .unwrap();
    assert_eq!(later, [LogAppended::Closed]);
}

async fn a_gap_is_kept_in_order_and_the_archive_is_no_longer_complete(store: Arc<dyn Store>) {
    store
        .append_logs(
            &[plain_append("j", vec![log_line(Some("pod-a"), "before".into())])],
            CAP,
        )
        .await
        .unwrap();
    assert!(store.log_archive("j").await.unwrap().unwrap().complete());
    let gap = LogGap {
        source: Some("pod-a".into()),
        lines: None,
        cause: LogLoss::Rotated,
        detail: None,
    };
    let after_gap = LogAppend {
        gap: Some(gap.clone()),
        ..plain_append("j", vec![log_line(Some("pod-a"), "after".into())])
    };
    assert_eq!(
        store.append_logs(&[after_gap], CAP).await.unwrap(),
        [LogAppended::Appended]
    );
    let lines = store.log_lines("j", 0, 10, 1 << 20).await.unwrap();
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.text.as_str()).collect();
    assert_eq!(texts, ["before", gap.marker().as_str(), "after"]);
    assert_eq!(lines[1].1.source.as_deref(), Some("pod-a"));
    let archive = store.log_archive("j").await.unwrap().unwrap();
    assert_eq!(
        (archive.lines, archive.gaps, archive.loss),
        (3, 1, Some(LogLoss::Rotated))
    );
    assert!(!archive.complete() && !archive.truncated);
    // A later gap of another cause counts, and the first cause stays the reason.
    let collected = LogAppend {
        gap: Some(LogGap {
            cause: LogLoss::Collected,
            detail: None,
            ..gap
        }),
        ..plain_append("j", Vec::new())
    };
    store.append_logs(&[collected], CAP).await.unwrap();
    let archive = store.log_archive("j").await.unwrap().unwrap();
    assert_eq!(
        (archive.lines, archive.gaps, archive.loss),
        (4, 2, Some(LogLoss::Rotated))
    );
}
