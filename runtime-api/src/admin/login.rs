//! Admin login: a PBKDF2 challenge-response over the admin password, answered with a JWT.
//!
//! The client derives `hex(PBKDF2-HMAC-SHA256(password, salt + challenge, iterations, 32))`
//! (salt and challenge concatenated as strings); the server derives the same from the
//! password it was configured with and compares in constant time. A challenge is taken
//! from the store atomically before the hash is checked, so each one allows one attempt.

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// Current guidance for PBKDF2-HMAC-SHA256 (OWASP Password Storage Cheat Sheet, 2023).
pub const DEFAULT_PBKDF2_ITERATIONS: u32 = 600_000;
/// How long a challenge may be answered.
pub const CHALLENGE_LIFETIME: Duration = Duration::from_secs(300);
/// How long an admin token is valid.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// The audience and issuer of admin tokens: a token minted for anything else is refused.
const AUDIENCE: &str = "sandgate-runtime-admin";
const ISSUER: &str = "sandgate";
/// Clock skew tolerated between replicas when checking `iat`.
const LEEWAY_SECONDS: i64 = 60;
/// Derived key length, in bytes.
const HASH_BYTES: usize = 32;

/// `hex(PBKDF2-HMAC-SHA256(password, salt + challenge, iterations, 32))`, the hash a
/// client sends to log in.
pub fn login_hash(password: &str, salt: &str, challenge: &str, iterations: u32) -> String {
    hex::encode(derive(password, salt, challenge, iterations))
}

fn derive(password: &str, salt: &str, challenge: &str, iterations: u32) -> [u8; HASH_BYTES] {
    let mut salted = String::with_capacity(salt.len() + challenge.len());
    salted.push_str(salt);
    salted.push_str(challenge);
    pbkdf2::pbkdf2_hmac_array::<Sha256, HASH_BYTES>(
        password.as_bytes(),
        salted.as_bytes(),
        iterations,
    )
}

/// Checks login hashes against the admin password. PBKDF2 runs on the blocking pool, at
/// most one per core at a time, so a burst of logins cannot starve the other requests.
pub struct PasswordCheck {
    password: Arc<str>,
    permits: Arc<Semaphore>,
}

impl PasswordCheck {
    pub fn new(password: &str) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            password: password.into(),
            permits: Arc::new(Semaphore::new(cores)),
        }
    }

    /// Whether `hash` (hex) is the login hash of the password for this salt and challenge.
    pub async fn verify(&self, salt: &str, challenge: &str, iterations: u32, hash: &str) -> bool {
        let Ok(given) = hex::decode(hash) else {
            return false;
        };
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        let (password, salt, challenge) =
            (self.password.clone(), salt.to_owned(), challenge.to_owned());
        let Ok(expected) =
            tokio::task::spawn_blocking(move || derive(&password, &salt, &challenge, iterations))
                .await
        else {
            return false;
        };
        // Lengths are public; the bytes are compared in constant time.
        given.len() == HASH_BYTES && bool::from(expected.ct_eq(given.as_slice()))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    aud: String,
    iss: String,
    iat: i64,
    exp: i64,
    /// Not before: Sandgate issues none, but a token that carries one is held to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<i64>,
}

/// Why a token was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the admin token has expired")]
    Expired,
    #[error("the admin token is invalid")]
    Invalid,
}

