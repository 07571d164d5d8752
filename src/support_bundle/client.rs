//! `sandgate support-bundle`: downloads the support bundle from a running Sandgate and
//! writes it to a file (or stdout). It logs in with the admin password as `sandgate admin`
//! does; inside runtime-api's pod, whose metrics listener serves the bundle but no login,
//! it signs the admin token itself with the pod's `JWT_SECRET`
//! (`--sign-with-jwt-secret`): holding the key is what an admin login proves.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use crate::cli::SupportBundleArgs;

/// How long building and downloading the bundle may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The admin token, and the HTTP client to use it with.
async fn session(args: &SupportBundleArgs) -> anyhow::Result<(reqwest::Client, String)> {
    if args.sign_with_jwt_secret {
        let secret = args
            .jwt_secret
            .as_deref()
            .filter(|secret| !secret.is_empty())
            .ok_or_else(|| anyhow!("--sign-with-jwt-secret: JWT_SECRET is not set"))?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        let token = sandgate_runtime_api::admin::login::Tokens::new(secret.as_bytes())
            .issue(now_ms)
            .context("cannot sign an admin token")?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(TIMEOUT)
            .build()?;
        return Ok((http, token));
    }
    crate::admin_client::admin_session(&args.url, args.admin_password.clone(), TIMEOUT)
        .await
        .context("logging in with ADMIN_PASSWORD")
}

/// Downloads the bundle and writes it where `args` says; returns where.
pub async fn run(args: &SupportBundleArgs, stdout: &mut dyn Write) -> anyhow::Result<String> {
    let (http, token) = session(args).await?;
    let url = format!("{}{}", args.url.trim_end_matches('/'), super::http::PATH);
    let response = http
        .get(&url)
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", args.url))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        bail!(
            "downloading the support bundle: {} ({status})",
            crate::admin_client::detail(&body)
        );
    }
    let mut archive = response
        .bytes()
        .await
        .context("downloading the support bundle")?
        .to_vec();
    if args.json {
        archive = as_json(&archive)?;
    }
    let output = args.output.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or_default();
        let extension = if args.json { "json" } else { "tar.gz" };
        format!("sandgate-support-bundle-{now}.{extension}").into()
    });
    if output.as_os_str() == "-" {
        stdout.write_all(&archive)?;
        stdout.flush()?;
        return Ok("stdout".to_owned());
    }
    std::fs::write(&output, &archive)
        .with_context(|| format!("cannot write {}", output.display()))?;
    Ok(output.display().to_string())
}

/// The archive's files as one JSON object, name → text, in the archive's order.
fn as_json(archive: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let mut files = serde_json::Map::new();
    for entry in tar.entries().context("the answer is not a tar.gz")? {
        let mut entry = entry.context("the answer is not a tar.gz")?;
        let name = entry.path()?.display().to_string();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut entry, &mut text)
            .with_context(|| format!("{name} is not text"))?;
        files.insert(name, serde_json::Value::String(text));
    }
    let mut json = serde_json::to_vec_pretty(&files)?;
    json.push(b'\n');
    Ok(json)
}
