//! Counts summed in memory before a batch writes them: the spend counters of the gateway's
//! spend log, the ledger's rows of the gateway and of the runtime API.

use std::hash::Hash;

/// Sums by day and scope, then id. An id counted before is found by reference (`&str`),
/// not copied for each count, so the sums cost the distinct ids counted, not the counts.
/// Hashed with foldhash (randomly seeded): the maps live for a batch.
#[derive(Debug)]
pub struct DayCounts<S, V>(foldhash::HashMap<(u32, S), foldhash::HashMap<String, V>>);

impl<S, V> Default for DayCounts<S, V> {
    fn default() -> Self {
        Self(foldhash::HashMap::default())
    }
}

impl<S: Copy + Eq + Hash, V: Default> DayCounts<S, V> {
    /// Adds to `id`'s sum of `day` in `scope` (made, from its default, when new).
    pub fn add(&mut self, day: u32, scope: S, id: &str, add: impl FnOnce(&mut V)) {
        let ids = self.0.entry((day, scope)).or_default();
        let sum = match ids.get_mut(id) {
            Some(sum) => sum,
            None => ids.entry(id.to_owned()).or_default(),
        };
        add(sum);
    }

    /// The distinct ids counted.
    pub fn len(&self) -> usize {
        self.0.values().map(foldhash::HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every sum, `(day, scope, id, sum)`, emptying `self`.
    pub fn take(&mut self) -> impl Iterator<Item = (u32, S, String, V)> + use<S, V> {
        std::mem::take(&mut self.0)
            .into_iter()
            .flat_map(|((day, scope), ids)| {
                ids.into_iter().map(move |(id, sum)| (day, scope, id, sum))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::DayCounts;

    #[test]
    fn sums_are_kept_per_day_scope_and_id_and_taken_once() {
        let mut counts: DayCounts<u8, f64> = DayCounts::default();
        assert!(counts.is_empty());
        for (day, scope, id, amount) in [
            (1, 0, "a", 1.0),
            (1, 0, "a", 2.5),
            (1, 1, "a", 4.0),
            (2, 0, "a", 8.0),
            (1, 0, "b", 16.0),
        ] {
            counts.add(day, scope, id, |sum| *sum += amount);
        }
        assert_eq!(counts.len(), 4);
        let mut sums: Vec<_> = counts.take().collect();
        sums.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        assert_eq!(
            sums,
            [
                (1, 0, "a".to_owned(), 3.5),
                (1, 0, "b".to_owned(), 16.0),
                (1, 1, "a".to_owned(), 4.0),
                (2, 0, "a".to_owned(), 8.0),
            ]
        );
        assert!(counts.is_empty());
        assert_eq!(counts.take().count(), 0);
    }
}