/// Admin tokens: HS256 JWTs signed with `JWT_SECRET`. The algorithm is pinned, so a token
/// claiming `none` or another algorithm is refused; `aud`, `iss`, `iat` and `exp` are
/// required, and `exp`, `iat` and `nbf` (when present) are checked against the service's
/// clock.
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl Tokens {
    pub fn new(secret: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[AUDIENCE]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iat", "aud", "iss", "sub"]);
        // Time is checked below against the injectable clock.
        validation.validate_exp = false;
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
        }
    }

    /// A token valid from `now_ms` for [`TOKEN_LIFETIME`].
    pub fn issue(&self, now_ms: i64) -> Result<String, jsonwebtoken::errors::Error> {
        let iat = now_ms / 1000;
        let claims = Claims {
            sub: "admin".into(),
            aud: AUDIENCE.into(),
            iss: ISSUER.into(),
            iat,
            exp: iat + TOKEN_LIFETIME.as_secs() as i64,
            nbf: None,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
    }

    pub fn verify(&self, token: &str, now_ms: i64) -> Result<(), TokenError> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|_| TokenError::Invalid)?
            .claims;
        let now = now_ms / 1000;
        if claims.iat > now + LEEWAY_SECONDS
            || claims.nbf.is_some_and(|nbf| nbf > now + LEEWAY_SECONDS)
            || claims.sub != "admin"
        {
            return Err(TokenError::Invalid);
        }
        if claims.exp <= now {
            return Err(TokenError::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_hash_matches_the_reference_vectors() {
        assert_eq!(
            login_hash("s3cret", "abc123", "deadbeef", 10_000),
            "bf4fc232251203db24257fccf358a22e7f52adff3f223cbbe3fe3d09ddda4411"
        );
        assert_eq!(
            login_hash("pw", "salt", "chal", 10_000),
            "8d2a7ad00cdaf383f13a8e2759bacf138ab875abbf0ea35e5897cc6c97d35b4b"
        );
    }

    #[tokio::test]
    async fn verify_accepts_the_hash_and_nothing_else() {
        let check = PasswordCheck::new("s3cret");
        let good = "bf4fc232251203db24257fccf358a22e7f52adff3f223cbbe3fe3d09ddda4411";
        assert!(check.verify("abc123", "deadbeef", 10_000, good).await);
        assert!(
            check
                .verify("abc123", "deadbeef", 10_000, &good.to_uppercase())
                .await,
            "hex is case-insensitive"
        );
        assert!(!check.verify("abc123", "deadbeee", 10_000, good).await);
        assert!(!check.verify("abc123", "deadbeef", 10_001, good).await);
        assert!(
            !check
                .verify("abc123", "deadbeef", 10_000, &good[..62])
                .await
        );
        assert!(!check.verify("abc123", "deadbeef", 10_000, "not hex").await);
        assert!(!check.verify("abc123", "deadbeef", 10_000, "").await);
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW_MS: i64 = 1_800_000_000_000;

    #[test]
    fn a_token_is_valid_for_24_hours() {
        let tokens = Tokens::new(SECRET);
        let token = tokens.issue(NOW_MS).expect("issue");
        assert_eq!(tokens.verify(&token, NOW_MS), Ok(()));
        let day_ms = TOKEN_LIFETIME.as_millis() as i64;
        assert_eq!(tokens.verify(&token, NOW_MS + day_ms - 1000), Ok(()));
        assert_eq!(
            tokens.verify(&token, NOW_MS + day_ms),
            Err(TokenError::Expired)
        );
    }

    #[test]
    fn a_token_is_not_valid_before_its_nbf() {
        let tokens = Tokens::new(SECRET);
        let now = NOW_MS / 1000;
        let signed = |nbf: i64| {
            let claims = Claims {
                sub: "admin".into(),
                aud: AUDIENCE.into(),
                iss: ISSUER.into(),
                iat: now,
                exp: now + 3600,
                nbf: Some(nbf),
            };
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &tokens.encoding)
                .expect("sign")
        };
        assert_eq!(
            tokens.verify(&signed(now + 600), NOW_MS),
            Err(TokenError::Invalid)
        );
        assert_eq!(tokens.verify(&signed(now), NOW_MS), Ok(()));
    }

    #[test]
    fn tampered_foreign_and_unsigned_tokens_are_refused() {
        let tokens = Tokens::new(SECRET);
        let token = tokens.issue(NOW_MS).expect("issue");
        let (signed, signature) = token.rsplit_once('.').expect("three parts");

        // Another secret.
        let foreign = Tokens::new(b"another secret, also 32 bytes long")
            .issue(NOW_MS)
            .expect("issue");
        assert_eq!(tokens.verify(&foreign, NOW_MS), Err(TokenError::Invalid));

        // A payload changed after signing (a later expiry).
        let (header, _) = signed.split_once('.').expect("header");
        let forged = base64_url(&format!(
            r#"{{"sub":"admin","aud":"{AUDIENCE}","iss":"{ISSUER}","iat":0,"exp":99999999999}}"#
        ));
        let tampered = format!("{header}.{forged}.{signature}");
        assert_eq!(tokens.verify(&tampered, NOW_MS), Err(TokenError::Invalid));

        // `alg: none`, unsigned.
        let none = format!(
            "{}.{}.",
            base64_url(r#"{"alg":"none","typ":"JWT"}"#),
            signed.split_once('.').expect("payload").1
        );
        assert_eq!(tokens.verify(&none, NOW_MS), Err(TokenError::Invalid));

        // A token for another audience, signed with the right secret.
        let other_audience = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &Claims {
                sub: "admin".into(),
                aud: "someone-else".into(),
                iss: ISSUER.into(),
                iat: NOW_MS / 1000,
                exp: NOW_MS / 1000 + 60,
                nbf: None,
            },
            &EncodingKey::from_secret(SECRET),
        )
        .expect("encode");
        assert_eq!(
            tokens.verify(&other_audience, NOW_MS),
            Err(TokenError::Invalid)
        );
        assert_eq!(tokens.verify("", NOW_MS), Err(TokenError::Invalid));
        assert_eq!(tokens.verify("a.b.c", NOW_MS), Err(TokenError::Invalid));
    }

    fn base64_url(text: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }
}
