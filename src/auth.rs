//! Who is calling, and which namespaces they may use.
//!
//! Credentials arrive as `Authorization: Bearer <credential>` on HTTP and as
//! `{"authorization": "Bearer <credential>"}` in a WebSocket's `connection_init` payload. A
//! credential is either a static API token, looked up by its SHA-256 digest among those of
//! the tokens file (the token itself is never stored), or a JWT (three dot-separated parts)
//! verified with an HS256 secret or the RS256/ES256 keys of a JWKS file. A token naming a
//! `kid` jobgate does not know makes it read the JWKS file again (at most every 10 s), so an
//! issuer's key rotation needs no restart. The tokens file is read again when its content
//! changes (looked at, at most every [`TOKENS_RELOAD_INTERVAL`], by the next check), so a token
//! removed or narrowed there (a Kubernetes Secret updated) takes effect without a restart; a
//! file that has become invalid is logged and the tokens already loaded are kept. Each identity
//! maps to
//! a [`Scope`]: the namespaces it may use, or all of them for an admin. Anonymous callers are
//! let in only when the configuration says so.
//!
//! This module must not know about GraphQL or jobs beyond `Scope`; it never logs a credential.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::model::Scope;

/// The caller, once authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The human name, recorded and shown as the submitter of the jobs it submits: a token's
    /// name, a JWT's `sub`, `anonymous`. Two kinds of credential may give the same name.
    pub name: String,
    /// Who it is, unambiguously: `token:<name>` for API tokens, `jwt:["<iss>","<sub>"]` for
    /// JWTs, `anonymous`. The key of its rate limits and the scope of its idempotency keys,
    /// so that a JWT whose `sub` is an API token's name shares nothing with that token.
    pub principal: String,
    pub scope: Scope,
    pub method: Method,
}

/// How the caller proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Anonymous,
    ApiToken,
    Jwt,
}

impl Identity {
    pub fn anonymous(scope: Scope) -> Self {
        Self {
            name: ANONYMOUS.to_owned(),
            principal: ANONYMOUS.to_owned(),
            scope,
            method: Method::Anonymous,
        }
    }
}

/// Why a caller was refused. The texts go to the client: they say what is wrong with the
/// credential, never anything about the server's secrets or other identities.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("missing credentials: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("invalid credentials")]
    Invalid,
    #[error("invalid token: {0}")]
    InvalidJwt(String),
}

impl AuthError {
    /// A short, fixed name for metrics labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Invalid => "invalid",
            Self::InvalidJwt(_) => "jwt",
        }
    }
}

/// A problem with the authentication settings, found at start.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// One entry of the tokens file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    /// Who holds it: recorded as the submitter of its jobs.
    name: String,
    /// Hex SHA-256 digest of the token (`jobgate hash-token` prints it).
    sha256: String,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    admin: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensToml {
    #[serde(default)]
    token: Vec<TokenEntry>,
}

/// How JWTs are checked.
#[derive(Clone, Debug, Default)]
pub struct JwtSettings {
    pub hs256_secret_file: Option<PathBuf>,
    pub jwks_file: Option<PathBuf>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// The claim listing the namespaces the bearer may use (an array, or a string of names
    /// separated by spaces or commas).
    pub namespaces_claim: String,
    /// The claim listing roles; the role `admin` may use every namespace.
    pub roles_claim: String,
}

/// Everything [`Auth::load`] needs.
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    /// Anonymous callers' scope, when they are let in at all.
    pub anonymous: Option<Scope>,
    /// A single static token (its holder is an admin named `api-token`).
    pub api_token: Option<String>,
    pub api_tokens_file: Option<PathBuf>,
    pub jwt: JwtSettings,
}

impl AuthSettings {
    /// Whether any credential is configured.
    pub fn has_credentials(&self) -> bool {
        self.api_token.is_some()
            || self.api_tokens_file.is_some()
            || self.jwt.hs256_secret_file.is_some()
            || self.jwt.jwks_file.is_some()
    }
}

type Keys = HashMap<String, (Algorithm, DecodingKey)>;

/// Clock skew allowed between the issuer and jobgate, in seconds, for `exp`, `nbf` and `iat`.
const JWT_LEEWAY_SECS: u64 = 30;

/// How often, at most, an unknown `kid` makes jobgate read the JWKS file again.
const JWKS_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

