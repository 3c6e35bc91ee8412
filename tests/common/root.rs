//! How a test runs jobgate as root, whoever runs the test: as root, directly; as another user,
//! in a user namespace of its own, where that user is root and its subordinate ids
//! (`/etc/subuid`, `/etc/subgid`, mapped by `newuidmap` from Debian's `uidmap`) give the
//! namespace the other users jobgate switches to (`nobody` included). Inside, jobgate and its
//! jobs see the ids they would see on a machine where jobgate is root; files keep their
//! owners' rights, so what a job can and cannot read is the same.
//!
//! It decides only how to start the process; whether the test may skip when neither way
//! works is `skip`'s decision.

use std::path::Path;

/// The highest id a test's jobs run as: `nobody`, 65534. The namespace maps ids up to it.
const HIGHEST_ID: u32 = 65534;

/// The command (and its arguments) that runs a program as root: empty when this process is
/// root; otherwise `unshare` with the user's subordinate ids, or why that cannot be done here.
pub fn wrapper() -> Result<Vec<String>, String> {
    if nix::unistd::geteuid().is_root() {
        return Ok(Vec::new());
    }
    for tool in ["unshare", "newuidmap", "newgidmap"] {
        if super::skip::tool_on_path(tool).is_none() {
            return Err(format!(
                "it runs jobgate as root in a user namespace, which needs {tool} on PATH \
                 (Debian: util-linux, uidmap)"
            ));
        }
    }
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_default();
    // newuidmap and newgidmap both look the ranges up by the user.
    let users = subordinate(Path::new("/etc/subuid"), &name, uid.as_raw())?;
    let groups = subordinate(Path::new("/etc/subgid"), &name, uid.as_raw())?;
    Ok(vec![
        "unshare".to_owned(),
        "--map-root-user".to_owned(),
        format!("--map-users={},1,{HIGHEST_ID}", users),
        format!("--map-groups={},1,{HIGHEST_ID}", groups),
    ])
}

/// The first id of the user's subordinate range in `file` that holds [`HIGHEST_ID`] ids.
fn subordinate(file: &Path, name: &str, id: u32) -> Result<u32, String> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        format!(
            "it runs jobgate as root in a user namespace, which needs {}: {e}",
            file.display()
        )
    })?;
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim().split(':');
            let owner = fields.next()?;
            let start: u32 = fields.next()?.parse().ok()?;
            let count: u32 = fields.next()?.parse().ok()?;
            let mine = (!name.is_empty() && owner == name) || owner == id.to_string();
            (mine && count >= HIGHEST_ID).then_some(start)
        })
        .next()
        .ok_or_else(|| {
            format!(
                "it runs jobgate as root in a user namespace, which needs {HIGHEST_ID} \
                 subordinate ids for {name} (uid {id}) in {} (e.g. `usermod --add-subuids \
                 100000-165535 --add-subgids 100000-165535 {name}`, as root)",
                file.display()
            )
        })
}
