//! Shutdown: on SIGTERM every socket, acknowledged or not, is closed with 1001 "Server shutting
//! down" before jobgate exits 0, also when the sessions run on a one-thread delivery runtime.

use serde_json::json;

use crate::client::{Client, Received, read_events_until_succeeded};
use crate::common::Server;

#[tokio::test]
async fn sigterm_closes_every_socket_with_1001() {
    let mut server = Server::spawn(&[]).await;
    let mut active = Client::acked(&server).await;
    active
        .subscribe("events", "subscription { jobEvents { cursor } }", json!({}))
        .await;
    active.expect_alive().await;
    let mut waiting = Client::connect(&server).await;
    waiting.send(json!({"type": "ping"})).await;
    waiting.expect(json!({"type": "pong"})).await;

    let closes = async {
        let a = active.recv().await;
        let w = waiting.recv().await;
        (a, w)
    };
    let (status, (active_close, waiting_close)) = tokio::join!(server.terminate(), closes);
    let shutting_down = Received::Closed(1001, "Server shutting down".into());
    assert_eq!(active_close, shutting_down);
    assert_eq!(waiting_close, shutting_down);
    assert!(status.success(), "jobgate exited with {status}");
}

/// Sessions run on a runtime of their own (`--delivery-threads`) whose threads run below
/// jobgate's others (`--delivery-nice`). With a single such thread a subscriber still gets
/// its events, and SIGTERM still closes its socket with 1001 before jobgate exits 0: the
/// runtime outlives the sessions it runs.
#[tokio::test]
async fn sessions_on_a_one_thread_delivery_runtime_get_events_and_close_at_shutdown() {
    let mut server = Server::spawn(&["--delivery-threads", "1", "--delivery-nice", "7"]).await;
    let mut client = Client::acked(&server).await;
    // From the start of the log, so that no event can slip by before the subscription is live.
    client
        .subscribe(
            "events",
            "subscription { jobEvents(after: \"0\") { phase job { id } } }",
            json!({}),
        )
        .await;
    let job = server.submit(json!({"command": ["true"]})).await;
    read_events_until_succeeded(&mut client, &job).await;

    // The delivery threads, as `top -H` shows them: 7 nice steps below the process.
    let pid = server.pid();
    let process_nice = nice(&format!("/proc/{pid}/stat"));
    let mut delivery = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads") {
        let task = task.expect("a thread").path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if name.trim() == "ws-delivery" {
            delivery.push(nice(&task.join("stat").to_string_lossy()));
        }
    }
    assert!(!delivery.is_empty(), "no ws-delivery thread in jobgate");
    assert!(
        delivery.iter().all(|n| *n == (process_nice + 7).min(19)),
        "delivery threads' nice values {delivery:?}, jobgate's {process_nice}"
    );

    let (status, close) = tokio::join!(server.terminate(), client.recv());
    assert_eq!(close, Received::Closed(1001, "Server shutting down".into()));
    assert!(status.success(), "jobgate exited with {status}");
    let log = server.log_text();
    for trouble in [
        "could not lower",
        "did not close within",
        "did not shut down cleanly",
    ] {
        assert!(!log.contains(trouble), "{trouble:?} in jobgate's log: {log}");
    }
}

/// The nice value in a /proc `stat` file (field 19).
fn nice(stat_path: &str) -> i64 {
    let stat = std::fs::read_to_string(stat_path).expect("a stat file");
    let after_comm = stat.rsplit_once(')').expect("(comm)").1;
    // Field 3 (state) is the first after "(comm)", so field 19 is the 17th.
    after_comm
        .split_whitespace()
        .nth(16)
        .and_then(|n| n.parse().ok())
        .expect("a nice value")
}
