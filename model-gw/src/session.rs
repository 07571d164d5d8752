//! Whose session a call names. A session is a conversation's: its per-session budget, its
//! sandbox's idle clock and its start's timeline follow the calls that name it, so a call
//! may name only its own.
//!
//! - A call from a sandbox Sandgate runs (its TCP peer is a live sandbox's
//!   `source_address`: the edge passes the peer it saw as `PEER_ADDRESS_METADATA`, set by
//!   itself, never taken from the client) has that sandbox's session, whatever its header
//!   says: without one it gets the sandbox's; one naming the sandbox's session, or a
//!   conversation the sandbox owns (or one nobody has named yet, taken by the sandbox), is
//!   its own; one naming another sandbox's session or conversation is refused (403).
//! - Any other call: the first virtual key that names a session owns it; another key
//!   naming it is refused (403). The master key is the operator's and is not held to it.
//! - A key with `max_budget_per_session` must name a session (400): without one its
//!   per-session budget would never apply.
//!
//! A refused call goes no further than its spend log entry: nothing is marked.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use sandgate_proto::PEER_ADDRESS_METADATA;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::keys::{SESSION_SPEND_TTL_MS, session_digest};
use sandgate_store::{Store, StoreError, StoredSandbox};
use tokio::sync::watch;
use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::auth::{KEEP_AT_MOST, MAX_KEPT, session_id};
use crate::headers::SESSION_ID;
use crate::keys::Caller;
use crate::support::error;

/// [`PEER_ADDRESS_METADATA`], built once.
static PEER_ADDRESS: HeaderName = HeaderName::from_static(PEER_ADDRESS_METADATA);

/// How long an owner is kept: as long as the session's spend.
const OWNED_FOR: Duration = Duration::from_millis(SESSION_SPEND_TTL_MS as u64);
/// How long this replica trusts an owner it confirmed, before it asks the store again
/// (a sandbox may take a session over that a key named first).
const CONFIRMED_FOR: Duration = Duration::from_secs(60);
/// Confirmed owners kept at most; past it the memory starts again.
const MAX_CONFIRMED: usize = 10_000;

/// The sessions' owners, as the store keeps them and this replica confirmed them.
pub(crate) struct Sessions {
    store: Store,
    /// session digest → (its owner, when confirmed).
    confirmed: Mutex<HashMap<String, (String, Instant)>>,
    /// The sandboxes at callers' addresses, as last read.
    addresses: Addresses,
}

/// What this replica read of the sandbox at each caller's address, with the generation
/// it was read under ([`SandboxStore::address_changes`](sandgate_store::SandboxStore)):
/// a call from an address read before costs no store round trip until a sandbox write
/// changes what the index answers, on any replica. A kept read is never served once the
/// generation has moved (a sandbox gone, its address another's), nor while the
/// notifications are down, nor past [`KEEP_AT_MOST`].
struct Addresses {
    changes: watch::Receiver<Option<u64>>,
    kept: Mutex<HashMap<IpAddr, KeptAddress>>,
}

struct KeptAddress {
    sandbox: Option<Arc<StoredSandbox>>,
    generation: u64,
    read_at: Instant,
}

impl Addresses {
    fn get(&self, peer: IpAddr, generation: Option<u64>) -> Option<Option<Arc<StoredSandbox>>> {
        let generation = generation?;
        let kept = self.kept.lock().ok()?;
        let entry = kept.get(&peer)?;
        (entry.generation == generation && entry.read_at.elapsed() < KEEP_AT_MOST)
            .then(|| entry.sandbox.clone())
    }

    fn keep(
        &self,
        peer: IpAddr,
        sandbox: Option<Arc<StoredSandbox>>,
        generation: Option<u64>,
        read_at: Instant,
    ) {
        let (Some(generation), Ok(mut kept)) = (generation, self.kept.lock()) else {
            return;
        };
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.insert(
            peer,
            KeptAddress {
                sandbox,
                generation,
                read_at,
            },
        );
    }
}

fn unavailable(err: StoreError) -> Status {
    ErrorDetail::from(err).into_status()
}

fn refused(message: String) -> Status {
    error(ErrorCode::Forbidden, message)
}

impl Sessions {
    pub(crate) fn new(store: Store) -> Self {
        let addresses = Addresses {
            changes: store.sandboxes.address_changes(),
            kept: Mutex::default(),
        };
        Self {
            store,
            confirmed: Mutex::default(),
            addresses,
        }
    }

