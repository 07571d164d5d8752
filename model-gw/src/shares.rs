//! A replica's shares of its budgets: most calls of a key with a budget admitted in this
//! replica's memory, without a store round trip on their path.
//!
//! A call whose scopes are limited by budgets alone (no `max_parallel_requests`,
//! `rpm_limit` or `tpm_limit`, which are counted per call in the store) is admitted against
//! this replica's **share** of each scope's budget: a hold in the store, on that scope,
//! that the replica's calls on the scope are admitted against in its memory while it has
//! room for their whole hold. Where a scope's share has no room, the store's admission
//! asks, for those scopes, for up to [`SHARE_CALLS`] times the call's hold; the store holds
//! at most a quarter of the room each has left, never less than the call's hold (see
//! `sandgate_store::admission`). Each call's settlement takes its cost off its shares'
//! holds in the store as it adds it to the spend, so the store counts every call once,
//! spent or held. A share no call uses for [`SHARE_IDLE`], or older than [`SHARE_LIFE`],
//! admits no more calls and is given back once its calls have ended, its release written
//! after their settlements.
//!
//! A share is per scope, not per key: a team's keys, or a key's sessions, draw on one share
//! of the team's (the key's) budget per replica. So a busy key makes a store round trip per
//! share, not per call; and the budgets' bound is the store's: every grant fits in the room
//! left but the last (a call's own hold), so concurrent calls on every replica together
//! overshoot a budget by at most one hold. A share held by one replica is room another
//! cannot use until it is spent or given back: a quarter of what was left at most, given
//! back within [`SHARE_IDLE`] of its last call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sandgate_store::admission::{BudgetScope, Consume, Release, ScopeLimits};

/// How many calls' holds a share asks for (within a quarter of the room): more than a
/// replica has in flight on a scope at once, since each holds its part of the share until
/// it ends. At 32, 64 calls in flight on a key emptied a share every few dozen calls,
/// each refill a round trip the calls meanwhile waited for (`gateway_keys` on Redis at
/// c64: 156 a second).
pub(crate) const SHARE_CALLS: f64 = 256.0;

/// A share no call has used for this long is given back: the room it holds is another
/// replica's to use.
pub(crate) const SHARE_IDLE: Duration = Duration::from_secs(1);

/// A share admits no call past this age (its lease in the store outlives it by the
/// longest call and the settlement's margin).
pub(crate) const SHARE_LIFE: Duration = Duration::from_secs(5);

/// How often idle shares are looked for.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// This replica's shares, by scope (with its window and budget).
#[derive(Default)]
pub(crate) struct Shares {
    /// By scope, then window and budget: found without a name built per call.
    slots: Mutex<foldhash::HashMap<BudgetScope, Vec<Arc<Slot>>>>,
    /// Every share not yet retired: what the sweep looks at.
    live: Mutex<Vec<Arc<Share>>>,
    sweeping: AtomicBool,
    /// The generations of keys' and of organisations' records the shares were taken
    /// under.
    generations: Mutex<Option<(u64, u64)>>,
}

/// The share of one scope, and the one admission at a time that replaces it.
pub(crate) struct Slot {
    /// The scope's name with its window and budget: the order slots are refilled in.
    pub(crate) name: String,
    window: u64,
    max_budget: Option<f64>,
    current: Mutex<Option<Arc<Share>>>,
    /// Held while a call asks the store for a share, so that the calls meanwhile wait for
    /// its grant rather than each ask for their own.
    pub(crate) refill: tokio::sync::Mutex<()>,
}

/// A share: its hold in the store and what this replica's calls use of it.
pub(crate) struct Share {
    hold: String,
    scope: BudgetScope,
    state: Mutex<ShareState>,
}

struct ShareState {
    /// What the store holds for it.
    amount: f64,
    /// The holds of its calls in flight and the cost of those ended.
    used: f64,
    in_flight: u32,
    taken: Instant,
    last: Instant,
    /// It admits no more calls.
    retired: bool,
    /// Its release has been handed to the settlements.
    released: bool,
}

