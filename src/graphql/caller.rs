//! Who is calling: the [`Identity`] the transport (HTTP or WebSocket) authenticated and put
//! into the request's data, as resolvers read it from their `Context`, and the
//! [`Submitter`] it makes of a job the caller submits.
//!
//! Both the root resolvers (`schema`) and the object types (`types`) need it, so it lives
//! here, below both. It must not authenticate anything or decide what the caller may see: it
//! only finds the identity the transport already established.

use async_graphql::Context;

use crate::auth::Identity;
use crate::graphql::error::{Code, error};
use crate::jobs::service::Submitter;

/// The caller, as the transport authenticated it. Every request carries one; a request
/// without (a bug) is refused rather than let in.
pub(crate) fn caller<'c>(ctx: &'c Context<'_>) -> async_graphql::Result<&'c Identity> {
    ctx.data_opt::<Identity>()
        .ok_or_else(|| error(Code::Unauthenticated, "no identity"))
}

/// The caller as the submitter of a job: every way of submitting records the same name and
/// scopes idempotency keys by the same principal.
pub(crate) fn submitter(identity: &Identity) -> Submitter {
    Submitter {
        name: identity.name.clone(),
        principal: identity.principal.clone(),
    }
}
