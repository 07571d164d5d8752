//! The store's settings: a Redis URL Sandgate can use, and the TLS files beside it.

use super::{Finding, RuntimeApiSettings, Severity};
use sandgate_store::redis_url_problem;

/// `REDIS_URL` is a form the Redis backend connects with, and each TLS file it names can
/// be read and holds PEM; TLS files beside a URL without TLS are pointed out.
pub fn redis(settings: &RuntimeApiSettings) -> Vec<Finding> {
    let mut findings = Vec::new();
    let Some(url) = &settings.redis_url else {
        for (setting, _) in &settings.redis_tls_files {
            findings.push(Finding::new(
                Severity::Warning,
                setting,
                "set, but REDIS_URL is not: the embedded store does not use it",
            ));
        }
        return findings;
    };
    if let Some(problem) = redis_url_problem(url) {
        findings.push(Finding::new(Severity::Fatal, "REDIS_URL", problem));
    }
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    let tls = scheme.starts_with("rediss");
    for (setting, path) in &settings.redis_tls_files {
        match std::fs::read(path) {
            Err(err) => findings.push(Finding::new(
                Severity::Fatal,
                setting,
                format!("cannot read {}: {err}", path.display()),
            )),
            Ok(pem) if !pem.windows(11).any(|window| window == b"-----BEGIN ") => {
                findings.push(Finding::new(
                    Severity::Fatal,
                    setting,
                    format!("{} holds no PEM block", path.display()),
                ));
            }
            Ok(_) if !tls => findings.push(Finding::new(
                Severity::Warning,
                setting,
                "set, but REDIS_URL is not rediss:// (or rediss+sentinel://, rediss+cluster://): the connection does not use TLS",
            )),
            Ok(_) => {}
        }
    }
    findings
}

/// With `check-config --connect`: whether the store can be reached as configured.
pub async fn connect(args: &crate::cli::StoreArgs) -> Option<Finding> {
    args.redis.as_ref().filter(|url| !url.is_empty())?;
    match crate::open_store(args).await {
        Ok(_) => None,
        Err(err) => Some(Finding::new(
            Severity::Fatal,
            "REDIS_URL",
            format!("cannot connect: {err:#}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn with_url(url: &str) -> RuntimeApiSettings {
        RuntimeApiSettings {
            redis_url: Some(url.to_owned()),
            shared_store: true,
            ..RuntimeApiSettings::default()
        }
    }

    fn settings_of(findings: &[Finding]) -> Vec<(&str, Severity)> {
        findings
            .iter()
            .map(|finding| (finding.setting.as_str(), finding.severity))
            .collect()
    }

    #[test]
    fn the_url_forms_sandgate_connects_with_pass() {
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://:secret@redis:6379",
            "rediss://:secret@redis.example.internal:6380/0",
            "redis+unix:///run/redis.sock",
            "redis+sentinel://:secret@s1:26379,s2:26379,s3:26379/mymaster",
            "rediss+sentinel://s1:26380/mymaster/1",
            "redis+cluster://:secret@n1:6379,n2:6379,n3",
            "rediss+cluster://n1:6380/",
        ] {
            assert_eq!(redis(&with_url(url)), [], "{url}");
        }
    }

    #[test]
    fn other_url_forms_are_fatal_and_never_echo_the_password() {
        for url in [
            "redis+sentinel://:hunter2@s1:26379,s2:26379",
            "redis+sentinel://:hunter2@s1:port/mymaster",
            "redis+cluster://:hunter2@n1:6379/0",
            "http://:hunter2@redis:6379",
            "redis-host:6379",
        ] {
            let findings = redis(&with_url(url));
            assert_eq!(
                settings_of(&findings),
                [("REDIS_URL", Severity::Fatal)],
                "{url}"
            );
            assert!(!findings[0].message.contains("hunter2"), "{findings:?}");
        }
    }

    #[test]
    fn tls_files_must_hold_pem_and_go_with_rediss() {
        let mut pem = tempfile::NamedTempFile::new().expect("temp file");
        pem.write_all(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
            .expect("write");
        let mut not_pem = tempfile::NamedTempFile::new().expect("temp file");
        not_pem.write_all(b"not a certificate").expect("write");
        let files = |path: &std::path::Path| vec![("REDIS_CA_CERT", path.to_owned())];

        let tls = RuntimeApiSettings {
            redis_tls_files: files(pem.path()),
            ..with_url("rediss://redis:6380")
        };
        assert_eq!(redis(&tls), []);

        let plain = RuntimeApiSettings {
            redis_tls_files: files(pem.path()),
            ..with_url("redis://redis:6379")
        };
        assert_eq!(
            settings_of(&redis(&plain)),
            [("REDIS_CA_CERT", Severity::Warning)]
        );

        for path in [not_pem.path(), std::path::Path::new("/nonexistent/ca.pem")] {
            let broken = RuntimeApiSettings {
                redis_tls_files: files(path),
                ..with_url("rediss://redis:6380")
            };
            assert_eq!(
                settings_of(&redis(&broken)),
                [("REDIS_CA_CERT", Severity::Fatal)],
                "{}",
                path.display()
            );
        }
    }
}
