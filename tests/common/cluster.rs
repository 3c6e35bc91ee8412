//! An emulated Kubernetes cluster for the tests that run jobgate's Kubernetes executor: the
//! API emulator (tests/kube-emulator), a kubeconfig for jobgate, and a kube-rs client for the
//! test's own look at the cluster, as kubectl would.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube_emulator::Emulator;

use super::{Polling, Server};

/// The emulator's profile, from `JOBGATE_TEST_EMULATOR_PROFILE`: `fast` (the default) or
/// `real-cluster` (kube-apiserver's watch pace, the controllers' back-offs, 30 s grace).
fn emulator_options() -> kube_emulator::Options {
    let profile = std::env::var("JOBGATE_TEST_EMULATOR_PROFILE").unwrap_or_else(|_| "fast".into());
    kube_emulator::Options::profile(&profile).unwrap_or_else(|| {
        panic!(
            "JOBGATE_TEST_EMULATOR_PROFILE={profile:?} is none of {:?}",
            kube_emulator::PROFILES
        )
    })
}

/// An emulated cluster, a kubeconfig pointing at it, and a kube-rs client for inspection.
pub struct Cluster {
    pub emu: Emulator,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let emu = Emulator::start_with(emulator_options()).await.expect("emulator");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        emu.write_kubeconfig(&kubeconfig, "default").unwrap();
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        Cluster {
            emu,
            kubeconfig,
            client,
            _dir: dir,
        }
    }

    pub fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--executor",
            "kubernetes",
            "--kubeconfig",
            self.kubeconfig.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args
    }

    pub async fn jobgate(&self, extra: &[&str]) -> Server {
        Server::start(&self.args(extra)).await
    }

    /// The jobgate binary against this cluster, as a process of its own (to kill it).
    pub async fn spawn_jobgate(&self, extra: &[&str]) -> Server {
        Server::spawn(&self.args(extra)).await
    }

    pub fn jobs(&self) -> Api<K8sJob> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// The pods of jobgate's job `id`, found by the label jobgate puts on what it creates.
    pub async fn pods_of(&self, id: &str) -> Vec<Pod> {
        let labels = format!("jobgate.io/job-id={id}");
        self.pods()
            .list(&ListParams::default().labels(&labels))
            .await
            .unwrap()
            .items
    }

    /// The Jobs jobgate manages, by jobgate job id.
    pub async fn managed_jobs(&self) -> BTreeMap<String, Vec<K8sJob>> {
        let list = self
            .jobs()
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=jobgate"))
            .await
            .unwrap();
        let mut by_id: BTreeMap<String, Vec<K8sJob>> = BTreeMap::new();
        for job in list.items {
            let id = job.metadata.labels.as_ref().unwrap()["jobgate.io/job-id"].clone();
            by_id.entry(id).or_default().push(job);
        }
        by_id
    }

    /// Waits until `check` holds of the cluster (the cluster is the test's to poll).
    pub async fn until<F, Fut>(&self, what: &str, check: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let polling = Polling::start();
        while !check().await {
            polling.pause(|| format!("never: {what}")).await;
        }
    }
}
