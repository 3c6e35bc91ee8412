//! Where a jobgate we started listens: it is started on `127.0.0.1:0` and says which port it
//! got in its log line "jobgate listening on http://ADDR …". This file reads that line for
//! the tests (`tests/common`) and the benchmarks (`benches/common`, which include it by
//! path), so it uses nothing but the standard library. It must not decide what else the
//! log means: every line goes on to the caller.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// What precedes the address in jobgate's "listening on" line.
const LISTENING_ON: &str = "listening on http://";

/// The address in `line`, if it is jobgate's "listening on http://ADDR" line.
///
/// Panics if the line is that one but its address does not parse: jobgate's log format
/// changed, and every test would otherwise wait out its start-up limit.
pub fn listening_address(line: &str) -> Option<SocketAddr> {
    let rest = line.split(LISTENING_ON).nth(1)?;
    let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
    // Whatever follows the port without a space (a colour code, a full stop) is not in it.
    let addr = addr.trim_end_matches(|c: char| !c.is_ascii_digit());
    Some(
        addr.parse()
            .unwrap_or_else(|e| panic!("the address in jobgate's line {line:?}: {e}")),
    )
}

/// Why [`read_log_until_listening`] found no address.
#[derive(Debug, PartialEq, Eq)]
pub enum NotListening {
    /// The limit passed first; jobgate may still be starting.
    TimedOut,
    /// Its log ended first: jobgate exited (or closed its standard error).
    LogEnded,
}

/// Reads jobgate's log (its standard error) on a thread of its own, handing every line to
/// `each_line` in order, the "listening on" line included, until the log ends; meanwhile it
/// waits up to `limit` for the "listening on" line and returns the address with the moment
/// the line was read (so a benchmark can time start-up up to it).
pub fn read_log_until_listening(
    log: impl Read + Send + 'static,
    limit: Duration,
    mut each_line: impl FnMut(String) + Send + 'static,
) -> Result<(SocketAddr, Instant), NotListening> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(log).lines() {
            let Ok(line) = line else { break };
            if tx.is_some()
                && let Some(addr) = listening_address(&line)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send((addr, Instant::now()));
            }
            each_line(line);
        }
    });
    rx.recv_timeout(limit).map_err(|e| match e {
        RecvTimeoutError::Timeout => NotListening::TimedOut,
        RecvTimeoutError::Disconnected => NotListening::LogEnded,
    })
}
