//! Where a webhook may be sent: URL validation, DNS resolution, the address policy, and the
//! pinned address a delivery connects to.
//!
//! A webhook URL is chosen by a tenant but requested by jobgate, from inside its network: left
//! unchecked it would let a tenant reach loopback services, the private network or a cloud
//! metadata endpoint (server-side request forgery). So the host is resolved here, every
//! address it resolves to is checked against the policy, and the delivery connects to the
//! checked address only (see [`Resolved::pin`]): a DNS answer that changes between the check
//! and the connection (rebinding) cannot redirect it. Checked when an endpoint is created and
//! again before every delivery. It does not send anything.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;

/// The longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Why a URL may not be a webhook target; the message is shown to the caller.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    #[error("{0}")]
    Invalid(String),
    #[error(
        "{host} resolves to {addr}, a {kind} address, which webhooks may not target (the server's --webhook-allow-private-targets allows it)"
    )]
    Refused {
        host: String,
        addr: IpAddr,
        kind: &'static str,
    },
    #[error("{host} could not be resolved: {message}")]
    Unresolvable { host: String, message: String },
}

/// A URL that passed the syntactic checks: http or https, a host, no credentials.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: Url,
}

/// A target with the one address to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The host name to pin, `None` for an IP literal (nothing to resolve).
    pub domain: Option<String>,
    pub addr: SocketAddr,
}

impl Target {
    pub fn parse(text: &str) -> Result<Self, TargetError> {
        let invalid = |m: &str| Err(TargetError::Invalid(m.to_owned()));
        if text.len() > MAX_URL_LEN {
            return invalid("is longer than 2048 characters");
        }
        let Ok(url) = Url::parse(text) else {
            return invalid("is not an absolute URL");
        };
        if !matches!(url.scheme(), "http" | "https") {
            return invalid("must be an http:// or https:// URL");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return invalid("must not contain credentials");
        }
        if url.host().is_none() {
            return invalid("has no host");
        }
        if url.fragment().is_some() {
            return invalid("must not contain a fragment");
        }
        Ok(Self { url })
    }

    /// Resolves the host and picks the address to connect to; with `allow_private` false,
    /// refuses the target when any address it resolves to is not a public one (an attacker's
    /// name may resolve to a public and a private address, and the client would pick either).
    pub async fn resolve(&self, allow_private: bool) -> Result<Resolved, TargetError> {
        let port = self.url.port_or_known_default().unwrap_or(80);
        let (domain, addrs) = match self.url.host() {
            Some(url::Host::Ipv4(ip)) => (None, vec![SocketAddr::new(ip.into(), port)]),
            Some(url::Host::Ipv6(ip)) => (None, vec![SocketAddr::new(ip.into(), port)]),
            Some(url::Host::Domain(name)) => {
                let found = tokio::net::lookup_host((name, port))
                    .await
                    .map_err(|e| TargetError::Unresolvable {
                        host: name.to_owned(),
                        message: e.to_string(),
                    })?
                    .collect::<Vec<_>>();
                (Some(name.to_owned()), found)
            }
            None => return Err(TargetError::Invalid("has no host".into())),
        };
        let host = domain.clone().unwrap_or_else(|| addrs[0].ip().to_string());
        if !allow_private {
            for addr in &addrs {
                if let Some(kind) = forbidden(addr.ip()) {
                    return Err(TargetError::Refused {
                        host,
                        addr: addr.ip(),
                        kind,
                    });
                }
            }
        }
        let addr = *addrs.first().ok_or_else(|| TargetError::Unresolvable {
            host: host.clone(),
            message: "no address".into(),
        })?;
        Ok(Resolved { domain, addr })
    }
}

impl Resolved {
    /// A client builder that connects to the checked address only: the host name still goes
    /// into the Host header and TLS's SNI and certificate check, but is not resolved again.
    pub fn pin(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        match &self.domain {
            Some(domain) => builder.resolve(domain, self.addr),
            None => builder,
        }
    }
}

/// What kind of non-public address `ip` is, or `None` for a public one.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            // Addresses that carry an IPv4 address are judged by it: IPv4-mapped
            // (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96).
            let s = v6.segments();
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            if s[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified() {
                return forbidden_v4(Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32));
            }
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return forbidden_v4(Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32));
            }
            forbidden_v6(v6)
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        // 169.254.0.0/16, where cloud metadata services answer (169.254.169.254).
        Some("link-local")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        Some("multicast or reserved")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (CGNAT)")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_multicast() {
        Some("multicast or reserved")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_forbidden() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("10.0.0.1", "private"),
            ("172.16.3.4", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("224.0.0.1", "multicast or reserved"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "private"),
            ("fe80::1", "link-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::a00:1", "private"),
        ] {
            assert_eq!(forbidden(ip.parse().expect("an address")), Some(kind), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "2606:2800:220:1::1",
            "100.128.0.1",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(forbidden(ip.parse().expect("an address")), None, "{ip}");
        }
    }

    #[test]
    fn only_plain_http_urls_are_targets() {
        for bad in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "https://user:pw@example.com/",
            "/relative",
            "https://example.com/#frag",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        assert!(Target::parse("https://example.com:8443/hook?x=1").is_ok());
    }
}
