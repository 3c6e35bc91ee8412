//! An emulated Kubernetes cluster for the tests that run jobgate's Kubernetes executor: the
//! API emulator (tests/kube-emulator), a kubeconfig for jobgate, and a kube-rs client for the
//! test's own look at the cluster, as kubectl would.
//!
//! With [`Cluster::start_as`], jobgate runs as the service account of deploy/ under the RBAC
//! of the overlay a test models (deploy/rendered/<overlay>.yaml, which deploy/validate keeps
//! equal to `kubectl kustomize`), so a verb missing from deploy/ fails the test; the test's own
//! client is a cluster admin.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube_emulator::Emulator;

use super::{Polling, Server};

/// The emulator's options for the profile `JOBGATE_TEST_EMULATOR_PROFILE` names: `fast` (the
/// default) or `real-cluster` (kube-apiserver's watch pace, the controllers' back-offs, 30 s
/// grace). Every cluster of the tests starts from them.
pub fn emulator_options() -> kube_emulator::Options {
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
    /// Whether RBAC is enforced (jobgate then watches only the namespaces its Roles grant).
    rbac: bool,
    _dir: tempfile::TempDir,
}

/// The namespace the tests run jobs in: the overlays' own namespace (`jobgate`) becomes it.
const TEST_NAMESPACE: &str = "default";

/// The RBAC objects of deploy/rendered/`overlay`.yaml, with the Roles and RoleBindings of
/// jobgate's own namespace moved to [`TEST_NAMESPACE`] (the subjects, and so jobgate's
/// identity, stay `system:serviceaccount:jobgate:jobgate`).
pub fn overlay_rbac(overlay: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/rendered")
        .join(format!("{overlay}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut value = <serde_json::Value as serde::Deserialize>::deserialize(document).unwrap();
        let kind = value["kind"].as_str().unwrap_or_default();
        if !matches!(
            kind,
            "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
        ) {
            continue;
        }
        if value["metadata"]["namespace"] == "jobgate" {
            value["metadata"]["namespace"] = TEST_NAMESPACE.into();
        }
        documents.push(value.to_string());
    }
    assert!(!documents.is_empty(), "{} holds no RBAC", path.display());
    documents.join("\n---\n")
}

async fn client_of(kubeconfig: &std::path::Path) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

impl Cluster {
    /// A cluster that allows every request.
    pub async fn start() -> Cluster {
        Self::start_with(emulator_options()).await
    }

    /// A cluster where jobgate has the RBAC of deploy/overlays/`overlay` (`base` for
    /// deploy/base).
    pub async fn start_as(overlay: &str) -> Cluster {
        Self::start_with_rbac(&overlay_rbac(overlay)).await
    }

    /// A cluster where jobgate has the RBAC in `rbac` (multi-document YAML).
    pub async fn start_with_rbac(rbac: &str) -> Cluster {
        Self::start_with(kube_emulator::Options {
            rbac: Some(rbac.to_owned()),
            ..emulator_options()
        })
        .await
    }

    /// An emulated cluster started with `options` (e.g. RBAC, the kubelet's log rotation and
    /// container removal).
    pub async fn start_with(options: kube_emulator::Options) -> Cluster {
        let rbac = options.rbac.is_some();
        let emu = Emulator::start_with(options).await.expect("emulator");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        emu.write_kubeconfig(&kubeconfig, TEST_NAMESPACE).unwrap();
        let admin = dir.path().join("admin-kubeconfig");
        emu.write_admin_kubeconfig(&admin, TEST_NAMESPACE).unwrap();
        let client = client_of(&admin).await;
        Cluster {
            emu,
            kubeconfig,
            client,
            rbac,
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
        // As deployed (deploy/base sets JOBGATE_ALLOWED_NAMESPACES to its own namespace):
        // jobgate watches only the namespaces its Roles grant, unless the test names others.
        if self.rbac && !extra.contains(&"--allowed-namespaces") {
            args.extend_from_slice(&["--allowed-namespaces", TEST_NAMESPACE]);
        }
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
