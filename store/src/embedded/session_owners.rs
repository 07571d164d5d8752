//! Session owners in the embedded store: session digest → (owner, when it lapses).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};

use super::{EmbeddedStore, unavailable};
use crate::StoreResult;
use crate::session_owners::SessionOwnerStore;

/// session digest → its owner and the milliseconds since the epoch when it lapses.
const OWNERS: TableDefinition<&str, (&str, u64)> = TableDefinition::new("session_owners");

pub(super) fn create_tables(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(OWNERS).map_err(unavailable)?;
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// Owners past which a new one first drops the lapsed: the table stays bounded by the
/// sessions named within the TTL (plus this many), one scan per this many new sessions.
const PRUNE_EVERY: u64 = 4_096;

fn prune(owners: &mut redb::Table<&str, (&str, u64)>, now: u64) -> StoreResult<()> {
    if owners.len().map_err(unavailable)? % PRUNE_EVERY == PRUNE_EVERY - 1 {
        owners
            .retain(|_, (_, until)| until > now)
            .map_err(unavailable)?;
    }
    Ok(())
}

#[async_trait]
impl SessionOwnerStore for EmbeddedStore {
    async fn claim_session(
        &self,
        session: &str,
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<String> {
        let (session, owner) = (session.to_owned(), owner.to_owned());
        self.transact(move |txn| {
            let mut owners = txn.open_table(OWNERS).map_err(unavailable)?;
            let now = now_ms();
            let lapses = now.saturating_add(ttl.as_millis() as u64);
            let current = owners
                .get(session.as_str())
                .map_err(unavailable)?
                .map(|entry| {
                    let (current, until) = entry.value();
                    (current.to_owned(), until)
                })
                .filter(|(_, until)| *until > now);
            match current {
                Some((current, _)) if current != owner => Ok(current),
                current => {
                    if current.is_none() {
                        prune(&mut owners, now)?;
                    }
                    owners
                        .insert(session.as_str(), (owner.as_str(), lapses))
                        .map_err(unavailable)?;
                    Ok(owner)
                }
            }
        })
        .await
    }

    async fn own_session(&self, session: &str, owner: &str, ttl: Duration) -> StoreResult<()> {
        let (session, owner) = (session.to_owned(), owner.to_owned());
        self.transact(move |txn| {
            let mut owners = txn.open_table(OWNERS).map_err(unavailable)?;
            let lapses = now_ms().saturating_add(ttl.as_millis() as u64);
            owners
                .insert(session.as_str(), (owner.as_str(), lapses))
                .map_err(unavailable)?;
            Ok(())
        })
        .await
    }
}
