//! Login attempts limited per client: each client address may ask for so many challenges
//! and make so many login attempts per window (two counters), across every replica (the
//! counters are in the store). Past the limit the caller gets 429 with the seconds until
//! its window ends. With the PBKDF2 cost, this bounds both online password guessing and
//! the CPU a client can make the service spend.
//!
//! Addresses are cheap (a /64 of IPv6, a proxy pool): 41 loopback addresses made 410
//! judged attempts in one window. So the account has a bound of its own as well: so many
//! judged login attempts (a live challenge answered, the hash checked) per window,
//! whatever their source. Past it, every login is refused until the window ends, the
//! admin's too: a guesser is held to the bound, at the price of the admin waiting once
//! they are under attack.

use std::net::IpAddr;
use std::time::Duration;

use sandgate_proto::CLIENT_ADDRESS_METADATA;
use sandgate_proto::error::ErrorDetail;
use tonic::{Request, Status};

use sandgate_store::Store;

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
    /// A login of the account whose hash is checked, from any client.
    Judged,
}

impl Attempt {
    fn name(self) -> &'static str {
        match self {
            Self::Challenge => "challenge",
            Self::Login => "login",
            Self::Judged => "judged-login",
        }
    }
}

/// The client a call is made for: the address the edge names in the call's metadata, else
/// the caller's own remote address (a direct gRPC caller), else `unknown` (an in-process
/// caller that named none, counted as one client).
pub fn client_of<T>(request: &Request<T>) -> String {
    let named = request
        .metadata()
        .get(CLIENT_ADDRESS_METADATA)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<IpAddr>().ok());
    named
        .or_else(|| request.remote_addr().map(|address| address.ip()))
        .map_or_else(
            || "unknown".to_owned(),
            |address| address.to_canonical().to_string(),
        )
}

/// Counts one attempt of the client `request` is made for, and refuses it (429, with the
/// seconds to wait) past the limit.
pub async fn check<T>(
    store: &Store,
    rate: LoginRate,
    attempt: Attempt,
    request: &Request<T>,
) -> Result<(), Status> {
    let client = match attempt {
        // One count for every client.
        Attempt::Judged => "account".to_owned(),
        Attempt::Challenge | Attempt::Login => client_of(request),
    };
    let hit = store
        .rate_limits
        .hit(&format!("admin-{}:{client}", attempt.name()), rate.window)
        .await
        .map_err(ErrorDetail::from)?;
    let allowed = u64::from(rate.attempts);
    if hit.count <= allowed {
        return Ok(());
    }
    let seconds = u32::try_from(hit.resets_in.as_millis().div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1);
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
    Err(ErrorDetail::rate_limited(
        format!("Too many login attempts; retry in {seconds} seconds"),
        seconds,
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
