//! Secrets: present where the install needs them, and strong (at least 32 bytes, as
//! `sandgate gen-secrets` makes them). A finding names the secret and its length, never
//! its value.

use super::{Finding, ModelGwSettings, RuntimeApiSettings, Severity};

/// The shortest secret accepted: 32 bytes, the size of the HMAC-SHA256 keys, and what
/// spec 2.8 asks of random values.
pub const MIN_SECRET_BYTES: usize = 32;

/// A secret shorter than [`MIN_SECRET_BYTES`]. `severity` says what it breaks: an HMAC key
/// under its size is refused at start (fatal); a guessable password or API key is an
/// error of `check-config` and a warning at start.
fn strength(setting: &str, what: &str, secret: &str, severity: Severity) -> Option<Finding> {
    (secret.len() < MIN_SECRET_BYTES).then(|| {
        Finding::new(
            severity,
            setting,
            format!(
                "{what}is {} bytes; use at least {MIN_SECRET_BYTES} random bytes \
                 (`sandgate gen-secrets` or `openssl rand -hex 32`)",
                secret.len()
            ),
        )
    })
}

/// The runtime API's secrets: present and strong.
pub fn runtime_api_secrets(settings: &RuntimeApiSettings) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Some(key) = &settings.jwt_secret {
        findings.extend(strength("JWT_SECRET", "", key, Severity::Fatal));
    }
    if let Some(key) = &settings.sandbox_key_secret {
        findings.extend(strength("SANDBOX_KEY_SECRET", "", key, Severity::Fatal));
    }
    match &settings.admin_password {
        Some(password) => {
            findings.extend(strength("ADMIN_PASSWORD", "", password, Severity::Error));
        }
        None => findings.push(Finding::new(
            Severity::Warning,
            "ADMIN_PASSWORD",
            "not set: admin login is disabled and every admin endpoint answers 403 \
             (warm runtime configurations cannot be saved)",
        )),
    }
    match &settings.default_api_key {
        Some(key) => findings.extend(strength("DEFAULT_API_KEY", "", key, Severity::Error)),
        None => findings.push(Finding::new(
            Severity::Error,
            "DEFAULT_API_KEY",
            "not set: there is no runtime API key (X-API-Key), so the platform can neither \
             start sandboxes nor read the configurations and conversations",
        )),
    }
    let keys = &settings.webhook_api_keys;
    if keys.is_empty() {
        findings.push(Finding::new(
            Severity::Warning,
            "SANDGATE_WEBHOOK_API_KEYS",
            "not set: only the sandboxes Sandgate starts (with their own session keys) can \
             post conversation updates",
        ));
    }
    for (index, key) in keys.iter().enumerate() {
        let what = format!("key {} of {}: ", index + 1, keys.len());
        findings.extend(strength(
            "SANDGATE_WEBHOOK_API_KEYS",
            &what,
            key,
            Severity::Error,
        ));
    }
    findings
}

/// Keys that sign something are set when the store is shared. Without `JWT_SECRET`, admin
/// tokens are signed with a random key per process, and without `SANDBOX_KEY_SECRET`
/// either, so are sandbox session keys: both stop working after a restart and on every
/// other replica. Replicas need Redis (`REDIS_URL`), so with Redis this is an error; with
/// the embedded store (one process) a warning.
pub fn signing_keys_shared(settings: &RuntimeApiSettings) -> Vec<Finding> {
    if settings.jwt_secret.is_some() {
        return Vec::new();
    }
    let mut lost = Vec::new();
    if settings.admin_password.is_some() {
        lost.push("admin tokens");
    }
    if settings.sandbox_key_secret.is_none() {
        lost.push("sandbox session keys (SANDBOX_KEY_SECRET is not set either)");
    }
    if lost.is_empty() {
        return Vec::new();
    }
    let (severity, scope) = if settings.shared_store {
        (
            Severity::Error,
            "with a shared store (REDIS_URL) the install may run replicas: ",
        )
    } else {
        (Severity::Warning, "")
    };
    vec![Finding::new(
        severity,
        "JWT_SECRET",
        format!(
            "not set: {scope}{} use a random key per process and stop working after a \
             restart and on other replicas; set the same JWT_SECRET everywhere",
            lost.join(" and ")
        ),
    )]
}

