//! Each part of jobgate's settings, built from a validated [`Config`]: what the store, the
//! executors, the service, the API and the server are given. It must not validate (see
//! `validation`) nor read the environment.

use std::sync::Arc;
use std::time::Duration;

use crate::executor::kube::KubeConfig;
use crate::executor::kube::manifest::ManifestDefaults;
use crate::executor::kube::membership::MembershipConfig;
use crate::executor::kube::priority_classes::PriorityClasses;
use crate::executor::local::LocalConfig;
use crate::executor::local::sandbox;
use crate::graphql::http::HttpOptions;
use crate::graphql::schema::QueryLimits;
use crate::graphql::ws::WsConfig;
use crate::jobs::catalog::{self, Runtime};
use crate::jobs::service::ServiceConfig;
use crate::metrics::Metrics;
use crate::model::{KueueLimits, TemplateInputs, ValidationLimits};
use crate::rate_limits::RateLimitSettings;
use crate::templates::{TemplateError, TemplateSet};

use super::{Config, ConfigError, DeliverySettings, ExecutorKind};

impl Config {
    pub fn rate_limits(&self) -> RateLimitSettings {
        RateLimitSettings {
            mutations_per_minute: self.mutations_per_minute,
            connections_per_minute: self.connections_per_minute,
            subscriptions_per_minute: self.subscriptions_per_minute,
        }
    }

    /// The allowed namespaces, the default one included; empty means any.
    pub fn allowed_namespaces(&self) -> Vec<String> {
        let mut namespaces = self.allowed_namespaces.clone();
        namespaces.retain(|ns| !ns.trim().is_empty());
        if !namespaces.is_empty() && !namespaces.contains(&self.default_namespace) {
            namespaces.insert(0, self.default_namespace.clone());
        }
        namespaces
    }

    /// The workload templates: the built-ins, then those of `--template-dir`.
    pub fn workload_templates(&self) -> Result<TemplateSet, TemplateError> {
        TemplateSet::load(self.template_dir.as_deref())
    }

    /// The default LocalQueue, if one is set (an empty value sets none).
    pub(super) fn default_queue(&self) -> Option<String> {
        self.default_queue.clone().filter(|q| !q.trim().is_empty())
    }

    /// Whether jobs are queued in Kueue: asked for, or implied by a default queue.
    pub fn kueue_enabled(&self) -> bool {
        self.kueue || self.default_queue().is_some()
    }

    pub fn validation_limits(&self, workloads: &TemplateSet) -> ValidationLimits {
        let mut templates = vec![crate::templates::CONTAINER.to_owned()];
        templates.extend(workloads.names().map(str::to_owned));
        let template_inputs = workloads
            .iter()
            .map(|t| {
                let inputs = TemplateInputs {
                    fields: t.fields.iter().map(|(f, _)| f.clone()).collect(),
                    required: t.required.clone(),
                    not_queueable: t.kueue_suspend_field().err(),
                    retry_refusal: t.retry_refusal(),
                };
                (t.name.clone(), inputs)
            })
            .collect();
        ValidationLimits {
            templates,
            template_inputs,
            max_parallelism: self.max_parallelism,
            max_completions: self.max_completions,
            default_namespace: self.default_namespace.clone(),
            allowed_namespaces: self.allowed_namespaces(),
            service_accounts: self.service_accounts.clone(),
            require_image: self.executor == ExecutorKind::Kubernetes,
            fixed_backoff: (self.executor == ExecutorKind::Kubernetes).then(|| {
                "the Kubernetes Job controller's back-off is fixed (10 s, doubling, at most 6 minutes) and no Job can set it; omit backoff".to_owned()
            }),
            kueue: KueueLimits {
                enabled: self.kueue_enabled(),
                default_queue: self.default_queue(),
            },
            priorities: self.priority_limits(),
            ..ValidationLimits::default()
        }
    }

