//! The store's unit tests: creation and metadata, writes and their rules, deletion, watches from
//! a resourceVersion, listing and pod logs.

use super::metadata::NAME_SUFFIX_ALPHABET;
use super::*;

fn job(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"parallelism": 1}})
}

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
}

fn rv(o: &Value) -> u64 {
    resource_version(o).expect("object has an rv")
}

#[test]
fn new_store_has_builtins_and_namespaces() {
    let store = Store::new();
    for key in [
        "namespaces",
        "pods",
        "events",
        "events.events.k8s.io",
        "jobs.batch",
    ] {
        assert!(store.resource(key).is_some(), "{key}");
    }
    assert_eq!(
        store.resource("jobs.batch").map(|r| r.api_version()),
        Some("batch/v1".to_owned())
    );
    let (names, _) = store.list("namespaces", None, &|_| true);
    let names: Vec<_> = names
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["default", "kube-public", "kube-system"]);
}

#[test]
fn create_fills_metadata_and_rejects_duplicates() {
    let store = Store::new();
    let created = store
        .create("jobs.batch", Some("default"), job("a"))
        .expect("create");
    assert_eq!(created["metadata"]["namespace"], "default");
    assert_eq!(created["metadata"]["generation"], 1);
    let mut given = job("given-uid");
    given["metadata"]["uid"] = json!("0b5e0000-0000-4000-8000-000000000000");
    let kept = store
        .create("jobs.batch", Some("default"), given)
        .expect("create with uid");
    assert_eq!(kept["metadata"]["uid"], "0b5e0000-0000-4000-8000-000000000000");
    assert!(created["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(rv(&created) < store.current_rv());
    assert_eq!(rv(&kept), store.current_rv());
    assert_eq!(
        store.create("jobs.batch", Some("default"), job("a")),
        Err(StoreError::AlreadyExists)
    );
    // Same name in another namespace is fine.
    store
        .create("namespaces", None, json!({"metadata": {"name": "other"}}))
        .expect("namespace");
    store
        .create("jobs.batch", Some("other"), job("a"))
        .expect("other namespace");
    // Missing namespace.
    assert_eq!(
        store.create("jobs.batch", Some("nope"), job("a")),
        Err(StoreError::NotFound)
    );
    // Neither name nor generateName.
    assert!(matches!(
        store.create("jobs.batch", Some("default"), json!({"metadata": {}})),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn generate_name_appends_five_chars_from_the_alphabet() {
    let store = Store::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let p = store
            .create(
                "pods",
                Some("default"),
                json!({"metadata": {"generateName": "pi-"}}),
            )
            .expect("create");
        let name = p["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let suffix = name.strip_prefix("pi-").expect("prefix kept");
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix.bytes().all(|b| NAME_SUFFIX_ALPHABET.contains(&b)),
            "{name}"
        );
        assert!(seen.insert(name));
    }
}

#[test]
fn resource_version_is_monotonic_across_all_objects() {
    let store = Store::new();
    let mut last = store.current_rv();
    let mut check = |o: &Value| {
        let r = rv(o);
        assert!(r > last, "{r} after {last}");
        last = r;
    };
    check(&store.create("jobs.batch", Some("default"), job("a")).expect("a"));
    check(&store.create("pods", Some("default"), pod("p")).expect("p"));
    check(&store.create("jobs.batch", Some("default"), job("b")).expect("b"));
    check(
        &store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                o["status"] = json!({"active": 1});
                Ok(())
            })
            .expect("modify"),
    );
    check(&store.delete("pods", Some("default"), "p", None).expect("delete"));
    assert_eq!(last, store.current_rv());
}

#[test]
fn modify_bumps_generation_only_for_spec_and_skips_noops() {
    let store = Store::new();
    let created = store
        .create("jobs.batch", Some("default"), job("a"))
        .expect("create");
    let same = store
        .modify("jobs.batch", Some("default"), "a", &mut |_| Ok(()))
        .expect("noop");
    assert_eq!(same, created);
    assert_eq!(store.current_rv(), rv(&created));

    let labelled = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["metadata"]["labels"] = json!({"x": "y"});
            o["metadata"]["generation"] = json!(42); // clients cannot set it
            o["metadata"]["uid"] = json!("forged");
            Ok(())
        })
        .expect("labels");
    assert_eq!(labelled["metadata"]["generation"], 1);
    assert_eq!(labelled["metadata"]["uid"], created["metadata"]["uid"]);
    assert!(rv(&labelled) > rv(&created));

    let respec = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["spec"]["parallelism"] = json!(2);
            Ok(())
        })
        .expect("spec");
    assert_eq!(respec["metadata"]["generation"], 2);
    assert_eq!(
        store.modify("jobs.batch", Some("default"), "zz", &mut |_| Ok(())),
        Err(StoreError::NotFound)
    );
    // An error from `f` commits nothing.
    let before = store.current_rv();
    let err = store.modify("jobs.batch", Some("default"), "a", &mut |o| {
        o["spec"]["parallelism"] = json!(9);
        Err(StoreError::Invalid("no".into()))
    });
    assert_eq!(err, Err(StoreError::Invalid("no".into())));
    assert_eq!(store.current_rv(), before);
}

