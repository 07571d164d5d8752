//! A virtual key's call admitted against every budget and limit it counts towards, and
//! what it settles once it ends (see `sandgate_store::admission` for the store's side).
//!
//! The scopes of a call: its key, its session (when it names one), and its user, team and
//! team membership once those have records ([`CallScopes::with`] takes them): each
//! counts the call's cost when it settles, and its budget is judged on that count. Only a
//! call with at least one limit makes the store round trip of admission (one limited by
//! budgets alone, once per share of them: see [`crate::shares`]); the others are counted
//! when they end, as before.
//!
//! What a call holds is its **largest possible cost**: every byte the upstream receives
//! counted as an input token (a token is at least one byte of text; images by URL and
//! audio are the exception: priced by the upstream beyond their bytes), at the highest of
//! the entry's input, cache read and cache write prices, plus the most output tokens the
//! call may be billed for at the output price: the request's `max_tokens`
//! (`max_completion_tokens`, `max_output_tokens`; the largest when several), within the
//! entry's `model_info.max_output_tokens` when it has one, else that, else
//! [`DEFAULT_MAX_OUTPUT_TOKENS`].

use std::sync::Arc;
use std::time::Duration;

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::Api;
use sandgate_store::admission::{
    Admission, BudgetScope, Consume, Refusal, Release, ScopeLimits, ScopeSpend,
};
use sandgate_store::{Store, StoredKey};
use tonic::Status;

use crate::budget::{Prices, key_window};
use crate::keys::descriptor;
use crate::rewrite::ChatRequest;
use crate::shares::{SHARE_CALLS, SHARE_LIFE, ShareCost, SharedCall, shareable};
use crate::spend::SpendLog;
use crate::support::now_ms;

/// The output tokens a call holds when neither it nor its entry bounds them.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 32_768;

/// How much longer than the longest call (`--gateway-call-deadline`) a hold lives unless
/// settled: the settlement's own delay (the spend log's batch, a slow store).
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The scopes a call counts towards, with their limits.
pub(crate) struct CallScopes {
    scopes: Vec<ScopeLimits>,
}

impl CallScopes {
    /// Those of `key`'s call (of `session`, a digest) at `now_ms`: the key's, and the
    /// session's when the call names one (its spend is counted whether or not the key
    /// has a per-session budget).
    pub(crate) fn of_key(key: &StoredKey, session: Option<&str>, now_ms: i64) -> Self {
        let (window, _) = key_window(key, now_ms);
        let mut scopes = vec![ScopeLimits::new(
            BudgetScope::Key(key.token.clone()),
            window,
            key.max_budget,
            &key.limits,
        )];
        if let Some(session) = session {
            scopes.push(ScopeLimits {
                scope: BudgetScope::Session {
                    token: key.token.clone(),
                    session: session.to_owned(),
                },
                window: 0,
                max_budget: key.max_budget_per_session,
                max_parallel_requests: None,
                rpm_limit: None,
                tpm_limit: None,
            });
        }
        Self { scopes }
    }

    /// With more scopes: a user's, a team's or a membership's, from their records.
    pub(crate) fn with(mut self, limits: impl IntoIterator<Item = ScopeLimits>) -> Self {
        self.scopes.extend(limits);
        self
    }

    fn limited(&self) -> bool {
        self.scopes.iter().any(ScopeLimits::limits)
    }
}

/// The most output tokens a call of `api` asks for (`request`), within `prices`'s bound.
fn max_output_tokens(api: Api, request: &ChatRequest<'_>, prices: &Prices) -> u64 {
    match api {
        Api::Embeddings => return 0,
        Api::MessagesCountTokens => return 1,
        _ => {}
    }
    let asked = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .into_iter()
        .filter_map(|name| request.raw(name)?.parse::<u64>().ok())
        .max();
    match (asked, prices.max_output_tokens) {
        (Some(asked), Some(bound)) => asked.min(bound),
        (Some(asked), None) => asked,
        (None, Some(bound)) => bound,
        (None, None) => DEFAULT_MAX_OUTPUT_TOKENS,
    }
}

