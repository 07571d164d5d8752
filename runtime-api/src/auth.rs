//! Who is calling: the services authenticate from request metadata, so an internal gRPC
//! caller is held to exactly the rules a REST caller is. Keys are compared as their sha256
//! digests, never kept in clear, and never logged.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;

use sandgate_store::SessionKeyStore;

pub const SESSION_KEY_HEADER: &str = "x-session-api-key";
pub const API_KEY_HEADER: &str = "x-api-key";
/// Where the admin token stands for a runtime API key (the console's reads, pause and
/// stop). Not `Authorization`: there, as the spec says, a runtime API route refuses it.
pub const ADMIN_TOKEN_HEADER: &str = "x-sandgate-admin-token";

/// The sender of a webhook delivery or a settings call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// A sandbox, by the session key the Sandboxes service issued to it.
    Sandbox(String),
    /// An external sender, by the fingerprint of its configured static key.
    StaticKey(String),
}

impl Principal {
    /// How the catalog records the owner of what this principal sent.
    pub fn owner(&self) -> String {
        match self {
            Self::Sandbox(id) => format!("sandbox:{id}"),
            Self::StaticKey(fingerprint) => format!("static:{fingerprint}"),
        }
    }
}

/// Whether a call carries a valid admin token: set by the RuntimeAdmin service, which
/// holds the token's secret.
pub type AdminCheck = Arc<dyn Fn(&MetadataMap) -> bool + Send + Sync>;

/// Who holds the runtime API's rights on a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// A runtime API key, in `x-api-key`.
    RuntimeKey,
    /// The admin, by its token: it reads the runtime API keys' values anyway
    /// (`GET /api/admin/api-keys`), so it is given nothing it could not take. Its
    /// changes are audited.
    Admin,
}

/// Who may read the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The runtime API key: reads every conversation.
    RuntimeApi,
    /// A session key: reads what it sent.
    Session(Principal),
}

pub struct Authenticator {
    /// sha256 of each static session key → its fingerprint (a prefix of that digest).
    static_session_keys: HashMap<[u8; 32], String>,
    runtime_api_keys: Vec<[u8; 32]>,
    issued_keys: Arc<dyn SessionKeyStore>,
    admin: OnceLock<AdminCheck>,
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn header<'a>(metadata: &'a MetadataMap, name: &str) -> Option<&'a str> {
    metadata
        .get(name)
        .and_then(|value| value.to_str().ok())
        .filter(|value| !value.is_empty())
}

fn unauthenticated(detail: &str) -> ErrorDetail {
    ErrorDetail::new(ErrorCode::Unauthenticated, detail)
}

impl Authenticator {
    /// `static_session_keys`: keys of external webhook senders; `runtime_api_keys`: keys
    /// that read the whole catalog. Empty strings are ignored.
    pub fn new(
        static_session_keys: &[String],
        runtime_api_keys: &[String],
        issued_keys: Arc<dyn SessionKeyStore>,
    ) -> Self {
        let static_session_keys = static_session_keys
            .iter()
            .filter(|key| !key.is_empty())
            .map(|key| {
                let digest = digest(key);
                (digest, hex::encode(&digest[..8]))
            })
            .collect();
        let runtime_api_keys = runtime_api_keys
            .iter()
            .filter(|key| !key.is_empty())
            .map(|key| digest(key))
            .collect();
        Self {
            static_session_keys,
            runtime_api_keys,
            issued_keys,
            admin: OnceLock::new(),
        }
    }

    /// Lets an admin token stand where a runtime API key is asked (the console's reads
    /// and its pause and stop). Set once; later calls are ignored.
    pub fn admit_admin_tokens(&self, check: AdminCheck) {
        let _ = self.admin.set(check);
    }

    /// The principal behind `x-session-api-key`.
    pub async fn session(&self, metadata: &MetadataMap) -> Result<Principal, ErrorDetail> {
        let key = header(metadata, SESSION_KEY_HEADER)
            .ok_or_else(|| unauthenticated("X-Session-API-Key header is required"))?;
        let digest = digest(key);
        if let Some(fingerprint) = self.static_session_keys.get(&digest) {
            return Ok(Principal::StaticKey(fingerprint.clone()));
        }
        match self.issued_keys.sandbox_for_key(&hex::encode(digest)).await {
            Ok(Some(sandbox)) => Ok(Principal::Sandbox(sandbox)),
            Ok(None) => Err(unauthenticated("Invalid session API key")),
            Err(err) => Err(err.into()),
        }
    }

    /// Whether `key` is a runtime API key: its digest is compared with every configured
    /// one in constant time.
    fn is_runtime_api_key(&self, key: &str) -> bool {
        let digest = digest(key);
        self.runtime_api_keys
            .iter()
            .fold(subtle::Choice::from(0), |found, known| {
                found | known.ct_eq(&digest)
            })
            .into()
    }

    /// Requires a runtime API key in `x-api-key`, or, without that header, the admin's
    /// token in `x-sandgate-admin-token` (once admitted).
    pub fn runtime_api_key(&self, metadata: &MetadataMap) -> Result<Operator, ErrorDetail> {
        match header(metadata, API_KEY_HEADER) {
            Some(key) if self.is_runtime_api_key(key) => Ok(Operator::RuntimeKey),
            None if self.admin.get().is_some_and(|check| check(metadata)) => Ok(Operator::Admin),
            _ => Err(unauthenticated("provide a valid API key")),
        }
    }

    /// The reader behind `x-api-key` (preferred when present) or `x-session-api-key`.
    pub async fn reader(&self, metadata: &MetadataMap) -> Result<Reader, ErrorDetail> {
        if header(metadata, API_KEY_HEADER).is_some() {
            return self.runtime_api_key(metadata).map(|_| Reader::RuntimeApi);
        }
        if header(metadata, SESSION_KEY_HEADER).is_none() {
            if self.admin.get().is_some_and(|check| check(metadata)) {
                return Ok(Reader::RuntimeApi);
            }
            return Err(unauthenticated(
                "X-API-Key or X-Session-API-Key header is required",
            ));
        }
        self.session(metadata).await.map(Reader::Session)
    }
}

/// The sha256 hex under which an issued session key is stored.
pub fn session_key_digest(key: &str) -> String {
    hex::encode(digest(key))
}
