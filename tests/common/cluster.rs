//! The Kubernetes cluster of the tests that run jobgate's Kubernetes executor, from one place:
//! the API emulator (tests/kube-emulator) by default, or the cluster of the kubeconfig named by
//! `JOBGATE_TEST_KUBECONFIG` (kind, k3d, a staging cluster: see scripts/test-cluster). Both
//! take the same path: a kubeconfig (the emulator's, or the user's) whose context is switched
//! to a namespace of the test's own, created at start and, on a real cluster, deleted when the
//! [`Cluster`] is dropped; jobgate gets that kubeconfig and namespace, and the test a kube-rs
//! client for its own look at the cluster, as kubectl would.
//!
//! On the emulator jobgate always runs as the service account of deploy/ under the RBAC of the
//! overlay the test models (deploy/rendered/<overlay>.yaml, which deploy/validate keeps equal
//! to `kubectl kustomize`): deploy/base's by default ([`Cluster::start`],
//! [`Cluster::emulated`]), another overlay's with [`Cluster::start_as`] and
//! [`Cluster::emulated_as`], so a verb missing from deploy/ fails a test with the API server's
//! 403. A test that is about other rights says so with the RBAC it gives
//! ([`Cluster::emulated_with_rbac`], [`Cluster::start_with_rbac`]). The test's own client is a
//! cluster admin. On a real cluster the RBAC is the cluster's own: jobgate and the test use the
//! kubeconfig's identity.
//!
//! A test that needs what only the emulator can do (go down, throttle, drop watches, evict a
//! Kueue workload, scripted pod outcomes through `EMULATOR_*` variables) starts its cluster
//! with [`Cluster::emulated`] (or `emulated_as`, …), which on a real cluster skips it through
//! the one skip decision (tests/common/skip.rs) as expected there; [`Cluster::emu`] is the
//! emulator's handle. Every emulator starts from the profile `JOBGATE_TEST_EMULATOR_PROFILE`
//! names ([`emulator_options`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_emulator::Emulator;
use serde_json::{Value, json};

use super::skip::{Skip, skip_or_fail};
use super::{Polling, Server};

/// The variable naming a real cluster's kubeconfig; unset, the tests start an emulator.
pub const KUBECONFIG_VAR: &str = "JOBGATE_TEST_KUBECONFIG";
/// The variable naming scripts/test-cluster's run, a label on each test's namespace.
const RUN_VAR: &str = "JOBGATE_TEST_RUN";

/// The emulator's options for the profile `JOBGATE_TEST_EMULATOR_PROFILE` names: `fast` (the
/// default) or `real-cluster` (kube-apiserver's watch pace, the controllers' back-offs, 30 s
/// grace). Every emulator of the tests starts from them.
pub fn emulator_options() -> kube_emulator::Options {
    let profile = std::env::var("JOBGATE_TEST_EMULATOR_PROFILE").unwrap_or_else(|_| "fast".into());
    kube_emulator::Options::profile(&profile).unwrap_or_else(|| {
        panic!(
            "JOBGATE_TEST_EMULATOR_PROFILE={profile:?} is none of {:?}",
            kube_emulator::PROFILES
        )
    })
}

/// The namespace deploy/ installs jobgate in, whose Roles grant it rights there.
const DEPLOY_NAMESPACE: &str = "jobgate";

/// The overlay of the tests that name none: deploy/base.
const BASE: &str = "base";

