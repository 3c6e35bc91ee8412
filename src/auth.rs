//! Who is calling: an optional static API token, checked on HTTP requests and in the
//! WebSocket `connection_init` payload.
//!
//! With no token configured every caller is anonymous and allowed (the local default, said
//! at start). With one, HTTP requests need `Authorization: Bearer <token>` and WebSocket
//! clients need `{"authorization": "Bearer <token>"}` in `connection_init`. The token is kept
//! only as a SHA-256 digest and compared in constant time. This module must not know
//! about GraphQL or jobs.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

/// The caller, once authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    Anonymous,
    TokenHolder,
}

impl Identity {
    /// How the identity is recorded as a job's submitter.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Anonymous => "anonymous",
            Self::TokenHolder => "api-token",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("missing credentials: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("invalid credentials")]
    Invalid,
}

#[derive(Clone, Debug)]
pub struct Auth {
    token_digest: Option<[u8; 32]>,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    pub fn new(token: Option<&str>) -> Self {
        Self {
            token_digest: token.map(digest),
        }
    }

    pub fn is_open(&self) -> bool {
        self.token_digest.is_none()
    }

    fn check_bearer(&self, value: Option<&str>) -> Result<Identity, AuthError> {
        let Some(expected) = &self.token_digest else {
            return Ok(Identity::Anonymous);
        };
        let value = value.ok_or(AuthError::Missing)?;
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or(AuthError::Invalid)?;
        if same(&digest(token.trim()), expected) {
            Ok(Identity::TokenHolder)
        } else {
            Err(AuthError::Invalid)
        }
    }

    /// Checks an HTTP request's `Authorization` header.
    pub fn check_headers(&self, headers: &HeaderMap) -> Result<Identity, AuthError> {
        let value = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        self.check_bearer(value)
    }

    /// Checks a `connection_init` payload: `{"authorization": "Bearer <token>"}` (the key is
    /// matched case-insensitively, as graphql-ws clients send headers both ways).
    pub fn check_init_payload(&self, payload: &serde_json::Value) -> Result<Identity, AuthError> {
        let value = payload.as_object().and_then(|o| {
            o.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
                .and_then(|(_, v)| v.as_str())
        });
        self.check_bearer(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_auth_lets_everyone_in() {
        let auth = Auth::new(None);
        assert_eq!(auth.check_headers(&HeaderMap::new()), Ok(Identity::Anonymous));
    }

    #[test]
    fn token_is_required_and_compared() {
        let auth = Auth::new(Some("s3cret"));
        assert_eq!(auth.check_headers(&HeaderMap::new()), Err(AuthError::Missing));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert_eq!(auth.check_headers(&h), Err(AuthError::Invalid));
        h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(auth.check_headers(&h), Ok(Identity::TokenHolder));
        let payload = serde_json::json!({"Authorization": "Bearer s3cret"});
        assert_eq!(auth.check_init_payload(&payload), Ok(Identity::TokenHolder));
        assert_eq!(
            auth.check_init_payload(&serde_json::Value::Null),
            Err(AuthError::Missing)
        );
    }
}