impl ShareState {
    /// Its release, once it is retired and its last call has ended (once).
    fn release(&mut self, share: &Share) -> Option<Release> {
        (self.retired && self.in_flight == 0 && !std::mem::replace(&mut self.released, true)).then(
            || Release {
                hold: share.hold.clone(),
                scopes: vec![share.scope.clone()],
            },
        )
    }
}

impl Share {
    fn state(&self) -> std::sync::MutexGuard<'_, ShareState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a call holding `amount` when the share has room for it.
    fn take(&self, amount: f64, now: Instant) -> bool {
        let mut state = self.state();
        if state.retired
            || now.duration_since(state.taken) > SHARE_LIFE
            || state.amount - state.used < amount
        {
            return false;
        }
        state.used += amount;
        state.in_flight += 1;
        state.last = now;
        true
    }

    /// A call that held `held` has ended, having cost `cost`: the share's release when it
    /// was its retired share's last call, or its last call and it has no room for
    /// another like it (a budget's last room, or a grant of one call's hold: held as long
    /// as the call, as a hold of its own would be).
    fn end(&self, held: f64, cost: f64) -> Option<Release> {
        let mut state = self.state();
        state.used = (state.used - held + cost).max(0.0);
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.amount - state.used < held {
            state.retired = true;
        }
        state.release(self)
    }

    /// Admits no more calls: its release when none is in flight.
    fn retire(&self) -> Option<Release> {
        let mut state = self.state();
        state.retired = true;
        state.release(self)
    }

    /// Whether it should admit no more calls at `now`.
    fn spent_its_time(&self, now: Instant) -> bool {
        let state = self.state();
        now.duration_since(state.last) > SHARE_IDLE || now.duration_since(state.taken) > SHARE_LIFE
    }

    fn idle(&self) -> bool {
        self.state().in_flight == 0
    }
}

/// The name of a scope with its window and budget (a change of its budget or a new window
/// is another slot): the order slots are refilled in.
fn slot_name(limits: &ScopeLimits) -> String {
    format!(
        "{}\u{1}{}\u{1}{:?}",
        limits.scope.name(),
        limits.window,
        limits.max_budget
    )
}

/// Whether a call of `scopes` may be admitted against a share: every limit is a budget.
pub(crate) fn shareable(scopes: &[ScopeLimits]) -> bool {
    !scopes.is_empty()
        && scopes.iter().all(|limits| {
            limits.max_budget.is_some()
                && limits.max_parallel_requests.is_none()
                && limits.rpm_limit.is_none()
                && limits.tpm_limit.is_none()
        })
}

impl Slot {
    /// Admits a call holding `amount` against the current share, when it has room.
    pub(crate) fn take(&self, amount: f64) -> Option<SharedCall> {
        self.take_at(amount, Instant::now())
    }

    fn take_at(&self, amount: f64, now: Instant) -> Option<SharedCall> {
        let share = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        let taken = share.take(amount, now);
        taken.then_some(SharedCall {
            share,
            held: amount,
        })
    }

    /// Whether it is the slot of `limits`: its scope's, with its window and budget.
    fn serves(&self, limits: &ScopeLimits) -> bool {
        self.window == limits.window
            && self.max_budget.map(f64::to_bits) == limits.max_budget.map(f64::to_bits)
    }

    /// Retires the current share when no call is in flight on it (it had no room for the
    /// next): its release, to write before the store is asked for another.
    pub(crate) fn retire_idle(&self) -> Option<Release> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if !current.as_ref().is_some_and(|share| share.idle()) {
            return None;
        }
        current.take().and_then(|share| share.retire())
    }
}

impl Shares {
    /// Admits a call holding `amount` against the current share of each of `scopes`, in
    /// their order, in one pass under the slots' lock with one reading of the clock (the
    /// call's path when every share has room): `Ok` with every part; `Err` with those
    /// taken before the first scope without a slot or a share with room, for the caller
    /// to take the rest one by one ([`Self::slots`], [`Slot::take`]).
    pub(crate) fn take_all(
        &self,
        scopes: &[ScopeLimits],
        amount: f64,
    ) -> Result<Vec<SharedCall>, Vec<SharedCall>> {
        let now = Instant::now();
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut taken = Vec::with_capacity(scopes.len());
        for limits in scopes {
            let call = slots
                .get(&limits.scope)
                .and_then(|of_scope| of_scope.iter().find(|slot| slot.serves(limits)))
                .and_then(|slot| slot.take_at(amount, now));
            match call {
                Some(call) => taken.push(call),
                None => return Err(taken),
            }
        }
        Ok(taken)
    }

