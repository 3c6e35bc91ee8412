//! What a subscription resolver needs to share the rendering of its events with identical
//! subscriptions, whatever transport delivers them: the seam between the resolvers in
//! `schema` and a transport that groups subscriptions (the WebSocket one, in `ws::fanout`).
//!
//! A transport that shares renderings puts a [`Tap`] into the data of every subscription it
//! starts. A resolver that can share calls [`Tap::join`] with its caller's sharing key (what
//! the caller may see: callers whose renderings may differ must not give the same key) and
//! hands its events to the returned [`SharedDelivery`] instead of yielding them to
//! async-graphql; its stream then yields only the error that ends them. A group renders with
//! one long-lived execution of the same operation whose data holds a [`RenderFeed`] instead:
//! the resolver, seeing it, yields the events fed to it and nothing else (no rate limit, no
//! lookup: the subscriber's own execution did those). With neither in its data (over HTTP, in
//! tests), a resolver yields its events itself.
//!
//! This module must not know any transport, the schema or any business rule: it only names
//! what the two sides exchange.

use std::any::Any;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tracing::error;

/// An event as the schema hands it over; only the schema's resolvers look inside.
pub type Item = Arc<dyn Any + Send + Sync>;

/// Which rendering of an event: its cursor, and a variant the schema chooses (for example to
/// tell a synthesised current state from the recorded event with the same cursor).
pub type RenderKey = (i64, u8);

/// A subscriber's events as it hands them over: each with its rendering's key and, when the
/// frame moves the subscription's resume cursor, that cursor; or the error that ends them.
pub type SharedEvents = BoxStream<'static, Result<(RenderKey, Item, Option<i64>), async_graphql::Error>>;

/// In the data of a group's rendering execution: the events to render, in order.
pub struct RenderFeed(Mutex<Option<mpsc::UnboundedReceiver<Item>>>);

impl RenderFeed {
    /// The feed of a rendering execution, reading the events its transport sends.
    pub fn new(events: mpsc::UnboundedReceiver<Item>) -> Self {
        Self(Mutex::new(Some(events)))
    }

    /// The events to render, as the resolver must yield them; the first call takes them (a
    /// document has one root field, so there is only one).
    pub fn events<T: Send + Sync + 'static>(&self) -> BoxStream<'static, Arc<T>> {
        let Some(feed) = self.0.lock().expect("render feed lock").take() else {
            return futures::stream::empty().boxed();
        };
        futures::stream::unfold(feed, |mut feed| async move {
            loop {
                let item = feed.recv().await?;
                match item.downcast::<T>() {
                    Ok(event) => return Some((event, feed)),
                    // Cannot happen with one resolver per group; skipping keeps the order.
                    Err(_) => error!("a shared subscription was fed an item of another type"),
                }
            }
        })
        .boxed()
    }
}

/// How a transport groups subscriptions that may share renderings.
pub trait RenderSharing: Send + Sync {
    /// Joins the group of this subscription's operation for callers with `sharing`. Called
    /// once the subscriber's place in the event stream is taken: the group's member count
    /// then tells a client that events recorded from now on reach it.
    fn join(&self, sharing: &str) -> Box<dyn SharedDelivery>;
}

/// A subscriber's membership of a group: hands its events over for rendering and delivers
/// the rendered frames.
pub trait SharedDelivery: Send {
    /// Says where this subscription could be resumed from before any event has been
    /// delivered: every event it should get after `cursor` is still to come.
    fn resumable_after(&self, cursor: i64);

    /// Delivers a subscriber's own `events` until they end, the first error, or the
    /// subscriber goes; the returned stream yields that error and then ends, and dropping it
    /// stops the delivery.
    fn run(self: Box<Self>, events: SharedEvents) -> BoxStream<'static, async_graphql::Error>;
}

/// In the data of every subscription whose transport shares renderings: how its resolver
/// joins a group.
pub struct Tap(Box<dyn RenderSharing>);

impl Tap {
    pub fn new(sharing: impl RenderSharing + 'static) -> Self {
        Self(Box::new(sharing))
    }

    /// See [`RenderSharing::join`].
    pub fn join(&self, sharing: &str) -> Box<dyn SharedDelivery> {
        self.0.join(sharing)
    }
}
