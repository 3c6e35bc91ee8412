//! What the client prints on standard output: JSON (one object, or one per line for
//! streams) or, for people, aligned tables and `key value` lists with short timestamps.
//!
//! Text for people passes through [`printable`]: a job controls its name, message and result,
//! and a terminal obeys control characters and escape sequences it is sent (to set its title,
//! clear the screen, rewrite what was printed before, or worse), so they are shown escaped.
//! Only `logs` prints a job's output as it is ([`raw`]), as `kubectl logs` does.
//!
//! It must not fetch anything nor decide exit statuses; every write is flushed at once, so
//! that a stream's lines reach a pipe as they happen.

use std::io::Write;

use serde_json::Value;

use super::client::CliError;

/// Writes one line (a newline is added) to standard output and flushes it.
pub fn line(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Writes one JSON value as one line.
pub fn json(value: &Value) -> Result<(), CliError> {
    line(&value.to_string())
}

/// Columns padded to their widest cell; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < widths.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        text.trim_end().to_owned()
    };
    let mut lines = vec![render(&mut header.iter().copied())];
    for row in rows {
        lines.push(render(&mut row.iter().map(String::as_str)));
    }
    lines.join("\n")
}

/// A string field for people (see [`printable`]), or `-` when null or absent.
pub fn text(value: &Value) -> String {
    printable(&raw(value))
}

/// A string field as the server sent it, or `-` when null or absent: for a job's output
/// (`logs`) and for values handed back to the server (cursors).
pub fn raw(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `text` with every character a terminal would act on instead of showing escaped, as Rust
/// writes it: the C0 controls (newline and tab included, which would break a table's lines
/// and columns), DEL, the C1 controls (U+0080 to U+009F, CSI among them) and the bidirectional
/// overrides and isolates (which reorder what is shown). ESC becomes `\x1b`, so no escape
/// sequence survives. Every other character, ordinary Unicode included, is kept.
pub fn printable(text: &str) -> String {
    let risky = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(risky) {
        return text.to_owned();
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if c.is_ascii() && risky(c) => shown.push_str(&format!("\\x{:02x}", c as u32)),
            c if risky(c) => shown.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => shown.push(c),
        }
    }
    shown
}

/// An RFC 3339 timestamp as `YYYY-MM-DD HH:MM:SS` in UTC; `-` when null; as given when it
/// does not parse.
pub fn time(value: &Value) -> String {
    match value.as_str() {
        None => "-".to_owned(),
        Some(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| {
                t.with_timezone(&chrono::Utc)
                    .format("%Y-%m-%d %H:%M:%S")
                    .to_string()
            })
            .unwrap_or_else(|_| printable(s)),
    }
}

/// A job, field by field, for `get`.
/// A waiting job's queue in one line: its queue, reason, position and estimate.
fn queue_line(queue: &Value) -> Option<String> {
    if !queue.is_object() {
        return None;
    }
    let mut line = format!("{} {}", text(&queue["name"]), text(&queue["state"]));
    if let Some(reason) = queue["reason"].as_str() {
        line.push_str(&format!(" ({reason})"));
    }
    if let Some(position) = queue["position"].as_i64() {
        line.push_str(&format!(", position {position}"));
        if let Some(local) = queue["localQueuePosition"].as_i64() {
            line.push_str(&format!(" ({local} in its namespace)"));
        }
    }
    if !queue["estimatedStartAt"].is_null() {
        line.push_str(&format!(", may start {}", time(&queue["estimatedStartAt"])));
    }
    if let Some(estimate) = queue["estimate"].as_str() {
        line.push_str(&format!("; {estimate}"));
    }
    if let Some(message) = queue["message"].as_str() {
        line.push_str(&format!("; {message}"));
    }
    Some(line)
}

