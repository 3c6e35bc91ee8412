//! Authentication: who a request comes from. Each user the emulator knows has a bearer token;
//! the kubeconfigs it writes carry one. Answers a request without a known token with the real
//! server's `401 Unauthorized` Status.
//!
//! Must not decide what a user may do; that is [`super::rbac`]'s.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{HeaderMap, header};

use super::status::ApiError;

/// The identity jobgate's tests run as: the service account of deploy/base.
pub const DEFAULT_USER: &str = "system:serviceaccount:jobgate:jobgate";
/// A cluster administrator (in `system:masters`, which every real API server allows everything).
pub const ADMIN_USER: &str = "system:admin";
/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group whose members are allowed every request, whatever RBAC says.
pub const MASTERS: &str = "system:masters";

/// An authenticated user: the name and groups the authorizer sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user named `name`; a service account (`system:serviceaccount:NS:NAME`) is also in
    /// `system:serviceaccounts` and `system:serviceaccounts:NS`, as the token authenticator
    /// puts it; every user is in `system:authenticated`.
    pub fn named(name: &str, extra_groups: &[&str]) -> UserInfo {
        let mut groups: Vec<String> = extra_groups.iter().map(|g| (*g).to_owned()).collect();
        if let Some(rest) = name.strip_prefix("system:serviceaccount:")
            && let Some((namespace, _)) = rest.split_once(':')
        {
            groups.push("system:serviceaccounts".to_owned());
            groups.push(format!("system:serviceaccounts:{namespace}"));
        }
        groups.push(AUTHENTICATED.to_owned());
        UserInfo {
            name: name.to_owned(),
            groups,
        }
    }

    /// A request without credentials, as the real server names it.
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: "system:anonymous".to_owned(),
            groups: vec!["system:unauthenticated".to_owned()],
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// The bearer tokens the emulator accepts, each naming a user.
#[derive(Debug, Default)]
pub struct Tokens {
    by_token: Mutex<HashMap<String, UserInfo>>,
}

impl Tokens {
    /// The token of `user` (one is made the first time a user is named).
    pub fn token_for(&self, user: &UserInfo) -> String {
        let mut map = self.by_token.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((token, _)) = map.iter().find(|(_, u)| *u == user) {
            return token.clone();
        }
        let token = format!("emulator-{}", uuid::Uuid::new_v4().simple());
        map.insert(token.clone(), user.clone());
        token
    }

    /// The user a request's `Authorization: Bearer …` names; `401` without a known token.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let map = self.by_token.lock().unwrap_or_else(|p| p.into_inner());
        token
            .and_then(|t| map.get(t).cloned())
            .ok_or_else(ApiError::unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_accounts_are_in_their_groups() {
        let sa = UserInfo::named(DEFAULT_USER, &[]);
        assert!(sa.in_group("system:serviceaccounts"));
        assert!(sa.in_group("system:serviceaccounts:jobgate"));
        assert!(sa.in_group(AUTHENTICATED));
        let admin = UserInfo::named(ADMIN_USER, &[MASTERS]);
        assert!(!admin.in_group("system:serviceaccounts"));
        assert!(admin.in_group(MASTERS));
    }

    #[test]
    fn only_known_tokens_authenticate() {
        let tokens = Tokens::default();
        let sa = UserInfo::named(DEFAULT_USER, &[]);
        let token = tokens.token_for(&sa);
        assert_eq!(tokens.token_for(&sa), token);
        let mut headers = HeaderMap::new();
        assert_eq!(
            tokens.authenticate(&headers).map(|_| ()),
            Err(ApiError::unauthorized())
        );
        headers.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert!(tokens.authenticate(&headers).is_err());
        headers.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        assert_eq!(tokens.authenticate(&headers), Ok(sa));
    }
}
