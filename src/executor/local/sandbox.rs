//! What a local job may touch: the user it runs as, its own working directory, its PATH, and
//! the result file jobgate reads back.
//!
//! jobgate keeps its own files (database, logs, the results it records) in the data
//! directory, mode 0700; a job never gets a path into it. Each job gets a directory of its
//! own under the work root (`--local-work-dir`, outside the data directory; the root is
//! jobgate's, mode 0711, so a job can reach its own directory but list nobody's), owned by the
//! job's user, mode 0700, which is its HOME and holds its TMPDIR. When jobgate runs as root,
//! every run drops to an unprivileged user ([`RunAs`]: uid, gid, no supplementary groups).
//!
//! This is not a sandbox, and must not pretend to be one: jobs share the host's network, CPU
//! and memory, can read whatever is world-readable, see the host's processes, and all jobs run
//! as the same user, so jobs running at the same time can reach each other. Untrusted tenants
//! belong on the Kubernetes executor.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{Group, Uid, User};
use tokio::io::AsyncReadExt;

use crate::model::{MAX_RESULT_BYTES, clip};

/// The unprivileged user every local run switches to (`--run-as-user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// The name given, or the user database's name for the uid.
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// Reads `USER`, `UID`, `USER:GROUP` or `UID:GID` (a group by name or number). A uid
    /// unknown to the user database needs its gid; a name must exist. Root (uid or gid 0)
    /// is refused: its jobs would be as privileged as jobgate.
    pub fn resolve(spec: &str) -> Result<Self, String> {
        let (user, group) = match spec.split_once(':') {
            Some((user, group)) => (user.trim(), Some(group.trim())),
            None => (spec.trim(), None),
        };
        let lookup_failed = |e: nix::Error| format!("--run-as-user {spec:?}: reading the user database: {e}");
        let (name, uid, primary_gid) = match user.parse::<u32>() {
            Ok(uid) => match User::from_uid(Uid::from_raw(uid)).map_err(lookup_failed)? {
                Some(found) => (found.name, uid, Some(found.gid.as_raw())),
                None => (uid.to_string(), uid, None),
            },
            Err(_) => match User::from_name(user).map_err(lookup_failed)? {
                Some(found) => (found.name, found.uid.as_raw(), Some(found.gid.as_raw())),
                None => {
                    return Err(format!(
                        "--run-as-user {spec:?}: there is no user {user:?} on this machine"
                    ));
                }
            },
        };
        let gid = match group {
            Some(group) => match group.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => match Group::from_name(group).map_err(lookup_failed)? {
                    Some(found) => found.gid.as_raw(),
                    None => return Err(format!("--run-as-user {spec:?}: there is no group {group:?} on this machine")),
                },
            },
            None => primary_gid.ok_or_else(|| {
                format!("--run-as-user {spec:?}: uid {uid} is not in the user database, so give its group too: --run-as-user {uid}:GID")
            })?,
        };
        if uid == 0 || gid == 0 {
            return Err(format!(
                "--run-as-user {spec:?} is root (uid {uid}, gid {gid}): its jobs could read and change everything jobgate can; name an unprivileged user such as nobody"
            ));
        }
        Ok(Self { name, uid, gid })
    }
}

/// Whether every user may reach `dir`: an absolute path whose every directory, itself
/// included, lets others search it. Group and owner permissions are ignored, so this may
/// say no to a directory that a particular user could reach; never yes to one it cannot.
pub fn reachable_by_all(dir: &Path) -> bool {
    dir.is_absolute()
        && dir
            .ancestors()
            .all(|a| std::fs::metadata(a).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0))
}

/// Whether every user may read `file`: it lets others read it, in a directory every user may
/// reach.
pub fn readable_by_all(file: &Path) -> bool {
    let Ok(file) = std::path::absolute(file) else {
        return false;
    };
    std::fs::metadata(&file).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
        && file.parent().is_some_and(reachable_by_all)
}

/// The directories of `path` that every user may reach, in order: the PATH of jobs that run
/// as another user than jobgate (`/root/.cargo/bin` is of no use to `nobody`, and a program
/// found there could not be started). The standard directories when none is left.
pub fn reachable_path(path: &str) -> String {
    let kept: Vec<PathBuf> = std::env::split_paths(path)
        .filter(|dir| reachable_by_all(dir))
        .collect();
    if kept.is_empty() {
        return "/usr/local/bin:/usr/bin:/bin".to_owned();
    }
    std::env::join_paths(kept)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned())
}

