//! A bound of each sender's own on the conversations it creates: one webhook key created
//! 30,000 conversations in 13 s, each a record every catalog read may scan. Each key (a
//! webhook key, a sandbox's session key) may create so many new conversations per window,
//! counted in the store across replicas; past it, a delivery for a conversation it has
//! not created yet is refused (429) until the window ends, while deliveries for its
//! existing conversations go on.

use std::time::Duration;

use sandgate_proto::error::ErrorDetail;
use sandgate_store::Store;
use tonic::Status;

/// New conversations a key may create per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreationRate {
    pub conversations: u32,
    /// Opens with a key's first creation.
    pub window: Duration,
}

/// `WEBHOOK_NEW_CONVERSATIONS_RATE`'s default: 10,000 new conversations a minute per key,
/// past what a platform's app servers start through one shared webhook key (a load test
/// of the catalog makes thousands a minute), far below a flood.
pub const DEFAULT_CREATION_RATE: CreationRate = CreationRate {
    conversations: 10_000,
    window: Duration::from_secs(60),
};

/// Counts one new conversation of `owner` (the catalog's owner, never a key itself), and
/// refuses it past `rate` (429, with the seconds to wait).
pub async fn count(store: &Store, rate: Option<CreationRate>, owner: &str) -> Result<(), Status> {
    let Some(rate) = rate else {
        return Ok(());
    };
    let hit = store
        .rate_limits
        .hit(&format!("webhook-new-conversations:{owner}"), rate.window)
        .await
        .map_err(ErrorDetail::from)?;
    let allowed = u64::from(rate.conversations);
    if hit.count <= allowed {
        return Ok(());
    }
    if hit.count == allowed + 1 {
        tracing::warn!(
            sender = %owner,
            limit = rate.conversations,
            window_seconds = rate.window.as_secs(),
            "a sender created too many conversations; refusing new ones until its window ends"
        );
    }
    let seconds = u32::try_from(hit.resets_in.as_millis().div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1);
    Err(ErrorDetail::rate_limited(
        format!(
            "Too many new conversations: this key may create {} per {} seconds; retry in {seconds} seconds",
            rate.conversations,
            rate.window.as_secs()
        ),
        seconds,
    )
    .into())
}
