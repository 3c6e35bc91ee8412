//! The job domain and the service that runs it.
//!
//! - [`model`]: types and rules, no I/O;
//! - [`service`]: `JobService`, the one writer of job state (submit, cancel, observations,
//!   launching);
//! - [`bus`]: broadcast of recorded events and gap-free replay from the store;
//! - [`template`]: the templates jobs may name, described for clients (fields, limits).

pub mod bus;
pub mod model;
pub mod service;
pub mod template;
