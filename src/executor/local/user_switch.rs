//! Starting a local job's program as another user without forking jobgate.
//!
//! The standard library can switch user in the child (`Command::uid`), but only by forking:
//! `fork` copies jobgate's page tables, holds its memory map locked while it does, and leaves
//! every page copy-on-write until the child execs, so every thread of a busy jobgate (the
//! WebSocket fan-out, the commit path) stalls on page faults each time a job starts, and the
//! cost grows with jobgate's memory (BENCHMARKS.md). A command with no user switch
//! is started with `posix_spawn`, which shares the parent's memory until the exec and copies
//! nothing. So a job of another user is started as *this binary* (`/proc/self/exe`) with
//! [`ARG`] and the uid, gid and program: the fresh process, small and single-threaded, drops
//! its supplementary groups, gid and uid ([`run_if_asked`], first thing in `main`), then
//! execs the program in place (same pid, process group, environment, directory and output).
//!
//! Whether the exec worked comes back the way the standard library's own fork path reports
//! it: the launcher's standard input is the write end of a pipe, which it moves to a
//! close-on-exec descriptor (replacing standard input by `/dev/null`, which the job gets); a
//! successful exec closes it, a failure writes the reason first. `Launch::started` reads
//! that, so a program that cannot start is still a failed start, with its reason, not a run
//! that exits 127.
//!
//! The launcher also closes whatever descriptors jobgate inherited from its own parent
//! without close-on-exec, so a job of another user starts with its three standard streams
//! only.
//!
//! This module owns that hand-over; it must not decide who a job runs as (`sandbox`, the
//! configuration) nor anything about the run after the exec (the runner).

use std::convert::Infallible;
use std::ffi::OsString;
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::process::Command;

use super::sandbox::RunAs;

/// The first argument that makes this binary a launcher. Anyone may pass it: all the
/// launcher can do is give up privileges (switching to another uid needs root already).
pub const ARG: &str = "--jobgate-internal-launch-as";

/// The launcher's `argv[0]`, which `ps` shows until the exec.
const NAME: &str = "jobgate-launch";

/// Set once the binary's `main` has called [`run_if_asked`]: only then does running this
/// binary with [`ARG`] launch a job. (A test binary that links jobgate does not, and keeps
/// the standard library's fork.)
static HANDLED_BY_MAIN: AtomicBool = AtomicBool::new(false);

/// If this process was started as a launcher, becomes the job's program (or exits, having
/// reported why it could not); otherwise returns and records that this binary can launch.
/// Call it first thing in `main`, before any thread starts: `setuid` must happen while the
/// process has one thread.
pub fn run_if_asked() {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|first| first == ARG) {
        let code = launch(args.collect());
        std::process::exit(code);
    }
    HANDLED_BY_MAIN.store(true, Ordering::Relaxed);
}

/// The launcher to use: this binary, when its `main` handles [`ARG`].
pub fn this_binary() -> Option<PathBuf> {
    HANDLED_BY_MAIN
        .load(Ordering::Relaxed)
        .then(|| PathBuf::from("/proc/self/exe"))
}

/// A command that runs `program` as `user` through `launcher`, and the read end of its
/// report pipe. Add the arguments, environment, directory and output as for the program
/// itself, but not its standard input (the job gets `/dev/null`).
pub(super) fn command(launcher: &Path, user: &RunAs, program: &Path) -> io::Result<(Command, Launch)> {
    let (report, report_writer) = io::pipe()?;
    let mut command = Command::new(launcher);
    command
        .arg0(NAME)
        .arg(ARG)
        .arg(user.uid.to_string())
        .arg(user.gid.to_string())
        .arg(program)
        .stdin(report_writer);
    Ok((command, Launch { report }))
}

/// The launch under way: what the launcher reports.
pub(super) struct Launch {
    report: io::PipeReader,
}

