//! The embedded store's index of keys by owner (user, team, alias): an entry
//! `kind\0id\0token` per owner of each key, written in the transaction that writes the
//! key, so that a team's keys are found without reading every key.
//!
//! The entry `""` says the index is whole: a store written before it existed is indexed
//! once, in the opening transaction.

use redb::{ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction};

use super::keys::KEYS;
use super::{EmbeddedStore, unavailable};
use crate::keys::{KeyOwner, StoredKey, oldest_first};
use crate::{StoreError, StoreResult};

/// `kind\0id\0token` → nothing; `""`: the index holds every key.
const OWNERS: TableDefinition<&str, ()> = TableDefinition::new("gateway_key_owners");

fn prefix(owner: &KeyOwner) -> String {
    format!("{}\0{}\0", owner.kind(), owner.id())
}

/// A key record as stored.
pub(super) fn decode(data: &[u8]) -> StoreResult<StoredKey> {
    serde_json::from_slice(data).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// Indexes every key of a store written before the index, once.
pub(super) fn upgrade(txn: &WriteTransaction) -> StoreResult<()> {
    let mut owners = txn.open_table(OWNERS).map_err(unavailable)?;
    if owners.get("").map_err(unavailable)?.is_some() {
        return Ok(());
    }
    let keys = txn.open_table(KEYS).map_err(unavailable)?;
    for entry in keys.iter().map_err(unavailable)? {
        let (_, data) = entry.map_err(unavailable)?;
        let key = decode(data.value())?;
        reindex(&mut owners, None, Some(&key))?;
    }
    owners.insert("", ()).map_err(unavailable)?;
    Ok(())
}

/// Moves a key's entries from what `old` (the record replaced or removed) names to what
/// `new` (the record written, if any) names.
pub(super) fn reindex(
    owners: &mut Table<&str, ()>,
    old: Option<&StoredKey>,
    new: Option<&StoredKey>,
) -> StoreResult<()> {
    let entries = |key: Option<&StoredKey>| -> Vec<String> {
        key.map(|key| {
            key.owners()
                .iter()
                .map(|owner| prefix(owner) + &key.token)
                .collect()
        })
        .unwrap_or_default()
    };
    let (old, new) = (entries(old), entries(new));
    for gone in old.iter().filter(|entry| !new.contains(entry)) {
        owners.remove(gone.as_str()).map_err(unavailable)?;
    }
    for entry in &new {
        owners.insert(entry.as_str(), ()).map_err(unavailable)?;
    }
    Ok(())
}

/// Opens the index in a write transaction (for [`reindex`]).
pub(super) fn open(txn: &WriteTransaction) -> StoreResult<Table<'_, &'static str, ()>> {
    txn.open_table(OWNERS).map_err(unavailable)
}

impl EmbeddedStore {
    pub(super) async fn owned_keys(&self, owner: &KeyOwner) -> StoreResult<Vec<StoredKey>> {
        let owner = owner.clone();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let owners = txn.open_table(OWNERS).map_err(unavailable)?;
            let keys = txn.open_table(KEYS).map_err(unavailable)?;
            let start = prefix(&owner);
            let mut found = Vec::new();
            for entry in owners.range(start.as_str()..).map_err(unavailable)? {
                let (entry, _) = entry.map_err(unavailable)?;
                let Some(token) = entry.value().strip_prefix(start.as_str()) else {
                    break;
                };
                if let Some(data) = keys.get(token).map_err(unavailable)? {
                    let key = decode(data.value())?;
                    // An id holding the separator could share a prefix: the record says.
                    if owner.owns(&key) {
                        found.push(key);
                    }
                }
            }
            oldest_first(&mut found);
            Ok(found)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyStore;

    fn key(token: &str, team: &str) -> StoredKey {
        StoredKey {
            token: token.into(),
            team_id: Some(team.into()),
            created_at_ms: 1,
            ..StoredKey::default()
        }
    }

    #[tokio::test]
    async fn a_store_written_before_the_index_is_indexed_when_it_opens() {
        let dir = tempfile::tempdir().expect("dir");
        // As an earlier version left it: the keys, and no index.
        let db = redb::Database::create(dir.path().join("sandgate.redb")).expect("db");
        let txn = db.begin_write().expect("txn");
        {
            let mut keys = txn.open_table(KEYS).expect("keys");
            for key in [key("t1", "red"), key("t2", "blue")] {
                let json = serde_json::to_vec(&key).expect("json");
                keys.insert(key.token.as_str(), json.as_slice())
                    .expect("insert");
            }
        }
        txn.commit().expect("commit");
        drop(db);

        let store = EmbeddedStore::open(dir.path().to_path_buf())
            .await
            .expect("open");
        let red = store
            .keys_of(&KeyOwner::Team("red".into()))
            .await
            .expect("keys of");
        assert_eq!(red, [key("t1", "red")]);
    }
}