/// The largest possible cost of a call of `api` whose upstream receives `bytes` bytes.
pub(crate) fn largest_cost(
    api: Api,
    request: &ChatRequest<'_>,
    bytes: usize,
    prices: &Prices,
) -> f64 {
    let input = [prices.input, prices.cache_read, prices.cache_creation]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
    bytes as f64 * input
        + max_output_tokens(api, request, prices) as f64 * prices.output.unwrap_or(0.0)
}

/// What a call settles when it ends: its spend to its scopes, its cost taken off the
/// share it was admitted against, a hold released (its own, or its share's once retired).
#[derive(Clone, Debug, Default)]
pub(crate) struct Settle {
    pub(crate) spend: Vec<ScopeSpend>,
    pub(crate) consume: Vec<ShareCost>,
    /// What calls cost their shares, summed already: a settlement the store could not
    /// take, put back.
    pub(crate) consumed: Vec<Consume>,
    pub(crate) release: Vec<Release>,
    /// Written as the call ends, apart from the spend log's batch: a call's own hold, which
    /// the client's next call may need released. What calls admitted against shares
    /// settle goes with the batch (their next calls are admitted in memory), in order: a
    /// share's release after its calls' costs.
    pub(crate) at_once: bool,
}

impl Settle {
    /// Holds to release.
    pub(crate) fn releasing(release: Vec<Release>) -> Self {
        Self {
            release,
            ..Self::default()
        }
    }

    /// Whether it changes what the store holds: written as calls end, off their paths.
    pub(crate) fn holds(&self) -> bool {
        !self.release.is_empty() || !self.consume.is_empty() || !self.consumed.is_empty()
    }
}

/// What a call holds while in flight: a hold of its own, or part of this replica's share
/// of each of its scopes.
enum Held {
    Own(Release),
    Shares(Vec<SharedCall>),
}

/// Gives back what `calls` took of their shares, uncharged: the releases of the shares
/// whose last call they were (retired meanwhile).
fn give_back(calls: Vec<SharedCall>) -> Vec<Release> {
    calls.into_iter().filter_map(SharedCall::abandon).collect()
}

/// A call's hold on its scopes: released when the call settles, or when it is dropped
/// unsettled (the call's future was dropped: its client left before an answer), its
/// release then written as settlements are (see `settling`).
pub(crate) struct Hold {
    spend: Arc<SpendLog>,
    held: Option<Held>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let (release, at_once) = match self.held.take() {
            None => return,
            Some(Held::Own(release)) => (vec![release], true),
            Some(Held::Shares(calls)) => (give_back(calls), false),
        };
        // Outside a runtime (its shutdown) nothing can be written: the lease ends it.
        if !release.is_empty() && tokio::runtime::Handle::try_current().is_ok() {
            self.spend.settle(Settle {
                at_once,
                ..Settle::releasing(release)
            });
        }
    }
}

/// What of a call a scope's counters count when it settles: always its cost (the
/// scope's spend: `/key/info`'s, `/team/info`'s, what its budget is judged on); its
/// tokens where it has a `tpm_limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    tokens: bool,
}

impl Counts {
    fn of(limits: &ScopeLimits) -> Self {
        Self {
            tokens: limits.tpm_limit.is_some(),
        }
    }
}