#[test]
fn stale_resource_version_conflicts() {
    let store = Store::new();
    let created = store
        .create("jobs.batch", Some("default"), job("a"))
        .expect("create");
    let mut stale = created.clone();
    let updated = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            let mut body = created.clone();
            body["spec"]["parallelism"] = json!(3);
            *o = body;
            Ok(())
        })
        .expect("update with the current rv");
    assert_eq!(updated["spec"]["parallelism"], 3);
    stale["spec"]["parallelism"] = json!(4);
    let err = store.modify("jobs.batch", Some("default"), "a", &mut |o| {
        *o = stale.clone();
        Ok(())
    });
    assert!(matches!(err, Err(StoreError::Conflict(_))), "{err:?}");
    // Without a resourceVersion the write is unconditional.
    let forced = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            let mut body = stale.clone();
            if let Some(m) = body["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            *o = body;
            Ok(())
        })
        .expect("unconditional");
    assert_eq!(forced["spec"]["parallelism"], 4);
}

#[test]
fn delete_with_uid_precondition() {
    let store = Store::new();
    let created = store
        .create("jobs.batch", Some("default"), job("a"))
        .expect("create");
    assert!(matches!(
        store.delete("jobs.batch", Some("default"), "a", Some("other-uid")),
        Err(StoreError::Conflict(_))
    ));
    let uid = created["metadata"]["uid"].as_str().map(str::to_owned);
    let deleted = store
        .delete("jobs.batch", Some("default"), "a", uid.as_deref())
        .expect("delete");
    assert_eq!(rv(&deleted), store.current_rv());
    assert!(store.get("jobs.batch", Some("default"), "a").is_none());
    assert_eq!(
        store.delete("jobs.batch", Some("default"), "a", None),
        Err(StoreError::NotFound)
    );
}

#[test]
fn finalizers_defer_deletion_until_the_last_one_goes() {
    let store = Store::new();
    let mut body = job("a");
    body["metadata"]["finalizers"] = json!(["x", "y"]);
    store.create("jobs.batch", Some("default"), body).expect("create");
    let deleting = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["metadata"]["deletionTimestamp"] = json!(now_timestamp());
            o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            Ok(())
        })
        .expect("mark deleting");
    assert_eq!(
        deleting["metadata"]["generation"], 2,
        "deferred deletion bumps generation"
    );
    // Cannot add finalizers or clear the deletion mark.
    let err = store.modify("jobs.batch", Some("default"), "a", &mut |o| {
        o["metadata"]["finalizers"] = json!(["x", "y", "z"]);
        Ok(())
    });
    assert!(matches!(err, Err(StoreError::Invalid(_))));
    let kept = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["metadata"]["finalizers"] = json!(["y"]);
            if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("deletionTimestamp");
            }
            Ok(())
        })
        .expect("remove one finalizer");
    assert!(kept["metadata"]["deletionTimestamp"].is_string());
    assert!(store.get("jobs.batch", Some("default"), "a").is_some());

    let (_, mut rx) = store.watch(None).expect("watch");
    let gone = store
        .modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["metadata"]["finalizers"] = json!([]);
            Ok(())
        })
        .expect("remove the last finalizer");
    assert!(store.get("jobs.batch", Some("default"), "a").is_none());
    let change = rx.try_recv().expect("a change");
    assert_eq!(change.kind, ChangeKind::Deleted);
    assert_eq!(rv(&gone), change.rv);
}

#[test]
fn deleting_pod_goes_when_terminal() {
    let store = Store::new();
    store.create("pods", Some("default"), pod("p")).expect("create");
    store
        .modify("pods", Some("default"), "p", &mut |o| {
            o["metadata"]["deletionTimestamp"] = json!(now_timestamp());
            o["metadata"]["deletionGracePeriodSeconds"] = json!(30);
            o["status"] = json!({"phase": "Running"});
            Ok(())
        })
        .expect("graceful delete");
    assert!(
        store.get("pods", Some("default"), "p").is_some(),
        "a running pod stays while terminating"
    );
    let (_, mut rx) = store.watch(None).expect("watch");
    let last = store
        .modify("pods", Some("default"), "p", &mut |o| {
            o["status"]["phase"] = json!("Succeeded");
            Ok(())
        })
        .expect("terminal");
    assert!(store.get("pods", Some("default"), "p").is_none());
    let change = rx.try_recv().expect("a change");
    assert_eq!(change.kind, ChangeKind::Deleted);
    assert_eq!(change.object["status"]["phase"], "Succeeded");
    assert_eq!(
        change.previous.as_ref().map(|p| p["status"]["phase"].clone()),
        Some(json!("Running"))
    );
    assert_eq!(last["status"]["phase"], "Succeeded");
}