struct JwtVerifier {
    /// Keys by `kid`; the one key without a `kid` under "". Swapped whole on a reload.
    keys: std::sync::RwLock<Arc<Keys>>,
    /// The HS256 key, kept apart so a JWKS reload leaves it alone.
    hs256: Option<DecodingKey>,
    jwks_file: Option<PathBuf>,
    /// When the JWKS file was last read again (never, at first).
    reloaded: std::sync::Mutex<Option<std::time::Instant>>,
    validation_base: Validation,
    namespaces_claim: String,
    roles_claim: String,
}

/// How often, at most, the tokens file is looked at again.
pub const TOKENS_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Static tokens by the digest of the token.
type Tokens = HashMap<[u8; 32], Identity>;

/// The tokens file, read again when its content changes.
struct TokensFile {
    path: PathBuf,
    /// The single `--api-token`'s entry, kept across reloads.
    api_token: Option<([u8; 32], Identity)>,
    /// When the file was last looked at, and the digest of the content loaded.
    checked: std::sync::Mutex<(std::time::Instant, [u8; 32])>,
}

/// What a principal may use now, by the current credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Its scope now (for a token's name listed several times, every one's namespaces).
    Scope(Scope),
    /// No current credential names it; why.
    Gone(String),
    /// A JWT's subject: its claims are known only when it calls.
    Unknown,
}

/// The authenticator: built once at start, shared by every request.
pub struct Auth {
    anonymous: Option<Scope>,
    /// Swapped whole when the tokens file changes.
    tokens: std::sync::RwLock<Arc<Tokens>>,
    tokens_file: Option<TokensFile>,
    jwt: Option<JwtVerifier>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("anonymous", &self.anonymous)
            .field("tokens", &self.current_tokens().len())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

/// The hex SHA-256 digest of a token, as the tokens file stores it.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.trim().as_bytes()))
}

fn read(path: &Path) -> Result<String, AuthSetupError> {
    std::fs::read_to_string(path).map_err(|source| AuthSetupError::Read {
        path: path.to_owned(),
        source,
    })
}

fn scope_of(namespaces: Vec<String>, admin: bool) -> Scope {
    if admin {
        Scope::All
    } else {
        Scope::namespaces(namespaces)
    }
}

impl Auth {
    /// Loads the tokens file and JWT keys. Any problem names the file and stops jobgate.
    pub fn load(settings: &AuthSettings) -> Result<Self, AuthSetupError> {
        let api_token = settings.api_token.as_ref().map(|token| {
            (
                digest(token),
                Identity {
                    name: "api-token".to_owned(),
                    principal: token_principal("api-token"),
                    scope: Scope::All,
                    method: Method::ApiToken,
                },
            )
        });
        let mut tokens = Tokens::new();
        tokens.extend(api_token.clone());
        let mut tokens_file = None;
        if let Some(path) = &settings.api_tokens_file {
            let text = read(path)?;
            read_tokens(path, &text, &mut tokens)?;
            tokens_file = Some(TokensFile {
                path: path.clone(),
                api_token,
                checked: std::sync::Mutex::new((std::time::Instant::now(), digest_bytes(text.as_bytes()))),
            });
        }
        let jwt = JwtVerifier::load(&settings.jwt)?;
        Ok(Self {
            anonymous: settings.anonymous.clone(),
            tokens: std::sync::RwLock::new(Arc::new(tokens)),
            tokens_file,
            jwt,
        })
    }

