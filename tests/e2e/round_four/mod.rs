//! Round four of the hostile tests (issue 53): what a key holder, an upstream or a stranger
//! could still do. Each test fails on the code before its fix:
//!
//! - `gateway.rs`: added models never through a proxy, IANA's special-purpose blocks
//!   refused, a bound on added models, a virtual key never given the master's value,
//!   `/spend/logs` judging the caller before its query;
//! - `loops.rs`: an entry's `max_parallel_requests`, and a loop through a hop that drops
//!   `x-sandgate-hop` stopped within a few calls;
//! - `quotas.rs`: `MAX_RUNTIMES` and `SANDBOX_START_RATE` exact across two replicas, and a
//!   webhook key's bound on the conversations it creates;
//! - `bundle.rs`: the support bundle quotes no URL's query values or userinfo, no failing
//!   call's model name and no broken file's values.
//!
//! The admin login that strangers cannot lock out is in `login_rate.rs`.

mod bundle;
mod gateway;
mod loops;
mod quotas;
