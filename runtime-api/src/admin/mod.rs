//! The RuntimeAdmin service: admin login, API keys and warm runtime configurations
//! (spec 2.1–2.3, 4.1, 5, 7).

pub mod audit;
mod config_writes;
pub mod configs;
pub mod installer;
mod ledger;
pub mod login;
pub mod rate_limit;
pub mod source;
mod wire;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use prost::Message;
use sandgate_proto::admin::v1::runtime_admin_server::RuntimeAdmin;
use sandgate_proto::admin::v1::{
    self as pb, DeleteWarmRuntimeConfigRequest, DeleteWarmRuntimeConfigResponse,
    GetChallengeRequest, GetChallengeResponse, ListApiKeysRequest, ListApiKeysResponse,
    ListWarmRuntimeConfigsRequest, ListWarmRuntimeConfigsResponse, LoginRequest, LoginResponse,
    PutWarmRuntimeConfigRequest, PutWarmRuntimeConfigResponse,
};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sha2::{Digest, Sha256};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::ambient::{Clock, SystemClock, random_hex};
use crate::auth::Authenticator;
use login::{CHALLENGE_LIFETIME, PasswordCheck, TokenError, Tokens};
use rate_limit::{AccountGate, Attempt, LoginRate};
use sandgate_store::{Store, StoredChallenge};
use source::{Generation, WarmConfigSource};
use wire::entry;

/// Challenges and hashes longer than this are refused unread.
const MAX_CREDENTIAL_LEN: usize = 256;

/// How runtime management is configured. Not `Debug`: it holds the admin password and
/// the token key, which must never reach a log.
#[derive(Clone)]
pub struct AdminConfig {
    /// `ADMIN_PASSWORD`; absent, every admin call answers 403.
    pub admin_password: Option<String>,
    /// `JWT_SECRET`, the HMAC key of admin tokens; absent, a random one per process.
    pub jwt_secret: Option<Vec<u8>>,
    /// `DEFAULT_API_KEY`: the API key named `default`.
    pub default_api_key: Option<String>,
    /// `MAX_RUNTIMES`, shown on that key's entry.
    pub max_runtimes: Option<usize>,
    /// `WARM_RUNTIMES_FILE`: the installer's configurations.
    pub warm_runtimes_file: Option<PathBuf>,
    /// `WARM_RUNTIME_CONFIG_OVERLAY`: merge saved configurations over the installer's
    /// instead of taking over from them.
    pub overlay: bool,
    /// `PBKDF2_ITERATIONS` asked of login hashes.
    pub pbkdf2_iterations: u32,
    /// `ADMIN_LOGIN_RATE`: challenges and login attempts per client and window; `None`,
    /// unlimited.
    pub login_rate: Option<LoginRate>,
    /// `ADMIN_LOGIN_ACCOUNT_RATE`: judged logins of the account per window, whatever
    /// their source; `None`, unlimited.
    pub account_login_rate: Option<LoginRate>,
    /// `WARM_POOL_MAX_SIZE` and `WARM_POOLS_MAX_TOTAL`.
    pub warm_limits: configs::WarmLimits,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            admin_password: None,
            jwt_secret: None,
            default_api_key: None,
            max_runtimes: None,
            warm_runtimes_file: None,
            overlay: false,
            pbkdf2_iterations: login::DEFAULT_PBKDF2_ITERATIONS,
            login_rate: Some(rate_limit::DEFAULT_LOGIN_RATE),
            account_login_rate: Some(LoginRate {
                attempts: rate_limit::DEFAULT_ACCOUNT_LOGIN_ATTEMPTS,
                window: rate_limit::DEFAULT_LOGIN_RATE.window,
            }),
            warm_limits: configs::WarmLimits::default(),
        }
    }
}

/// What is needed once an admin password is configured.
struct Admin {
    password: PasswordCheck,
    tokens: Arc<Tokens>,
}

/// The last list answered, kept until the saved configurations or the file change.
struct Cached {
    generation: Generation,
    /// A digest of the list's encoding: the same contents give the same tag on every
    /// replica, so a caller's cached copy stays valid whichever one it asks.
    etag: String,
    configs: Vec<pb::WarmRuntimeConfigEntry>,
}

pub struct RuntimeAdminService {
    store: Store,
    auth: Arc<Authenticator>,
    admin: Option<Admin>,
    default_api_key: Option<String>,
    /// `MAX_RUNTIMES`, shown on the default key's entry.
    max_runtimes: Option<usize>,
    iterations: u32,
    login_rate: Option<LoginRate>,
    account_login_rate: Option<LoginRate>,
    configs: Arc<WarmConfigSource>,
    clock: Arc<dyn Clock>,
    cached: Mutex<Option<Arc<Cached>>>,
    /// What the sandbox time a ledger read adds so far costs.
    sandbox_prices: crate::sandboxes::SandboxPrices,
}

