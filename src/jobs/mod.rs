//! The service that runs jobs (the model it speaks is [`crate::model`]).
//!
//! - [`service`]: `JobService`, the one writer of job state (submit, cancel, observations,
//!   launching);
//! - [`bus`]: broadcast of recorded events and gap-free replay from the store;
//! - [`catalog`]: the templates jobs may name, described for clients (fields, limits);
//! - [`retention`]: deletes finished jobs older than their retention, in the background;
//! - [`schedules`]: jobs submitted on cron rules, and the ticker that fires them;
//! - [`log_archive`]: the archive of jobs' output, which executors feed and the service reads.

pub mod bus;
pub mod catalog;
pub mod log_archive;
pub mod retention;
pub mod schedules;
pub mod service;
