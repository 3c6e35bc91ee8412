//! The accept loop. Each connection is served by hyper (HTTP/1.1, keep-alive, chunked watch
//! bodies) in a task owned by the loop's `JoinSet`, so stopping the loop closes the listener *and*
//! cuts every live connection at once — what "the API server went down" looks like to a client.
//! (axum's `serve` drains connections gracefully instead, which is the opposite of the fault we
//! want.)
//!
//! Must not know about routes or state beyond the `Router` it is given.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// Serves `app` on `listener` until `stop` fires (or is dropped); then closes the listener, cuts
/// every connection and returns once all connection tasks are gone.
pub async fn serve(listener: TcpListener, app: Router, mut stop: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Watch events are small writes that must not wait for Nagle.
                    let _ = stream.set_nodelay(true);
                    let service = TowerToHyperService::new(app.clone());
                    connections.spawn(async move {
                        let served = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                        if let Err(e) = served {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    // Typically EMFILE: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}