    /// The slots of `scopes`, in their order.
    pub(crate) fn slots(&self, scopes: &[ScopeLimits]) -> Vec<Arc<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        scopes
            .iter()
            .map(|limits| {
                let of_scope = match slots.get_mut(&limits.scope) {
                    Some(of_scope) => of_scope,
                    None => slots.entry(limits.scope.clone()).or_default(),
                };
                if let Some(slot) = of_scope.iter().find(|slot| slot.serves(limits)) {
                    return slot.clone();
                }
                let slot = Arc::new(Slot {
                    name: slot_name(limits),
                    window: limits.window,
                    max_budget: limits.max_budget,
                    current: Mutex::default(),
                    refill: tokio::sync::Mutex::default(),
                });
                of_scope.push(slot.clone());
                slot
            })
            .collect()
    }

    /// A grant of `amount` (`hold` in the store, on `scope`) becomes `slot`'s share, its
    /// first call holding `held`; the share it replaces is retired (its release returned
    /// when no call is in flight on it).
    pub(crate) fn install(
        &self,
        slot: &Slot,
        hold: String,
        scope: BudgetScope,
        amount: f64,
        held: f64,
    ) -> (SharedCall, Option<Release>) {
        let now = Instant::now();
        let share = Arc::new(Share {
            hold,
            scope,
            state: Mutex::new(ShareState {
                amount,
                used: held,
                in_flight: 1,
                taken: now,
                last: now,
                retired: false,
                released: false,
            }),
        });
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(share.clone());
        let replaced = slot
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(share.clone());
        (
            SharedCall { share, held },
            replaced.and_then(|share| share.retire()),
        )
    }

    /// Follows the generations of keys' and organisations' records: `true` when they moved
    /// since the last call (every share is then to be given back).
    pub(crate) fn follow(&self, generations: (u64, u64)) -> bool {
        let mut seen = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        seen.replace(generations)
            .is_some_and(|before| before != generations)
    }

    /// Whether a sweep should start: none runs (it then counts as running).
    pub(crate) fn start_sweep(&self) -> bool {
        !self.sweeping.swap(true, Ordering::AcqRel)
    }

    /// Retires the shares idle or old at `now` and forgets the slots without a share: the
    /// releases of those retired with no call in flight, and whether shares are left (when
    /// none is, the sweep stops, and the next share starts another).
    pub(crate) fn sweep(&self, now: Instant) -> (Vec<Release>, bool) {
        let releases = self.retire(|share| share.spent_its_time(now));
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, of_scope| {
                of_scope.retain(|slot| {
                    let current = slot.current.lock().unwrap_or_else(PoisonError::into_inner);
                    current.as_ref().is_some_and(|share| !share.state().retired)
                        || slot.refill.try_lock().is_err()
                });
                !of_scope.is_empty()
            });
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if live.is_empty() {
            self.sweeping.store(false, Ordering::Release);
        }
        (releases, !live.is_empty())
    }

    /// Retires every share (the gateway stops): the releases of those with no call in
    /// flight.
    pub(crate) fn retire_all(&self) -> Vec<Release> {
        self.retire(|_| true)
    }

    /// Retires the live shares `which` picks: the releases of those with no call in
    /// flight (the others are released by their last call).
    fn retire(&self, which: impl Fn(&Share) -> bool) -> Vec<Release> {
        let mut releases = Vec::new();
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|share| {
                if !which(share) {
                    return true;
                }
                releases.extend(share.retire());
                false
            });
        releases
    }
}

/// A call admitted against a share: what it holds of it.
pub(crate) struct SharedCall {
    share: Arc<Share>,
    held: f64,
}