    /// The live sandbox the call comes from, by its peer address (the edge's metadata,
    /// else the gRPC caller's own address); a call from one that names no session is
    /// given the sandbox's, in `metadata`, before anything reads it.
    pub(crate) async fn origin(
        &self,
        metadata: &mut MetadataMap,
        remote: Option<SocketAddr>,
    ) -> Result<Option<Arc<StoredSandbox>>, Status> {
        let headers: &http::HeaderMap = metadata.as_ref();
        let peer = headers
            .get(&PEER_ADDRESS)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<IpAddr>().ok())
            .or_else(|| remote.map(|remote| remote.ip()));
        let Some(peer) = peer.map(|peer| peer.to_canonical()) else {
            return Ok(None);
        };
        // Read before the store is: a write landing meanwhile moves it past what is kept.
        let generation = *self.addresses.changes.borrow();
        let sandbox = match self.addresses.get(peer, generation) {
            Some(kept) => kept,
            None => {
                let read_at = Instant::now();
                let sandbox = self
                    .store
                    .sandboxes
                    .sandbox_at_address(&peer.to_string())
                    .await
                    .map_err(unavailable)?
                    .filter(|sandbox| sandbox.session_id.is_some())
                    .map(Arc::new);
                self.addresses
                    .keep(peer, sandbox.clone(), generation, read_at);
                sandbox
            }
        };
        if let Some(session) = sandbox.as_ref().and_then(|s| s.session_id.as_deref())
            && session_id(metadata).is_none()
            && let Ok(value) = HeaderValue::try_from(session)
        {
            let [spec_name, _] = &SESSION_ID;
            metadata.as_mut().insert(spec_name.clone(), value);
        }
        Ok(sandbox)
    }

    /// Whether `caller`, from `sandbox` (if any), may name the session `metadata` names.
    pub(crate) async fn check(
        &self,
        metadata: &MetadataMap,
        sandbox: Option<&StoredSandbox>,
        caller: &Caller,
    ) -> Result<(), Status> {
        let named = session_id(metadata);
        if let Some(sandbox) = sandbox {
            return match named {
                Some(named) => self.of_sandbox(sandbox, named, caller).await,
                None => Ok(()),
            };
        }
        let Caller::Virtual { key, .. } = caller else {
            return Ok(());
        };
        let Some(named) = named else {
            if key.max_budget_per_session.is_some() {
                return Err(error(
                    ErrorCode::BadRequest,
                    "this key has a budget per session (max_budget_per_session): each call must name its session (x-litellm-session-id or x-gateway-session-id)",
                ));
            }
            return Ok(());
        };
        let owner = Owner {
            kind: "key",
            id: &key.token,
        };
        let digest = digest_of(caller, named);
        if self.confirmed(&digest, owner) {
            return Ok(());
        }
        let owner = owner.name();
        if self.held_by_sandbox(named).await? {
            return Err(refused(format!(
                "the session {named:?} belongs to a sandbox's conversation: only calls from that sandbox may name it"
            )));
        }
        let found = self
            .store
            .session_owners
            .claim_session(&digest, &owner, OWNED_FOR)
            .await
            .map_err(unavailable)?;
        if found != owner {
            return Err(refused(format!(
                "the session {named:?} belongs to {}: a call may name only its own session (the first key to name one owns it)",
                whose(&found)
            )));
        }
        self.confirm(digest.into_owned(), owner);
        Ok(())
    }

    /// A call from `sandbox` naming `named`: its own session, a conversation it owns, or
    /// one nobody named yet (which it takes); anything else is another conversation's.
    async fn of_sandbox(
        &self,
        sandbox: &StoredSandbox,
        named: &str,
        caller: &Caller,
    ) -> Result<(), Status> {
        let owner = Owner {
            kind: "sandbox",
            id: &sandbox.runtime_id,
        };
        let digest = digest_of(caller, named);
        if self.confirmed(&digest, owner) {
            return Ok(());
        }
        let owner = owner.name();
        let own = sandbox.session_id.as_deref() == Some(named) || self.owns(sandbox, named).await?;
        let another = || {
            refused(format!(
                "this call comes from the sandbox of session {:?}: it may not name another conversation's session",
                sandbox.session_id.as_deref().unwrap_or_default()
            ))
        };
        if own {
            // Taken whoever named it first: the conversation is the sandbox's.
            self.store
                .session_owners
                .own_session(&digest, &owner, OWNED_FOR)
                .await
                .map_err(unavailable)?;
        } else {
            let other_sandbox = self
                .store
                .sandboxes
                .sandbox_for_session(named)
                .await
                .map_err(unavailable)?
                .is_some_and(|other| other.runtime_id != sandbox.runtime_id);
            if other_sandbox || self.conversation_owner(named).await?.is_some() {
                return Err(another());
            }
            let found = self
                .store
                .session_owners
                .claim_session(&digest, &owner, OWNED_FOR)
                .await
                .map_err(unavailable)?;
            if found != owner {
                return Err(another());
            }
        }
        self.confirm(digest.into_owned(), owner);
        Ok(())
    }

    /// Whether `named` is the session of a sandbox whose calls Sandgate knows by their
    /// address (or a conversation such a sandbox owns): only its own calls name it. A
    /// sandbox without a known address makes its calls like any client: the first key
    /// rule holds for its session.
    async fn held_by_sandbox(&self, named: &str) -> Result<bool, Status> {
        let sandboxes = &self.store.sandboxes;
        if let Some(sandbox) = sandboxes
            .sandbox_for_session(named)
            .await
            .map_err(unavailable)?
        {
            return Ok(sandbox.address_index().is_some());
        }
        let Some(owner) = self.conversation_owner(named).await? else {
            return Ok(false);
        };
        let Some(runtime_id) = owner.strip_prefix("sandbox:") else {
            return Ok(false);
        };
        Ok(sandboxes
            .sandbox(runtime_id)
            .await
            .map_err(unavailable)?
            .is_some_and(|sandbox| sandbox.address_index().is_some()))
    }

    /// Whether the conversation `named` is `sandbox`'s (its records came from it).
    async fn owns(&self, sandbox: &StoredSandbox, named: &str) -> Result<bool, Status> {
        let owner = self.conversation_owner(named).await?;
        Ok(owner.as_deref() == Some(&format!("sandbox:{}", sandbox.runtime_id)))
    }

    /// The owner of the conversation whose id is `named`, if there is one.
    async fn conversation_owner(&self, named: &str) -> Result<Option<String>, Status> {
        let Ok(id) = uuid::Uuid::parse_str(named) else {
            return Ok(None);
        };
        Ok(self
            .store
            .conversations
            .get(id)
            .await
            .map_err(unavailable)?
            .map(|conversation| conversation.owner))
    }

    /// Whether this replica confirmed `owner` as the owner of `digest` lately.
    fn confirmed(&self, digest: &str, owner: Owner<'_>) -> bool {
        self.confirmed.lock().is_ok_and(|confirmed| {
            confirmed
                .get(digest)
                .is_some_and(|(known, at)| owner.is(known) && at.elapsed() < CONFIRMED_FOR)
        })
    }

    fn confirm(&self, digest: String, owner: String) {
        if let Ok(mut confirmed) = self.confirmed.lock() {
            if confirmed.len() >= MAX_CONFIRMED {
                confirmed.clear();
            }
            confirmed.insert(digest, (owner, Instant::now()));
        }
    }
}