/// The token of `authorization: Bearer <token>`.
fn bearer(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(sandgate_proto::bearer_token)
}

fn forbidden() -> Status {
    ErrorDetail::new(ErrorCode::Forbidden, "Admin functionality is disabled").into()
}

fn unauthenticated(detail: &str) -> Status {
    ErrorDetail::new(ErrorCode::Unauthenticated, detail).into()
}

fn store_failed(err: sandgate_store::StoreError) -> Status {
    ErrorDetail::from(err).into()
}

impl RuntimeAdminService {
    pub fn new(
        store: Store,
        auth: Arc<Authenticator>,
        config: AdminConfig,
        configs: Arc<WarmConfigSource>,
    ) -> Self {
        Self::with_clock(store, auth, config, configs, Arc::new(SystemClock))
    }

    pub fn with_clock(
        store: Store,
        auth: Arc<Authenticator>,
        config: AdminConfig,
        configs: Arc<WarmConfigSource>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let admin = config.admin_password.as_deref().map(|password| {
            let secret = config.jwt_secret.clone().unwrap_or_else(|| {
                tracing::warn!(
                    "JWT_SECRET is not set: admin tokens are signed with a random key, valid only in this process until it restarts"
                );
                rand::random::<[u8; 32]>().to_vec()
            });
            Admin {
                password: PasswordCheck::new(password),
                tokens: Arc::new(Tokens::new(&secret)),
            }
        });
        if let Some(admin) = &admin {
            let (tokens, clock) = (admin.tokens.clone(), clock.clone());
            auth.admit_admin_tokens(Arc::new(move |metadata| {
                metadata
                    .get(crate::auth::ADMIN_TOKEN_HEADER)
                    .and_then(|value| value.to_str().ok())
                    .is_some_and(|token| tokens.verify(token, clock.now_ms()).is_ok())
            }));
        }
        Self {
            store,
            auth,
            admin,
            default_api_key: config.default_api_key.filter(|key| !key.is_empty()),
            max_runtimes: config.max_runtimes,
            iterations: config.pbkdf2_iterations,
            login_rate: config.login_rate,
            account_login_rate: config.account_login_rate,
            configs,
            clock,
            cached: Mutex::new(None),
            sandbox_prices: Default::default(),
        }
    }

    /// The prices of a sandbox's hour, for the cost of the time a ledger read adds.
    #[must_use]
    pub fn with_sandbox_prices(mut self, prices: crate::sandboxes::SandboxPrices) -> Self {
        self.sandbox_prices = prices;
        self
    }

    fn admin(&self) -> Result<&Admin, Status> {
        self.admin.as_ref().ok_or_else(forbidden)
    }

    /// Counts an attempt of the calling client, refused past the login rate.
    async fn limit<T>(&self, attempt: Attempt, request: &Request<T>) -> Result<(), Status> {
        match self.login_rate {
            Some(rate) => rate_limit::check(&self.store, rate, attempt, request).await,
            None => Ok(()),
        }
    }

    /// The admin behind `authorization: Bearer <JWT>`. Public for the routes served beside
    /// the gRPC services (the support bundle), which take the same admin token.
    pub fn authorize(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let admin = self.admin()?;
        let token = bearer(metadata)
            .ok_or_else(|| unauthenticated("Authorization: Bearer <admin token> is required"))?;
        admin
            .tokens
            .verify(token, self.clock.now_ms())
            .map_err(|err| match err {
                TokenError::Expired => unauthenticated("The admin token has expired; log in again"),
                TokenError::Invalid => unauthenticated("Invalid admin token"),
            })
    }

    /// The effective configurations, answered from the last list while neither the saved
    /// configurations nor the installer's file changed.
    async fn effective(&self) -> Result<Arc<Cached>, Status> {
        let generation = self.configs.generation().await.map_err(store_failed)?;
        if let Ok(cached) = self.cached.lock()
            && let Some(cached) = cached.as_ref()
            && cached.generation == generation
        {
            return Ok(cached.clone());
        }
        let (effective, generation) = self.configs.effective().await.map_err(store_failed)?;
        let configs: Vec<_> = effective.iter().map(entry).collect();
        let encoded = ListWarmRuntimeConfigsResponse {
            configs: configs.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        let fresh = Arc::new(Cached {
            generation,
            etag: hex::encode(&Sha256::digest(&encoded)[..16]),
            configs,
        });
        if let Ok(mut cached) = self.cached.lock() {
            *cached = Some(fresh.clone());
        }
        Ok(fresh)
    }
}

#[tonic::async_trait]
impl RuntimeAdmin for RuntimeAdminService {
    async fn get_challenge(
        &self,
        request: Request<GetChallengeRequest>,
    ) -> Result<Response<GetChallengeResponse>, Status> {
        self.admin()?;
        self.limit(Attempt::Challenge, &request).await?;
        let challenge = random_hex(32);
        let salt = random_hex(16);
        let record = StoredChallenge {
            salt: salt.clone(),
            iterations: self.iterations,
            expires_at_ms: self.clock.now_ms() + CHALLENGE_LIFETIME.as_millis() as i64,
        };
        self.store
            .challenges
            .put_challenge(&challenge, &record, CHALLENGE_LIFETIME)
            .await
            .map_err(store_failed)?;
        Ok(Response::new(GetChallengeResponse {
            challenge,
            salt,
            iterations: self.iterations,
        }))
    }

