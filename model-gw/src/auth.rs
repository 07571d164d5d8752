//! Who calls: the master key, compared in constant time, or a virtual key found by its
//! token; and, before a virtual key's call goes upstream, whether the budgets it last read
//! are spent already (the store's admission, `admit`, decides the rest).
//!
//! A virtual key and its spend are read from the store in one read (on Redis one round
//! trip), and kept until the store says a key changed (`KeyStore::key_changes`: on Redis a
//! notification every replica follows, within milliseconds), at most 30 s: a changed or
//! deleted key holds on every replica within that notification's delay. The spend kept
//! with it only refuses early a call already over budget; the store's admission
//! (`admit`) judges every budget as stored.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::keys::session_digest;
use sandgate_store::{SpendCounters, Store, StoredKey};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::watch;
use tonic::Status;

use crate::budget::key_window;
use crate::headers::{SESSION_ID, first_header};
use crate::keys::{Caller, descriptor, expired, token_of};
use crate::support::now_ms;

/// Every key a caller presents, where LiteLLM's proxy takes one: `Authorization: Bearer`
/// (OpenAI SDKs), `x-api-key` (the Anthropic SDK, Claude Code), `api-key` (Azure OpenAI
/// clients), `x-litellm-api-key` (LiteLLM's own, with or without `Bearer `),
/// `x-goog-api-key` (Google AI Studio clients; the OpenHands enterprise app sends the
/// master key there) and `ocp-apim-subscription-key` (Azure API Management).
fn presented_keys(metadata: &tonic::metadata::MetadataMap) -> impl Iterator<Item = &str> {
    let headers: &HeaderMap = metadata.as_ref();
    let text = |name: &HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    let bearer = text(&AUTHORIZATION).and_then(sandgate_proto::bearer_token);
    let litellm = text(&LITELLM_API_KEY)
        .map(|value| sandgate_proto::bearer_token(value).unwrap_or(value.trim()));
    let raw = RAW_KEYS
        .iter()
        .filter_map(move |name| text(name).map(str::trim));
    bearer.into_iter().chain(litellm).chain(raw)
}

/// LiteLLM's own key header, with or without `Bearer `.
static LITELLM_API_KEY: HeaderName = HeaderName::from_static("x-litellm-api-key");
/// The headers that carry a key as it is.
static RAW_KEYS: [HeaderName; 4] = [
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("api-key"),
    HeaderName::from_static("x-goog-api-key"),
    HeaderName::from_static("ocp-apim-subscription-key"),
];

/// How long a kept read serves at most, whatever the generation says: a bound should the
/// store's notifications stop without it noticing.
pub(crate) const KEEP_AT_MOST: Duration = Duration::from_secs(30);
/// How long one call's refresh of a stale read may take before another call tries.
const REFRESH_AT_MOST: Duration = Duration::from_secs(1);
/// Keys kept at most, and sessions of one key; past it the cache starts again.
pub(crate) const MAX_KEPT: usize = 10_000;

/// What `key_for_call` read, by the key as presented and the session as named (a hit
/// costs no digest of either), each with the generation it was read under. Once the
/// generation moves, the first call reads again while the calls that come meanwhile are
/// served what was read before (one read for all of them, not one each); so a change is
/// seen one store round trip after its notification.
#[derive(Default)]
pub struct KeyCache(Mutex<foldhash::HashMap<String, Sessions>>);

/// What is kept of one key: its calls naming no session, and each session's (looked up by
/// the name as the call gives it, without a copy).
#[derive(Default)]
struct Sessions {
    unnamed: Option<Kept>,
    named: foldhash::HashMap<String, Kept>,
}

impl Sessions {
    fn get_mut(&mut self, session: Option<&str>) -> Option<&mut Kept> {
        match session {
            None => self.unnamed.as_mut(),
            Some(session) => self.named.get_mut(session),
        }
    }

    fn insert(&mut self, session: Option<String>, kept: Kept) {
        match session {
            None => self.unnamed = Some(kept),
            Some(session) => {
                if self.named.len() >= MAX_KEPT {
                    self.named.clear();
                }
                self.named.insert(session, kept);
            }
        }
    }
}

type Read = (Arc<StoredKey>, SpendCounters);

struct Kept {
    read: Read,
    /// The session as the store names it.
    session: Option<String>,
    read_at: Instant,
    generation: u64,
    /// A call is reading it again, since then.
    refreshing: Option<Instant>,
}

/// The key as presented, the session as named, and the session as the store names it.
type Names = (String, Option<String>, Option<String>);

impl KeyCache {
    /// What is kept for `key` and `session` under `generation`, with the session's store
    /// name; `None`: the caller reads the store (and keeps what it read).
    fn get(
        &self,
        key: &str,
        session: Option<&str>,
        generation: Option<u64>,
    ) -> Option<(Read, Option<String>)> {
        let generation = generation?;
        let mut kept = self.0.lock().ok()?;
        let entry = kept.get_mut(key)?.get_mut(session)?;
        if entry.read_at.elapsed() >= KEEP_AT_MOST {
            return None;
        }
        let stale_but_refreshing = entry
            .refreshing
            .is_some_and(|since| since.elapsed() < REFRESH_AT_MOST);
        if entry.generation == generation || stale_but_refreshing {
            return Some((entry.read.clone(), entry.session.clone()));
        }
        entry.refreshing = Some(Instant::now());
        None
    }

    /// Drops whatever is kept of `key`, every session's.
    fn forget(&self, key: &str) {
        if let Ok(mut kept) = self.0.lock() {
            kept.remove(key);
        }
    }

