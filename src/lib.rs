//! jobgate: an asynchronous job gateway. Clients submit long batch work over GraphQL, get an
//! id back at once, and are pushed every status change over a WebSocket subscription.
//!
//! # Layout
//!
//! From the bottom up (each layer imports only from those below it; tests/architecture.rs
//! checks it, and docs/ARCHITECTURE.md walks a job through the files):
//!
//! - [`model`]: the domain (jobs, phases, validation, filters, scopes); imports nothing of
//!   ours. [`metrics`]: the metric handles everyone pushes to, rendered for `/metrics`;
//! - [`templates`]: workload templates (format, rendering, status rules);
//!   [`store`]: the `Store` trait and its SQLite and PostgreSQL implementations: jobs, the
//!   launch outbox, the event log;
//! - [`executor`]: the `Executor` trait, local processes and Kubernetes;
//! - [`jobs`]: the one writer of job state (`service`), the event fan-out with replay
//!   (`bus`), templates described for clients (`catalog`);
//! - [`auth`]: who is calling (API tokens, JWTs, anonymous) and their namespaces;
//!   [`rate_limits`]: per-identity rate limits; [`webhooks`]: signed webhook endpoints and
//!   their delivery from the event log; [`traces`]: each job's OpenTelemetry spans, emitted
//!   after the fact from its events and exported over OTLP;
//! - [`graphql`]: schema types and resolvers, error codes, the HTTP and graphql-transport-ws
//!   transports;
//! - [`hosts`]: which `Host` a request may name (DNS rebinding); [`listener`]: the accept
//!   loop on hyper (connection cap, header, idle and body timeouts); [`web`]: browser assets
//!   embedded at build time (dashboard, GraphiQL);
//! - [`config`]: one `Config` from flags, `JOBGATE_*` variables and a TOML file;
//!   [`server`]: the axum router (`/graphql`, `/graphiql`, `/healthz`, `/readyz`,
//!   `/metrics`), wiring, graceful shutdown; [`telemetry`]: logging; [`cli`]: the
//!   command-line client (`jobgate submit`, `watch`, ...), which speaks only the public
//!   GraphQL API over the network.
//!
//! The channels: resolvers send commands to the service's writer task (`mpsc`); executors
//! send observations to it (`mpsc`); the writer commits, then publishes events on a
//! `tokio::broadcast` that every subscription reads, catching up from the store when it lags.

pub mod auth;
pub mod cli;
pub mod config;
pub mod executor;
pub mod graphql;
pub mod hosts;
pub mod jobs;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod rate_limits;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod templates;
pub mod traces;
pub mod web;
pub mod webhooks;

pub use server::run;