    pub fn kube(&self, workloads: Arc<TemplateSet>, metrics: Arc<Metrics>) -> KubeConfig {
        KubeConfig {
            templates: workloads,
            kubeconfig: self.kubeconfig.clone(),
            context: self.kube_context.clone(),
            watch_namespaces: self.allowed_namespaces(),
            manifest: ManifestDefaults {
                ttl_seconds_after_finished: Some(self.ttl_seconds_after_finished),
                archive_logs: true,
                priority_classes: PriorityClasses::new(
                    &self.kueue_priority_classes,
                    &self.pod_priority_classes,
                ),
            },
            captured_log_lines: self.captured_log_lines,
            log_follow_concurrency: usize::try_from(self.log_follow_concurrency).unwrap_or(usize::MAX),
            kueue: self.kueue_enabled(),
            kueue_positions_interval: Duration::from_millis(self.kueue_positions_interval_ms),
            // A shared store means replicas: they divide the work through Leases.
            membership: self
                .database_url
                .as_deref()
                .is_some_and(|url| !url.trim().is_empty())
                .then(|| MembershipConfig {
                    replica_id: self.replica_id.clone().filter(|id| !id.trim().is_empty()),
                    namespace: self.lease_namespace.clone().filter(|ns| !ns.trim().is_empty()),
                    lease_duration: Duration::from_secs(self.lease_duration_secs),
                }),
            ..KubeConfig::new(metrics)
        }
    }

    /// What retention deletes, and how often it looks.
    pub fn retention(&self) -> crate::jobs::retention::RetentionPolicy {
        let days = |d: f64| Duration::from_secs_f64(d * 86_400.0);
        crate::jobs::retention::RetentionPolicy {
            default: self.retention_days.map(days),
            namespaces: self
                .retention_namespaces
                .iter()
                .map(|r| (r.namespace.clone(), r.days.map(days)))
                .collect(),
            interval: Duration::from_millis(self.retention_interval_ms),
            batch: self.retention_batch,
            // Long enough for a queued submission to take the write lock between batches.
            pause: Duration::from_millis(20),
        }
    }

    /// The archive of jobs' output.
    pub fn log_archive(&self) -> crate::jobs::log_archive::LogArchiveSettings {
        crate::jobs::log_archive::LogArchiveSettings {
            max_bytes_per_job: i64::try_from(self.log_archive_max_bytes).unwrap_or(i64::MAX),
            buffer_bytes: usize::try_from(self.log_archive_buffer_bytes).unwrap_or(usize::MAX),
            ..crate::jobs::log_archive::LogArchiveSettings::default()
        }
    }

    pub fn webhooks(&self) -> crate::webhooks::WebhookSettings {
        crate::webhooks::WebhookSettings {
            allow_private_targets: self.webhook_allow_private_targets,
            retry_window: Duration::from_secs(self.webhook_retry_window_secs),
            backoff_min: Duration::from_millis(self.webhook_backoff_min_ms),
            backoff_max: Duration::from_millis(self.webhook_backoff_max_ms.max(self.webhook_backoff_min_ms)),
            request_timeout: Duration::from_millis(self.webhook_timeout_ms),
        }
    }

    pub fn schedules(&self) -> crate::jobs::schedules::ScheduleSettings {
        crate::jobs::schedules::ScheduleSettings {
            limits: crate::model::ScheduleLimits {
                max_per_namespace: self.max_schedules_per_namespace,
                min_interval_seconds: self.schedule_min_interval_secs,
            },
        }
    }

    pub fn service(&self, workloads: Arc<TemplateSet>, metrics: Arc<Metrics>) -> ServiceConfig {
        let limits = self.validation_limits(&workloads);
        let runtime = match self.executor {
            ExecutorKind::Local => Runtime::Local,
            ExecutorKind::Kubernetes => Runtime::Kubernetes {
                ttl_seconds_after_finished: self.ttl_seconds_after_finished,
            },
        };
        ServiceConfig {
            templates: catalog::builtin(&limits, runtime, &workloads),
            workload_templates: workloads,
            limits,
            broadcast_capacity: self.broadcast_capacity as usize,
            max_active_per_namespace: self.max_active_jobs_per_namespace,
            page_scan_budget: self.page_scan_budget as i64,
            launch_retry_limit: std::time::Duration::from_secs(self.launch_retry_limit_secs),
            local_queue: (self.executor == ExecutorKind::Local).then(|| self.queue_policy()),
            ..ServiceConfig::new(metrics)
        }
    }

