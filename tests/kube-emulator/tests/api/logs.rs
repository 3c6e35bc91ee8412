//! The `pods/{name}/log` subresource: tail, follow, and the end of a followed log; what the
//! kubelet forgets: rotated files (`log_max_bytes`) and the containers of deleted pods
//! (`kubelet_gc`).
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

#[tokio::test]
async fn pod_logs_tail_and_follow_until_the_container_stops() {
    let (emulator, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(
            "talker",
            &[
                ("EMULATOR_GATE", "stop"),
                ("EMULATOR_LOG", "one\ntwo\nthree"),
                ("EMULATOR_RUN_MS", "0"),
            ],
        ),
    )
    .await
    .expect("pod");
    let all = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(text) = pods.logs("talker", &LogParams::default()).await
                && text.lines().count() == 3
            {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the container logs");
    assert_eq!(all, "one\ntwo\nthree\n");
    let tail = pods
        .logs(
            "talker",
            &LogParams {
                tail_lines: Some(2),
                ..LogParams::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail, "two\nthree\n");

    let stream = pods
        .log_stream(
            "talker",
            &LogParams {
                follow: true,
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .expect("follow");
    let mut lines = stream.lines();
    assert_eq!(next(&mut lines).await.expect("line"), "three");
    emulator.store().append_log("default", "talker", "four");
    assert_eq!(next(&mut lines).await.expect("line"), "four");
    emulator.simulation().open_gate("stop");
    let rest: Vec<String> = tokio::time::timeout(WAIT, lines.try_collect())
        .await
        .expect("ends")
        .expect("lines");
    assert!(rest.is_empty(), "{rest:?}");

    let status = api_error(pods.logs("missing", &LogParams::default()).await);
    assert_eq!(status.code, 404);
    emulator.shutdown().await;
}

/// Waits until the pod's log (a plain read) holds `lines` lines; returns it.
async fn log_with_lines(pods: &Api<Pod>, name: &str, lines: usize) -> String {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(text) = pods.logs(name, &LogParams::default()).await
                && text.lines().count() == lines
            {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the container logs")
}

/// A pod `name` held running by the gate `gate`, its container having written `log` (lines
/// joined by `\n`) at once; a follow of its log, opened once all of `log` can be read, and
/// read past its first line. The rest of the stream is returned.
async fn followed_after_first_line(
    pods: &Api<Pod>,
    name: &str,
    gate: &str,
    log: &str,
) -> impl Stream<Item = std::io::Result<String>> + Unpin {
    pods.create(
        &PostParams::default(),
        &pod(
            name,
            &[
                ("EMULATOR_GATE", gate),
                ("EMULATOR_LOG", log),
                ("EMULATOR_RUN_MS", "0"),
            ],
        ),
    )
    .await
    .expect("pod");
    let lines: Vec<&str> = log.split('\n').collect();
    assert_eq!(log_with_lines(pods, name, lines.len()).await, format!("{log}\n"));
    let follow = pods
        .log_stream(
            name,
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("follow");
    let mut followed = follow.lines();
    assert_eq!(next(&mut followed).await.expect("line"), lines[0]);
    followed
}

#[tokio::test]
async fn a_rotated_log_serves_only_its_current_file_but_a_follow_goes_on_across_rotations() {
    let (emulator, client) = start_with(Options {
        simulation: kube_emulator::SimConfig {
            log_max_bytes: Some(20),
            ..kube_emulator::SimConfig::default()
        },
        ..Options::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut followed = followed_after_first_line(&pods, "rotator", "stop", "a1\na2").await;
    // 4 bytes a line with its newline: a file of at most 20 bytes holds five of them. The
    // current file ends up as b19, b20.
    let written: Vec<String> = (1..=20).map(|i| format!("b{i:02}")).collect();
    for line in &written {
        emulator.store().append_log("default", "rotator", line);
    }
    let mut expected = vec!["a2".to_owned()];
    expected.extend(written.iter().cloned());
    for line in &expected {
        assert_eq!(
            &next(&mut followed).await.expect("line"),
            line,
            "the follow goes on across rotations"
        );
    }
    assert_eq!(
        pods.logs("rotator", &LogParams::default()).await.expect("read"),
        "b19\nb20\n",
        "a read sees only the current file"
    );
    let tail = pods
        .logs(
            "rotator",
            &LogParams {
                tail_lines: Some(10),
                ..LogParams::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail, "b19\nb20\n");
    // Re-opened from the time of the first line, as a client resuming a cut follow does.
    let first = emulator.store().log_entries("default", "rotator").expect("log")[0].0;
    let since = k8s_openapi::jiff::Timestamp::from_second(first.timestamp()).expect("a time");
    let resumed = pods
        .logs(
            "rotator",
            &LogParams {
                since_time: Some(since),
                timestamps: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("since");
    let texts: Vec<&str> = resumed
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, t)| t))
        .collect();
    assert_eq!(
        texts,
        ["b19", "b20"],
        "a sinceTime read sees only the current file"
    );
    emulator.simulation().open_gate("stop");
    let rest: Vec<String> = tokio::time::timeout(WAIT, followed.try_collect())
        .await
        .expect("ends")
        .expect("lines");
    assert!(rest.is_empty(), "{rest:?}");
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_deleted_pods_log_is_collected_after_the_gc_delay_whatever_its_finalizers() {
    let (emulator, client) = start_with(Options {
        simulation: kube_emulator::SimConfig {
            kubelet_gc: Some(Duration::ZERO),
            ..kube_emulator::SimConfig::default()
        },
        ..Options::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut held = pod("held", &[("EMULATOR_LOG", "one\ntwo"), ("EMULATOR_RUN_MS", "0")]);
    held.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    pods.create(&PostParams::default(), &held).await.expect("pod");
    // Ended, not deleted: the log stays readable.
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            let p = pods.get("held").await.expect("pod");
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the pod ends");
    assert_eq!(log_with_lines(&pods, "held", 2).await, "one\ntwo\n");
    let container_id = ended
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .expect("statuses")[0]
        .container_id
        .clone()
        .expect("a container id");
    pods.delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    // The finalizer keeps the pod, not its containers: the kubelet's answer, relayed with 200.
    let answer = tokio::time::timeout(WAIT, async {
        loop {
            let text = pods
                .logs("held", &LogParams::default())
                .await
                .expect("a 200 answer");
            if !text.ends_with('\n') {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the containers are collected");
    assert_eq!(
        answer,
        format!("unable to retrieve container logs for {container_id}")
    );
    let kept = pods.get("held").await.expect("the pod object stays");
    assert!(kept.metadata.deletion_timestamp.is_some());
    let follow = pods
        .logs(
            "held",
            &LogParams {
                follow: true,
                timestamps: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("follow");
    assert_eq!(follow, answer, "a follow gets the same answer and ends");
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_follow_open_when_the_containers_are_collected_sends_what_was_written_then_ends() {
    let (emulator, client) = start_with(Options::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let followed = followed_after_first_line(&pods, "drained", "never", "a1").await;
    // Written, then the containers removed at once: the kubelet's reader drains the files it
    // holds open, so the stream sends every line before it ends.
    let written: Vec<String> = (1..=5).map(|i| format!("b{i}")).collect();
    for line in &written {
        emulator.store().append_log("default", "drained", line);
    }
    emulator.store().collect_log("default", "drained");
    let rest: Vec<String> = tokio::time::timeout(WAIT, followed.try_collect())
        .await
        .expect("the stream ends")
        .expect("lines");
    assert_eq!(rest, written);
    emulator.shutdown().await;
}