pub fn job_details(job: &Value) -> String {
    let spec = &job["spec"];
    let words = |v: &Value| -> String {
        v.as_array()
            .map(|items| items.iter().map(shell_word).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let command = [words(&spec["command"]), words(&spec["args"])]
        .into_iter()
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let progress = &job["progress"];
    let progress = if progress.is_null() {
        "-".to_owned()
    } else {
        let total = progress["total"]
            .as_i64()
            .map(|t| t.to_string())
            .unwrap_or_else(|| "?".into());
        format!(
            "{}/{total} succeeded, {} failed, {} active",
            text(&progress["succeeded"]),
            text(&progress["failed"]),
            text(&progress["active"])
        )
    };
    let env = spec["env"]
        .as_array()
        .map(|vars| {
            vars.iter()
                .map(|v| format!("{}={}", text(&v["name"]), text(&v["value"])))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let mut rows: Vec<(&str, String)> = vec![
        ("id", text(&job["id"])),
        ("name", text(&job["name"])),
        ("namespace", text(&job["namespace"])),
        ("template", text(&job["template"])),
        ("phase", text(&job["phase"])),
        ("submitted", time(&job["submittedAt"])),
        ("started", time(&job["startedAt"])),
        ("finished", time(&job["finishedAt"])),
        ("progress", progress),
        ("message", text(&job["message"])),
        ("result", text(&job["result"])),
    ];
    if let Some(queue) = queue_line(&job["queue"]) {
        rows.push(("queue", queue));
    }
    if !job["traceId"].is_null() {
        rows.push(("trace", text(&job["traceId"])));
    }
    if let Some(time_spent) = time_spent(&job["timeline"]) {
        rows.push(("time", time_spent));
    }
    if !spec["image"].is_null() {
        rows.push(("image", text(&spec["image"])));
    }
    if !command.is_empty() {
        rows.push(("command", command));
    }
    if !env.is_empty() {
        rows.push(("env", env));
    }
    if !spec["parameters"].is_null() {
        // JSON escapes C0 controls but not DEL or C1 ones.
        rows.push(("parameters", printable(&spec["parameters"].to_string())));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a job's time went, on one line: each segment of its `timeline` with its length
/// (`…` for the one it is in), e.g. `queued 0.2s, launching 0.1s, attempt index-0-run-1
/// 12.0s (exit 0), finishing 0.1s`.
fn time_spent(timeline: &Value) -> Option<String> {
    let segments = timeline.as_array().filter(|s| !s.is_empty())?;
    let parts: Vec<String> = segments
        .iter()
        .map(|s| {
            let length = match s["durationSeconds"].as_f64() {
                Some(seconds) if s["endedAt"].is_string() => format!("{seconds:.1}s"),
                _ => "…".to_owned(),
            };
            let exit = match s["exitCode"].as_i64() {
                Some(code) => format!(" (exit {code})"),
                None => String::new(),
            };
            format!("{} {length}{exit}", text(&s["name"]))
        })
        .collect();
    Some(parts.join(", "))
}

/// One `jobEvents` / `jobStatus` event as a line for people.
pub fn event_line(event: &Value) -> String {
    let job = &event["job"];
    let transition = match (event["previousPhase"].as_str(), event["phase"].as_str()) {
        (Some(before), Some(after)) if before != after => format!("{before} -> {after}"),
        (Some(_), Some(phase)) => format!("{phase} (progress)"),
        (None, Some(phase)) => phase.to_owned(),
        _ => "-".to_owned(),
    };
    let mut line = format!(
        "{}  {}  {:<16}  {:<22}",
        time(&event["at"]),
        text(&job["id"]),
        text(&job["name"]),
        transition
    );
    let why: Vec<String> = [&event["reason"], &event["message"]]
        .into_iter()
        .filter_map(|v| v.as_str().map(printable))
        .collect();
    if !why.is_empty() {
        line.push_str("  ");
        line.push_str(&why.join(": "));
    }
    line.trim_end().to_owned()
}

/// One `jobEvents` / `jobStatus` event as a flat JSON object for scripts.
pub fn event_json(event: &Value) -> Value {
    serde_json::json!({
        "cursor": event["cursor"],
        "jobId": event["job"]["id"],
        "name": event["job"]["name"],
        "namespace": event["job"]["namespace"],
        "phase": event["phase"],
        "previousPhase": event["previousPhase"],
        "at": event["at"],
        "reason": event["reason"],
        "message": event["message"],
    })
}

/// A word as a shell would need it quoted to read it back.
fn shell_word(value: &Value) -> String {
    let word = text(value);
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tables_align_every_column_but_the_last() {
        let rows = vec![
            vec!["a".to_owned(), "longer".to_owned(), "x".to_owned()],
            vec!["bbb".to_owned(), "c".to_owned(), "yy".to_owned()],
        ];
        assert_eq!(
            table(&["ID", "NAME", "END"], &rows),
            "ID   NAME    END\na    longer  x\nbbb  c       yy"
        );
    }

    #[test]
    fn times_are_short_and_in_utc() {
        assert_eq!(
            time(&json!("2026-01-02T03:04:05.678+01:00")),
            "2026-01-02 02:04:05"
        );
        assert_eq!(time(&Value::Null), "-");
        assert_eq!(time(&json!("soon")), "soon");
    }

    #[test]
    fn control_characters_are_shown_escaped_and_other_text_as_it_is() {
        assert_eq!(
            printable("\x1b]0;pwned\x07 and \x1b[2J"),
            r"\x1b]0;pwned\x07 and \x1b[2J"
        );
        assert_eq!(printable("a\nb\tc\rd\x7f\0"), r"a\nb\tc\rd\x7f\x00");
        assert_eq!(
            printable("csi \u{9b}2J, rlo \u{202e}txt"),
            r"csi \u{9b}2J, rlo \u{202e}txt"
        );
        for kept in ["plain", "café 東京 🚀", "C:\\path", "ünïcödé — “quotes”"] {
            assert_eq!(printable(kept), kept);
        }
        assert_eq!(text(&json!("x\x1by")), r"x\x1by");
        assert_eq!(raw(&json!("x\x1by")), "x\x1by");
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word(&json!("echo")), "echo");
        assert_eq!(shell_word(&json!("a b")), "'a b'");
        assert_eq!(shell_word(&json!("it's")), r"'it'\''s'");
    }
}
