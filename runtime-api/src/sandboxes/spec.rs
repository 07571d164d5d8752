//! What makes sandboxes interchangeable (the claim key; `matching.rs` says which kind),
//! what a warm pool's sandboxes run, and the keys they are issued.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::driver::SandboxKeys;
use super::matching::{is_deferred, shape_key};
use crate::admin::configs::Effective;
use sandgate_store::SandboxSpec;

/// Environment keys that differ per deployment of the app server, not per sandbox: a start
/// may claim a warm sandbox whatever they hold (design.md).
pub const PER_DEPLOYMENT_KEYS: &[&str] = &["OH_WEBHOOKS_0_BASE_URL", "OH_ALLOW_CORS_ORIGINS_0"];

/// The claim key of a sandbox of `spec`: for a pool personalised at claim, what shapes
/// its process ([`shape_key`]); else [`exact_key`].
pub fn claim_key(spec: &SandboxSpec) -> String {
    if is_deferred(spec) {
        shape_key(spec)
    } else {
        exact_key(spec)
    }
}

/// A digest of what a start must match exactly to claim a warm sandbox: image, command,
/// working directory and environment, less the per-deployment keys.
pub fn exact_key(spec: &SandboxSpec) -> String {
    let mut digest = Sha256::new();
    let mut field = |bytes: &[u8]| {
        digest.update((bytes.len() as u64).to_be_bytes());
        digest.update(bytes);
    };
    field(spec.image.as_bytes());
    field(spec.working_dir.as_bytes());
    field(&(spec.command.len() as u64).to_be_bytes());
    for part in &spec.command {
        field(part.as_bytes());
    }
    for (key, value) in &spec.environment {
        if !PER_DEPLOYMENT_KEYS.contains(&key.as_str()) {
            field(key.as_bytes());
            field(value.as_bytes());
        }
    }
    hex::encode(&digest.finalize()[..16])
}

/// What a warm sandbox of `config`'s pool runs.
pub fn pool_spec(config: &Effective) -> SandboxSpec {
    let config_body = &config.config;
    SandboxSpec {
        image: config_body.image.clone(),
        command: config_body.command.clone(),
        working_dir: config_body.working_dir.clone(),
        environment: config_body.environment.clone(),
        run_as_user: config_body.run_as_user,
        run_as_group: config_body.run_as_group,
        fs_group: config_body.fs_group,
        fuse_s3_mount: config_body.fuse_s3_mount,
        resource_factor: None,
    }
}

/// Session keys: derived from a secret and the sandbox's current nonce, so the service
/// can hand a warm sandbox's key to whoever claims it while storing only its sha256.
/// A resume draws a new nonce: the old key stops working.
///
/// Secret keys (`OH_SECRET_KEY`, what the agent-server encrypts the secrets it saves
/// with): derived from the same secret and the sandbox's id alone, so a sandbox has one
/// for its whole life, across pauses and resumes, that no store holds and every replica
/// computes alike. Derived rather than stored because a stored key would be a secret in
/// the sandbox's record; the price is that rotating `SANDBOX_KEY_SECRET` changes it, and
/// what paused sandboxes saved under the old one cannot be read back.
pub struct SessionKeys {
    secret: Vec<u8>,
}

impl SessionKeys {
    pub fn new(secret: &[u8]) -> Self {
        Self {
            secret: secret.to_vec(),
        }
    }

    /// The key of `runtime_id` under `nonce`.
    pub fn key(&self, runtime_id: &str, nonce: &str) -> String {
        // A key of any length is valid for HMAC.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.secret) else {
            return String::new();
        };
        mac.update(b"sandgate session key\0");
        mac.update(runtime_id.as_bytes());
        mac.update(b"\0");
        mac.update(nonce.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The secret key of `runtime_id`: the same for as long as the sandbox exists.
    pub fn secret_key(&self, runtime_id: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.secret) else {
            return String::new();
        };
        // Another label than the session key's: neither key tells anything of the other.
        mac.update(b"sandgate secret key\0");
        mac.update(runtime_id.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Both keys of `runtime_id`, its session key under `nonce`.
    pub fn keys(&self, runtime_id: &str, nonce: &str) -> SandboxKeys {
        SandboxKeys {
            session: self.key(runtime_id, nonce),
            secret: self.secret_key(runtime_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec {
            image: "ghcr.io/acme/agent:1".into(),
            command: vec!["/usr/bin/agent".into(), "--port".into(), "8000".into()],
            working_dir: "/workspace".into(),
            environment: [
                ("LOG_LEVEL".to_owned(), "info".to_owned()),
                (
                    "OH_WEBHOOKS_0_BASE_URL".to_owned(),
                    "https://app-a".to_owned(),
                ),
            ]
            .into(),
            ..SandboxSpec::default()
        }
    }

    #[test]
    fn per_deployment_keys_do_not_change_the_claim_key() {
        let base = claim_key(&spec());
        let mut other = spec();
        other
            .environment
            .insert("OH_WEBHOOKS_0_BASE_URL".into(), "https://app-b".into());
        other
            .environment
            .insert("OH_ALLOW_CORS_ORIGINS_0".into(), "https://b".into());
        assert_eq!(claim_key(&other), base);
        other.environment.remove("OH_WEBHOOKS_0_BASE_URL");
        assert_eq!(claim_key(&other), base);
    }

    #[test]
    fn every_other_difference_changes_the_claim_key() {
        let base = claim_key(&spec());
        let changes: [fn(&mut SandboxSpec); 5] = [
            |spec| spec.image.push('2'),
            |spec| spec.working_dir.push('x'),
            |spec| spec.command.push("--debug".into()),
            |spec| {
                spec.environment.insert("LOG_LEVEL".into(), "debug".into());
            },
            |spec| {
                spec.environment.insert("EXTRA".into(), String::new());
            },
        ];
        for change in changes {
            let mut other = spec();
            change(&mut other);
            assert_ne!(claim_key(&other), base, "{other:?}");
        }
        // Parts are length-prefixed: moving a boundary is a difference.
        let mut split = spec();
        split.command = vec!["/usr/bin/agent--port".into(), "8000".into()];
        assert_ne!(claim_key(&split), base);
    }

    #[test]
    fn session_keys_depend_on_secret_sandbox_and_nonce() {
        let keys = SessionKeys::new(b"secret");
        let key = keys.key("abc", "n1");
        assert_eq!(key.len(), 64);
        assert_eq!(keys.key("abc", "n1"), key);
        assert_ne!(keys.key("abc", "n2"), key);
        assert_ne!(keys.key("abd", "n1"), key);
        assert_ne!(SessionKeys::new(b"other").key("abc", "n1"), key);
    }

    #[test]
    fn a_secret_key_is_the_sandbox_s_whatever_its_session_key() {
        let keys = SessionKeys::new(b"secret");
        let first = keys.keys("abc", "n1");
        let resumed = keys.keys("abc", "n2");
        assert_eq!(first.secret.len(), 64);
        assert_eq!(first.secret, resumed.secret, "a resume keeps it");
        assert_ne!(first.session, resumed.session);
        assert_ne!(first.secret, first.session);
        assert_ne!(keys.secret_key("abd"), first.secret);
        assert_ne!(SessionKeys::new(b"other").secret_key("abc"), first.secret);
    }
}