impl Launch {
    /// Waits until the launcher has exec'd the program (`Ok`) or said why it could not. Call
    /// it once the command (which holds the pipe's write end) is dropped. Takes as long as the
    /// launcher's start, a few milliseconds, without holding a runtime thread meanwhile.
    pub(super) async fn started(self) -> Result<(), String> {
        use tokio::io::AsyncReadExt as _;
        let reading = |e: io::Error| format!("reading the launcher's report: {e}");
        let mut report =
            tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(self.report)).map_err(reading)?;
        let mut why = Vec::new();
        report.read_to_end(&mut why).await.map_err(reading)?;
        if why.is_empty() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&why).into_owned())
        }
    }
}

/// The launcher: `args` are uid, gid, program and the program's arguments. Returns the exit
/// code when it could not exec.
fn launch(args: Vec<OsString>) -> i32 {
    // The report pipe is on standard input; keep it close-on-exec and give the job /dev/null.
    let report = match take_report_pipe() {
        Ok(report) => report,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            return 126;
        }
    };
    close_inherited(&report);
    let mut report = std::fs::File::from(report);
    match switch_and_exec(&args) {
        Ok(never) => match never {},
        Err((code, why)) => {
            // Nowhere else to say it if the parent is gone.
            let _ = report.write_all(why.as_bytes());
            code
        }
    }
}

/// Closes every descriptor above standard error but `keep`: the ones jobgate itself
/// inherited without close-on-exec (whatever its parent left open: a shell's pipe, a
/// supervisor's socket) would otherwise reach the job, which runs as another user. A
/// descriptor that will not close is left; the job then has it, as it would without this.
fn close_inherited(keep: &OwnedFd) {
    use std::os::fd::AsRawFd as _;
    let keep = keep.as_raw_fd();
    // Listed first, closed after: the listing's own descriptor is gone by then.
    let open: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2 && fd != keep)
            .collect(),
        Err(_) => return,
    };
    for fd in open {
        // EBADF for the listing's descriptor, already closed: nothing to do.
        let _ = nix::unistd::close(fd);
    }
}

fn take_report_pipe() -> io::Result<OwnedFd> {
    let report = rustix::io::fcntl_dupfd_cloexec(io::stdin(), 3)?;
    let null = std::fs::File::open("/dev/null")?;
    // Atomically replaces the pipe with /dev/null.
    nix::unistd::dup2_stdin(&null)?;
    Ok(report)
}

fn switch_and_exec(args: &[OsString]) -> Result<Infallible, (i32, String)> {
    let [uid, gid, program, rest @ ..] = args else {
        return Err((126, format!("{NAME}: expected a uid, a gid and a program")));
    };
    let number = |what: &str, arg: &OsString| {
        arg.to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| (126, format!("{NAME}: bad {what} {arg:?}")))
    };
    let (uid, gid) = (number("uid", uid)?, number("gid", gid)?);
    // Root's jobs would be as privileged as jobgate; the configuration refuses it, and so
    // does the launcher, whatever it was given.
    if uid == 0 || gid == 0 {
        return Err((
            126,
            format!("{NAME}: refusing to run a job as uid {uid}, gid {gid}"),
        ));
    }
    let switched = nix::unistd::setgroups(&[])
        .and_then(|()| nix::unistd::setgid(nix::unistd::Gid::from_raw(gid)))
        .and_then(|()| nix::unistd::setuid(nix::unistd::Uid::from_raw(uid)));
    if let Err(e) = switched {
        return Err((126, format!("switching to uid {uid}, gid {gid}: {e}")));
    }
    // Not trusted blindly: a process that can get root back has not dropped it.
    if nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).is_ok() {
        return Err((126, format!("switching to uid {uid} left root within reach")));
    }
    // The standard library's exec, not a bare execv: it puts back what the Rust runtime
    // changed in this process at start-up (SIGPIPE ignored, which the job would inherit
    // across the exec, so `yes | head` in a job would end in an EPIPE error, not quietly) and
    // clears the signal mask. The runner resolved the program against the jobs' PATH; a bare
    // name left means it was not found there, and the PATH search says so the same way.
    let err = std::os::unix::process::CommandExt::exec(std::process::Command::new(program).args(rest));
    // Only the reason: the runner says which program.
    Err((
        if err.kind() == io::ErrorKind::NotFound {
            127
        } else {
            126
        },
        err.to_string(),
    ))
}
