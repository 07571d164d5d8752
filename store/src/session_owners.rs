//! Who a gateway session belongs to: the first caller that names a session id owns it
//! (a virtual key, `key:<token>`), or the sandbox whose conversation it is
//! (`sandbox:<runtime id>`), which takes it whoever named it first. The model gateway
//! refuses a call that names a session of another owner, and marks nothing for it (idle
//! pause, the start's timeline). Sessions are named by their digest
//! (`keys::session_digest`), never by the id a client sent.

use std::time::Duration;

use async_trait::async_trait;

use crate::StoreResult;

#[async_trait]
pub trait SessionOwnerStore: Send + Sync + 'static {
    /// The owner of `session`: `owner` when it had none (it has now), else the one it
    /// has. Kept `ttl` after the last claim by its owner.
    async fn claim_session(&self, session: &str, owner: &str, ttl: Duration)
    -> StoreResult<String>;

    /// Makes `owner` the owner of `session`, whoever it was, for `ttl`.
    async fn own_session(&self, session: &str, owner: &str, ttl: Duration) -> StoreResult<()>;
}