impl SharedCall {
    /// The call has ended, having cost `cost`: what its settlement takes off the share,
    /// and the share's release when it was its retired share's last call.
    pub(crate) fn end(self, cost: f64) -> (Option<ShareCost>, Option<Release>) {
        let release = self.share.end(self.held, cost);
        let cost = (cost > 0.0).then_some(ShareCost {
            share: self.share,
            amount: cost,
        });
        (cost, release)
    }

    /// The call ended without a cost known (its client left before its answer).
    pub(crate) fn abandon(self) -> Option<Release> {
        self.share.end(self.held, 0.0)
    }
}

/// What an ended call cost a share: taken off the share's hold in the store as the
/// call's spend is added. The costs of one share in a batch are summed into one
/// [`Consume`], built once per batch, not once per call.
#[derive(Clone)]
pub(crate) struct ShareCost {
    share: Arc<Share>,
    pub(crate) amount: f64,
}

impl ShareCost {
    /// The share's identity: the same for every call admitted against it.
    pub(crate) fn share(&self) -> *const () {
        Arc::as_ptr(&self.share).cast()
    }

    /// `amount` taken off the share's hold.
    pub(crate) fn consume(&self, amount: f64) -> Consume {
        Consume {
            hold: self.share.hold.clone(),
            scopes: vec![self.share.scope.clone()],
            amount,
        }
    }
}

