//! The sweep indexes of sandboxes in Redis (see [`SweepIndex`]): a bucket's members of an
//! index read up to a position, and the indexes repaired from the records, for the records
//! a writer that did not know them left out (`reindex_sandboxes`).

use std::sync::LazyLock;

use redis::Script;

use super::{Keys, decode};
use crate::StoreResult;
use crate::redis::{RedisStore, unavailable};
use crate::sandboxes::{StoredSandbox, SweepIndex};

/// KEYS: versions, then the sweep indexes in [`SweepIndex::ALL`]'s order. ARGV: id,
/// version, the index it belongs to (1 to 4, 0: none), its position there. Puts the record
/// in its index alone, when it is still at that version. Returns the entries added or
/// dropped.
static REINDEX: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local changed = 0
for index = 1, 4 do
  if index == tonumber(ARGV[3]) then
    changed = changed + redis.call('ZADD', KEYS[index + 1], 'CH', ARGV[4], ARGV[1])
  else
    changed = changed + redis.call('ZREM', KEYS[index + 1], ARGV[1])
  end
end
return changed
",
    )
});

/// Records a reindex reads at a time.
const REINDEX_PAGE: usize = 256;

impl RedisStore {
    /// Puts `records`, all of one bucket, in their sweep indexes (see
    /// `reindex_sandboxes`): where each stands is read in one round trip, and only a
    /// misplaced one costs a version-checked fix.
    async fn reindex(&self, keys: &Keys, records: &[StoredSandbox]) -> StoreResult<usize> {
        if records.is_empty() {
            return Ok(0);
        }
        let mut connection = self.connection();
        let indexes = SweepIndex::ALL.map(|index| keys.sweep(index));
        let mut positions = redis::pipe();
        for record in records {
            for key in &indexes {
                positions.zscore(key, &record.runtime_id);
            }
        }
        let positions: Vec<Option<i64>> = positions
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let mut changed = 0;
        for (record, found) in records.iter().zip(positions.chunks(indexes.len())) {
            let place = record.sweep_index();
            let expected = SweepIndex::ALL.map(|index| {
                place.and_then(|(belongs, position)| (belongs == index).then_some(position))
            });
            if found == expected.as_slice() {
                continue;
            }
            // The script numbers the indexes from 1, 0 for none.
            let (number, position) = place.map_or((0, 0), |(belongs, position)| {
                (belongs.ordinal() + 1, position)
            });
            let fixed: usize = REINDEX
                .key(keys.versions())
                .key(&indexes[0])
                .key(&indexes[1])
                .key(&indexes[2])
                .key(&indexes[3])
                .arg(&record.runtime_id)
                .arg(record.version)
                .arg(number)
                .arg(position)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            changed += fixed;
        }
        Ok(changed)
    }

    /// One bucket's sandboxes in `index` up to `until_ms`, at most `limit` of them.
    pub(super) async fn swept_in_bucket(
        &self,
        keys: Keys,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let key = keys.sweep(index);
        let mut connection = self.connection();
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(until_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(i64::try_from(limit).unwrap_or(-1))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let records: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(keys.records())
            .arg(&ids)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        // A member without a record was deleted by a writer that did not know the
        // index; runtime ids are never reused, so it can go without a check.
        let gone: Vec<&String> = ids
            .iter()
            .zip(&records)
            .filter_map(|(id, record)| record.is_none().then_some(id))
            .collect();
        if !gone.is_empty() {
            redis::cmd("ZREM")
                .arg(&key)
                .arg(gone)
                .query_async::<i64>(&mut connection)
                .await
                .map_err(unavailable)?;
        }
        records.iter().flatten().map(|data| decode(data)).collect()
    }

    /// One bucket's sweep indexes repaired (see `reindex_sandboxes`).
    pub(super) async fn reindex_bucket(&self, keys: Keys) -> StoreResult<usize> {
        let mut connection = self.connection();
        let mut cursor = 0_u64;
        let mut changed = 0;
        loop {
            let (next, page): (u64, Vec<(String, Vec<u8>)>) = redis::cmd("HSCAN")
                .arg(keys.records())
                .arg(cursor)
                .arg("COUNT")
                .arg(REINDEX_PAGE)
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            let records = page
                .iter()
                .map(|(_, data)| decode(data))
                .collect::<StoreResult<Vec<_>>>()?;
            changed += self.reindex(&keys, &records).await?;
            if next == 0 {
                return Ok(changed);
            }
            cursor = next;
        }
    }
}
