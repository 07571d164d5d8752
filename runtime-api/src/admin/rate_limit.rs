//! Login attempts limited per client: each client address may ask for so many challenges
//! and make so many login attempts per window (two counters), across every replica (the
//! counters are in the store). Past the limit the caller gets 429 with the seconds until
//! its window ends. With the PBKDF2 cost, this bounds both online password guessing and
//! the CPU a client can make the service spend.
//!
//! Addresses are cheap (a /64 of IPv6, a proxy pool): 41 loopback addresses made 410
//! judged attempts in one window. So the account has a bound of its own as well: so many
//! judged login attempts (a live challenge answered, the hash checked) per window,
//! whatever their source ([`AccountGate`]). Past it, the bound does not refuse the
//! account, which would let a stranger with no credential lock the admin out: it refuses
//! the clients that guess. A client (an address; an IPv6 /64) that has given a wrong proof
//! in the window, or has another attempt in flight, is refused unjudged until the window
//! ends (past the bound, a client's counts are kept per period of the window's length,
//! counted from the epoch, so that its trials and passes are always of one window); one
//! that has not is judged, so the admin's right proof passes whatever the guessers do. Past the bound, a guesser has one judged attempt per window and
//! network, against the ten per address the per-client limit alone would give.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use sandgate_proto::error::ErrorDetail;
use tonic::{Request, Status};

use sandgate_store::{RateCount, Store};

/// How many attempts a client may make per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginRate {
    pub attempts: u32,
    /// Opens with a client's first attempt; its counts start again once it has passed.
    pub window: Duration,
}

/// `ADMIN_LOGIN_RATE`'s default: 10 attempts a minute.
pub const DEFAULT_LOGIN_RATE: LoginRate = LoginRate {
    attempts: 10,
    window: Duration::from_secs(60),
};

/// `ADMIN_LOGIN_ACCOUNT_RATE`'s default: 30 judged logins of the account per window, three
/// clients' worth.
pub const DEFAULT_ACCOUNT_LOGIN_ATTEMPTS: u32 = 30;

/// What a client attempts: each has its own counter.
#[derive(Clone, Copy, Debug)]
pub enum Attempt {
    Challenge,
    Login,
}

impl Attempt {
    fn name(self) -> &'static str {
        match self {
            Self::Challenge => "challenge",
            Self::Login => "login",
        }
    }
}

/// The client a call is made for: the address the edge names in the call's metadata, else
/// the caller's own remote address (a direct gRPC caller), else `unknown` (an in-process
/// caller that named none, counted as one client).
pub fn client_of<T>(request: &Request<T>) -> String {
    sandgate_proto::client_address(request)
        .map_or_else(|| "unknown".to_owned(), |address| address.to_string())
}

/// Counts one attempt of the client `request` is made for, and refuses it (429, with the
/// seconds to wait) past the limit.
pub async fn check<T>(
    store: &Store,
    rate: LoginRate,
    attempt: Attempt,
    request: &Request<T>,
) -> Result<(), Status> {
    let client = client_of(request);
    let hit = store
        .rate_limits
        .hit(&format!("admin-{}:{client}", attempt.name()), rate.window)
        .await
        .map_err(ErrorDetail::from)?;
    let allowed = u64::from(rate.attempts);
    if hit.count <= allowed {
        return Ok(());
    }
    // Once per window and client, not once per refused attempt: a flood stays one line.
    if hit.count == allowed + 1 {
        tracing::warn!(
            client = %client,
            attempt = attempt.name(),
            limit = rate.attempts,
            window_seconds = rate.window.as_secs(),
            "too many admin login attempts; refusing this client until its window ends"
        );
    }
    Err(refused(hit.resets_in))
}

/// The account's bound on judged logins, checked between taking a challenge and judging
/// its proof. [`AccountGate::enter`] counts the attempt; the caller then reports how the
/// proof was judged ([`AccountGate::judged`]), which is what tells the admin (no wrong
/// proof) from a guesser once the account is past its bound.
pub struct AccountGate<'a> {
    store: &'a Store,
    rate: Option<LoginRate>,
    /// The client's network: an IPv4 address, an IPv6 /64.
    network: String,
    /// The window of this attempt, as a number of windows since the epoch: a client's
    /// trials, passes and wrong proofs are counted in it together. Counters that each
    /// opened their own window at their first hit drifted apart: the admin's passes
    /// expired before its trials, and its next right proof was refused.
    period: u64,
}

