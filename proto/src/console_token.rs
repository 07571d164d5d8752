//! The console's gateway credential: an operator who signs in to the console with the
//! master key holds, in its cookie, a token that expires instead of the key itself. The
//! edge mints it from the key the operator typed; the model gateway, which knows the
//! master key, verifies it and takes it for the master key until it expires. Both sides
//! keep this one format.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

const PREFIX: &str = "sgcon1.";
/// What the signature covers, before the expiry: a console token cannot pass for any
/// other HMAC of the same key.
const PURPOSE: &[u8] = b"sandgate console session|";
/// The longest life a token may claim, whatever its expiry says.
pub const MAX_LIFETIME_SECS: i64 = 12 * 3600;

fn mac(master_key_digest: &[u8; 32], expires: i64) -> Hmac<Sha256> {
    // A 32-byte key: never refused.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(master_key_digest)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(PURPOSE);
    mac.update(expires.to_string().as_bytes());
    mac
}

/// The token standing for `master_key` until `expires` (seconds since the epoch).
pub fn mint(master_key: &str, expires: i64) -> String {
    let digest: [u8; 32] = Sha256::digest(master_key.as_bytes()).into();
    let signature = mac(&digest, expires).finalize().into_bytes();
    format!("{PREFIX}{expires}.{}", hex(&signature))
}

/// Whether `text` has a console token's form (not whether it is valid).
pub fn is_token(text: &str) -> bool {
    text.starts_with(PREFIX)
}

/// Whether `token` was minted from the master key whose sha256 is `master_key_digest`
/// and is still valid at `now` (seconds): the signature is compared in constant time.
pub fn verify(token: &str, master_key_digest: &[u8; 32], now: i64) -> bool {
    let Some((expires, signature)) = token
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('.'))
    else {
        return false;
    };
    let Ok(expires) = expires.parse::<i64>() else {
        return false;
    };
    if expires <= now || expires > now.saturating_add(MAX_LIFETIME_SECS) {
        return false;
    }
    let Some(signature) = unhex(signature) else {
        return false;
    };
    mac(master_key_digest, expires)
        .verify_slice(&signature)
        .is_ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(key: &str) -> [u8; 32] {
        Sha256::digest(key.as_bytes()).into()
    }

    #[test]
    fn a_token_stands_for_its_key_until_it_expires() {
        let token = mint("sk-master", 1_000 + 3600);
        assert!(verify(&token, &digest("sk-master"), 1_000));
        assert!(!verify(&token, &digest("sk-master"), 1_000 + 3600));
        assert!(!verify(&token, &digest("sk-another"), 1_000));
        // No token lives past the longest lifetime, whatever it claims.
        let far = mint("sk-master", 1_000 + MAX_LIFETIME_SECS + 1);
        assert!(!verify(&far, &digest("sk-master"), 1_000));
    }

    #[test]
    fn a_changed_token_is_refused() {
        let token = mint("sk-master", 5_000);
        let later = token.replace(".5000.", ".5001.");
        assert!(!verify(&later, &digest("sk-master"), 1_000));
        for bad in ["", "sgcon1.", "sgcon1.5000", "sgcon1.x.00", "sk-master"] {
            assert!(!verify(bad, &digest("sk-master"), 1_000), "{bad}");
        }
        let mut flipped = token.clone();
        flipped.pop();
        flipped.push(if token.ends_with('0') { '1' } else { '0' });
        assert!(!verify(&flipped, &digest("sk-master"), 1_000));
    }
}