/// What a virtual key's call is charged to: its scopes, and its hold when it took one.
pub(crate) struct Charge {
    pub(crate) token: String,
    pub(crate) key_alias: Option<String>,
    /// The key's user and team: the reporting counters its spend adds to.
    pub(crate) user_id: Option<String>,
    pub(crate) team_id: Option<String>,
    /// Each scope, its window, and what of a call counts there.
    scopes: Vec<(BudgetScope, u64, Counts)>,
    hold: Option<Hold>,
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Charge")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Charge {
    /// What the call settles, having cost `amount` (none: nothing known) in `tokens`.
    pub(crate) fn settle(mut self, amount: Option<f64>, tokens: u64) -> Option<Settle> {
        let amount = amount.filter(|amount| *amount > 0.0).unwrap_or(0.0);
        // Moved, not copied: a call's scopes are its settlement's.
        let spend = std::mem::take(&mut self.scopes)
            .into_iter()
            .map(|(scope, window, counts)| ScopeSpend {
                scope,
                window,
                amount,
                tokens: if counts.tokens { tokens } else { 0 },
            })
            .filter(|item| item.amount > 0.0 || item.tokens > 0)
            .collect::<Vec<_>>();
        let (mut consume, mut release) = (Vec::new(), Vec::new());
        let mut at_once = false;
        match self.hold.as_mut().and_then(|hold| hold.held.take()) {
            None => {}
            Some(Held::Own(own)) => {
                release.push(own);
                at_once = true;
            }
            Some(Held::Shares(calls)) => {
                for call in calls {
                    let (consumed, released) = call.end(amount);
                    consume.extend(consumed);
                    release.extend(released);
                }
            }
        }
        let settle = Settle {
            spend,
            consume,
            release,
            at_once,
            consumed: Vec::new(),
        };
        (!settle.spend.is_empty() || settle.holds()).then_some(settle)
    }
}

/// Admits `key`'s call of `scopes`, costing at most `amount`: its charge, or the refusal
/// LiteLLM answers (429 for a rate limit, `budget_exceeded` for a budget). A refusal
/// while holds are taken is tried once more after `spend`'s settlements have caught up:
/// a hold may be the client's own last call's, its settlement still under way.
pub(crate) async fn admit(
    store: &Store,
    spend: &Arc<SpendLog>,
    key: &StoredKey,
    scopes: CallScopes,
    amount: f64,
    lease: Duration,
) -> Result<Charge, Status> {
    let charge_scopes = scopes
        .scopes
        .iter()
        .map(|limits| (limits.scope.clone(), limits.window, Counts::of(limits)))
        .collect();
    let mut charge = Charge {
        token: key.token.clone(),
        key_alias: key.key_alias.clone(),
        user_id: key.user_id.clone(),
        team_id: key.team_id.clone(),
        scopes: charge_scopes,
        hold: None,
    };
    if !scopes.limited() {
        return Ok(charge);
    }
    let limited: Vec<ScopeLimits> = scopes
        .scopes
        .into_iter()
        .filter(ScopeLimits::limits)
        .collect();
    let held = |held| {
        Some(Hold {
            spend: spend.clone(),
            held: Some(held),
        })
    };
    if shareable(&limited) && spend.follow_changes() {
        let calls = admit_shared(store, spend, key, limited, amount, lease).await?;
        charge.hold = held(Held::Shares(calls));
        return Ok(charge);
    }
    let admission = Admission {
        hold: uuid::Uuid::new_v4().simple().to_string(),
        amount,
        most: amount,
        lease_ms: (lease + LEASE_MARGIN).as_millis() as i64,
        now_ms: now_ms(),
        scopes: limited,
    };
    let retry = async || spend.settling().before_retry().await;
    admit_at_store(store, key, &admission, retry).await?;
    let scopes: Vec<BudgetScope> = admission
        .scopes
        .iter()
        .filter(|limits| limits.holds())
        .map(|limits| limits.scope.clone())
        .collect();
    // Only rate counted (`rpm_limit`, `tpm_limit`): nothing to release.
    if !scopes.is_empty() {
        charge.hold = held(Held::Own(Release {
            hold: admission.hold,
            scopes,
        }));
    }
    Ok(charge)
}

/// The store's admission of `admission`, tried once more after `before_retry` (the
/// settlements under way written, or another replica's given their time to land) when
/// refused while holds are taken: what each scope holds.
async fn admit_at_store(
    store: &Store,
    key: &StoredKey,
    admission: &Admission,
    before_retry: impl AsyncFnOnce(),
) -> Result<Vec<f64>, Status> {
    let admit = || async {
        store
            .keys
            .admit_up_to(admission)
            .await
            .map_err(|err| ErrorDetail::from(err).into_status())
    };
    let mut answer = admit().await?;
    if answer
        .as_ref()
        .is_err_and(|refusal| only_held(admission, refusal))
    {
        before_retry().await;
        answer = admit().await?;
    }
    answer.map_err(|refusal| refused(key, admission, refusal))
}