    fn current_tokens(&self) -> Arc<Tokens> {
        self.tokens.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The static tokens, after reading the tokens file again if [`TOKENS_RELOAD_INTERVAL`]
    /// has passed since it was last looked at and its content has changed since it was
    /// loaded. A file that cannot be read or is invalid is logged (each time it is looked at)
    /// and the tokens already loaded stay.
    fn tokens(&self) -> Arc<Tokens> {
        let Some(file) = &self.tokens_file else {
            return self.current_tokens();
        };
        // Another check is looking at the file: the tokens loaded are as good as ever.
        let mut checked = match file.checked.try_lock() {
            Ok(checked) => checked,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return self.current_tokens(),
        };
        if checked.0.elapsed() < TOKENS_RELOAD_INTERVAL {
            return self.current_tokens();
        }
        checked.0 = std::time::Instant::now();
        let text = match read(&file.path) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(error = %e, "reading the tokens file again failed; keeping the tokens already loaded");
                return self.current_tokens();
            }
        };
        let content = digest_bytes(text.as_bytes());
        if content == checked.1 {
            return self.current_tokens();
        }
        let mut tokens = Tokens::new();
        tokens.extend(file.api_token.clone());
        match read_tokens(&file.path, &text, &mut tokens) {
            Ok(()) => {
                checked.1 = content;
                tracing::info!(path = %file.path.display(), tokens = tokens.len(), "tokens file read again");
                let tokens = Arc::new(tokens);
                *self.tokens.write().unwrap_or_else(|e| e.into_inner()) = tokens.clone();
                tokens
            }
            Err(e) => {
                tracing::error!(error = %e, "the tokens file has changed and is invalid; keeping the tokens already loaded");
                self.current_tokens()
            }
        }
    }

    /// What `principal` may use now: a token's current scope (the tokens file read again if
    /// it changed), anonymous access's, or gone; a JWT subject's is unknown.
    pub fn standing(&self, principal: &str) -> Standing {
        if principal == ANONYMOUS {
            return match &self.anonymous {
                Some(scope) => Standing::Scope(scope.clone()),
                None => Standing::Gone("anonymous access is turned off".into()),
            };
        }
        if principal.starts_with(JWT_PREFIX) {
            return Standing::Unknown;
        }
        let scope = self
            .tokens()
            .values()
            .filter(|identity| identity.principal == principal)
            .map(|identity| identity.scope.clone())
            .reduce(|a, b| a.union(&b));
        match (scope, principal.strip_prefix(TOKEN_PREFIX)) {
            (Some(scope), _) => Standing::Scope(scope),
            (None, Some(name)) => Standing::Gone(format!("the API token {name:?} no longer exists")),
            (None, None) => Standing::Gone(format!("no credential is known for {principal:?}")),
        }
    }

    /// Whether callers without credentials are let in.
    pub fn allows_anonymous(&self) -> bool {
        self.anonymous.is_some()
    }

    /// How many static tokens are known.
    pub fn token_count(&self) -> usize {
        self.current_tokens().len()
    }

    pub fn checks_jwts(&self) -> bool {
        self.jwt.is_some()
    }

    /// Who a static token or anonymous access lets in, with their scopes, sorted by name
    /// (JWTs are not listed: their claims may name any namespaces).
    pub fn static_scopes(&self) -> Vec<(String, Scope)> {
        let mut scopes: Vec<(String, Scope)> = self
            .current_tokens()
            .values()
            .map(|identity| (identity.name.clone(), identity.scope.clone()))
            .collect();
        scopes.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(scope) = &self.anonymous {
            scopes.push(("anonymous callers".to_owned(), scope.clone()));
        }
        scopes
    }

    fn check_bearer(&self, value: Option<&str>) -> Result<Identity, AuthError> {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return self
                .anonymous
                .clone()
                .map(Identity::anonymous)
                .ok_or(AuthError::Missing);
        };
        let credential = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or(AuthError::Invalid)?;
        if let Some(identity) = self.tokens().get(&digest(credential)) {
            return Ok(identity.clone());
        }
        match &self.jwt {
            Some(jwt) if credential.matches('.').count() == 2 => jwt.verify(credential),
            _ => Err(AuthError::Invalid),
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

const TOKEN_PREFIX: &str = "token:";
const JWT_PREFIX: &str = "jwt:";
const ANONYMOUS: &str = "anonymous";

/// An API token holder's principal: its name in the `token:` space, apart from JWT subjects.
fn token_principal(name: &str) -> String {
    format!("{TOKEN_PREFIX}{name}")
}

/// Reads the tokens file's entries into `tokens`; any problem names the file.
fn read_tokens(path: &Path, text: &str, tokens: &mut Tokens) -> Result<(), AuthSetupError> {
    let invalid = |message: String| AuthSetupError::Invalid {
        path: path.to_owned(),
        message,
    };
    let file: TokensToml = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    for (i, entry) in file.token.into_iter().enumerate() {
        let mut d = [0u8; 32];
        hex::decode_to_slice(entry.sha256.trim(), &mut d).map_err(|_| {
            invalid(format!(
                "token {} ({:?}): sha256 must be 64 hex digits (see `jobgate hash-token`)",
                i + 1,
                entry.name
            ))
        })?;
        if entry.name.trim().is_empty() {
            return Err(invalid(format!("token {}: name is empty", i + 1)));
        }
        if !entry.admin && entry.namespaces.is_empty() {
            return Err(invalid(format!(
                "token {} ({:?}): give it namespaces, or admin = true",
                i + 1,
                entry.name
            )));
        }
        let identity = Identity {
            principal: token_principal(&entry.name),
            name: entry.name,
            scope: scope_of(entry.namespaces, entry.admin),
            method: Method::ApiToken,
        };
        if tokens.insert(d, identity).is_some() {
            return Err(invalid(format!(
                "token {}: the same token is listed twice",
                i + 1
            )));
        }
    }
    Ok(())
}

fn digest_bytes(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A JWT bearer's principal: its issuer (`iss` as the token has it: a string, an array, or
/// null when absent) and subject, JSON-encoded so that no choice of either can make two pairs
/// collide (`jwt:["https://issuer.example","carol"]`).
fn jwt_principal(issuer: &serde_json::Value, subject: &str) -> String {
    format!("{JWT_PREFIX}{}", serde_json::json!([issuer, subject]))
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.trim().as_bytes()).into()
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// Reads a JWKS file: RS256 (RSA) and ES256 (P-256) keys by `kid`.
fn read_jwks(path: &Path) -> Result<Keys, AuthSetupError> {
    let invalid = |message: String| AuthSetupError::Invalid {
        path: path.to_owned(),
        message,
    };
    let set: JwkSet = serde_json::from_str(&read(path)?).map_err(|e| invalid(format!("not a JWKS: {e}")))?;
    if set.keys.is_empty() {
        return Err(invalid("the JWKS holds no keys".into()));
    }
    let mut keys = Keys::new();
    for (i, jwk) in set.keys.iter().enumerate() {
        let algorithm = match &jwk.algorithm {
            jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
            jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(p)
                if p.curve == jsonwebtoken::jwk::EllipticCurve::P256 =>
            {
                Algorithm::ES256
            }
            _ => {
                return Err(invalid(format!(
                    "key {}: only RSA (RS256) and P-256 EC (ES256) keys are supported",
                    i + 1
                )));
            }
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| invalid(format!("key {}: {e}", i + 1)))?;
        let kid = jwk.common.key_id.clone().unwrap_or_default();
        if keys.insert(kid.clone(), (algorithm, key)).is_some() {
            return Err(invalid(format!(
                "key {}: two keys share the kid {kid:?} (or both have none)",
                i + 1
            )));
        }
    }
    Ok(keys)
}

impl JwtVerifier {
    fn load(settings: &JwtSettings) -> Result<Option<Self>, AuthSetupError> {
        let mut keys = Keys::new();
        let mut hs256 = None;
        if let Some(path) = &settings.hs256_secret_file {
            let secret = read(path)?;
            let secret = secret.trim();
            if secret.len() < 32 {
                return Err(AuthSetupError::Invalid {
                    path: path.clone(),
                    message: "an HS256 secret must be at least 32 bytes".into(),
                });
            }
            hs256 = Some(DecodingKey::from_secret(secret.as_bytes()));
        }
        if let Some(path) = &settings.jwks_file {
            keys = read_jwks(path)?;
        }
        if let Some(key) = &hs256 {
            Self::add_hs256(&mut keys, key, settings.hs256_secret_file.as_deref())?;
        }
        if keys.is_empty() {
            return Ok(None);
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = JWT_LEEWAY_SECS;
        // `nbf` is checked with the same leeway as `exp` (jsonwebtoken skips it by default);
        // `iat` in `verify`, which jsonwebtoken does not check at all.
        validation.validate_nbf = true;
        // A configured audience or issuer is required, not merely compared when present: a
        // token minted for another service (no `aud`) or by another issuer (no `iss`) must not
        // pass because it left the claim out.
        let mut required = vec!["exp", "sub"];
        match &settings.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &settings.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        Ok(Some(Self {
            keys: std::sync::RwLock::new(Arc::new(keys)),
            hs256,
            jwks_file: settings.jwks_file.clone(),
            reloaded: std::sync::Mutex::new(None),
            validation_base: validation,
            namespaces_claim: settings.namespaces_claim.clone(),
            roles_claim: settings.roles_claim.clone(),
        }))
    }

    /// The HS256 key goes under the empty `kid`, which a JWKS key without one would take.
    fn add_hs256(keys: &mut Keys, key: &DecodingKey, path: Option<&Path>) -> Result<(), AuthSetupError> {
        if keys
            .insert(String::new(), (Algorithm::HS256, key.clone()))
            .is_some()
        {
            return Err(AuthSetupError::Invalid {
                path: path.map(Path::to_owned).unwrap_or_default(),
                message: "the JWKS has a key without a kid, which tokens signed with the HS256 secret would also select; give that key a kid".into(),
            });
        }
        Ok(())
    }

    fn current(&self) -> Arc<Keys> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// An unknown `kid` may be a key the issuer has just added (rotation): read the JWKS file
    /// again, at most every [`JWKS_RELOAD_INTERVAL`], and keep the old keys if it is bad.
    fn reload(&self) -> Arc<Keys> {
        let Some(path) = &self.jwks_file else {
            return self.current();
        };
        {
            let mut reloaded = self.reloaded.lock().unwrap_or_else(|e| e.into_inner());
            if reloaded.is_some_and(|at| at.elapsed() < JWKS_RELOAD_INTERVAL) {
                return self.current();
            }
            *reloaded = Some(std::time::Instant::now());
        }
        let fresh = read_jwks(path).and_then(|mut keys| {
            if let Some(key) = &self.hs256 {
                Self::add_hs256(&mut keys, key, Some(path))?;
            }
            Ok(keys)
        });
        match fresh {
            Ok(keys) => {
                tracing::info!(path = %path.display(), keys = keys.len(), "JWKS read again");
                let keys = Arc::new(keys);
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys.clone();
                keys
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the JWKS again failed; keeping the keys already loaded");
                self.current()
            }
        }
    }

    fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| AuthError::InvalidJwt("malformed".into()))?;
        let kid = header.kid.clone().unwrap_or_default();
        let mut keys = self.current();
        if !keys.contains_key(&kid) {
            keys = self.reload();
        }
        let (algorithm, key) = keys
            .get(&kid)
            .ok_or_else(|| AuthError::InvalidJwt("signed with an unknown key".into()))?;
        // The key decides the algorithm; a token naming another (`none`, or HS256 with a
        // public key as the secret) is refused.
        if header.alg != *algorithm {
            return Err(AuthError::InvalidJwt(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        let mut validation = self.validation_base.clone();
        validation.algorithms = vec![*algorithm];
        let data = jsonwebtoken::decode::<Claims>(token, key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            AuthError::InvalidJwt(
                match e.kind() {
                    ErrorKind::ExpiredSignature => "expired",
                    ErrorKind::ImmatureSignature => "not valid yet (`nbf`)",
                    ErrorKind::InvalidAudience => "wrong audience",
                    ErrorKind::InvalidIssuer => "wrong issuer",
                    ErrorKind::InvalidSignature => "bad signature",
                    ErrorKind::MissingRequiredClaim(claim) => {
                        return AuthError::InvalidJwt(format!("the required claim `{claim}` is missing"));
                    }
                    _ => "malformed",
                }
                .into(),
            )
        })?;
        let claims = data.claims;
        // Issued in the future (beyond the leeway): a wrong clock or a forged time; jsonwebtoken
        // does not look at `iat`.
        match claims.rest.get("iat") {
            None => {}
            Some(iat) => {
                let iat = iat
                    .as_f64()
                    .ok_or_else(|| AuthError::InvalidJwt("`iat` is not a number".into()))?;
                let now = chrono::Utc::now().timestamp() as f64;
                if iat > now + JWT_LEEWAY_SECS as f64 {
                    return Err(AuthError::InvalidJwt("issued in the future (`iat`)".into()));
                }
            }
        }
        let issuer = claims.rest.get("iss").unwrap_or(&serde_json::Value::Null);
        let principal = jwt_principal(issuer, &claims.sub);
        let strings = |claim: &str| -> Vec<String> {
            match claims.rest.get(claim) {
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
                Some(serde_json::Value::String(s)) => s
                    .split([' ', ','])
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            }
        };
        let admin = strings(&self.roles_claim).iter().any(|r| r == "admin");
        Ok(Identity {
            name: claims.sub,
            principal,
            scope: scope_of(strings(&self.namespaces_claim), admin),
            method: Method::Jwt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AuthSettings {
        AuthSettings {
            jwt: JwtSettings {
                namespaces_claim: "namespaces".into(),
                roles_claim: "roles".into(),
                ..JwtSettings::default()
            },
            ..AuthSettings::default()
        }
    }

    #[test]
    fn anonymous_only_when_configured() {
        let closed = Auth::load(&settings()).unwrap();
        assert_eq!(closed.check_headers(&HeaderMap::new()), Err(AuthError::Missing));
        let open = Auth::load(&AuthSettings {
            anonymous: Some(Scope::All),
            ..settings()
        })
        .unwrap();
        assert_eq!(
            open.check_headers(&HeaderMap::new()).map(|i| i.method),
            Ok(Method::Anonymous)
        );
    }

    #[test]
    fn token_is_required_and_compared() {
        let auth = Auth::load(&AuthSettings {
            api_token: Some("s3cret".into()),
            ..settings()
        })
        .unwrap();
        assert_eq!(auth.check_headers(&HeaderMap::new()), Err(AuthError::Missing));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert_eq!(auth.check_headers(&h), Err(AuthError::Invalid));
        h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(auth.check_headers(&h).unwrap().name, "api-token");
        let payload = serde_json::json!({"Authorization": "Bearer s3cret"});
        assert_eq!(auth.check_init_payload(&payload).unwrap().scope, Scope::All);
        assert_eq!(
            auth.check_init_payload(&serde_json::Value::Null),
            Err(AuthError::Missing)
        );
    }

    #[test]
    fn principals_keep_tokens_and_jwt_subjects_apart() {
        assert_eq!(token_principal("alice"), "token:alice");
        let iss = |s: &str| serde_json::Value::from(s);
        assert_eq!(
            jwt_principal(&iss("https://issuer.example"), "alice"),
            r#"jwt:["https://issuer.example","alice"]"#
        );
        // No issuer or subject can be chosen to collide with another pair.
        assert_ne!(
            jwt_principal(&iss("a\",\"b"), "c"),
            jwt_principal(&iss("a"), "b\",\"c")
        );
        assert_ne!(
            jwt_principal(&serde_json::Value::Null, "c"),
            jwt_principal(&iss(""), "c")
        );
        assert_eq!(Identity::anonymous(Scope::All).principal, "anonymous");
    }

    #[test]
    fn standing_is_a_tokens_scope_now_gone_or_unknown_for_a_jwt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let entry = |name: &str, token: &str, scope: &str| {
            format!(
                "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\n{scope}\n",
                hash_token(token)
            )
        };
        // Two tokens of one name: its holder may use what either allows.
        let text = [
            entry("ci", "t1", "namespaces = [\"a\"]"),
            entry("ci", "t2", "namespaces = [\"b\"]"),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let auth = Auth::load(&AuthSettings {
            api_tokens_file: Some(path),
            api_token: Some("root".into()),
            anonymous: None,
            ..settings()
        })
        .unwrap();
        assert_eq!(
            auth.standing("token:ci"),
            Standing::Scope(Scope::namespaces(["a", "b"]))
        );
        assert_eq!(auth.standing("token:api-token"), Standing::Scope(Scope::All));
        assert!(matches!(auth.standing("token:gone"), Standing::Gone(r) if r.contains("\"gone\"")));
        assert!(matches!(auth.standing("anonymous"), Standing::Gone(r) if r.contains("anonymous")));
        assert_eq!(
            auth.standing(&jwt_principal(&serde_json::Value::Null, "ci")),
            Standing::Unknown
        );
    }

    #[test]
    fn a_bad_tokens_file_names_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let cases = [
            (
                "[[token]]\nname = \"a\"\nsha256 = \"xyz\"\nadmin = true\n",
                "64 hex digits",
            ),
            (
                &format!("[[token]]\nname = \"a\"\nsha256 = \"{}\"\n", hash_token("t")),
                "give it namespaces",
            ),
            ("[[token]]\nname = \"a\"\nsha = \"x\"\n", "unknown field"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, text).unwrap();
            let e = Auth::load(&AuthSettings {
                api_tokens_file: Some(path.clone()),
                ..settings()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains("tokens.toml") && e.contains(expected), "{e}");
        }
    }
}
