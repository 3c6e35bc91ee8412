//! jobgate: an asynchronous job gateway. Clients submit long batch work over GraphQL, get an
//! id back at once, and are pushed every status change over a WebSocket subscription.
//!
//! # Layout
//!
//! - [`config`]: one `Config` from flags, `JOBGATE_*` variables and a TOML file;
//! - [`server`]: the axum router (`/graphql`, `/graphiql`, `/healthz`, `/readyz`), wiring,
//!   graceful shutdown;
//! - [`listener`]: the accept loop on hyper: the connection cap, header, idle and body
//!   timeouts, TCP_NODELAY;
//! - [`hosts`]: which `Host` a request may name (DNS rebinding);
//! - [`graphql`]: schema types and resolvers, error codes, the HTTP and graphql-transport-ws
//!   transports;
//! - [`jobs`]: the domain (`model`), the one writer of job state (`service`), and the event
//!   fan-out with replay (`bus`);
//! - [`store`]: SQLite through sqlx: jobs, the launch outbox, the event log;
//! - [`executor`]: the `Executor` trait and the local process executor;
//! - [`auth`]: who is calling (API tokens, JWTs, anonymous) and their namespaces;
//! - [`limits`]: per-identity rate limits;
//! - [`metrics`]: `/metrics` (Prometheus);
//! - [`web`]: browser assets embedded at build time (GraphiQL).
//!
//! Dependencies point one way: `graphql → jobs::service → {store, executor, jobs::bus} →
//! model`. The channels: resolvers send commands to the service's writer task
//! (`mpsc`); executors send observations to it (`mpsc`); the writer commits, then publishes
//! events on a `tokio::broadcast` that every subscription reads, catching up from the store
//! when it lags.

pub mod auth;
pub mod config;
pub mod executor;
pub mod graphql;
pub mod hosts;
pub mod jobs;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod templates;
pub mod web;

pub use server::run;