/// Makes the work root if needed and checks it is jobgate's own directory (not a link, not
/// someone else's: in a shared /tmp another user could have made it first), mode 0711.
pub fn prepare_root(root: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(root)?;
    let meta = std::fs::symlink_metadata(root)?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "the local work directory {} is not a directory (a link?): set --local-work-dir to a directory of jobgate's own",
            root.display()
        )));
    }
    if meta.uid() != me {
        return Err(io::Error::other(format!(
            "the local work directory {} belongs to uid {}, not to jobgate (uid {me}): set --local-work-dir to a directory of jobgate's own",
            root.display(),
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o7777 != 0o711 {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))?;
    }
    Ok(())
}

/// The job's own working directory, `<root>/<job id>`: made (mode 0700, with `tmp` inside)
/// and given to the job's user. The directory of a job adopted after a restart is kept, so
/// that its retries find what earlier runs left, as before.
pub fn prepare_work_dir(root: &Path, job_id: &str, run_as: Option<&RunAs>) -> io::Result<PathBuf> {
    if job_id.is_empty() || job_id.contains('/') || job_id.starts_with('.') {
        return Err(io::Error::other(format!("{job_id:?} cannot name a directory")));
    }
    prepare_root(root)?;
    let dir = root.join(job_id);
    let fresh = match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(e),
    };
    // Only jobgate can make entries in the root, so `dir` is what jobgate made.
    if !std::fs::symlink_metadata(&dir)?.is_dir() {
        return Err(io::Error::other(format!("{} is not a directory", dir.display())));
    }
    let tmp = dir.join("tmp");
    if fresh {
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    }
    if let Some(user) = run_as {
        std::os::unix::fs::lchown(&dir, Some(user.uid), Some(user.gid))?;
        if fresh {
            std::os::unix::fs::lchown(&tmp, Some(user.uid), Some(user.gid))?;
        }
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Removes a finished job's working directory (links inside are removed, never followed).
pub async fn remove_work_dir(dir: PathBuf) {
    let removed = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || std::fs::remove_dir_all(dir)
    })
    .await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.kind() == io::ErrorKind::NotFound => {}
        Ok(Err(e)) => {
            tracing::warn!(dir = %dir.display(), error = %e, "a finished job's working directory was not removed")
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "removing a finished job's working directory failed")
        }
    }
}

/// Up to [`MAX_RESULT_BYTES`] of a run's result file, read by jobgate (perhaps root) from a
/// directory the job controls: so a link is not followed, and anything but a regular file
/// (a FIFO would block the read), or a file that `owner` (the job's user) does not own (a
/// hard link to one of jobgate's), is ignored.
pub async fn read_result(path: &Path, owner: Option<u32>) -> Option<String> {
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .await
        .ok()?;
    let meta = file.metadata().await.ok()?;
    if !meta.is_file() || owner.is_some_and(|uid| meta.uid() != uid) {
        tracing::warn!(file = %path.display(), "a run's result file is not a regular file of the job's user; ignored");
        return None;
    }
    let mut buf = Vec::new();
    file.take(MAX_RESULT_BYTES as u64)
        .read_to_end(&mut buf)
        .await
        .ok()?;
    Some(clip(String::from_utf8_lossy(&buf).into_owned(), MAX_RESULT_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_unknown_users_are_refused() {
        assert!(RunAs::resolve("root").unwrap_err().contains("is root"));
        assert!(RunAs::resolve("0:0").unwrap_err().contains("is root"));
        assert!(RunAs::resolve("1234:0").unwrap_err().contains("is root"));
        let unknown = RunAs::resolve("no-such-user-for-jobgate").unwrap_err();
        assert!(unknown.contains("no user"), "{unknown}");
        let bare = RunAs::resolve("4000123").unwrap_err();
        assert!(bare.contains("4000123:GID"), "{bare}");
        assert_eq!(
            RunAs::resolve("4000123:4000124").unwrap(),
            RunAs {
                name: "4000123".into(),
                uid: 4000123,
                gid: 4000124
            }
        );
    }

    #[test]
    fn only_directories_everyone_can_reach_stay_in_the_path() {
        let private = tempfile::tempdir().unwrap();
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = format!("{}:relative/bin:/bin:/nonexistent", private.path().display());
        assert_eq!(reachable_path(&path), "/bin");
        assert_eq!(reachable_path("relative"), "/usr/local/bin:/usr/bin:/bin");
    }

    #[tokio::test]
    async fn work_dirs_are_private_and_results_are_not_followed_through_links() {
        let root_parent = tempfile::tempdir().unwrap();
        let root = root_parent.path().join("work");
        let dir = prepare_work_dir(&root, "job-1", None).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            (mode(&root), mode(&dir), mode(&dir.join("tmp"))),
            (0o711, 0o700, 0o700)
        );
        assert!(prepare_work_dir(&root, "../escape", None).is_err());

        let secret = root_parent.path().join("secret");
        std::fs::write(&secret, "jobgate's own").unwrap();
        let result = dir.join("result");
        std::os::unix::fs::symlink(&secret, &result).unwrap();
        assert_eq!(read_result(&result, None).await, None);
        std::fs::remove_file(&result).unwrap();
        std::fs::write(&result, "42").unwrap();
        assert_eq!(read_result(&result, None).await.as_deref(), Some("42"));
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(read_result(&result, Some(me + 1)).await, None);
        remove_work_dir(dir.clone()).await;
        assert!(!dir.exists());
    }
}