/// Admits a call limited by budgets alone against this replica's share of each of its
/// scopes (see [`crate::shares`]): in memory where every share has room for its hold;
/// else the store is asked for new shares of the scopes whose share has none, one
/// admission at a time per scope (the calls meanwhile wait for its grant).
async fn admit_shared(
    store: &Store,
    spend: &Arc<SpendLog>,
    key: &StoredKey,
    limited: Vec<ScopeLimits>,
    amount: f64,
    lease: Duration,
) -> Result<Vec<SharedCall>, Status> {
    let first = match spend.shares().take_all(&limited, amount) {
        Ok(calls) => return Ok(calls),
        Err(first) => first,
    };
    let slots = spend.shares().slots(&limited);
    let mut taken: Vec<Option<SharedCall>> = first.into_iter().map(Some).collect();
    taken.extend(slots.iter().skip(taken.len()).map(|slot| slot.take(amount)));
    if taken.iter().all(Option::is_some) {
        return Ok(taken.into_iter().flatten().collect());
    }
    // The scopes without room, refilled in the order of their names (no two calls wait
    // on each other's).
    let mut lacking: Vec<usize> = (0..slots.len()).filter(|&i| taken[i].is_none()).collect();
    lacking.sort_by(|a, b| slots[*a].name.cmp(&slots[*b].name));
    let mut refilling = Vec::with_capacity(lacking.len());
    for &i in &lacking {
        refilling.push(slots[i].refill.lock().await);
    }
    // Refilled meanwhile by the call that held the lock; an idle share without room is
    // given back first, so the store judges the call on what is really held.
    let mut releases = Vec::new();
    lacking.retain(|&i| {
        taken[i] = slots[i].take(amount);
        if taken[i].is_none() {
            releases.extend(slots[i].retire_idle());
        }
        taken[i].is_none()
    });
    if !releases.is_empty() {
        spend.settle(Settle::releasing(releases));
    }
    if lacking.is_empty() {
        return Ok(taken.into_iter().flatten().collect());
    }
    let admission = Admission {
        hold: uuid::Uuid::new_v4().simple().to_string(),
        amount,
        most: amount * SHARE_CALLS,
        lease_ms: (lease + LEASE_MARGIN + SHARE_LIFE).as_millis() as i64,
        now_ms: now_ms(),
        scopes: lacking.iter().map(|&i| limited[i].clone()).collect(),
    };
    // The calls waiting on these scopes go meanwhile; the shares given back are written
    // first (they go with the spend log's batch).
    let retry = async || {
        refilling.clear();
        if !spend.write_settles_now().await {
            tokio::time::sleep(crate::settling::SETTLEMENT_GRACE).await;
        }
    };
    let granted = match admit_at_store(store, key, &admission, retry).await {
        Ok(granted) => granted,
        Err(status) => {
            let release = give_back(taken.into_iter().flatten().collect());
            if !release.is_empty() {
                spend.settle(Settle::releasing(release));
            }
            return Err(status);
        }
    };
    let mut replaced = Vec::new();
    for (&i, granted) in lacking.iter().zip(granted) {
        let (call, old) = spend.shares().install(
            &slots[i],
            admission.hold.clone(),
            limited[i].scope.clone(),
            granted,
            amount,
        );
        taken[i] = Some(call);
        replaced.extend(old);
    }
    drop(refilling);
    if !replaced.is_empty() {
        spend.settle(Settle::releasing(replaced));
    }
    spend.sweep_shares_soon();
    Ok(taken.into_iter().flatten().collect())
}

/// Whether `refusal` is owed to holds alone: without the calls in flight, the call
/// would have been admitted.
fn only_held(admission: &Admission, refusal: &Refusal) -> bool {
    match refusal {
        Refusal::Budget {
            spent,
            reserved,
            max_budget,
            ..
        } => *reserved > 0.0 && spent < max_budget,
        Refusal::Rate {
            scope,
            in_flight,
            requests,
            tokens,
        } => admission
            .scopes
            .iter()
            .find(|limits| &limits.scope == scope)
            .is_some_and(|limits| {
                let below =
                    |count: u64, limit: Option<u64>| limit.is_none_or(|limit| count < limit);
                *in_flight > 0
                    && below(*requests, limits.rpm_limit)
                    && below(*tokens, limits.tpm_limit)
            }),
    }
}

