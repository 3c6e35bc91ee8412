//! How the replicas bench puts its figures in the table: a row printed as it is added, and
//! the emulator's request counts per minute and per resource. It measures nothing itself.

use std::time::Duration;

use crate::cluster::Cluster;
use crate::common::Table;

pub(crate) fn push(table: &mut Table, what: &str, figure: &str, value: String) {
    println!("  {figure}: {value}");
    table.push((what.to_owned(), figure.to_owned(), value));
}

/// API requests counted by the emulator since its last reset, per minute over `window`.
pub(crate) fn requests_per_minute(cluster: &Cluster, window: Duration) -> String {
    let counted = cluster.emu.requests();
    println!("  requests by resource: {}", by_resource(&counted));
    let verbs: Vec<String> = counted
        .by_verb
        .iter()
        .map(|(verb, count)| format!("{verb} {count}"))
        .collect();
    format!(
        "{:.1} ({} in {:.1} s: {}; {} open watches)",
        counted.total as f64 * 60.0 / window.as_secs_f64().max(1e-9),
        counted.total,
        window.as_secs_f64(),
        if verbs.is_empty() {
            "none".into()
        } else {
            verbs.join(", ")
        },
        counted.open_watches
    )
}

/// "resource verb count, …" of the requests counted.
pub(crate) fn by_resource(counted: &kube_emulator::RequestCounts) -> String {
    let parts: Vec<String> = counted
        .by_resource
        .iter()
        .flat_map(|(resource, verbs)| {
            verbs
                .iter()
                .map(move |(verb, count)| format!("{resource} {verb} {count}"))
        })
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}
