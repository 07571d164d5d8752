//! What this process remembers of the store for a while, so that the calls and webhooks
//! that follow cost no store read: the timeline phases it knows are recorded
//! (`first.rs`), the sessions it found no sandbox for.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Entries past which the expired ones are dropped, and all of them if none is: memory
/// stays bounded whatever the number of sandboxes a process sees.
const MEMO_CAPACITY: usize = 100_000;

/// What this process knows of the store, by key, until when (ms since the epoch).
#[derive(Default)]
pub(super) struct Memo(Mutex<HashMap<String, i64>>);

impl Memo {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn knows(&self, key: &str, now: i64) -> bool {
        self.lock().get(key).is_some_and(|until| *until > now)
    }

    pub(super) fn remember(&self, key: String, until: i64, now: i64) {
        let mut memo = self.lock();
        if memo.len() >= MEMO_CAPACITY && !memo.contains_key(&key) {
            memo.retain(|_, kept| *kept > now);
            if memo.len() >= MEMO_CAPACITY {
                memo.clear();
            }
        }
        memo.insert(key, until);
    }

    pub(super) fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}