    pub fn query_limits(&self) -> QueryLimits {
        QueryLimits {
            max_depth: self.max_query_depth,
            max_complexity: self.max_query_complexity,
            max_aliases: self.max_aliases,
            max_selections: self.max_query_selections,
            introspection: !self.disable_introspection,
            suggestions: !self.disable_suggestions,
        }
    }

    pub fn http(&self) -> HttpOptions {
        HttpOptions {
            allow_batch: self.allow_batch,
            max_batch: self.max_batch,
            request_timeout: Duration::from_millis(self.request_timeout_ms),
        }
    }

    /// The Host allowlist (validated in `validate`).
    pub fn allowed_hosts(&self) -> crate::hosts::AllowedHosts {
        crate::hosts::AllowedHosts::parse(&self.allowed_hosts).unwrap_or_default()
    }

    /// Per-connection limits of the HTTP server.
    pub fn connection_limits(&self) -> crate::listener::ConnectionLimits {
        let ms = |v: u64| (v > 0).then(|| Duration::from_millis(v));
        crate::listener::ConnectionLimits {
            header_timeout: ms(self.http_header_timeout_ms),
            idle_timeout: ms(self.http_idle_timeout_ms),
            body_timeout: ms(self.http_body_timeout_ms),
            max_connections: self.max_connections,
        }
    }

    pub fn ws(&self, metrics: Arc<Metrics>) -> WsConfig {
        WsConfig {
            init_timeout: Duration::from_millis(self.ws_init_timeout_ms),
            keepalive_interval: Duration::from_millis(self.ws_keepalive_ms),
            max_message_bytes: self.ws_max_message_bytes,
            max_frame_bytes: self.ws_max_frame_bytes,
            read_buffer_bytes: usize::try_from(self.ws_read_buffer_bytes).unwrap_or(usize::MAX),
            max_subscriptions: self.ws_max_subscriptions,
            idle_timeout: Duration::from_secs(self.ws_idle_timeout_secs),
            slow_consumer_timeout: Duration::from_millis(self.ws_slow_consumer_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            ..WsConfig::new(metrics)
        }
    }

    /// The WebSocket delivery runtime's settings: `--delivery-threads` (one per CPU unless
    /// told) and `--delivery-nice`.
    pub fn delivery(&self) -> DeliverySettings {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        DeliverySettings {
            threads: self.delivery_threads.unwrap_or(cpus),
            nice: self.delivery_nice,
        }
    }

    /// The local executor's settings; resolves `--run-as-user` again (see [`Config::run_as`]).
    pub fn local(&self) -> Result<LocalConfig, ConfigError> {
        let run_as = self.run_as()?;
        let path = match (&self.local_path, &run_as) {
            (Some(path), _) => path.clone(),
            (None, Some(_)) => sandbox::reachable_path(&self.job_path),
            (None, None) => self.job_path.clone(),
        };
        Ok(LocalConfig {
            data_dir: self.data_dir.clone(),
            work_root: self.local_work_root(),
            run_as,
            launcher: crate::executor::local::user_switch::this_binary(),
            retry_delay: Duration::from_millis(self.local_retry_delay_ms),
            retry_delay_cap: Duration::from_millis(self.local_retry_delay_cap_ms),
            kill_grace: Duration::from_millis(self.local_kill_grace_ms),
            max_log_bytes: self.local_max_log_bytes,
            path,
            credential_files: [
                &self.api_tokens_file,
                &self.jwt_hs256_secret_file,
                &self.database_url_file,
                &self.config,
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect(),
        })
    }
}
