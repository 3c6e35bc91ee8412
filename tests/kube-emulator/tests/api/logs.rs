//! The `pods/{name}/log` subresource: tail, follow, and the end of a followed log.
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
