//! Which `Host` a request may name: jobgate's defence against DNS rebinding.
//!
//! A page on an attacker's site can make a browser resolve the attacker's own name to
//! jobgate's address (DNS rebinding) and then send requests that the browser holds to be
//! same-origin with that page: they reach jobgate carrying `Host: attacker.example`, with no
//! CORS in the way. So every request, before any other work (authentication, reading the
//! body, a WebSocket upgrade), must name a host jobgate answers to:
//!
//! - **an IP address literal** (`127.0.0.1`, `[::1]`, the pod's IP): rebinding needs a
//!   *name* whose resolution the attacker controls, and nobody controls what an address
//!   literal resolves to, so a browser that sends `Host: 10.1.2.3` was pointed at that address
//!   by its own user. This also keeps kubelet probes and Prometheus scrapes working, which
//!   address the pod by IP;
//! - **`localhost` and names under `.localhost`**, which browsers resolve to loopback
//!   themselves, without DNS (RFC 6761 §6.3);
//! - **a name of `--allowed-hosts`**: exact (`jobgate.example.com`), a suffix
//!   (`.example.com`: that name and every name under it), or `*` for any (for those whose
//!   own proxy checks Host).
//!
//! The port is ignored: rebinding is a matter of names, an attacker's name is refused
//! whatever port follows it, and behind a Service or a proxy the port a client used is not
//! the one jobgate listens on. A request without `Host` is let through: browsers always send
//! one, so it cannot be a browser's. Anything else is answered 421 Misdirected Request.
//!
//! This module knows nothing of routes or credentials.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The names requests may use besides IP literals and `localhost`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `*`: no check at all.
    any: bool,
    /// Exact names, lowercase, without a trailing dot.
    names: Vec<String>,
    /// Suffixes, with their leading dot (`.example.com`).
    suffixes: Vec<String>,
}

impl AllowedHosts {
    /// Parses `--allowed-hosts` entries; an error names the bad entry.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut hosts = Self::default();
        for entry in entries {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                hosts.any = true;
                continue;
            }
            let lower = entry.to_ascii_lowercase();
            let name = lower.trim_end_matches('.');
            let bare = name.strip_prefix('.').unwrap_or(name);
            let valid = !bare.is_empty()
                && bare.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if !valid {
                return Err(format!(
                    "--allowed-hosts: {entry:?} is not a host name like jobgate.example.com, a suffix like .example.com, or * (no scheme, port or path: the port is not checked)"
                ));
            }
            if name.starts_with('.') {
                hosts.suffixes.push(name.to_owned());
            } else {
                hosts.names.push(name.to_owned());
            }
        }
        Ok(hosts)
    }

    /// Whether a request whose `Host` is `value` (`name`, `name:port`, `[v6]:port`) may be
    /// answered.
    pub fn allows(&self, value: &str) -> bool {
        if self.any {
            return true;
        }
        let Some(host) = host_of(value) else {
            return false;
        };
        match host {
            Host::Ip => true,
            Host::Name(name) => {
                name == "localhost"
                    || name.ends_with(".localhost")
                    || self.names.contains(&name)
                    || self
                        .suffixes
                        .iter()
                        .any(|s| name.ends_with(s.as_str()) || name == s[1..])
            }
        }
    }
}

enum Host {
    Ip,
    /// Lowercase, without a trailing dot.
    Name(String),
}

/// The host part of a `Host` value, without its port; `None` if it is malformed.
fn host_of(value: &str) -> Option<Host> {
    let value = value.trim();
    let port_ok = |port: &str| port.is_empty() || port.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = value.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        let port = match after {
            "" => "",
            p => p.strip_prefix(':')?,
        };
        return (port_ok(port) && address.parse::<Ipv6Addr>().is_ok()).then_some(Host::Ip);
    }
    let (name, port) = match value.split_once(':') {
        Some((name, port)) => (name, port),
        None => (value, ""),
    };
    if !port_ok(port) || name.is_empty() {
        return None;
    }
    if name.parse::<Ipv4Addr>().is_ok() {
        return Some(Host::Ip);
    }
    let name = name.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    if name.is_empty() || name.starts_with('.') {
        return None;
    }
    Some(Host::Name(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(entries: &[&str]) -> AllowedHosts {
        AllowedHosts::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn ip_literals_and_localhost_pass_other_names_need_listing() {
        let none = hosts(&[]);
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "10.1.2.3:80",
            "[::1]:8080",
            "[::1]",
            "localhost:8080",
            "LOCALHOST",
            "localhost.",
            "app.localhost:3000",
        ] {
            assert!(none.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "2130706433",
            "[::1",
            "[evil]:80",
            "::1",
            "host:port",
            "",
            ":8080",
            ".localhost",
        ] {
            assert!(!none.allows(refused), "{refused}");
        }
        let listed = hosts(&["jobgate.jobgate.svc", ".example.com", "Other.Example."]);
        for ok in [
            "jobgate.jobgate.svc",
            "jobgate.jobgate.svc:80",
            "example.com",
            "a.b.example.com:443",
            "other.example",
            "other.example.",
        ] {
            assert!(listed.allows(ok), "{ok}");
        }
        for refused in ["jobgate", "badexample.com", "example.com.evil", "svc"] {
            assert!(!listed.allows(refused), "{refused}");
        }
        assert!(hosts(&["*"]).allows("anything.example"));
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in ["http://a.example", "a.example:80", "a/b", ".", "a..b"] {
            assert!(AllowedHosts::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }
}
