//! Where a webhook may be sent: URL validation, DNS resolution, the address policy (applying
//! `addresses`, which says which addresses are public), and the pinned address a delivery
//! connects to.
//!
//! A webhook URL is chosen by a tenant but requested by jobgate, from inside its network: left
//! unchecked it would let a tenant reach loopback services, the private network or a cloud
//! metadata endpoint (server-side request forgery). So the host is resolved here, every
//! address it resolves to is checked against the policy, and the delivery connects to the
//! checked address only (see [`Resolved::pin`]): a DNS answer that changes between the check
//! and the connection (rebinding) cannot redirect it. Checked when an endpoint is created and
//! again before every delivery. A refusal names the address only when the caller wrote it: the
//! addresses a host name resolves to stay unsaid, so that refusals cannot be used to map
//! jobgate's internal DNS. It does not send anything.

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;

use super::addresses::{Refusal, refusal};

/// The longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Why a URL may not be a webhook target; the message is shown to the caller.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    #[error("{0}")]
    Invalid(String),
    /// An IP literal the caller wrote is not public: named, with why, as it is their input.
    #[error(
        "{addr} is {why}; webhooks may only target globally reachable addresses (the server's \
         --webhook-allow-private-targets allows any)"
    )]
    RefusedAddress { addr: IpAddr, why: Refusal },
    /// A host name resolves to an address that is not public. Which address, and why, is not
    /// said: it is jobgate's view of its own network, which the caller may not map.
    #[error(
        "{host} resolves to a non-public address, which webhooks may not target (the server's \
         --webhook-allow-private-targets allows it)"
    )]
    RefusedName { host: String },
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
        if !allow_private {
            for addr in &addrs {
                let Some(why) = refusal(addr.ip()) else { continue };
                return Err(match &domain {
                    Some(host) => {
                        // The operator may see where the name led; the caller is not told.
                        tracing::debug!(%host, addr = %addr.ip(), %why, "a webhook target's name resolves to a non-public address");
                        TargetError::RefusedName { host: host.clone() }
                    }
                    None => TargetError::RefusedAddress { addr: addr.ip(), why },
                });
            }
        }
        let addr = *addrs.first().ok_or_else(|| TargetError::Unresolvable {
            host: domain.clone().unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn a_refused_literal_is_named_and_a_refused_name_is_not_resolved_aloud() {
        let literal = Target::parse("http://[2002:7f00:1::]/hook").unwrap();
        let refused = literal.resolve(false).await.unwrap_err();
        assert!(
            matches!(refused, TargetError::RefusedAddress { .. }),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("6to4 address embedding 127.0.0.1"),
            "{refused}"
        );

        let name = Target::parse("http://localhost:9/hook").unwrap();
        let refused = name.resolve(false).await.unwrap_err();
        assert_eq!(
            refused,
            TargetError::RefusedName {
                host: "localhost".into()
            }
        );
        let message = refused.to_string();
        for secret in ["127.0.0.1", "::1", "127.0.0.0", "Loopback"] {
            assert!(!message.contains(secret), "{message}");
        }

        let allowed = name.resolve(true).await.unwrap();
        assert!(allowed.addr.ip().is_loopback(), "{allowed:?}");
    }
}