#[test]
fn watch_from_rv_has_no_gap_and_no_duplicate() {
    let store = Store::new();
    store.create("jobs.batch", Some("default"), job("a")).expect("a");
    let from = store.current_rv();
    store.create("jobs.batch", Some("default"), job("b")).expect("b");
    store.create("jobs.batch", Some("default"), job("c")).expect("c");
    let (history, mut rx) = store.watch(Some(from)).expect("watch");
    store
        .delete("jobs.batch", Some("default"), "b", None)
        .expect("delete b");
    let mut seen: Vec<u64> = history.iter().map(|c| c.rv).collect();
    while let Ok(c) = rx.try_recv() {
        seen.push(c.rv);
    }
    let expected: Vec<u64> = (from + 1..=store.current_rv()).collect();
    assert_eq!(seen, expected);
    assert_eq!(history.len(), 2);

    // From "now": nothing old.
    let (history, _rx) = store.watch(None).expect("watch now");
    assert!(history.is_empty());
    let (history, _rx) = store.watch(Some(store.current_rv())).expect("watch current");
    assert!(history.is_empty());
}

#[test]
fn concurrent_writers_and_a_watcher_see_every_rv_once() {
    let store = Store::new();
    let from = store.current_rv();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    store
                        .create("pods", Some("default"), pod(&format!("w{w}-{i}")))
                        .expect("create");
                }
            })
        })
        .collect();
    // Start the watch while writes are in flight.
    let (history, mut rx) = store.watch(Some(from)).expect("watch");
    for w in writers {
        w.join().expect("writer");
    }
    let mut seen: Vec<u64> = history.iter().map(|c| c.rv).collect();
    while let Ok(c) = rx.try_recv() {
        seen.push(c.rv);
    }
    let expected: Vec<u64> = (from + 1..=store.current_rv()).collect();
    assert_eq!(seen, expected);
}

#[test]
fn old_rv_expires_after_compaction_or_window() {
    let store = Store::new();
    let old = store.current_rv();
    store.create("jobs.batch", Some("default"), job("a")).expect("a");
    store.compact();
    let now = store.current_rv();
    assert_eq!(
        store.watch(Some(old)).map(|(h, _)| h.len()),
        Err(StoreError::Expired {
            requested: old,
            oldest: now
        })
    );
    assert!(store.watch(Some(now)).is_ok());

    let small = Store::with_options(StoreOptions {
        history: 2,
        ..StoreOptions::default()
    });
    let start = small.current_rv();
    for n in ["a", "b", "c"] {
        small
            .create("jobs.batch", Some("default"), job(n))
            .expect("create");
    }
    assert!(matches!(
        small.watch(Some(start)),
        Err(StoreError::Expired { .. })
    ));
    let (history, _) = small
        .watch(Some(small.current_rv() - 2))
        .expect("within the window");
    assert_eq!(history.len(), 2);
}

#[test]
fn list_is_sorted_filtered_and_scoped() {
    let store = Store::new();
    store
        .create("namespaces", None, json!({"metadata": {"name": "a-ns"}}))
        .expect("ns");
    for (ns, name) in [("default", "z"), ("a-ns", "y"), ("default", "b")] {
        store.create("jobs.batch", Some(ns), job(name)).expect("create");
    }
    let names = |items: Vec<Value>| -> Vec<String> {
        items
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"]
                )
            })
            .collect()
    };
    let (all, rv) = store.list("jobs.batch", None, &|_| true);
    assert_eq!(rv, store.current_rv());
    assert_eq!(names(all), ["a-ns/\"y\"", "default/\"b\"", "default/\"z\""]);
    let (def, _) = store.list("jobs.batch", Some("default"), &|o| o["metadata"]["name"] != "b");
    assert_eq!(names(def), ["default/\"z\""]);
}

#[tokio::test]
async fn logs_append_and_wake_followers() {
    let store = Store::new();
    assert!(store.logs("default", "p").is_none());
    store.create("pods", Some("default"), pod("p")).expect("pod");
    assert_eq!(store.logs("default", "p"), Some(vec![]));
    let woke = store.log_changed("default", "p");
    store.append_log("default", "p", "hello");
    tokio::time::timeout(std::time::Duration::from_secs(10), woke)
        .await
        .expect("woken by a line");
    assert_eq!(store.logs("default", "p"), Some(vec!["hello".to_owned()]));

    let woke = store.log_changed("default", "p");
    store.delete("pods", Some("default"), "p", None).expect("delete");
    tokio::time::timeout(std::time::Duration::from_secs(10), woke)
        .await
        .expect("woken by deletion");
    assert!(store.logs("default", "p").is_none());
    // A pod that does not exist resolves at once.
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        store.log_changed("default", "p"),
    )
    .await
    .expect("missing pod");
}