/// The RBAC objects (Roles, ClusterRoles and their bindings) of deploy/rendered/`overlay`.yaml
/// (`base` for deploy/base). When the cluster starts, the Roles and RoleBindings of deploy/'s
/// own namespace are moved to the test's namespace, and those of any other namespace (the
/// multi-namespace overlay's `batch-jobs`) stay where they are; the subjects, and so jobgate's
/// identity, stay `system:serviceaccount:jobgate:jobgate`.
pub fn overlay_rbac(overlay: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/rendered")
        .join(format!("{overlay}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = <Value as serde::Deserialize>::deserialize(document).unwrap();
        let kind = value["kind"].as_str().unwrap_or_default();
        if matches!(
            kind,
            "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
        ) {
            objects.push(value);
        }
    }
    assert!(!objects.is_empty(), "{} holds no RBAC", path.display());
    objects
}

/// `rbac` with the Roles and RoleBindings of deploy/'s namespace moved to `namespace`, as the
/// emulator's `--rbac` text (JSON documents, which are YAML, separated by `---`).
fn rbac_in(mut rbac: Vec<Value>, namespace: &str) -> String {
    for object in &mut rbac {
        if object["metadata"]["namespace"] == DEPLOY_NAMESPACE {
            object["metadata"]["namespace"] = namespace.into();
        }
    }
    let documents: Vec<String> = rbac.iter().map(Value::to_string).collect();
    documents.join("\n---\n")
}

/// A cluster (emulated or real), a kubeconfig for jobgate pointing at the test's namespace,
/// and a kube-rs client for inspection.
pub struct Cluster {
    emu: Option<Emulator>,
    namespace: String,
    /// Whether RBAC is enforced (jobgate then watches only the namespaces its Roles grant).
    rbac: bool,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// The test's cluster: `$JOBGATE_TEST_KUBECONFIG`'s if set, else a new emulator with
    /// jobgate under deploy/base's RBAC.
    pub async fn start() -> Cluster {
        Self::start_as(BASE).await
    }

    /// [`Cluster::start`] with jobgate, on the emulator, under the RBAC of
    /// deploy/overlays/`overlay`.
    pub async fn start_as(overlay: &str) -> Cluster {
        Self::start_with_rbac(overlay_rbac(overlay)).await
    }

    /// [`Cluster::start`] with jobgate, on the emulator, under the RBAC objects `rbac` (as
    /// [`overlay_rbac`] gives them), for a test about rights no overlay has.
    pub async fn start_with_rbac(rbac: Vec<Value>) -> Cluster {
        match std::env::var_os(KUBECONFIG_VAR) {
            Some(path) => Self::real(Path::new(&path)).await,
            None => Self::start_emulator(emulator_options(), rbac).await,
        }
    }

    /// A cluster for a test that needs the emulator's powers (`why` says which), with jobgate
    /// under deploy/base's RBAC: `None` on a real cluster, after a
    /// `JOBGATE-TEST-SKIPPED (needs the emulator)` line.
    pub async fn emulated(why: &str) -> Option<Cluster> {
        Self::emulated_as(why, BASE).await
    }

    /// [`Cluster::emulated`] with jobgate under the RBAC of deploy/overlays/`overlay`.
    pub async fn emulated_as(why: &str, overlay: &str) -> Option<Cluster> {
        Self::emulated_with_rbac(why, overlay_rbac(overlay)).await
    }

    /// [`Cluster::emulated`] with jobgate under the RBAC objects `rbac` (as [`overlay_rbac`]
    /// gives them), for a test about rights no overlay has.
    pub async fn emulated_with_rbac(why: &str, rbac: Vec<Value>) -> Option<Cluster> {
        Self::emulated_under(why, emulator_options(), rbac).await
    }

    /// [`Cluster::emulated`] with an emulator started with `options` (the kubelet's log
    /// rotation and container removal, …), jobgate under deploy/base's RBAC. The RBAC comes
    /// from the overlay, so `options.rbac` must be `None`.
    pub async fn emulated_with(why: &str, options: kube_emulator::Options) -> Option<Cluster> {
        assert!(
            options.rbac.is_none(),
            "the cluster's RBAC is an overlay's: Cluster::emulated_as or emulated_with_rbac"
        );
        Self::emulated_under(why, options, overlay_rbac(BASE)).await
    }

    async fn emulated_under(why: &str, options: kube_emulator::Options, rbac: Vec<Value>) -> Option<Cluster> {
        if std::env::var_os(KUBECONFIG_VAR).is_some() {
            skip_or_fail(Skip::NeedsEmulator(why.to_owned()));
            return None;
        }
        Some(Self::start_emulator(options, rbac).await)
    }

    /// A new emulator started with `options`, jobgate under `rbac` (moved to the test's
    /// namespace), reached through the kubeconfig it writes; the test's client is an admin's.
    async fn start_emulator(mut options: kube_emulator::Options, rbac: Vec<Value>) -> Cluster {
        let namespace = unique_namespace();
        options.rbac = Some(rbac_in(rbac, &namespace));
        let emu = Emulator::start_with(options).await.expect("emulator");
        let kubeconfig =
            Kubeconfig::from_yaml(&emu.kubeconfig_yaml("default")).expect("the emulator's kubeconfig");
        let admin = Kubeconfig::from_yaml(&emu.admin_kubeconfig_yaml("default"))
            .expect("the emulator's admin kubeconfig");
        Self::from_kubeconfig(kubeconfig, Some(admin), namespace, Some(emu)).await
    }

    /// The cluster of the kubeconfig at `path` (its current context), as a real one: no
    /// emulator powers, and its namespace deleted on drop.
    pub async fn real(path: &Path) -> Cluster {
        let kubeconfig = Kubeconfig::read_from(path)
            .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: not a kubeconfig: {e}", path.display()));
        Self::from_kubeconfig(kubeconfig, None, unique_namespace(), None).await
    }

    /// jobgate's cluster through `kubeconfig`, the test's through `admin` (or the same),
    /// both in `namespace`, which is made now.
    async fn from_kubeconfig(
        kubeconfig: Kubeconfig,
        admin: Option<Kubeconfig>,
        namespace: String,
        emu: Option<Emulator>,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write_in_namespace(kubeconfig, &namespace, &path);
        let rbac = admin.is_some();
        let client = match admin {
            Some(admin) => {
                let admin_path = dir.path().join("admin-kubeconfig");
                write_in_namespace(admin, &namespace, &admin_path);
                client_of(&admin_path).await
            }
            None => client_of(&path).await,
        };
        // Labelled with scripts/test-cluster's run, which deletes what a killed test left.
        let mut labels = json!({"app.kubernetes.io/created-by": "jobgate-tests"});
        if let Ok(run) = std::env::var(RUN_VAR) {
            labels["jobgate.io/test-run"] = json!(run);
        }
        let created: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace, "labels": labels}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &created)
            .await
            .unwrap_or_else(|e| panic!("creating the test's namespace {namespace}: {e}"));
        Cluster {
            emu,
            namespace,
            rbac,
            kubeconfig: path,
            client,
            _dir: dir,
        }
    }

    /// The emulator's handle, for the tests started with [`Cluster::emulated`].
    pub fn emu(&self) -> &Emulator {
        self.emu
            .as_ref()
            .expect("a real cluster has no emulator: start this test's cluster with Cluster::emulated")
    }

    /// Grants or takes away rights while jobgate runs: the RBAC objects in `rbac` (as
    /// [`overlay_rbac`] gives), those of deploy/'s namespace moved to the test's, created or
    /// replaced in the emulator's policy ([`Emulator::apply_rbac`]), in force from the next
    /// request on.
    pub fn apply_rbac(&self, rbac: Vec<Value>) {
        self.emu()
            .apply_rbac(&rbac_in(rbac, &self.namespace))
            .expect("applying RBAC objects");
    }

    /// The emulator's handle, if the cluster is emulated.
    pub fn emulator(&self) -> Option<&Emulator> {
        self.emu.as_ref()
    }

    /// The test's own namespace: jobgate's default namespace, and the kubeconfig's.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// jobgate's flags for this cluster, then `extra` (a `--namespace` there wins).
    pub fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--executor",
            "kubernetes",
            "--kubeconfig",
            self.kubeconfig.to_str().unwrap(),
        ];
        if !extra
            .iter()
            .any(|a| *a == "--namespace" || *a == "--default-namespace")
        {
            args.extend(["--namespace", self.namespace.as_str()]);
        }
        // As deployed (deploy/base sets JOBGATE_ALLOWED_NAMESPACES to its own namespace):
        // jobgate watches only the namespaces its Roles grant, unless the test names others.
        if self.rbac && !extra.contains(&"--allowed-namespaces") {
            args.extend(["--allowed-namespaces", self.namespace.as_str()]);
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
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
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

impl Drop for Cluster {
    /// On a real cluster, deletes the test's namespace and everything in it (the cluster
    /// finishes that in the background); an emulator goes away whole.
    fn drop(&mut self) {
        if self.emu.is_some() {
            return;
        }
        // On a runtime of its own, in a thread of its own: the test's runtime may be the
        // current thread's, blocked here, and the test's client lives on it.
        let path = self.kubeconfig.clone();
        let namespace = self.namespace.clone();
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = client_of(&path).await;
                Api::<Namespace>::all(client)
                    .delete(&namespace, &DeleteParams::background())
                    .await
                    .map(|_| ())
            })
        })
        .join();
        if let Ok(Err(e)) = deleted {
            eprintln!("could not delete the test's namespace {}: {e}", self.namespace);
        }
    }
}

/// Writes `kubeconfig` to `path` with its current context switched to `namespace`.
fn write_in_namespace(mut kubeconfig: Kubeconfig, namespace: &str, path: &Path) {
    let current = kubeconfig
        .current_context
        .clone()
        .expect("the kubeconfig has a current context");
    let context = kubeconfig
        .contexts
        .iter_mut()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_mut())
        .unwrap_or_else(|| panic!("the kubeconfig has no context {current:?}"));
    context.namespace = Some(namespace.to_owned());
    // JSON is YAML: kube-rs (jobgate's and the test's) reads it as a kubeconfig.
    std::fs::write(path, serde_json::to_vec_pretty(&kubeconfig).unwrap()).unwrap();
}

/// A kube-rs client of the kubeconfig at `path` (its current context).
async fn client_of(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A namespace name no other test (of this process, of another, or of an earlier run) uses:
/// `jobgate-test-<pid>-<time>-<count>`, a DNS label of at most 63 characters.
fn unique_namespace() -> String {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "jobgate-test-{:x}-{nanos:x}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}