    async fn login(
        &self,
        request: Request<LoginRequest>,
    ) -> Result<Response<LoginResponse>, Status> {
        let admin = self.admin()?;
        self.limit(Attempt::Login, &request).await?;
        let client = rate_limit::client_of(&request);
        let LoginRequest { challenge, hash } = request.into_inner();
        let invalid_challenge = || unauthenticated("Invalid or expired challenge");
        if challenge.is_empty() || challenge.len() > MAX_CREDENTIAL_LEN {
            return Err(invalid_challenge());
        }
        // Taken before the hash is checked: whatever the outcome, the challenge is spent.
        let record = self
            .store
            .challenges
            .take_challenge(&challenge)
            .await
            .map_err(store_failed)?
            .filter(|record| record.expires_at_ms > self.clock.now_ms())
            .ok_or_else(invalid_challenge)?;
        if hash.len() > MAX_CREDENTIAL_LEN {
            return Err(unauthenticated("Invalid admin password"));
        }
        // Counted before the hash is checked, so that concurrent attempts cannot all pass
        // a check made before any of them was counted.
        let gate = AccountGate::enter(&self.store, self.account_login_rate, &client).await?;
        let right = admin
            .password
            .verify(&record.salt, &challenge, record.iterations, &hash)
            .await;
        gate.judged(right).await?;
        if !right {
            tracing::warn!("admin login refused: wrong password hash");
            return Err(unauthenticated("Invalid admin password"));
        }
        let token = admin.tokens.issue(self.clock.now_ms()).map_err(|err| {
            tracing::error!(error = %err, "cannot sign an admin token");
            Status::from(ErrorDetail::new(
                ErrorCode::Internal,
                "Cannot sign the admin token",
            ))
        })?;
        tracing::info!("admin logged in");
        Ok(Response::new(LoginResponse { token }))
    }

    async fn list_api_keys(
        &self,
        request: Request<ListApiKeysRequest>,
    ) -> Result<Response<ListApiKeysResponse>, Status> {
        self.authorize(request.metadata())?;
        let keys = self
            .default_api_key
            .iter()
            .map(|key| pb::ApiKey {
                id: 1,
                name: "default".into(),
                key_value: key.clone(),
                max_runtimes: self
                    .max_runtimes
                    .map(|max| i64::try_from(max).unwrap_or(i64::MAX)),
                remaining_credits: None,
            })
            .collect();
        Ok(Response::new(ListApiKeysResponse { keys }))
    }

    async fn list_warm_runtime_configs(
        &self,
        request: Request<ListWarmRuntimeConfigsRequest>,
    ) -> Result<Response<ListWarmRuntimeConfigsResponse>, Status> {
        self.auth.runtime_api_key(request.metadata())?;
        let current = self.effective().await?;
        let not_modified = request.get_ref().if_none_match == current.etag;
        Ok(Response::new(ListWarmRuntimeConfigsResponse {
            configs: if not_modified {
                Vec::new()
            } else {
                current.configs.clone()
            },
            etag: current.etag.clone(),
            not_modified,
        }))
    }

    async fn put_warm_runtime_config(
        &self,
        request: Request<PutWarmRuntimeConfigRequest>,
    ) -> Result<Response<PutWarmRuntimeConfigResponse>, Status> {
        self.put_config(request).await
    }

    async fn delete_warm_runtime_config(
        &self,
        request: Request<DeleteWarmRuntimeConfigRequest>,
    ) -> Result<Response<DeleteWarmRuntimeConfigResponse>, Status> {
        self.delete_config(request).await
    }

    async fn list_audit_entries(
        &self,
        request: Request<pb::ListAuditEntriesRequest>,
    ) -> Result<Response<pb::ListAuditEntriesResponse>, Status> {
        self.list_audit(request).await
    }

    async fn get_conversation_ledger(
        &self,
        request: Request<pb::GetConversationLedgerRequest>,
    ) -> Result<Response<pb::GetConversationLedgerResponse>, Status> {
        self.conversation_ledger(request).await
    }

    async fn ledger_rollup(
        &self,
        request: Request<pb::LedgerRollupRequest>,
    ) -> Result<Response<pb::LedgerRollupResponse>, Status> {
        RuntimeAdminService::ledger_rollup(self, request).await
    }
}
