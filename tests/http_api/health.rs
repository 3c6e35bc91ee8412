//! The health endpoints: `/healthz` and `/readyz` answer 200, `/readyz` with its status as
//! JSON.

use reqwest::StatusCode;

use crate::common::Server;
use crate::support::{JSON, send};

#[tokio::test]
async fn health_and_readiness() {
    let server = Server::start(&[]).await;
    let reply = send(&server, server.http().get(server.url("/healthz"))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);

    let reply = send(&server, server.http().get(server.url("/readyz"))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.content_type(), JSON);
    assert_eq!(reply.json()["status"], "ready", "{}", reply.text);
}
