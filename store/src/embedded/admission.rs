//! Admission and settlement of the gateway's calls in the embedded store (see
//! [`crate::admission`]). This process is the store's only user: the holds and the
//! minutes' counts live in memory, under one lock, beside the spend counters the store
//! keeps in memory already; an admission reads nothing from the database once a scope's
//! counter is known, and a crash ends the holds with the calls that took them.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use redb::{ReadableDatabase, ReadableTable};

use super::keys::{KEY_SPEND, KEYS, key_spent, pack, session_name, session_spent};
use super::{EmbeddedStore, unavailable};
use crate::StoreResult;
use crate::admission::{Admission, BudgetScope, Refusal, Settlement, minute};

/// Holds and the minutes' counts, by scope name.
#[derive(Default)]
pub(super) struct Holds(Mutex<HashMap<String, ScopeState>>);

#[derive(Default)]
struct ScopeState {
    holds: HashMap<String, f64>,
    /// The minute counted, its calls and its tokens.
    minute: i64,
    requests: u64,
    tokens: u64,
}

impl ScopeState {
    fn reserved(&self) -> f64 {
        self.holds.values().sum()
    }

    /// The counts of `minute`: nothing when they count an earlier one.
    fn at(&mut self, minute: i64) -> &mut Self {
        if self.minute != minute {
            self.minute = minute;
            self.requests = 0;
            self.tokens = 0;
        }
        self
    }

    fn idle(&self) -> bool {
        self.holds.is_empty() && self.requests == 0 && self.tokens == 0
    }
}

/// Scopes with nothing held or counted are forgotten past this many.
const MAX_SCOPES: usize = 100_000;

/// The name of a scope's spend counter in `KEY_SPEND`.
fn counter_name(scope: &BudgetScope) -> String {
    match scope {
        BudgetScope::Key(token) => token.clone(),
        BudgetScope::Session { token, session } => session_name(token, session),
        other => other.name(),
    }
}

/// A scope's spend in `window` at `now_ms`, from its counter's stored value.
fn spent(scope: &BudgetScope, value: Option<[u8; 16]>, window: u64, now_ms: i64) -> f64 {
    match scope {
        BudgetScope::Session { .. } => session_spent(value, now_ms),
        _ => key_spent(value, window),
    }
}