/// `PROXY_MASTER_KEY`: without it the model gateway refuses every call (401), an error
/// when a gateway configuration is given, a warning when the gateway is unused.
pub fn proxy_master_key(settings: &ModelGwSettings) -> Vec<Finding> {
    match &settings.proxy_master_key {
        Some(key) => strength("PROXY_MASTER_KEY", "", key, Severity::Error)
            .into_iter()
            .collect(),
        None => {
            let severity = if settings.gateway_config.is_some() {
                Severity::Error
            } else {
                Severity::Warning
            };
            vec![Finding::new(
                severity,
                "PROXY_MASTER_KEY",
                "not set: the model gateway answers every call 401",
            )]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRONG: &str = "0123456789abcdef0123456789abcdef";
    const WEAK: &str = "test-session-key";

    fn strong() -> RuntimeApiSettings {
        RuntimeApiSettings {
            webhook_api_keys: vec![STRONG.to_owned(), STRONG.to_owned()],
            default_api_key: Some(STRONG.to_owned()),
            admin_password: Some(STRONG.to_owned()),
            jwt_secret: Some(STRONG.to_owned()),
            sandbox_key_secret: Some(STRONG.to_owned()),
            shared_store: true,
            ..RuntimeApiSettings::default()
        }
    }

    fn named<'a>(findings: &'a [Finding], setting: &str) -> Vec<&'a Finding> {
        findings.iter().filter(|f| f.setting == setting).collect()
    }

    #[test]
    fn strong_secrets_pass() {
        assert_eq!(runtime_api_secrets(&strong()), []);
        assert_eq!(signing_keys_shared(&strong()), []);
    }

    #[test]
    fn a_weak_secret_gives_its_name_and_length_never_its_value() {
        let weak = RuntimeApiSettings {
            webhook_api_keys: vec![STRONG.to_owned(), WEAK.to_owned()],
            default_api_key: Some(WEAK.to_owned()),
            admin_password: Some(WEAK.to_owned()),
            jwt_secret: Some(WEAK.to_owned()),
            sandbox_key_secret: Some(WEAK.to_owned()),
            ..strong()
        };
        let findings = runtime_api_secrets(&weak);
        for (setting, severity) in [
            ("JWT_SECRET", Severity::Fatal),
            ("SANDBOX_KEY_SECRET", Severity::Fatal),
            ("ADMIN_PASSWORD", Severity::Error),
            ("DEFAULT_API_KEY", Severity::Error),
            ("SANDGATE_WEBHOOK_API_KEYS", Severity::Error),
        ] {
            let found = named(&findings, setting);
            assert_eq!(found.len(), 1, "{setting}: {findings:?}");
            assert_eq!(found[0].severity, severity, "{setting}");
            assert!(
                found[0].message.contains("is 16 bytes"),
                "{}",
                found[0].message
            );
        }
        assert!(
            named(&findings, "SANDGATE_WEBHOOK_API_KEYS")[0]
                .message
                .starts_with("key 2 of 2: ")
        );
        assert!(findings.iter().all(|f| !f.to_string().contains(WEAK)));
    }

    #[test]
    fn missing_secrets_say_what_stops_working() {
        let findings = runtime_api_secrets(&RuntimeApiSettings::default());
        assert_eq!(
            named(&findings, "ADMIN_PASSWORD")[0].severity,
            Severity::Warning
        );
        assert_eq!(
            named(&findings, "DEFAULT_API_KEY")[0].severity,
            Severity::Error
        );
        assert_eq!(
            named(&findings, "SANDGATE_WEBHOOK_API_KEYS")[0].severity,
            Severity::Warning
        );
        assert!(
            named(&findings, "ADMIN_PASSWORD")[0]
                .message
                .contains("403")
        );
    }

    #[test]
    fn a_missing_jwt_secret_is_an_error_with_a_shared_store() {
        let replicas = RuntimeApiSettings {
            jwt_secret: None,
            ..strong()
        };
        let findings = signing_keys_shared(&replicas);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].severity, Severity::Error);
        assert!(
            findings[0]
                .message
                .contains("admin tokens use a random key"),
            "{}",
            findings[0].message
        );

        let one_process = RuntimeApiSettings {
            shared_store: false,
            ..replicas
        };
        assert_eq!(
            signing_keys_shared(&one_process)[0].severity,
            Severity::Warning
        );
    }

    #[test]
    fn without_jwt_secret_or_sandbox_key_secret_session_keys_are_named() {
        let findings = signing_keys_shared(&RuntimeApiSettings {
            shared_store: true,
            ..RuntimeApiSettings::default()
        });
        assert_eq!(findings.len(), 1);
        assert!(findings[0].message.contains("sandbox session keys"));
        assert!(!findings[0].message.contains("admin tokens"));
        let keyed = RuntimeApiSettings {
            sandbox_key_secret: Some(STRONG.to_owned()),
            shared_store: true,
            ..RuntimeApiSettings::default()
        };
        assert_eq!(
            signing_keys_shared(&keyed),
            [],
            "nothing is signed with a random key"
        );
    }

    #[test]
    fn the_proxy_master_key_is_present_and_strong() {
        let strong = ModelGwSettings {
            proxy_master_key: Some(STRONG.to_owned()),
            gateway_config: Some("gateway.yaml".into()),
            ..ModelGwSettings::default()
        };
        assert_eq!(proxy_master_key(&strong), []);
        let weak = ModelGwSettings {
            proxy_master_key: Some("master".to_owned()),
            ..strong.clone()
        };
        assert_eq!(proxy_master_key(&weak)[0].severity, Severity::Error);
        assert!(proxy_master_key(&weak)[0].message.contains("is 6 bytes"));
        let missing = ModelGwSettings {
            proxy_master_key: None,
            ..strong
        };
        assert_eq!(proxy_master_key(&missing)[0].severity, Severity::Error);
        assert_eq!(
            proxy_master_key(&ModelGwSettings::default())[0].severity,
            Severity::Warning,
            "no gateway configured"
        );
    }
}
