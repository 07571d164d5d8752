//! The support bundle: a `tar.gz` of what someone else needs to help with an install that
//! misbehaves (a pool that never fills, a conversation that never answers), built by the
//! running server, where the settings, the store, the pools, the metrics and the recent
//! log lines are. The admin downloads it (`GET /api/admin/support-bundle`, `http.rs`);
//! `sandgate support-bundle` is the client that saves it (`client.rs`).
//!
//! Nothing secret leaves (`redaction.rs`), nor a value a client or a file chose
//! (`values.rs`: URLs' query values and userinfo, quoted values), and it is bounded: each file is cut at
//! [`MAX_FILE_BYTES`], lists at [`MAX_RECORDS`] entries, so the archive stays a few MiB
//! whatever the install holds.

pub mod client;
pub mod http;
pub mod redaction;
mod sections;
mod values;

use std::sync::Arc;

use flate2::Compression;
use flate2::write::GzEncoder;
use metrics_exporter_prometheus::PrometheusHandle;
use sandgate_model_gw::ConfigFile;
use sandgate_runtime_api::admin::source::WarmConfigSource;
use sandgate_store::Store;
use serde_json::{Value, json};

use crate::check_config::Settings;
use redaction::Secrets;

/// The most bytes one file of the archive holds; past it, it is cut and says so.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// The most entries a list (sandboxes, upstream errors) holds: the newest.
pub const MAX_RECORDS: usize = 500;
/// Spend log entries looked through for upstream errors.
pub const SPEND_LOG_SCANNED: usize = 5000;
/// The directory every file of the archive is in.
const ROOT: &str = "sandgate-support-bundle";

/// What the bundle is built from: whatever this process runs. `serve` has all of it; the
/// runtime API alone has no gateway configuration.
pub struct Sources {
    /// Which subcommand runs (`serve`, `runtime-api`).
    pub service: &'static str,
    /// The settings the process started with (secrets included: they are what is
    /// redacted).
    pub settings: Settings,
    pub store: Option<Store>,
    pub data_dir: Option<String>,
    pub warm_configs: Option<WarmConfigSource>,
    pub gateway: Option<Arc<ConfigFile>>,
    pub metrics: Option<PrometheusHandle>,
}

impl Sources {
    /// Every secret this process knows, to take out of every file.
    async fn secrets(&self) -> Secrets {
        let mut secrets = Secrets::default();
        if let Some(rt) = &self.settings.runtime_api {
            secrets.add_all(rt.webhook_api_keys.iter().map(String::as_str));
            for value in [
                &rt.default_api_key,
                &rt.admin_password,
                &rt.jwt_secret,
                &rt.sandbox_key_secret,
            ]
            .into_iter()
            .flatten()
            {
                secrets.add(value);
            }
            if let Some(url) = &rt.redis_url {
                secrets.add_url(url);
            }
        }
        if let Some(key) = self
            .settings
            .model_gw
            .as_ref()
            .and_then(|gw| gw.proxy_master_key.as_ref())
        {
            secrets.add(key);
        }
        secrets.add_credential_environment(
            std::env::vars()
                .collect::<Vec<_>>()
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        );
        if let Ok(url) = std::env::var("REDIS_URL") {
            secrets.add_url(&url);
        }
        if let Some(config) = &self.gateway {
            let current = config.current();
            for entry in &current.models {
                secrets.add(&entry.api_key);
                secrets.add_url(&entry.api_base);
            }
            if let Some(store) = &self.store
                && let Ok(added) = store.models.added_models(&current.scope).await
            {
                for model in &added {
                    secrets.add(&model.api_key);
                    secrets.add_url(&model.api_base);
                }
            }
        }
        secrets
    }
}

/// One file of the archive: its name under [`ROOT`] and its text.
struct File {
    name: &'static str,
    text: String,
}

/// A JSON file, redacted, then cut to size.
fn json_file(name: &'static str, secrets: &Secrets, value: Value) -> File {
    let text = serde_json::to_string_pretty(&secrets.json(value)).unwrap_or_default();
    File {
        name,
        text: bounded(secrets.scrub(&text)),
    }
}

