//! jobgate's own queue for the local executor, as the domain sees it: the operator's policy
//! (caps on running jobs, fair-share weights and the highest priority of each tenant, a
//! tenant being a namespace), the reasons a waiting job gives, and how a job records the
//! reason it waits for. It must not decide which job starts next (the service's
//! `local_queue` does) nor keep any state of the queue.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::job::{DEPENDENCIES_SUCCEEDED, Job, Transition, WORKLOAD_CREATED};
use super::phase::{Condition, JobPhase};

/// The condition that says whether a job waits in jobgate's local queue (`False`, with the
/// reason) or was admitted from it (`True`).
pub const LOCAL_QUEUE: &str = "LocalQueue";
/// Every slot of the server (`--max-running`) is taken, or jobs ahead take the free ones.
pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
/// The job's tenant runs as many jobs as its own cap allows.
pub const TENANT_LIMIT: &str = "TenantLimit";
/// Creating the job's workload failed; the launcher tries again after a back-off.
pub const BACKING_OFF: &str = "BackingOff";
/// The reason of the `LocalQueue=True` condition of a job that left the queue.
pub const ADMITTED: &str = "Admitted";

/// The lowest and highest priorities any job may ask for: beyond them a value is a mistake,
/// not an intent.
pub const PRIORITY_FLOOR: i32 = -1_000_000;
pub const PRIORITY_CEILING: i32 = 1_000_000;

/// The highest priority a tenant's jobs may ask for, set by the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityLimits {
    /// For tenants not named in `tenants` (`--max-priority`).
    pub default: i32,
    /// Per tenant (`--tenant-max-priority NAMESPACE=P`).
    pub tenants: BTreeMap<String, i32>,
}

impl Default for PriorityLimits {
    fn default() -> Self {
        Self {
            default: DEFAULT_MAX_PRIORITY,
            tenants: BTreeMap::new(),
        }
    }
}

/// `--max-priority`'s default.
pub const DEFAULT_MAX_PRIORITY: i32 = 1_000;

impl PriorityLimits {
    /// The highest priority `tenant`'s jobs may ask for.
    pub fn max_of(&self, tenant: &str) -> i32 {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }
}

/// The local queue's caps and weights (the `--max-running`, `--tenant-*` flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuePolicy {
    /// Jobs running at once on this server; `None`: no cap.
    pub max_running: Option<u32>,
    /// Jobs running at once per named tenant (`--tenant-max-running NAMESPACE=N`).
    pub tenant_max_running: BTreeMap<String, u32>,
    /// For tenants not named there (`--default-tenant-max-running`); `None`: no cap.
    pub default_tenant_max_running: Option<u32>,
    /// Fair-share weights per named tenant (`--tenant-weight NAMESPACE=W`); others weigh 1.
    pub tenant_weights: BTreeMap<String, u32>,
}

impl QueuePolicy {
    /// The most jobs `tenant` may run at once; `None`: no cap of its own.
    pub fn tenant_cap(&self, tenant: &str) -> Option<u32> {
        self.tenant_max_running
            .get(tenant)
            .copied()
            .or(self.default_tenant_max_running)
    }

    /// `tenant`'s fair-share weight (at least 1).
    pub fn weight(&self, tenant: &str) -> u32 {
        self.tenant_weights.get(tenant).copied().unwrap_or(1).max(1)
    }
}

/// Why a PENDING job has not started, as the local queue shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueWait {
    pub reason: String,
    pub message: Option<String>,
    pub since: Option<DateTime<Utc>>,
}

impl Job {
    /// Records why the job waits in the local queue (`reason`, `message`): a transition only
    /// when that changed, so that a queue re-evaluated often records nothing new.
    pub fn queue_wait(&mut self, reason: &str, message: &str, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase != JobPhase::Pending || self.is_waiting_for_dependencies() {
            return None;
        }
        let unchanged = self.conditions.iter().any(|c| {
            c.type_ == LOCAL_QUEUE
                && c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message)
        });
        if unchanged {
            return None;
        }
        self.set_local_queue("False", reason, message, now);
        self.message = Some(message.to_owned());
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
        })
    }

    /// The job left the local queue (its workload is being created): its `LocalQueue`
    /// condition turns `True`. Returns whether it changed; not an event of its own (the
    /// launch and the run are).
    pub fn admitted_from_queue(&mut self, now: DateTime<Utc>) -> bool {
        let waited = self
            .conditions
            .iter()
            .any(|c| c.type_ == LOCAL_QUEUE && c.status == "False");
        if !waited || self.phase.is_terminal() {
            return false;
        }
        self.set_local_queue("True", ADMITTED, "admitted from the local queue", now);
        if self.phase == JobPhase::Pending {
            self.message = None;
        }
        true
    }

    /// Why the job waits, when it waits for anything jobgate's local queue knows of: its
    /// dependencies, a launch retry, or the queue's own reason. `None` once admitted.
    pub fn local_queue_wait(&self) -> Option<QueueWait> {
        if self.phase != JobPhase::Pending {
            return None;
        }
        let find = |type_: &str| {
            self.conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "False")
        };
        let wait = |c: &Condition, reason: &str| QueueWait {
            reason: reason.to_owned(),
            message: c.message.clone(),
            since: c.last_transition_time,
        };
        if let Some(c) = find(DEPENDENCIES_SUCCEEDED) {
            return Some(wait(c, c.reason.as_deref().unwrap_or_default()));
        }
        if let Some(c) = find(WORKLOAD_CREATED) {
            return Some(wait(c, BACKING_OFF));
        }
        find(LOCAL_QUEUE).map(|c| wait(c, c.reason.as_deref().unwrap_or(WAITING_FOR_CAPACITY)))
    }

    fn set_local_queue(&mut self, status: &str, reason: &str, message: &str, now: DateTime<Utc>) {
        self.conditions.retain(|c| c.type_ != LOCAL_QUEUE);
        self.conditions.push(Condition {
            type_: LOCAL_QUEUE.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: Some(now),
        });
    }
}
