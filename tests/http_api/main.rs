//! The GraphQL-over-HTTP surface as a client sees it: media types and status codes
//! (`media_types`), what each method runs (`operations`), GraphiQL and the dashboard
//! (`browser_pages`), request limits (`limits`), refused input (`bad_input`), error codes
//! (`error_codes`, `idempotency_keys`), authentication (`authentication`), no internal detail
//! in errors (`no_internals`), and health endpoints (`health`). Every test starts jobgate in
//! its own process (`Server::start`, through the binary's own configuration and serving path)
//! on the local executor and talks to it over real HTTP, through `support`.

#[path = "../common/mod.rs"]
mod common;

mod authentication;
mod bad_input;
mod browser_pages;
mod error_codes;
mod health;
mod idempotency_keys;
mod limits;
mod media_types;
mod no_internals;
mod operations;
mod support;
