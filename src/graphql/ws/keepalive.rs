//! Keepalive: a WebSocket ping frame every period, and the verdict on a peer that did not
//! answer the last one before the next tick (reference §4).
//!
//! It only keeps the clock and the payload it waits for. It must not send anything itself
//! (the session queues the ping it asks for), and must not count a pong frame that does not
//! echo the last ping.

use std::time::Duration;

use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::config::timer_period;

/// What a keepalive tick asks of the session.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Beat {
    /// Send a ping frame with this payload.
    Ping([u8; 8]),
    /// The last ping went unanswered for a whole period: the peer is presumed dead.
    Unanswered,
}

/// The keepalive state of one socket.
pub(super) struct Keepalive {
    /// `None` when keepalive is disabled.
    interval: Option<Interval>,
    /// The payload of the ping frame not yet answered. Only a pong frame carrying it counts:
    /// RFC 6455 lets a peer send pong frames unasked (a one-way heartbeat), and a peer that
    /// stopped reading could otherwise keep its socket, and every buffer behind it, forever
    /// with them. A peer that reads nothing never sees our ping (it sits behind the data the
    /// peer did not read), so it cannot answer it, and is dropped at the next tick.
    awaiting_pong: Option<[u8; 8]>,
    /// Pings sent so far; each ping's payload is its number, so every ping is distinct.
    pings: u64,
}

impl Keepalive {
    /// The first tick comes one `period` from now; a zero period disables keepalive.
    pub(super) fn new(period: Duration) -> Self {
        let period = timer_period(period);
        let interval = (!period.is_zero()).then(|| {
            let mut interval = tokio::time::interval_at(Instant::now() + period, period);
            // After a stall, tick once rather than in a burst: a burst would look like missed
            // pongs and drop a healthy client.
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            interval
        });
        Self {
            interval,
            awaiting_pong: None,
            pings: 0,
        }
    }

    /// The next tick; pending forever when keepalive is disabled. Cancel-safe (the state only
    /// changes once the tick has come), so it can be one branch of a `select!`.
    pub(super) async fn tick(&mut self) -> Beat {
        match &mut self.interval {
            Some(interval) => {
                interval.tick().await;
            }
            None => std::future::pending().await,
        }
        if self.awaiting_pong.is_some() {
            return Beat::Unanswered;
        }
        self.pings += 1;
        let payload = self.pings.to_be_bytes();
        self.awaiting_pong = Some(payload);
        Beat::Ping(payload)
    }

    /// A pong frame arrived; it answers the last ping only if it echoes its payload.
    pub(super) fn on_pong(&mut self, payload: &[u8]) {
        if self.awaiting_pong.is_some_and(|p| payload == &p[..]) {
            self.awaiting_pong = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::{SinkExt, StreamExt};
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };
    use tokio_tungstenite::tungstenite;

    use super::*;
    use crate::graphql::ws::{
        PROTOCOL, WsConfig,
        test_support::{TestServer, WAIT},
    };

    #[tokio::test]
    async fn only_the_echo_of_the_last_ping_answers_it() {
        let mut keepalive = Keepalive::new(Duration::from_millis(1));
        let Beat::Ping(first) = keepalive.tick().await else {
            panic!("no ping on the first tick");
        };
        // An unasked pong (another payload) does not count.
        keepalive.on_pong(b"unasked!");
        assert_eq!(keepalive.tick().await, Beat::Unanswered);
        keepalive.on_pong(&first);
        let Beat::Ping(second) = keepalive.tick().await else {
            panic!("an answered ping was not followed by another");
        };
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn a_zero_period_never_ticks() {
        let mut keepalive = Keepalive::new(Duration::ZERO);
        let tick = tokio::time::timeout(Duration::from_millis(20), keepalive.tick()).await;
        assert!(tick.is_err(), "ticked: {tick:?}");
    }

    #[tokio::test]
    async fn client_ping_frame_gets_pong_frame() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client
            .ws
            .send(tungstenite::Message::Ping(b"hi".to_vec().into()))
            .await
            .unwrap();
        loop {
            let frame = tokio::time::timeout(WAIT, client.ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if let tungstenite::Message::Pong(payload) = frame {
                assert_eq!(&payload[..], b"hi");
                break;
            }
        }
    }

    #[tokio::test]
    async fn keepalive_pings_a_live_client_and_keeps_it() {
        // Long enough for a loaded machine to answer each ping before the next tick.
        let server = TestServer::start(WsConfig {
            keepalive_interval: Duration::from_millis(250),
            ..WsConfig::new(crate::metrics::Metrics::new())
        })
        .await;
        let mut client = server.acked().await;
        // tungstenite answers each ping frame while we read.
        let mut pings = 0;
        while pings < 2 {
            let frame = tokio::time::timeout(WAIT, client.ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if matches!(frame, tungstenite::Message::Ping(_)) {
                pings += 1;
            }
        }
        client.expect_alive().await;
    }

    #[tokio::test]
    async fn keepalive_drops_a_client_that_never_answers() {
        let server = TestServer::start(WsConfig {
            keepalive_interval: Duration::from_millis(20),
            ..WsConfig::new(crate::metrics::Metrics::new())
        })
        .await;
        let opcodes = raw_silent_client(server.addr).await;
        assert!(opcodes.contains(&0x9), "no ping frame: {opcodes:?}");
        // Dropped without a close frame.
        assert!(!opcodes.contains(&0x8), "close frame sent: {opcodes:?}");
    }

    /// A client on a bare TCP socket that does the handshake, sends `connection_init`, then
    /// only reads (so no pong frame is ever sent). Returns the opcodes of the frames received
    /// until the server dropped the connection.
    async fn raw_silent_client(addr: std::net::SocketAddr) -> Vec<u8> {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let handshake = format!(
            "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
        );
        tcp.write_all(handshake.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let header_end = loop {
            let mut chunk = [0u8; 1024];
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed during the handshake");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        assert!(buf.starts_with(b"HTTP/1.1 101"));
        let mut rest = buf.split_off(header_end);
        // A masked text frame (clients must mask).
        let text = br#"{"type":"connection_init"}"#;
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | text.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        tcp.write_all(&frame).await.unwrap();
        tokio::time::timeout(WAIT, async {
            loop {
                let mut chunk = [0u8; 1024];
                match tcp.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => rest.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .expect("the server kept the silent client");
        // Server frames are unmasked and short here: opcode, 7-bit length, payload.
        let mut opcodes = Vec::new();
        let mut i = 0;
        while i + 2 <= rest.len() {
            opcodes.push(rest[i] & 0x0f);
            i += 2 + (rest[i + 1] & 0x7f) as usize;
        }
        opcodes
    }
}
