//! A small disk of its own for a jobgate under test, to fill and free while it runs: what a
//! full disk does to the store is tested on it, never on the machine's disks. It makes and
//! removes the disk; what jobgate answers meanwhile is the tests'.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A small disk for jobgate's data directory, to fill and free under a running jobgate: a
/// tmpfs mounted in a mount namespace of its own (so nothing on the machine sees it), held
/// open by a `sleep` in that namespace. jobgate runs in it through `nsenter`; the test reaches
/// its files through `/proc/<holder>/root`. As root this needs only a mount namespace; as
/// another user, also a user namespace where that user is root (`root::wrapper`), so that
/// jobgate there is root as it is in CI. Its jobs' directories are in a directory of the
/// disk's own beside it (the default, /tmp/jobgate-0, is the real root's).
pub struct SmallDisk {
    holder: Child,
    /// The mount point, as seen inside the namespace.
    dir: PathBuf,
    _temp: tempfile::TempDir,
    /// The jobs' directories, open for the jobs' user to pass through.
    work: tempfile::TempDir,
}

impl SmallDisk {
    /// A tmpfs of `size` (e.g. "4m"), or why one cannot be made here.
    pub fn create(size: &str) -> Result<SmallDisk, String> {
        let temp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dir = temp.path().to_owned();
        let work = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::set_permissions(work.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let mut command = Command::new("unshare");
        // Empty as root; otherwise `unshare` and the user namespace's arguments.
        command.args(super::root::wrapper()?.iter().skip(1));
        let script = format!(
            "mount -t tmpfs -o size={size},mode=0755 tmpfs '{}' && echo mounted && exec sleep 600",
            dir.display()
        );
        let mut holder = command
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running unshare: {e}"))?;
        let mut line = String::new();
        let stdout = holder.stdout.take().expect("piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.trim() != "mounted" {
            let _ = holder.kill();
            let output = holder.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "unshare could not mount a tmpfs: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            holder,
            dir,
            _temp: temp,
            work,
        })
    }

    /// A small disk, or `None` where namespaces are not allowed, after
    /// [`skip_or_fail`](super::skip::skip_or_fail) (a failure in CI).
    pub fn or_skip(size: &str) -> Option<SmallDisk> {
        match Self::create(size) {
            Ok(disk) => Some(disk),
            Err(why) => {
                let why = format!("it needs a tmpfs in a mount namespace of its own: {why}");
                super::skip::skip_or_fail(super::skip::Skip::Missing(why));
                None
            }
        }
    }

    /// jobgate's data directory, as jobgate sees it.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The path, seen from the test, of `relative` on the disk.
    pub fn path(&self, relative: &str) -> PathBuf {
        let inside = self.dir.join(relative);
        PathBuf::from(format!("/proc/{}/root{}", self.holder.id(), inside.display()))
    }

    /// The command that runs a program in the disk's namespace.
    pub(super) fn wrapper(&self) -> Vec<String> {
        let mut wrapper = vec![
            "env".to_owned(),
            format!("JOBGATE_LOCAL_WORK_DIR={}", self.work.path().display()),
            "nsenter".to_owned(),
            "--target".to_owned(),
            self.holder.id().to_string(),
        ];
        if !nix::unistd::geteuid().is_root() {
            wrapper.extend(["--user".to_owned(), "--preserve-credentials".to_owned()]);
        }
        wrapper.push("--mount".to_owned());
        wrapper.push("--".to_owned());
        wrapper
    }

    /// Fills every free byte with a file of its own.
    pub fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.path("filler")).expect("creating the filler");
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // Smaller writes for the last partial block.
        while let Ok(n) = file.write(&block[..512]) {
            if n == 0 {
                break;
            }
        }
    }

    /// Frees what [`SmallDisk::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.path("filler")).expect("removing the filler");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // The namespace, and the tmpfs with it, go when its last process does.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
