//! Runs that something else than their own exit ends: the OOM killer, the kubelet's node-pressure
//! eviction, the scheduler's preemption and the Eviction API; the pod each leaves behind, and what
//! the Job controller's `podFailurePolicy` makes of it.
//!
//! It must not define fixtures other modules need: those live in `mod.rs`.

use super::*;
use crate::controllers::disruption::{Disrupted, evict};

/// Every version of the Job's pods the store went through, oldest first (pods that are gone
/// included).
fn pod_versions(store: &Store, job: &str) -> Vec<Value> {
    let (history, _) = store.watch(Some(0)).expect("history");
    history
        .iter()
        .filter(|c| c.resource == "pods" && c.object["metadata"]["labels"]["job-name"] == job)
        .map(|c| (*c.object).clone())
        .collect()
}

/// The last version of each of the Job's pods, in creation order.
fn final_pods(store: &Store, job: &str) -> Vec<Value> {
    let mut names: Vec<String> = Vec::new();
    let mut last: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    for pod in pod_versions(store, job) {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if !names.contains(&name) {
            names.push(name.clone());
        }
        last.insert(name, pod);
    }
    names.into_iter().filter_map(|n| last.remove(&n)).collect()
}

fn disruption_target(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
}

fn terminated(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]["state"]["terminated"]
}

#[tokio::test]
async fn oom_killed_runs_end_with_137_and_reason_oom_killed() {
    let store = Store::new();
    let _sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("oom", json!({}), &[("EMULATOR_OOM_ATTEMPTS", "1")]),
        )
        .expect("create");
    let last = follow_job(&store, "oom", finished).await.pop().expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(last["status"]["failed"], 1);
    let pods = final_pods(&store, "oom");
    assert_eq!(pods.len(), 2);
    assert_eq!(pods[0]["status"]["phase"], "Failed");
    assert_eq!(terminated(&pods[0])["exitCode"], 137);
    assert_eq!(terminated(&pods[0])["reason"], "OOMKilled");
    assert!(pods[0]["status"].get("reason").is_none(), "{}", pods[0]["status"]);
    assert!(disruption_target(&pods[0]).is_none());
    assert_eq!(terminated(&pods[1])["reason"], "Completed");

    // With restartPolicy OnFailure the container restarts in place, its last state OOMKilled.
    let mut on_failure = job("oom-restart", json!({}), &[("EMULATOR_OOM_ATTEMPTS", "1")]);
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    store
        .create("jobs.batch", Some("default"), on_failure)
        .expect("create");
    follow_job(&store, "oom-restart", finished).await;
    let pods = final_pods(&store, "oom-restart");
    assert_eq!(pods.len(), 1);
    let status = &pods[0]["status"]["containerStatuses"][0];
    assert_eq!(status["restartCount"], 1);
    assert_eq!(status["lastState"]["terminated"]["reason"], "OOMKilled");
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 137);
}