impl EmbeddedStore {
    /// The counters of `scopes`, read from the database where the memory does not know
    /// them yet (and learned).
    async fn budget_counters<'a>(
        &self,
        scopes: impl Iterator<Item = &'a BudgetScope>,
    ) -> StoreResult<HashMap<String, [u8; 16]>> {
        let mut known = HashMap::new();
        let mut missing = Vec::new();
        for scope in scopes {
            let name = counter_name(scope);
            match self.key_spend_memory.get(&name) {
                Some(value) => {
                    known.insert(name, value);
                }
                None => missing.push(name),
            }
        }
        if missing.is_empty() {
            return Ok(known);
        }
        let read = self
            .read(move |db| {
                let txn = db.begin_read().map_err(unavailable)?;
                let spend = txn.open_table(KEY_SPEND).map_err(unavailable)?;
                missing
                    .into_iter()
                    .map(|name| {
                        let value = spend
                            .get(name.as_str())
                            .map_err(unavailable)?
                            .map_or([0; 16], |value| value.value());
                        Ok((name, value))
                    })
                    .collect::<StoreResult<Vec<_>>>()
            })
            .await?;
        for (name, value) in read {
            self.key_spend_memory.learn(name.clone(), value);
            known.insert(name, value);
        }
        Ok(known)
    }

    pub(super) async fn admit_call(
        &self,
        admission: &Admission,
    ) -> StoreResult<Result<Vec<f64>, Refusal>> {
        let read = self
            .budget_counters(
                admission
                    .scopes
                    .iter()
                    .filter(|limits| limits.max_budget.is_some())
                    .map(|limits| &limits.scope),
            )
            .await?;
        let now = admission.now_ms;
        let minute = minute(now);
        let mut states = self.holds.0.lock().unwrap_or_else(PoisonError::into_inner);
        if states.len() >= MAX_SCOPES {
            states.retain(|_, state| !state.idle());
        }
        // What each scope holds: the call's amount, or with a budget up to a quarter of
        // its room (a share), within the most.
        let mut held = Vec::with_capacity(admission.scopes.len());
        for limits in &admission.scopes {
            let state = states.entry(limits.scope.name()).or_default().at(minute);
            let in_flight = state.holds.len() as u64;
            if let Some(max_budget) = limits.max_budget {
                let name = counter_name(&limits.scope);
                // The memory as it is now (a settlement may have added to it since it was
                // read), else what was read.
                let value = self
                    .key_spend_memory
                    .get(&name)
                    .or(read.get(&name).copied());
                let spent = spent(&limits.scope, value, limits.window, now);
                let reserved = state.reserved();
                if spent + reserved >= max_budget {
                    return Ok(Err(Refusal::Budget {
                        scope: limits.scope.clone(),
                        spent,
                        reserved,
                        max_budget,
                    }));
                }
                let share = ((max_budget - spent - reserved) / 4.0).min(admission.most);
                held.push(admission.amount.max(share));
            } else {
                held.push(admission.amount);
            }
            let over = |limit: Option<u64>, count: u64| limit.is_some_and(|limit| count >= limit);
            if over(limits.max_parallel_requests, in_flight)
                || over(limits.rpm_limit, state.requests)
                || over(limits.tpm_limit, state.tokens)
            {
                return Ok(Err(Refusal::Rate {
                    scope: limits.scope.clone(),
                    in_flight,
                    requests: state.requests,
                    tokens: state.tokens,
                }));
            }
        }
        for (limits, held) in admission.scopes.iter().zip(&held) {
            let state = states.entry(limits.scope.name()).or_default().at(minute);
            if limits.holds() {
                state.holds.insert(admission.hold.clone(), *held);
            }
            if limits.rpm_limit.is_some() {
                state.requests += 1;
            }
        }
        Ok(Ok(held))
    }

    pub(super) async fn budget_spend_of(
        &self,
        scopes: &[(BudgetScope, u64)],
    ) -> StoreResult<Vec<f64>> {
        let counters = self
            .budget_counters(scopes.iter().map(|(scope, _)| scope))
            .await?;
        let now = crate::now_ms();
        Ok(scopes
            .iter()
            .map(|(scope, window)| {
                let value = counters.get(&counter_name(scope)).copied();
                spent(scope, value, *window, now)
            })
            .collect())
    }

    pub(super) async fn set_budget_spend_of(
        &self,
        scope: &BudgetScope,
        window: u64,
        spend: f64,
    ) -> StoreResult<()> {
        let name = counter_name(scope);
        let value = pack(window, spend);
        let memory = self.key_spend_memory.clone();
        self.transact(move |txn| {
            let mut counters = txn.open_table(KEY_SPEND).map_err(unavailable)?;
            counters.insert(name.as_str(), value).map_err(unavailable)?;
            memory.set(vec![(name, value)]);
            Ok(())
        })
        .await?;
        // The gateway gives back its shares of the scope's budget, granted on the spend
        // before.
        self.orgs_changed();
        Ok(())
    }

    pub(super) async fn settle_calls(&self, settlement: &Settlement) -> StoreResult<()> {
        let spend = settlement.spend.clone();
        let now = settlement.now_ms;
        if !spend.is_empty() {
            let memory = self.key_spend_memory.clone();
            self.transact(move |txn| {
                let keys = txn.open_table(KEYS).map_err(unavailable)?;
                let mut counters = txn.open_table(KEY_SPEND).map_err(unavailable)?;
                let mut changed = Vec::new();
                for item in spend {
                    if let Some(token) = item.scope.key_token()
                        && keys.get(token).map_err(unavailable)?.is_none()
                    {
                        continue;
                    }
                    let name = counter_name(&item.scope);
                    let stored = counters
                        .get(name.as_str())
                        .map_err(unavailable)?
                        .map(|value| value.value());
                    let value = match item.scope {
                        BudgetScope::Session { .. } => {
                            pack(now as u64, session_spent(stored, now) + item.amount)
                        }
                        _ => pack(item.window, key_spent(stored, item.window) + item.amount),
                    };
                    counters.insert(name.as_str(), value).map_err(unavailable)?;
                    changed.push((name, value));
                }
                // In the memory in the order the writer applies them (settlements
                // run at once), and before the holds go: no admission counts neither.
                memory.set(changed);
                Ok(())
            })
            .await?;
        }
        let minute = minute(now);
        let mut states = self.holds.0.lock().unwrap_or_else(PoisonError::into_inner);
        for item in settlement.spend.iter().filter(|item| item.tokens > 0) {
            let state = states.entry(item.scope.name()).or_default().at(minute);
            state.tokens = state.tokens.saturating_add(item.tokens);
        }
        for consume in &settlement.consumed {
            for scope in &consume.scopes {
                let held = states
                    .get_mut(&scope.name())
                    .and_then(|state| state.holds.get_mut(&consume.hold));
                if let Some(held) = held {
                    *held -= held.min(consume.amount);
                }
            }
        }
        for release in &settlement.releases {
            for scope in &release.scopes {
                if let Some(state) = states.get_mut(&scope.name()) {
                    state.holds.remove(&release.hold);
                }
            }
        }
        Ok(())
    }
}
