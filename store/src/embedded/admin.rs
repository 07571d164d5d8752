//! Runtime management's records in the embedded store: login challenges and rate limit
//! counters (in memory: they live minutes), and the saved warm runtime configurations.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{EmbeddedStore, unavailable};
use crate::admin::{
    ChallengeStore, PutWarmConfig, RateCount, RateLimitStore, StartAdmission, StartQuota,
    StoredChallenge, StoredWarmConfig, WarmConfigSnapshot, WarmConfigStore,
};
use crate::{StoreError, StoreResult};

/// name → a saved warm runtime configuration's JSON.
pub(super) const WARM_CONFIGS: TableDefinition<&str, &[u8]> = TableDefinition::new("warm_configs");
/// image → the name of the saved configuration using it.
pub(super) const WARM_IMAGES: TableDefinition<&str, &str> = TableDefinition::new("warm_images");

/// Login challenges outstanding at once, at most. Issuing one needs no credentials, so the
/// table is bounded; a flood past it is refused (503) rather than growing memory.
const MAX_CHALLENGES: usize = 100_000;

fn decode_warm_config(bytes: &[u8]) -> StoreResult<StoredWarmConfig> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt(err.to_string()))
}

#[async_trait]
impl ChallengeStore for EmbeddedStore {
    async fn put_challenge(
        &self,
        challenge: &str,
        record: &StoredChallenge,
        ttl: Duration,
    ) -> StoreResult<()> {
        let now = Instant::now();
        let mut challenges = self
            .challenges
            .lock()
            .map_err(|_| StoreError::Unavailable("the challenge table is poisoned".into()))?;
        if challenges.len() >= MAX_CHALLENGES {
            challenges.retain(|_, (_, forget_at)| *forget_at > now);
        }
        if challenges.len() >= MAX_CHALLENGES {
            return Err(StoreError::Unavailable(format!(
                "{MAX_CHALLENGES} login challenges are outstanding"
            )));
        }
        challenges.insert(challenge.to_owned(), (record.clone(), now + ttl));
        Ok(())
    }

    async fn take_challenge(&self, challenge: &str) -> StoreResult<Option<StoredChallenge>> {
        let mut challenges = self
            .challenges
            .lock()
            .map_err(|_| StoreError::Unavailable("the challenge table is poisoned".into()))?;
        Ok(challenges
            .remove(challenge)
            .filter(|(_, forget_at)| *forget_at > Instant::now())
            .map(|(record, _)| record))
    }
}

/// Rate limit counters kept at once before the ended windows are swept out: clients
/// arriving from many addresses cannot grow the table for long.
const RATE_LIMITS_SWEEP_AT: usize = 10_000;

#[async_trait]
impl RateLimitStore for EmbeddedStore {
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<RateCount> {
        let now = Instant::now();
        let mut counters = self
            .rate_limits
            .lock()
            .map_err(|_| StoreError::Unavailable("the rate limit table is poisoned".into()))?;
        if counters.len() >= RATE_LIMITS_SWEEP_AT {
            counters.retain(|_, (_, ends_at)| *ends_at > now);
        }
        let (count, ends_at) = counters
            .entry(key.to_owned())
            .and_modify(|(count, ends_at)| {
                if *ends_at <= now {
                    (*count, *ends_at) = (0, now + window);
                }
            })
            .or_insert((0, now + window));
        *count += 1;
        Ok(RateCount {
            count: *count,
            resets_in: ends_at.saturating_duration_since(now),
        })
    }

    async fn count(&self, key: &str) -> StoreResult<u64> {
        let now = Instant::now();
        let counters = self
            .rate_limits
            .lock()
            .map_err(|_| StoreError::Unavailable("the rate limit table is poisoned".into()))?;
        Ok(counters
            .get(key)
            .filter(|(_, ends_at)| *ends_at > now)
            .map_or(0, |(count, _)| *count))
    }

    async fn admit_start(&self, quota: &StartQuota<'_>) -> StoreResult<StartAdmission> {
        self.quotas.admit(quota)
    }

    async fn release_start(&self, key: &str, session: &str) -> StoreResult<()> {
        self.quotas.release(key, session)
    }
}

#[async_trait]
impl WarmConfigStore for EmbeddedStore {
    async fn warm_config_version(&self) -> StoreResult<u64> {
        Ok(self.warm_version.load(Ordering::Acquire))
    }

    async fn warm_configs(&self) -> StoreResult<WarmConfigSnapshot> {
        // Read the version first: a change committed meanwhile makes the snapshot newer
        // than its version says, so the next reader refreshes rather than missing it.
        let version = self.warm_version.load(Ordering::Acquire);
        let configs = self
            .read(|db| {
                let txn = db.begin_read().map_err(unavailable)?;
                let table = txn.open_table(WARM_CONFIGS).map_err(unavailable)?;
                table
                    .iter()
                    .map_err(unavailable)?
                    .map(|entry| {
                        let (name, data) = entry.map_err(unavailable)?;
                        Ok((name.value().to_owned(), decode_warm_config(data.value())?))
                    })
                    .collect::<StoreResult<Vec<_>>>()
            })
            .await?;
        Ok(WarmConfigSnapshot { version, configs })
    }

    async fn put_warm_config(
        &self,
        name: &str,
        config: &StoredWarmConfig,
    ) -> StoreResult<PutWarmConfig> {
        let name = name.to_owned();
        let image = config.image.clone();
        let json =
            serde_json::to_vec(config).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let outcome = self
            .transact(move |txn| {
                let mut configs = txn.open_table(WARM_CONFIGS).map_err(unavailable)?;
                let mut images = txn.open_table(WARM_IMAGES).map_err(unavailable)?;
                let owner = images
                    .get(image.as_str())
                    .map_err(unavailable)?
                    .map(|owner| owner.value().to_owned());
                if let Some(owner) = owner.filter(|owner| *owner != name) {
                    return Ok(PutWarmConfig::ImageTaken { by: owner });
                }
                let previous = configs
                    .get(name.as_str())
                    .map_err(unavailable)?
                    .map(|data| decode_warm_config(data.value()))
                    .transpose()?;
                if let Some(previous) = previous.filter(|previous| previous.image != image) {
                    images
                        .remove(previous.image.as_str())
                        .map_err(unavailable)?;
                }
                configs
                    .insert(name.as_str(), json.as_slice())
                    .map_err(unavailable)?;
                images
                    .insert(image.as_str(), name.as_str())
                    .map_err(unavailable)?;
                Ok(PutWarmConfig::Saved)
            })
            .await?;
        if outcome == PutWarmConfig::Saved {
            self.warm_version.fetch_add(1, Ordering::AcqRel);
        }
        Ok(outcome)
    }

    async fn delete_warm_config(&self, name: &str) -> StoreResult<bool> {
        let name = name.to_owned();
        let deleted = self
            .transact(move |txn| {
                let mut configs = txn.open_table(WARM_CONFIGS).map_err(unavailable)?;
                let mut images = txn.open_table(WARM_IMAGES).map_err(unavailable)?;
                let Some(previous) = configs
                    .remove(name.as_str())
                    .map_err(unavailable)?
                    .map(|data| decode_warm_config(data.value()))
                    .transpose()?
                else {
                    return Ok(false);
                };
                images
                    .remove(previous.image.as_str())
                    .map_err(unavailable)?;
                Ok(true)
            })
            .await?;
        if deleted {
            self.warm_version.fetch_add(1, Ordering::AcqRel);
        }
        Ok(deleted)
    }
}
