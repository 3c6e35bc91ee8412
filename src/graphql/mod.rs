//! The GraphQL API: schema types and resolvers, error codes, and both transports (HTTP in
//! [`http`], graphql-transport-ws in [`ws`]).
//!
//! It talks only to the job service; it holds no business rules and imports no storage or
//! executor types.

pub mod bounds;
mod caller;
pub mod error;
pub mod http;
pub mod limits;
pub mod operation;
pub mod schedule_schema;
pub mod schedule_types;
pub mod schema;
pub mod shared_rendering;
pub mod types;
pub mod unreadable_records;
pub mod webhook_types;
pub mod ws;
