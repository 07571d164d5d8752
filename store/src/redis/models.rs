//! The model gateway in Redis.
//!
//! - `sandgate:models:{<scope>}`: a hash, model name → the added model's JSON;
//! - `sandgate:models:changed`: a Pub/Sub channel, told of every addition, which each
//!   replica follows to know when the added models it keeps are out of date;
//! - `sandgate:spend-log`: a stream of entries (field `d`, the JSON), trimmed with
//!   `MAXLEN ~` on every append.

use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::watch;

use super::{Primary, RedisStore, corrupt, unavailable};
use crate::StoreResult;
use crate::models::{ModelStore, SpendLogEntry, SpendLogRetention, SpendLogStore, StoredModel};

const SPEND_LOG: &str = "sandgate:spend-log";
pub(super) const MODELS_CHANGED: &str = "sandgate:models:changed";

/// How long subscribing may take, and the wait before another try after a failure.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(500);

fn models_key(scope: &str) -> String {
    format!("sandgate:models:{{{scope}}}")
}

/// A subscription to `channel`.
async fn subscribe(
    client: &redis::Client,
    channel: &str,
) -> redis::RedisResult<redis::aio::PubSub> {
    let subscribing = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    };
    tokio::time::timeout(SUBSCRIBE_TIMEOUT, subscribing)
        .await
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "subscribing timed out")))?
}

/// Follows `channel` (`MODELS_CHANGED`, or the keys') until every receiver of
/// `generation` is gone: the generation moves on with each notification, and with each
/// new subscription (what was said while unsubscribed is unknown); it is `None` while
/// unsubscribed. Each subscription is to the primary of the moment (the sentinels may have
/// named another), or to a cluster's seed nodes in turn (a message published on any node
/// reaches the subscribers of every one).
impl RedisStore {
    /// The generation of what `channel` announces, followed from the first caller on
    /// (the model gateway), not by every process that opens the store: the runtime API
    /// never asks.
    pub(super) fn followed(
        &self,
        kept: &std::sync::OnceLock<watch::Receiver<Option<u64>>>,
        channel: &'static str,
    ) -> watch::Receiver<Option<u64>> {
        kept.get_or_init(|| {
            let (generation, changes) = watch::channel(None);
            tokio::spawn(follow_changes(
                Arc::downgrade(&self.primary),
                channel,
                generation,
            ));
            changes
        })
        .clone()
    }
}

async fn follow_changes(
    primary: Weak<RwLock<Primary>>,
    channel: &'static str,
    generation: watch::Sender<Option<u64>>,
) {
    let mut next = 0_u64;
    let mut warned = false;
    // Which of the servers to subscribe on (a cluster's seed nodes, in turn).
    let mut attempt = 0_usize;
    loop {
        let Some(client) = primary.upgrade().and_then(|primary| {
            let primary = primary.read().unwrap_or_else(PoisonError::into_inner);
            let subscribers = &primary.subscribers;
            attempt = attempt.wrapping_add(1);
            subscribers.get(attempt % subscribers.len().max(1)).cloned()
        }) else {
            return;
        };
        let subscribed = tokio::select! {
            subscribed = subscribe(&client, channel) => subscribed,
            () = generation.closed() => return,
        };
        match subscribed {
            Ok(pubsub) => {
                if warned {
                    tracing::info!(channel, "following the gateway's changes again");
                    warned = false;
                }
                next += 1;
                generation.send_replace(Some(next));
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        message = messages.next() => match message {
                            Some(_) => {
                                next += 1;
                                generation.send_replace(Some(next));
                            }
                            None => break,
                        },
                        () = generation.closed() => return,
                    }
                }
                generation.send_replace(None);
            }
            Err(err) if !warned => {
                tracing::warn!(error = %err, channel, "cannot follow the gateway's changes; what they invalidate is read on every call until then");
                warned = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            () = tokio::time::sleep(RESUBSCRIBE_DELAY) => {}
            () = generation.closed() => return,
        }
    }
}

#[async_trait]
impl ModelStore for RedisStore {
    async fn add_model(&self, scope: &str, model: &StoredModel) -> StoreResult<()> {
        let data = serde_json::to_vec(model).map_err(corrupt)?;
        let mut connection = self.write_connection();
        redis::cmd("HSET")
            .arg(models_key(scope))
            .arg(&model.model_name)
            .arg(data)
            .query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        // The model is added: a notification that fails (a Redis user without Pub/Sub)
        // only leaves other replicas' kept entries to age out, and a name they do not know
        // is looked up anyway.
        if let Err(err) = redis::cmd("PUBLISH")
            .arg(MODELS_CHANGED)
            .arg(scope)
            .query_async::<()>(&mut connection)
            .await
        {
            tracing::warn!(error = %err, "cannot tell other replicas of an added model");
        }
        Ok(())
    }

    async fn added_models(&self, scope: &str) -> StoreResult<Vec<StoredModel>> {
        let mut connection = self.connection();
        let entries: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(models_key(scope))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let mut models = entries
            .into_iter()
            .map(|(_, data)| serde_json::from_slice::<StoredModel>(&data).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        models.sort_by(|a, b| (a.added_at_ms, &a.model_name).cmp(&(b.added_at_ms, &b.model_name)));
        Ok(models)
    }

    async fn added_model(&self, scope: &str, name: &str) -> StoreResult<Option<StoredModel>> {
        let mut connection = self.connection();
        let data: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(models_key(scope))
            .arg(name)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        data.map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .transpose()
    }

    fn model_changes(&self) -> watch::Receiver<Option<u64>> {
        self.followed(&self.model_changes, MODELS_CHANGED)
    }
}

#[async_trait]
impl SpendLogStore for RedisStore {
    async fn append_spend_logs(
        &self,
        entries: &[SpendLogEntry],
        retention: SpendLogRetention,
    ) -> StoreResult<()> {
        let mut pipe = redis::pipe();
        for entry in entries {
            let data = serde_json::to_vec(entry).map_err(corrupt)?;
            pipe.cmd("XADD")
                .arg(SPEND_LOG)
                .arg("MAXLEN")
                .arg("~")
                .arg(retention.max_entries)
                .arg("*")
                .arg("d")
                .arg(data)
                .ignore();
        }
        // Entries' ids are the milliseconds they were added at: older ones than the age
        // kept go.
        let oldest_kept = crate::now_ms().saturating_sub(retention.max_age_ms).max(0);
        pipe.cmd("XTRIM")
            .arg(SPEND_LOG)
            .arg("MINID")
            .arg("=")
            .arg(oldest_kept)
            .ignore();
        let mut connection = self.write_connection();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn spend_logs(&self, limit: usize) -> StoreResult<Vec<SpendLogEntry>> {
        self.newest_of_stream(SPEND_LOG, "+", limit)
            .await?
            .into_iter()
            .map(|(_, data)| serde_json::from_slice(&data).map_err(corrupt))
            .collect()
    }
}
