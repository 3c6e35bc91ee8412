//! The Kubernetes executor end to end: jobgate, driven over GraphQL, runs jobs
//! as batch/v1 Jobs on the Kubernetes API emulator (tests/kube-emulator), which kube-rs talks
//! to over real HTTP, or on the real cluster of `JOBGATE_TEST_KUBECONFIG` (scripts/test-cluster),
//! each test in a namespace of its own. Pods are scripted per job through `EMULATOR_*` variables
//! in `env` (see tests/kube-emulator/README.md): those tests start with `Cluster::emulated` and
//! skip on a real cluster; the tests inspect the cluster through kube-rs as a user of kubectl
//! would.
//!
//! The modules: where the cluster comes from, the emulator or a kubeconfig
//! (`cluster_source`), jobs running to their outcome (`running`), each pod a job's attempt, its
//! end an event pushed as the pod ends (`attempts`), cancelling (`cancelling`), the
//! API server or jobgate failing along the way (`faults`), inputs and clusters that refuse a
//! job (`refusals`), the API server refusing jobgate itself (`forbidden`), admission webhooks
//! denying a workload or failing (`admission`), many jobs or subscribers at once (`scale`), a job's trace context and spans (`traces`), and schedules' concurrency policies
//! (`schedule_policies`, over the scenarios of `tests/scenarios/schedule_concurrency.rs`); `support` holds what they
//! share (a job's input, its phase history, the forward-only check).
//!
//! jobgate runs in the test's process (`Cluster::jobgate`, `Server::start`), except in the
//! tests that kill it or restart it mid-way, which spawn the binary (`Cluster::spawn_jobgate`).

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod attempts;
mod cancelling;
mod cluster_source;
mod faults;
mod forbidden;
mod refusals;
mod running;
mod scale;
#[path = "../scenarios/schedule_concurrency.rs"]
mod schedule_concurrency;
mod schedule_policies;
mod support;
mod traces;
