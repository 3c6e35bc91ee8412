//! The standalone emulator: serves the emulated API server and simulated controllers, writes a
//! kubeconfig for kubectl or jobgate, and runs until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube_emulator::{Emulator, Options};

/// An emulated Kubernetes API server with a simulated Job controller and kubelet.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "KUBE_EMULATOR_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write a kubeconfig pointing at the emulator.
    #[arg(long, env = "KUBE_EMULATOR_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace of the kubeconfig's context.
    #[arg(long, env = "KUBE_EMULATOR_NAMESPACE", default_value = "default")]
    namespace: String,
    /// `fast` (quick controllers, short bookmark interval: for tests) or `real-cluster`
    /// (kube-apiserver's and the controllers' own timings; see the README).
    #[arg(long, env = "KUBE_EMULATOR_PROFILE", default_value = "fast",
          value_parser = clap::builder::PossibleValuesParser::new(kube_emulator::PROFILES))]
    profile: String,
    /// Milliseconds between BOOKMARK events on idle watches (default: 5000 with the `fast`
    /// profile, about 60,000 with `real-cluster`).
    #[arg(long, env = "KUBE_EMULATOR_BOOKMARK_MS")]
    bookmark_ms: Option<u64>,
    /// Changes retained for watches (older resourceVersions expire; default: 10,000 with the
    /// `fast` profile, 102,400 and at most 75 s with `real-cluster`).
    #[arg(long, env = "KUBE_EMULATOR_HISTORY")]
    history: Option<usize>,
    /// Serve the workload CRDs (Kubeflow, Argo, Tekton, KubeRay, Spark) and simulate their
    /// operators.
    #[arg(long, env = "KUBE_EMULATOR_WORKLOAD_CRDS")]
    workload_crds: bool,
    /// Seconds after a pod is deleted and its containers have stopped before the kubelet
    /// removes them: its log becomes unreadable then, whatever finalizers keep the pod.
    /// Unset: never.
    #[arg(long, env = "KUBE_EMULATOR_KUBELET_GC_SECS")]
    kubelet_gc_secs: Option<u64>,
    /// The kubelet's containerLogMaxSize: a pod's log file is rotated when a line would take
    /// it past this many bytes; reads that open the log see only the current file. Unset: never.
    #[arg(long, env = "KUBE_EMULATOR_KUBELET_LOG_MAX_BYTES")]
    kubelet_log_max_bytes: Option<usize>,
    /// Authorize every request against the Roles, ClusterRoles, RoleBindings and
    /// ClusterRoleBindings in this multi-document YAML file (other kinds are ignored), e.g. the
    /// output of `kubectl kustomize deploy/overlays/prod`. Requests must then carry the
    /// kubeconfig's token (401 otherwise); refused ones get 403. Without it, all is allowed.
    #[arg(long, env = "KUBE_EMULATOR_RBAC")]
    rbac: Option<PathBuf>,
    /// The user the written kubeconfig authenticates as.
    #[arg(long, env = "KUBE_EMULATOR_USER", default_value = kube_emulator::api::authn::DEFAULT_USER)]
    user: String,
    /// Where to write a kubeconfig for a cluster administrator (allowed everything).
    #[arg(long, env = "KUBE_EMULATOR_ADMIN_KUBECONFIG")]
    admin_kubeconfig: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let rbac = match &args.rbac {
        Some(path) => {
            Some(std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    let mut options = Options::profile(&args.profile)
        .ok_or_else(|| anyhow::anyhow!("unknown profile {:?}", args.profile))?;
    options.listen = args.listen;
    if args.profile == "fast" {
        options.bookmark_interval = Duration::from_millis(5000);
    }
    if let Some(ms) = args.bookmark_ms {
        options.bookmark_interval = Duration::from_millis(ms);
    }
    if let Some(history) = args.history {
        options.history = history;
    }
    options.simulation.kubelet_gc = args.kubelet_gc_secs.map(Duration::from_secs);
    options.simulation.log_max_bytes = args.kubelet_log_max_bytes;
    options.rbac = rbac;
    options.user = args.user.clone();
    let emulator = Emulator::start_with(options).await?;
    if args.workload_crds {
        emulator.register_all_workload_crds()?;
    }
    if let Some(path) = &args.kubeconfig {
        emulator.write_kubeconfig(path, &args.namespace)?;
        tracing::info!(path = %path.display(), user = %emulator.user(), "kubeconfig written");
    }
    if let Some(path) = &args.admin_kubeconfig {
        emulator.write_admin_kubeconfig(path, &args.namespace)?;
        tracing::info!(path = %path.display(), "administrator's kubeconfig written");
    }
    tracing::info!(url = %emulator.url(), "kube emulator ready");
    kube_emulator::shutdown_signal().await;
    emulator.shutdown().await;
    Ok(())
}