/// A number as Python prints a float (`3.0`, `0.1`), as LiteLLM's messages show them.
fn float(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

/// The refusal of `key`'s call, as LiteLLM's proxy words each.
fn refused(key: &StoredKey, admission: &Admission, refusal: Refusal) -> Status {
    match refusal {
        Refusal::Budget {
            scope,
            spent,
            reserved,
            max_budget,
        } => {
            let held = if reserved > 0.0 {
                format!(", held by calls in flight: {}", float(reserved))
            } else {
                String::new()
            };
            let (spent, max_budget) = (float(spent), float(max_budget));
            let message = match &scope {
                BudgetScope::Key(_) => format!(
                    "Budget has been exceeded! Key={} Current cost: {spent}, Max budget: {max_budget}{held}",
                    descriptor(key)
                ),
                BudgetScope::Session { .. } => format!(
                    "Budget has been exceeded! Session of Key={} Current cost: {spent}, Max budget per session: {max_budget}{held}",
                    descriptor(key)
                ),
                BudgetScope::User(user) => format!(
                    "ExceededBudget: User={user} over budget. Spend={spent}, Budget={max_budget}{held}"
                ),
                BudgetScope::Team(team) => format!(
                    "Budget has been exceeded! Team={team} Current cost: {spent}, Max budget: {max_budget}{held}"
                ),
                BudgetScope::Member { team, user } => format!(
                    "Budget has been exceeded! User={user} in Team={team} Current cost: {spent}, Max budget: {max_budget}{held}"
                ),
            };
            match scope {
                BudgetScope::Key(_) | BudgetScope::Session { .. } => {
                    crate::auth::over_budget(message)
                }
                // LiteLLM answers a user's or team's budget with 400: the OpenHands app
                // reads a 400 naming the budget as a key that works, whose budget is spent.
                _ => ErrorDetail::new(ErrorCode::BadRequest, message)
                    .with_reason("budget_exceeded")
                    .into_status(),
            }
        }
        Refusal::Rate {
            scope,
            in_flight,
            requests,
            tokens,
        } => {
            let limits = admission.scopes.iter().find(|limits| limits.scope == scope);
            // LiteLLM prints an unset limit as Python's `sys.maxsize`.
            let limit = |pick: fn(&ScopeLimits) -> Option<u64>| {
                limits.and_then(pick).unwrap_or(i64::MAX as u64)
            };
            let kind = match scope {
                BudgetScope::Key(_) | BudgetScope::Session { .. } => "key",
                BudgetScope::User(_) => "user",
                BudgetScope::Team(_) | BudgetScope::Member { .. } => "team",
            };
            let message = format!(
                "LiteLLM Rate Limit Handler for rate limit type = {kind}. Crossed TPM / RPM / Max Parallel Request Limit. current rpm: {requests}, rpm limit: {}, current tpm: {tokens}, tpm limit: {}, current max_parallel_requests: {in_flight}, max_parallel_requests: {}",
                limit(|limits| limits.rpm_limit),
                limit(|limits| limits.tpm_limit),
                limit(|limits| limits.max_parallel_requests),
            );
            // Retry once the minute's counts start again, as LiteLLM's `retry-after` says.
            let next_minute = 60 - (now_ms().rem_euclid(60_000) / 1000) as u32;
            ErrorDetail::rate_limited(message, next_minute.max(1))
                .with_reason("rate_limit_error")
                .into_status()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> StoredKey {
        StoredKey {
            token: "t".into(),
            limits: sandgate_store::RateLimits {
                max_parallel_requests: Some(2),
                ..Default::default()
            },
            ..StoredKey::default()
        }
    }

    #[test]
    fn the_largest_cost_counts_every_byte_and_the_most_output() {
        let prices = Prices {
            input: Some(0.001),
            output: Some(0.01),
            cache_read: Some(0.0001),
            cache_creation: Some(0.002),
            max_output_tokens: Some(500),
        };
        let body = br#"{"model":"m","max_tokens":100,"max_completion_tokens":300}"#;
        let request = ChatRequest::parse(body).unwrap_or_else(|err| panic!("{err}"));
        // The largest of the two limits, every byte at the cache write price.
        let cost = largest_cost(Api::ChatCompletions, &request, 1000, &prices);
        assert!(
            (cost - (1000.0 * 0.002 + 300.0 * 0.01)).abs() < 1e-9,
            "{cost}"
        );
        // Past the entry's bound, the bound.
        let body = br#"{"model":"m","max_tokens":100000}"#;
        let request = ChatRequest::parse(body).unwrap_or_else(|err| panic!("{err}"));
        let cost = largest_cost(Api::Messages, &request, 0, &prices);
        assert!((cost - 5.0).abs() < 1e-9, "{cost}");
        // Nothing said anywhere: the default cap; an embedding has no output.
        let unbounded = Prices {
            max_output_tokens: None,
            ..prices
        };
        let body = br#"{"model":"m"}"#;
        let request = ChatRequest::parse(body).unwrap_or_else(|err| panic!("{err}"));
        let cost = largest_cost(Api::Responses, &request, 0, &unbounded);
        assert!((cost - DEFAULT_MAX_OUTPUT_TOKENS as f64 * 0.01).abs() < 1e-9);
        assert_eq!(
            largest_cost(Api::Embeddings, &request, 10, &Prices::default()),
            0.0
        );
    }

    /// An embedded store in a directory of its own (kept while it is), and its spend log.
    async fn embedded() -> (tempfile::TempDir, Store, Arc<SpendLog>) {
        let (dir, store) = crate::support::embedded_store().await;
        let spend = Arc::new(SpendLog::new(
            store.clone(),
            sandgate_store::models::SpendLogRetention::default(),
        ));
        (dir, store, spend)
    }

    /// A client that makes its next call the moment its answer is whole: the last call's
    /// settlement is still queued (it is written off the call's path), and the next
    /// admission, first refused over the hold, waits for it and passes.
    #[tokio::test(flavor = "current_thread")]
    async fn a_call_made_as_the_last_one_ends_is_admitted() {
        let (_dir, store, spend) = embedded().await;
        let mut key = key();
        key.limits.max_parallel_requests = Some(1);
        let held = || {
            let scopes = CallScopes::of_key(&key, None, now_ms());
            admit(&store, &spend, &key, scopes, 1.0, Duration::from_secs(5))
        };
        for call in 0..3 {
            let charge = held()
                .await
                .unwrap_or_else(|status| panic!("call {call}: {status:?}"));
            let entry = sandgate_store::SpendLogEntry::default();
            spend.log_answered((entry, charge.settle(Some(0.5), 10)));
            // Nothing has yielded to the settlement's writer: the store still holds the
            // call, and only the retry after the settlement admits the next.
            let probe = Admission {
                hold: format!("probe-{call}"),
                amount: 1.0,
                most: 1.0,
                lease_ms: 10_000,
                now_ms: now_ms(),
                scopes: CallScopes::of_key(&key, None, now_ms()).scopes,
            };
            let refused = store.keys.admit(&probe).await;
            assert!(
                matches!(refused, Ok(Some(Refusal::Rate { in_flight: 1, .. }))),
                "{refused:?}"
            );
        }
        // A refusal owed to calls in flight, not to a settlement: still refused.
        let first = held().await.unwrap_or_else(|status| panic!("{status:?}"));
        let second = held().await;
        assert_eq!(
            second.map(|_| ()).map_err(|status| status.code()),
            Err(tonic::Code::ResourceExhausted),
        );
        drop(first);
    }

    /// A key limited by its budget alone: its first call takes a share of the budget (a
    /// quarter of its room, within 256 holds), the next is admitted in memory; what calls
    /// cost is taken off the share as it is spent, and a stop gives the share back.
    #[tokio::test(flavor = "current_thread")]
    async fn calls_of_a_budget_alone_are_admitted_against_a_share() {
        let (_dir, store, spend) = embedded().await;
        let key = StoredKey {
            token: "t".into(),
            max_budget: Some(100.0),
            ..StoredKey::default()
        };
        let call = || {
            let scopes = CallScopes::of_key(&key, None, now_ms());
            admit(&store, &spend, &key, scopes, 1.0, Duration::from_secs(5))
        };
        // What the store holds of the key's budget, as a refusal with no room shows it.
        let held = || async {
            let probe = Admission {
                hold: "probe".into(),
                amount: 0.0,
                most: 0.0,
                lease_ms: 10_000,
                now_ms: now_ms(),
                scopes: vec![ScopeLimits {
                    max_budget: Some(0.0),
                    ..CallScopes::of_key(&key, None, now_ms()).scopes[0].clone()
                }],
            };
            match store.keys.admit_up_to(&probe).await {
                Ok(Err(Refusal::Budget { reserved, .. })) => reserved,
                other => panic!("{other:?}"),
            }
        };
        let first = call().await.unwrap_or_else(|status| panic!("{status:?}"));
        assert_eq!(held().await, 25.0, "a quarter of the room");
        let second = call().await.unwrap_or_else(|status| panic!("{status:?}"));
        assert_eq!(
            held().await,
            25.0,
            "the second call asked the store nothing"
        );
        let entry = sandgate_store::SpendLogEntry::default();
        spend.log_answered((entry, first.settle(Some(0.5), 10)));
        assert!(spend.write_settles_now().await, "it goes with the batch");
        assert_eq!(held().await, 24.5, "its cost taken off the share");
        drop(second);
        spend.flush().await;
        assert_eq!(held().await, 0.0, "a stop gives the share back");
    }

    #[test]
    fn amounts_read_as_python_prints_them() {
        assert_eq!(float(3.0), "3.0");
        assert_eq!(float(0.1), "0.1");
    }

    #[test]
    fn scopes_hold_only_what_has_a_limit() {
        let mut key = key();
        let scopes = CallScopes::of_key(&key, Some("s"), 0);
        assert!(scopes.limited());
        assert_eq!(scopes.scopes.len(), 2);
        assert!(
            !scopes.scopes[1].limits(),
            "a session without a budget holds nothing"
        );
        key.limits.max_parallel_requests = None;
        assert!(!CallScopes::of_key(&key, None, 0).limited());
        let team = ScopeLimits {
            scope: BudgetScope::Team("team".into()),
            window: 0,
            max_budget: Some(1.0),
            max_parallel_requests: None,
            rpm_limit: None,
            tpm_limit: None,
        };
        assert!(CallScopes::of_key(&key, None, 0).with([team]).limited());
    }

    #[test]
    fn a_settled_charge_counts_its_cost_everywhere_and_its_tokens_where_limited() {
        let charge = Charge {
            token: "t".into(),
            key_alias: None,
            user_id: None,
            team_id: None,
            scopes: vec![
                (BudgetScope::Key("t".into()), 3, Counts { tokens: true }),
                (BudgetScope::User("u".into()), 0, Counts { tokens: false }),
                // A team limited by its rate only: its cost (its spend), and its tokens.
                (BudgetScope::Team("r".into()), 0, Counts { tokens: true }),
            ],
            hold: None,
        };
        let settle = charge.settle(Some(0.5), 40).unwrap_or_default();
        assert_eq!(settle.spend.len(), 3);
        assert_eq!(
            settle
                .spend
                .iter()
                .map(|item| (item.amount, item.tokens))
                .collect::<Vec<_>>(),
            [(0.5, 40), (0.5, 0), (0.5, 40)]
        );
        assert_eq!(settle.spend[0].window, 3);
        assert!(settle.release.is_empty());
        let nothing = Charge {
            token: "t".into(),
            key_alias: None,
            user_id: None,
            team_id: None,
            scopes: vec![(BudgetScope::Key("t".into()), 0, Counts { tokens: false })],
            hold: None,
        };
        assert!(nothing.settle(None, 10).is_none());
    }
}