#[tokio::test]
async fn an_oom_kill_matches_an_exit_code_rule_of_its_container() {
    let store = Store::new();
    let _sim = sim(&store);
    let policy = json!({"podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [137]}}]}});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("oom-fail", policy, &[("EMULATOR_OOM_ATTEMPTS", "1")]),
        )
        .expect("create");
    let last = follow_job(&store, "oom-fail", finished)
        .await
        .pop()
        .expect("states");
    assert_eq!(condition_types(&last), ["FailureTarget", "Failed"]);
    let pod = final_pods(&store, "oom-fail").pop().expect("pod");
    assert_eq!(last["status"]["conditions"][1]["reason"], "PodFailurePolicy");
    assert_eq!(
        last["status"]["conditions"][1]["message"],
        format!(
            "Container main for pod default/{} failed with exit code 137 matching FailJob rule at index 0",
            pod["metadata"]["name"].as_str().unwrap_or("")
        )
    );
}

#[tokio::test]
async fn a_kubelet_eviction_fails_the_pod_as_evicted_and_an_ignore_rule_skips_it() {
    let store = Store::new();
    let _sim = sim(&store);
    let policy = json!({"backoffLimit": 0, "podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("evicted", policy, &[("EMULATOR_EVICT_ATTEMPTS", "1")]),
        )
        .expect("create");
    let last = follow_job(&store, "evicted", finished)
        .await
        .pop()
        .expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert!(
        last["status"].get("failed").is_none(),
        "an ignored eviction is not counted: {}",
        last["status"]
    );
    let pods = final_pods(&store, "evicted");
    assert_eq!(pods.len(), 2);
    let pod = &pods[0];
    let status = &pod["status"];
    assert_eq!(status["phase"], "Failed");
    assert_eq!(status["reason"], "Evicted");
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("The node was low on resource: memory. ") && message.contains("Container main"),
        "{message}"
    );
    let target = disruption_target(pod).expect("DisruptionTarget");
    assert_eq!(
        (&target["status"], &target["reason"], &target["message"]),
        (&json!("True"), &json!("TerminationByKubelet"), &json!(message))
    );
    assert_eq!(terminated(pod)["exitCode"], 137);
    assert!(
        pod["metadata"].get("deletionTimestamp").is_none(),
        "a kubelet eviction deletes nothing"
    );
    // The evicted pod stays, counted and without its tracking finalizer.
    let stored = store
        .get(
            "pods",
            Some("default"),
            pod["metadata"]["name"].as_str().unwrap_or(""),
        )
        .expect("the evicted pod stays");
    assert!(
        stored["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    let events = events_for(&store, pod["metadata"]["name"].as_str().unwrap_or(""));
    assert!(
        events.iter().any(|(r, m)| r == "Evicted" && m == message),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_preempted_pod_is_marked_deleted_and_fails_a_fail_job_rule() {
    let store = Store::new();
    let _sim = sim(&store);
    let policy = json!({"podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("preempted", policy, &[("EMULATOR_PREEMPT_ATTEMPTS", "1")]),
        )
        .expect("create");
    let last = follow_job(&store, "preempted", finished)
        .await
        .pop()
        .expect("states");
    assert_eq!(condition_types(&last), ["FailureTarget", "Failed"]);
    let pods = final_pods(&store, "preempted");
    assert_eq!(pods.len(), 1, "no replacement once the Job failed");
    let pod = &pods[0];
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    assert_eq!(last["status"]["conditions"][1]["reason"], "PodFailurePolicy");
    assert_eq!(
        last["status"]["conditions"][1]["message"],
        format!("Pod default/{name} has condition DisruptionTarget matching FailJob rule at index 0")
    );
    assert_eq!(last["status"]["failed"], 1);
    assert_eq!(pod["status"]["phase"], "Failed");
    assert!(pod["metadata"]["deletionTimestamp"].is_string());
    assert!(pod["status"].get("reason").is_none(), "{}", pod["status"]);
    let target = disruption_target(pod).expect("DisruptionTarget kept by the kubelet");
    assert_eq!(target["reason"], "PreemptionByScheduler");
    assert_eq!(
        target["message"],
        "default-scheduler: preempting to accommodate a higher priority pod"
    );
    assert_eq!(terminated(pod)["exitCode"], 143);
    let events = events_for(&store, name);
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Preempted" && m == "Preempted by a pod on node emulator-node"),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_eviction_api_marks_and_deletes_a_running_pod() {
    let store = Store::new();
    let sim = sim(&store);
    let policy = json!({"podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("drained", policy, &[("EMULATOR_GATE", "drained")]),
        )
        .expect("create");
    until(&store, "a running pod", |s| {
        pods_of(s, "drained")
            .iter()
            .any(|p| p["status"]["phase"] == "Running")
    })
    .await;
    let name = pods_of(&store, "drained")[0]["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert_eq!(evict(&store, "default", &name).expect("evict"), Disrupted::Marked);
    assert_eq!(
        evict(&store, "default", &name).expect("again"),
        Disrupted::AlreadyDeleting
    );
    assert_eq!(
        evict(&store, "default", "nope").expect("absent"),
        Disrupted::NotFound
    );
    until(&store, "a replacement", |s| {
        pods_of(s, "drained")
            .iter()
            .any(|p| p["metadata"]["name"] != name.as_str())
    })
    .await;
    sim.open_gate("drained");
    let last = follow_job(&store, "drained", finished)
        .await
        .pop()
        .expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert!(last["status"].get("failed").is_none(), "{}", last["status"]);
    let evicted = final_pods(&store, "drained")
        .into_iter()
        .find(|p| p["metadata"]["name"] == name.as_str())
        .expect("evicted pod");
    assert_eq!(evicted["status"]["phase"], "Failed");
    let target = disruption_target(&evicted).expect("DisruptionTarget");
    assert_eq!(
        (&target["reason"], &target["message"]),
        (&json!("EvictionByEvictionAPI"), &json!("Eviction API: evicting"))
    );
    assert_eq!(terminated(&evicted)["exitCode"], 143);
    // The kubelet writes its own conditions after the foreign one.
    let types: Vec<&str> = evicted["status"]["conditions"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        types,
        [
            "DisruptionTarget",
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
}
