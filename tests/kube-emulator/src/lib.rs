//! An emulator of the Kubernetes API server for jobgate's tests.

pub mod controllers;
pub mod store;