impl<'a> AccountGate<'a> {
    /// Counts a judged attempt of the account by `client` ([`client_of`]), and refuses it
    /// (429, unjudged) when the account is past its bound and this client has guessed wrong
    /// in the window, or has another attempt in flight.
    pub async fn enter(
        store: &'a Store,
        rate: Option<LoginRate>,
        client: &str,
    ) -> Result<AccountGate<'a>, Status> {
        let window = rate.map_or(1, |rate| rate.window.as_millis().max(1));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        let gate = Self {
            store,
            rate,
            network: network_of(client),
            period: u64::try_from(now / window).unwrap_or(u64::MAX),
        };
        let Some(rate) = rate else {
            return Ok(gate);
        };
        let account = gate.hit("admin-judged-login:account", rate).await?;
        if account.count <= u64::from(rate.attempts) {
            return Ok(gate);
        }
        if account.count == u64::from(rate.attempts) + 1 {
            tracing::warn!(
                limit = rate.attempts,
                window_seconds = rate.window.as_secs(),
                "too many judged admin logins; judging only clients with no wrong proof \
                 until the window ends"
            );
        }
        // Counted before anything is read, so that concurrent attempts of one client see
        // each other: only the first may be judged, unless the earlier ones all passed.
        let trial = gate.hit(&gate.key("trial"), rate).await?;
        let wrong = gate.count(&gate.key("wrong")).await?;
        let passed = gate.count(&gate.key("passed")).await?;
        if wrong == 0 && trial.count <= passed + 1 {
            return Ok(gate);
        }
        Err(refused(trial.resets_in))
    }

    /// Records how the proof was judged: a wrong one closes the account to this client
    /// while the account is past its bound.
    pub async fn judged(&self, right: bool) -> Result<(), Status> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        let key = self.key(if right { "passed" } else { "wrong" });
        self.hit(&key, rate).await.map(drop)
    }

    fn key(&self, what: &str) -> String {
        format!("admin-{what}:{}:{}", self.network, self.period)
    }

    async fn hit(&self, key: &str, rate: LoginRate) -> Result<RateCount, Status> {
        self.store
            .rate_limits
            .hit(key, rate.window)
            .await
            .map_err(|err| ErrorDetail::from(err).into())
    }

    async fn count(&self, key: &str) -> Result<u64, Status> {
        self.store
            .rate_limits
            .count(key)
            .await
            .map_err(|err| ErrorDetail::from(err).into())
    }
}

/// The network a client is counted by past the account's bound: its IPv4 address, or the
/// /64 of its IPv6 address (one host's usual allocation); anything else as it is.
fn network_of(client: &str) -> String {
    match client.parse::<IpAddr>() {
        Ok(IpAddr::V6(address)) => {
            let segments = address.segments();
            let network = Ipv6Addr::new(
                segments[0],
                segments[1],
                segments[2],
                segments[3],
                0,
                0,
                0,
                0,
            );
            format!("{network}/64")
        }
        _ => client.to_owned(),
    }
}

/// 429 with the seconds until `resets_in` has passed.
fn refused(resets_in: Duration) -> Status {
    let seconds = u32::try_from(resets_in.as_millis().div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1);
    ErrorDetail::rate_limited(
        format!("Too many login attempts; retry in {seconds} seconds"),
        seconds,
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgate_proto::CLIENT_ADDRESS_METADATA;

    #[test]
    fn the_named_client_wins_over_the_remote_address() {
        let mut request = Request::new(());
        assert_eq!(client_of(&request), "unknown");
        request.metadata_mut().insert(
            CLIENT_ADDRESS_METADATA,
            "::ffff:10.1.2.3".parse().expect("value"),
        );
        assert_eq!(client_of(&request), "10.1.2.3");
        request.metadata_mut().insert(
            CLIENT_ADDRESS_METADATA,
            "not an address".parse().expect("value"),
        );
        assert_eq!(client_of(&request), "unknown");
    }

    #[test]
    fn past_the_bound_an_ipv6_client_is_its_64() {
        assert_eq!(network_of("10.1.2.3"), "10.1.2.3");
        assert_eq!(network_of("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
        assert_eq!(network_of("2001:db8:1:2:ffff::1"), "2001:db8:1:2::/64");
        assert_eq!(network_of("unknown"), "unknown");
    }
}