/// An owner of sessions, named as the store names it (`key:{token}`,
/// `sandbox:{runtime_id}`) only when the store is asked: a call whose session this
/// replica confirmed formats nothing.
#[derive(Clone, Copy)]
struct Owner<'a> {
    kind: &'static str,
    id: &'a str,
}

impl Owner<'_> {
    fn is(self, name: &str) -> bool {
        name.strip_prefix(self.kind)
            .and_then(|rest| rest.strip_prefix(':'))
            == Some(self.id)
    }

    fn name(self) -> String {
        format!("{}:{}", self.kind, self.id)
    }
}

/// The store's name of the session `named` (its digest): the one the key's read
/// computed from the same header, kept with it, else computed here.
fn digest_of<'a>(caller: &'a Caller, named: &str) -> Cow<'a, str> {
    match caller {
        Caller::Virtual {
            session: Some(digest),
            ..
        } => {
            debug_assert_eq!(
                *digest,
                session_digest(named),
                "the key's read of another session"
            );
            Cow::Borrowed(digest)
        }
        _ => Cow::Owned(session_digest(named)),
    }
}

/// Who an owner is, for a refusal: never a key's token.
fn whose(owner: &str) -> &'static str {
    if owner.starts_with("sandbox:") {
        "a sandbox's conversation"
    } else {
        "another key"
    }
}

#[cfg(test)]
mod tests {
    use sandgate_store::{Restarts, SandboxSpec, SandboxState};

    use tonic::metadata::MetadataValue;

    use super::*;