impl std::fmt::Debug for ShareCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareCost")
            .field("hold", &self.share.hold)
            .field("amount", &self.amount)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(max_budget: f64) -> ScopeLimits {
        ScopeLimits {
            scope: BudgetScope::Team("t".into()),
            window: 0,
            max_budget: Some(max_budget),
            max_parallel_requests: None,
            rpm_limit: None,
            tpm_limit: None,
        }
    }

    fn slot(shares: &Shares, max_budget: f64) -> Arc<Slot> {
        shares.slots(&[team(max_budget)]).remove(0)
    }

    fn installed(shares: &Shares, slot: &Slot, hold: &str, amount: f64) -> SharedCall {
        let scope = BudgetScope::Team("t".into());
        let (call, replaced) = shares.install(slot, hold.into(), scope, amount, 2.0);
        assert!(replaced.is_none());
        call
    }

    #[test]
    fn a_share_admits_calls_while_it_has_room_for_their_whole_hold() {
        let shares = Shares::default();
        let slot = slot(&shares, 100.0);
        let first = installed(&shares, &slot, "s", 10.0);
        let calls: Vec<_> = (0..3).map(|_| slot.take(2.0)).collect();
        assert!(
            calls.iter().all(Option::is_some),
            "10 holds four calls of 2"
        );
        assert!(slot.take(2.5).is_none(), "2 left");
        // A call's cost, not its hold, stays used once it ends; what it costs is taken off
        // the share in the store.
        let (consume, release) = first.end(0.5);
        assert_eq!(consume.map(|consume| consume.amount), Some(0.5));
        assert!(release.is_none());
        assert!(slot.take(3.5).is_some());
        assert!(slot.take(0.1).is_none());
        // The same scope with another budget is another share.
        assert!(!Arc::ptr_eq(&slot, &self::slot(&shares, 50.0)));
        assert!(Arc::ptr_eq(&slot, &self::slot(&shares, 100.0)));
    }

    /// A call's path: every share taken in one pass when each has room; else the part
    /// taken before the first scope without a slot or room, and no slot made.
    #[test]
    fn a_call_takes_every_share_at_once_or_says_where_it_stopped() {
        let shares = Shares::default();
        let team_slot = slot(&shares, 100.0);
        let _first = installed(&shares, &team_slot, "team", 4.0);
        let user = ScopeLimits {
            scope: BudgetScope::User("u".into()),
            ..team(100.0)
        };
        // The user's scope has no slot yet: the team's part is handed back to take the
        // rest one by one, and no slot is made on this path.
        let Err(stopped) = shares.take_all(&[team(100.0), user.clone()], 1.0) else {
            panic!("no slot for the user: stopped there");
        };
        assert_eq!(stopped.len(), 1);
        assert_eq!(shares.slots.lock().map(|slots| slots.len()).ok(), Some(1));
        let user_slot = shares.slots(std::slice::from_ref(&user)).remove(0);
        let scope = BudgetScope::User("u".into());
        let (_user_first, _) = shares.install(&user_slot, "user".into(), scope, 4.0, 1.0);
        // Both have room: both taken. The team's share (4) now holds its first call's 2
        // and two calls of 1: no room for a third.
        let both = shares
            .take_all(&[team(100.0), user.clone()], 1.0)
            .map(|calls| calls.len());
        assert_eq!(both.ok(), Some(2));
        let Err(stopped) = shares.take_all(&[user, team(100.0)], 1.0) else {
            panic!("the team's share is full: stopped there");
        };
        assert_eq!(stopped.len(), 1, "the user's part, taken before");
    }

    /// A share granted for one call's hold (a budget's last room) is held as long as the
    /// call, as a hold of its own would be: another replica may need what it leaves.
    #[test]
    fn a_share_without_room_for_another_call_goes_with_its_last() {
        let shares = Shares::default();
        let slot = slot(&shares, 100.0);
        let only = installed(&shares, &slot, "one", 2.0);
        let (_, release) = only.end(1.0);
        assert_eq!(release.map(|release| release.hold), Some("one".into()));
        assert!(slot.take(0.5).is_none(), "retired");
    }

    #[test]
    fn a_replaced_share_is_given_back_by_its_last_call_once() {
        let shares = Shares::default();
        let slot = slot(&shares, 100.0);
        let first = installed(&shares, &slot, "old", 4.0);
        let second = slot.take(2.0).expect("room for a second call");
        let scope = BudgetScope::Team("t".into());
        let (third, replaced) = shares.install(&slot, "new".into(), scope, 8.0, 2.0);
        assert!(replaced.is_none(), "two calls in flight on it");
        assert!(first.end(1.0).1.is_none());
        // Its client left: nothing to take off, and the share is released.
        let release = second.abandon().expect("the last call releases it");
        assert_eq!(release.hold, "old");
        assert!(third.end(1.0).1.is_none(), "the new share is current");
        // An idle current share with no room is retired before the store is asked again.
        assert_eq!(
            slot.retire_idle().map(|release| release.hold),
            Some("new".into())
        );
        assert!(slot.retire_idle().is_none());
        assert!(slot.take(0.1).is_none());
    }

    #[test]
    fn idle_and_old_shares_are_swept_and_given_back() {
        let shares = Shares::default();
        let idle = slot(&shares, 100.0);
        let busy = slot(&shares, 50.0);
        let idle_call = installed(&shares, &idle, "idle", 10.0);
        let busy_call = installed(&shares, &busy, "busy", 10.0);
        assert!(idle_call.end(1.0).1.is_none());
        let now = Instant::now();
        let (releases, left) = shares.sweep(now);
        assert!(releases.is_empty() && left, "nothing idle yet");
        // Past the idle time: both retired, the idle one released now, the other by its
        // call; the slots forgotten.
        let (releases, left) = shares.sweep(now + SHARE_IDLE + Duration::from_millis(1));
        let released: Vec<_> = releases
            .iter()
            .map(|release| release.hold.as_str())
            .collect();
        assert_eq!(released, ["idle"]);
        assert!(!left, "no live share is left: the sweep stops");
        assert!(shares.slots.lock().is_ok_and(|slots| slots.is_empty()));
        assert!(idle.take(0.1).is_none() && busy.take(0.1).is_none());
        assert_eq!(
            busy_call.end(1.0).1.map(|release| release.hold),
            Some("busy".into())
        );
        assert!(shares.start_sweep(), "the next share starts a sweep");
        assert!(!shares.start_sweep());
        // A stop gives back every share with no call in flight.
        let last = installed(&shares, &slot(&shares, 10.0), "last", 5.0);
        assert!(shares.retire_all().is_empty(), "its call is in flight");
        assert_eq!(
            last.end(0.0).1.map(|release| release.hold),
            Some("last".into())
        );
    }
}