    fn keep(
        &self,
        (key, named, session): Names,
        read: Read,
        generation: Option<u64>,
        read_at: Instant,
    ) {
        let (Some(generation), Ok(mut kept)) = (generation, self.0.lock()) else {
            return;
        };
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.entry(key).or_default().insert(
            named,
            Kept {
                read,
                session,
                read_at,
                generation,
                refreshing: None,
            },
        );
    }
}

fn refused() -> Status {
    ErrorDetail::new(
        ErrorCode::Unauthenticated,
        "Authentication Error: invalid or missing key (Authorization: Bearer <key>, or x-api-key, api-key, x-litellm-api-key, x-goog-api-key, ocp-apim-subscription-key)",
    )
    .into_status()
}

/// Who calls: the keys it knows, and what it kept of virtual keys read.
pub(crate) struct Authenticator {
    /// sha256 of the master key: compared in constant time, whatever the lengths.
    master_key: Option<[u8; 32]>,
    store: Store,
    /// The store's generation of virtual keys' records (`KeyStore::key_changes`).
    key_changes: watch::Receiver<Option<u64>>,
    /// What the last calls of each virtual key read, until that generation moves.
    keys: KeyCache,
}

impl Authenticator {
    /// The master key `master_key` (none, or empty: every call is refused unless its
    /// virtual key is in `store`).
    pub(crate) fn new(store: Store, master_key: Option<String>) -> Self {
        Self {
            master_key: master_key
                .filter(|key| !key.is_empty())
                .map(|key| Sha256::digest(key.as_bytes()).into()),
            key_changes: store.keys.key_changes(),
            keys: KeyCache::default(),
            store,
        }
    }

    /// Whether `key` is the master key (compared in constant time): a virtual key may
    /// never be given its value.
    pub(crate) fn is_master(&self, key: &str) -> bool {
        self.master_key.as_ref().is_some_and(|master| {
            let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
            bool::from(digest.ct_eq(master))
        })
    }

    /// Whether one of the keys `presented` is the master key, or the console's token
    /// standing for it until it expires.
    fn presents_master(&self, presented: &[&str]) -> bool {
        let Some(master) = &self.master_key else {
            return false;
        };
        presented.iter().any(|key| {
            self.is_master(key)
                || sandgate_proto::console_token::verify(key, master, now_ms() / 1000)
        })
    }

    /// The caller of a request: the master key, or a virtual key that has not expired,
    /// with its spend as stored now.
    pub(crate) async fn authenticate(
        &self,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Caller, Status> {
        let presented: Vec<&str> = presented_keys(metadata)
            .filter(|key| !key.is_empty())
            .collect();
        let named = session_id(metadata);
        // Read before the store is: a change meanwhile makes what is read stale.
        let generation = *self.key_changes.borrow();
        // A lone key kept as a virtual key is not the master key (no virtual key may be
        // given its value, and the master key is never kept): its call needs no digest.
        let mut kept = match presented.as_slice() {
            [only] => self.keys.get(only, named, generation),
            _ => None,
        };
        if kept.is_none() {
            if self.presents_master(&presented) {
                return Ok(Caller::Master);
            }
            if presented.len() > 1 {
                kept = self.keys.get(presented[0], named, generation);
            }
        }
        // A client sends one key, in one carrier: the first is the one it meant.
        let Some(presented) = presented.first() else {
            return Err(refused());
        };
        let ((key, counters), session) = match kept {
            Some(hit) => hit,
            None => {
                let token = token_of(presented);
                let session = named.map(session_digest);
                let read_at = Instant::now();
                let Some((key, counters)) = self
                    .store
                    .keys
                    .key_for_call(&token, session.as_deref())
                    .await
                    .map_err(|err| ErrorDetail::from(err).into_status())?
                else {
                    // Deleted: nothing kept of it serves another call.
                    self.keys.forget(presented);
                    return Err(refused());
                };
                let read = (Arc::new(key), counters);
                let names = (
                    (*presented).to_owned(),
                    named.map(str::to_owned),
                    session.clone(),
                );
                self.keys.keep(names, read.clone(), generation, read_at);
                (read, session)
            }
        };
        if key.expires_at_ms.is_some_and(|expires| expires <= now_ms()) {
            return Err(expired(&key).into_status());
        }
        Ok(Caller::Virtual {
            key,
            counters,
            session,
        })
    }
}

/// The session a call names (`x-gateway-session-id`, else LiteLLM's
/// `x-litellm-session-id`).
pub(crate) fn session_id(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    first_header(metadata.as_ref(), &SESSION_ID).filter(|value| !value.is_empty())
}

/// Whether `key` may make one more call (of `session`, a digest), by what it and the
/// session spent as `counters` (kept from an earlier read) say: a budget already spent is
/// refused without a store round trip. The store's admission decides the rest.
pub(crate) fn check_budget(
    key: &StoredKey,
    counters: &SpendCounters,
    session: Option<&str>,
) -> Result<(), Status> {
    let (window, _) = key_window(key, now_ms());
    let spent = counters.in_window(window);
    if let Some(max) = key.max_budget
        && spent >= max
    {
        return Err(over_budget(format!(
            "Budget has been exceeded! Key={} Current cost: {spent}, Max budget: {max}",
            descriptor(key),
        )));
    }
    if let Some(max) = key.max_budget_per_session.filter(|_| session.is_some())
        && counters.session >= max
    {
        return Err(over_budget(format!(
            "Budget has been exceeded! Session of Key={} Current cost: {}, Max budget per session: {max}",
            descriptor(key),
            counters.session
        )));
    }
    Ok(())
}

/// A budget refusal, as LiteLLM's proxy answers it (422, `budget_exceeded`).
pub(crate) fn over_budget(message: String) -> Status {
    ErrorDetail::new(ErrorCode::ValidationFailed, message)
        .with_reason("budget_exceeded")
        .into_status()
}