    fn sandbox(session: &str, address: &str) -> StoredSandbox {
        StoredSandbox {
            runtime_id: "sandbox-1".into(),
            version: 1,
            session_id: Some(session.into()),
            pool: None,
            claim_key: "claim".into(),
            spec: SandboxSpec::default(),
            state: SandboxState::Running,
            status_detail: None,
            key_sha256: "00".into(),
            key_nonce: "nonce".into(),
            created_at_ms: 1,
            changed_at_ms: 1,
            restarts: Restarts::default(),
            slot_failures: 0,
            personalised: false,
            active_at_ms: 0,
            timeline: None,
            source_address: Some(address.into()),
        }
    }

    fn from(address: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        let value = MetadataValue::try_from(address).unwrap_or_else(|err| panic!("{err}"));
        metadata.insert(PEER_ADDRESS_METADATA, value);
        metadata
    }

    /// The session the sandbox at `address` gives a call that names none.
    async fn given(sessions: &Sessions, address: &str) -> Option<String> {
        let mut metadata = from(address);
        let sandbox = sessions
            .origin(&mut metadata, None)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let named = session_id(&metadata).map(str::to_owned);
        assert_eq!(
            named.as_deref(),
            sandbox.as_ref().and_then(|s| s.session_id.as_deref())
        );
        named
    }

    /// An address read once is answered from memory; every write there that changes its
    /// answer (a sandbox placed, claimed, stopped, another given the address) is seen by
    /// the very next call.
    #[tokio::test]
    async fn a_kept_address_follows_every_write_there() {
        let (_dir, store) = crate::support::embedded_store().await;
        let sessions = Sessions::new(store.clone());
        let write = async |previous: Option<&StoredSandbox>, next: &StoredSandbox| {
            let written = store.sandboxes.put_sandbox(previous, next, None).await;
            assert!(written.unwrap_or_else(|err| panic!("{err}")));
        };
        assert_eq!(given(&sessions, "10.2.0.5").await, None);
        let first = sandbox("conv-1", "10.2.0.5");
        write(None, &first).await;
        assert_eq!(
            given(&sessions, "10.2.0.5").await.as_deref(),
            Some("conv-1")
        );
        assert_eq!(
            given(&sessions, "10.2.0.5").await.as_deref(),
            Some("conv-1")
        );
        let claimed = StoredSandbox {
            version: 2,
            session_id: Some("conv-2".into()),
            ..first.clone()
        };
        write(Some(&first), &claimed).await;
        assert_eq!(
            given(&sessions, "10.2.0.5").await.as_deref(),
            Some("conv-2")
        );
        let stopped = StoredSandbox {
            version: 3,
            state: SandboxState::Stopped,
            ..claimed.clone()
        };
        write(Some(&claimed), &stopped).await;
        assert_eq!(given(&sessions, "10.2.0.5").await, None);
        let another = StoredSandbox {
            runtime_id: "sandbox-2".into(),
            ..sandbox("conv-3", "10.2.0.5")
        };
        write(None, &another).await;
        assert_eq!(
            given(&sessions, "10.2.0.5").await.as_deref(),
            Some("conv-3")
        );
        assert_eq!(given(&sessions, "10.2.0.6").await, None);
    }

    /// A kept read serves its own generation only, while the notifications are up, and
    /// not past its age.
    #[test]
    fn a_kept_address_serves_its_generation_only() {
        let (_sender, changes) = watch::channel(Some(3));
        let addresses = Addresses {
            changes,
            kept: Mutex::default(),
        };
        let peer: IpAddr = [10, 2, 0, 7].into();
        let record = Some(Arc::new(sandbox("conv-1", "10.2.0.7")));
        addresses.keep(peer, record, Some(3), Instant::now());
        let session = |kept: Option<Option<Arc<StoredSandbox>>>| {
            kept.map(|sandbox| sandbox.and_then(|sandbox| sandbox.session_id.clone()))
        };
        assert_eq!(
            session(addresses.get(peer, Some(3))),
            Some(Some("conv-1".into()))
        );
        assert_eq!(session(addresses.get(peer, Some(4))), None);
        assert_eq!(session(addresses.get(peer, None)), None);
        let other: IpAddr = [10, 2, 0, 8].into();
        addresses.keep(other, None, None, Instant::now());
        assert_eq!(
            session(addresses.get(other, Some(3))),
            None,
            "kept unfollowed"
        );
        if let Some(long_ago) = Instant::now().checked_sub(KEEP_AT_MOST) {
            addresses.keep(other, None, Some(3), long_ago);
            assert_eq!(
                session(addresses.get(other, Some(3))),
                None,
                "kept too long"
            );
        }
    }
}
