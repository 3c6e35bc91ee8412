//! Where the tests' cluster comes from (tests/common/cluster.rs): the emulator by default, or
//! the cluster of a kubeconfig (`JOBGATE_TEST_KUBECONFIG`, scripts/test-cluster). Either way a
//! test gets a namespace of its own that jobgate runs its jobs in; a real cluster's is deleted
//! when the test ends, and a real cluster has no emulator handle. A standalone emulator stands
//! in for the user's cluster here: the harness sees only its kubeconfig.

use kube_emulator::Emulator;
use serde_json::{Value, json};

use crate::common::cluster::Cluster;
use crate::support::{JOB_FIELDS, input};

/// Whether the emulator has namespace `name`, not being deleted.
fn has_active_namespace(emu: &Emulator, name: &str) -> bool {
    emu.store()
        .get("namespaces", None, name)
        .is_some_and(|ns| ns["status"]["phase"] != "Terminating")
}

/// The job runs to SUCCEEDED in the cluster's namespace, and its log is the pod's.
async fn runs_a_job_in_its_namespace(cluster: &Cluster) {
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(input(&[], json!({}))).await;
    assert_eq!(
        server.wait_terminal(&id).await.pop().as_deref(),
        Some("SUCCEEDED")
    );
    let job = server.job_with(&id, &format!("namespace {JOB_FIELDS}")).await;
    assert_eq!(job["namespace"], cluster.namespace(), "{job}");
    assert!(job["logs"].as_str().is_some_and(|l| l.contains("hello")), "{job}");
    let jobs = cluster.managed_jobs().await;
    assert_eq!(jobs[&id].len(), 1, "one Job in {}", cluster.namespace());
}

#[tokio::test]
async fn the_emulator_gives_each_test_a_namespace_of_its_own() {
    let why = "it reads the emulator's store";
    let Some(first) = Cluster::emulated(why).await else {
        return;
    };
    let Some(second) = Cluster::emulated(why).await else {
        return;
    };
    assert!(first.emulator().is_some());
    assert_ne!(first.namespace(), second.namespace());
    for cluster in [&first, &second] {
        assert!(
            cluster.namespace().starts_with("jobgate-test-"),
            "{}",
            cluster.namespace()
        );
        assert!(has_active_namespace(cluster.emu(), cluster.namespace()));
    }
    runs_a_job_in_its_namespace(&first).await;
}

// Multi-threaded: dropping the cluster deletes its namespace from a thread of its own, which
// the in-process emulator must answer meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_from_a_kubeconfig_runs_jobs_in_its_own_namespace_and_deletes_it() {
    let emu = Emulator::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    emu.write_kubeconfig(&path, "default").unwrap();

    let cluster = Cluster::real(&path).await;
    assert!(
        cluster.emulator().is_none(),
        "a real cluster offers no emulator powers"
    );
    let namespace = cluster.namespace().to_owned();
    assert!(has_active_namespace(&emu, &namespace), "created at start");
    let labels: &Value = &emu.store().get("namespaces", None, &namespace).unwrap()["metadata"]["labels"];
    assert_eq!(
        labels["app.kubernetes.io/created-by"], "jobgate-tests",
        "{labels}"
    );
    runs_a_job_in_its_namespace(&cluster).await;

    drop(cluster);
    assert!(
        !has_active_namespace(&emu, &namespace),
        "deleted when the test ends"
    );
    assert!(has_active_namespace(&emu, "default"), "nothing else deleted");
}