/// A text file, scrubbed, then cut to size.
fn text_file(name: &'static str, secrets: &Secrets, lines: Vec<String>) -> File {
    let mut text = secrets.lines(lines).join("\n");
    text.push('\n');
    File {
        name,
        text: bounded(secrets.scrub(&text)),
    }
}

/// `text` cut at [`MAX_FILE_BYTES`] (on a character boundary), saying so at its end.
fn bounded(mut text: String) -> String {
    if text.len() > MAX_FILE_BYTES {
        let mut end = MAX_FILE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n[cut: the support bundle keeps the first 1 MiB of each file]\n");
    }
    text
}

/// Builds the bundle: every section, redacted, as a `tar.gz`.
pub async fn build(sources: &Sources) -> std::io::Result<Vec<u8>> {
    let secrets = sources.secrets().await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default();
    let redis_url = sources
        .settings
        .runtime_api
        .as_ref()
        .and_then(|rt| rt.redis_url.clone());
    let store = match &sources.store {
        Some(store) => {
            sections::store(store, redis_url.as_deref(), sources.data_dir.as_deref()).await
        }
        None => json!(null),
    };
    let (pools, sandboxes) = sections::pools_and_sandboxes(sources).await;
    let (gateway, upstream_errors) = sections::gateway(sources).await;
    let metrics = sources
        .metrics
        .as_ref()
        .map(|handle| handle.render().lines().map(str::to_owned).collect())
        .unwrap_or_else(|| vec!["# this process keeps no metrics (no --metrics-listen)".into()]);
    let files = [
        json_file(
            "version.json",
            &secrets,
            json!({
                "sandgate": env!("CARGO_PKG_VERSION"),
                "service": sources.service,
                "target": format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
                "build": if cfg!(debug_assertions) { "debug" } else { "release" },
                "generated_at_ms": now_ms,
            }),
        ),
        json_file(
            "settings.json",
            &secrets,
            sections::settings(&sources.settings),
        ),
        json_file(
            "check-config.json",
            &secrets,
            sections::findings(&sources.settings),
        ),
        json_file("store.json", &secrets, store),
        json_file("pools.json", &secrets, pools),
        json_file("sandboxes.json", &secrets, sandboxes),
        json_file("gateway.json", &secrets, gateway),
        json_file("upstream-errors.json", &secrets, upstream_errors),
        text_file("metrics.txt", &secrets, metrics),
        text_file(
            "logs.txt",
            &secrets,
            // A line quotes what clients and files chose (a model's name, a file's value).
            crate::telemetry::recent::lines()
                .iter()
                .map(|line| values::hide_quoted(line))
                .collect(),
        ),
    ];
    archive(&files, now_ms)
}

fn archive(files: &[File], now_ms: u128) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    for file in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(file.text.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(u64::try_from(now_ms / 1000).unwrap_or_default());
        tar.append_data(
            &mut header,
            format!("{ROOT}/{}", file.name),
            file.text.as_bytes(),
        )?;
    }
    tar.into_inner()?.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn a_file_past_the_limit_is_cut_on_a_character_boundary_and_says_so() {
        let cut = bounded("é".repeat(MAX_FILE_BYTES));
        assert!(cut.len() < MAX_FILE_BYTES + 100, "{}", cut.len());
        assert!(cut.ends_with("the first 1 MiB of each file]\n"));
        assert_eq!(bounded("short".to_owned()), "short");
    }

    #[test]
    fn the_archive_holds_each_file_under_the_bundles_directory() {
        let files = [
            File {
                name: "version.json",
                text: "{}".to_owned(),
            },
            File {
                name: "logs.txt",
                text: "WARN x\n".to_owned(),
            },
        ];
        let archive = archive(&files, 1_700_000_000_000).unwrap();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive.as_slice()));
        let mut seen = Vec::new();
        for entry in tar.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut text = String::new();
            entry.read_to_string(&mut text).unwrap();
            seen.push((entry.path().unwrap().display().to_string(), text));
        }
        assert_eq!(
            seen,
            [
                (
                    "sandgate-support-bundle/version.json".to_owned(),
                    "{}".to_owned()
                ),
                (
                    "sandgate-support-bundle/logs.txt".to_owned(),
                    "WARN x\n".to_owned()
                ),
            ]
        );
    }
}
