//! `sandgate admin`: the management client of spec 4.1, over the REST edge.
//!
//! `save` and `delete` log in with the admin password (challenge, PBKDF2, JWT); `list` and
//! `template` send `API_KEY` as `X-API-Key`, or fetch the `default` key through an admin
//! login when it is not set. `https://` URLs are verified against the platform's trust
//! store.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use reqwest::{Method, RequestBuilder, Response};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::{AdminClientArgs, AdminCommand};

/// More iterations than any sane server asks for: refuse rather than spin for hours.
const MAX_ITERATIONS: u32 = 10_000_000;

pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    admin_password: Option<String>,
}

#[derive(Deserialize)]
struct Challenge {
    challenge: String,
    salt: String,
    iterations: u32,
}

/// The server's `detail`, as a line a person can act on.
fn describe(body: &str) -> String {
    let Ok(Value::Object(body)) = serde_json::from_str::<Value>(body) else {
        return body.trim().to_owned();
    };
    match body.get("detail") {
        Some(Value::String(detail)) => detail.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let loc = item["loc"]
                    .as_array()
                    .map(|loc| {
                        loc.iter()
                            .map(|part| match part {
                                Value::String(key) => key.clone(),
                                other => other.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join(".")
                    })
                    .unwrap_or_default();
                format!("{loc}: {}", item["msg"].as_str().unwrap_or("invalid"))
            })
            .collect::<Vec<_>>()
            .join("; "),
        _ => Value::Object(body).to_string(),
    }
}

impl Client {
    fn new(args: &AdminClientArgs) -> anyhow::Result<Self> {
        Self::to(&args.url, args.admin_password.clone())
    }

    /// A client of the edge at `url`, logging in with `admin_password`.
    pub(crate) fn to(url: &str, admin_password: Option<String>) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            http,
            base: url.trim_end_matches('/').to_owned(),
            admin_password: admin_password.filter(|p| !p.is_empty()),
        })
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// Sends the request; a non-2xx answer becomes an error carrying the server's detail.
    pub(crate) async fn send(
        &self,
        request: RequestBuilder,
        what: &str,
    ) -> anyhow::Result<Response> {
        let response = request
            .send()
            .await
            .with_context(|| format!("{what}: cannot reach {}", self.base))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        bail!("{what}: {} ({status})", describe(&body))
    }

    pub(crate) async fn json<T: serde::de::DeserializeOwned>(
        &self,
        request: RequestBuilder,
        what: &str,
    ) -> anyhow::Result<T> {
        self.send(request, what)
            .await?
            .json()
            .await
            .with_context(|| format!("{what}: the answer is not the expected JSON"))
    }

    /// Logs in with the admin password and returns the admin token.
    pub(crate) async fn login(&self) -> anyhow::Result<String> {
        let password = self
            .admin_password
            .clone()
            .ok_or_else(|| anyhow!("ADMIN_PASSWORD is not set"))?;
        let challenge: Challenge = self
            .json(self.request(Method::GET, "/api/admin/challenge"), "login")
            .await?;
        if challenge.iterations > MAX_ITERATIONS {
            bail!(
                "login: the server asks for {} PBKDF2 iterations, more than the {MAX_ITERATIONS} this client does",
                challenge.iterations
            );
        }
        let nonce = challenge.challenge.clone();
        let hash = tokio::task::spawn_blocking(move || {
            sandgate_runtime_api::admin::login::login_hash(
                &password,
                &challenge.salt,
                &challenge.challenge,
                challenge.iterations,
            )
        })
        .await?;
        let login: Value = self
            .json(
                self.request(Method::POST, "/api/admin/login")
                    .json(&serde_json::json!({ "challenge": nonce, "hash": hash })),
                "login",
            )
            .await?;
        login["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("login: the answer has no token"))
    }

    /// `API_KEY`, or the `default` key fetched through an admin login.
    async fn api_key(&self, given: Option<&str>) -> anyhow::Result<String> {
        if let Some(key) = given.filter(|key| !key.is_empty()) {
            return Ok(key.to_owned());
        }
        let token = self
            .login()
            .await
            .context("API_KEY is not set, so the default key is fetched through an admin login")?;
        let keys: Vec<Value> = self
            .json(
                self.request(Method::GET, "/api/admin/api-keys")
                    .bearer_auth(token),
                "listing API keys",
            )
            .await?;
        keys.iter()
            .find(|key| key["name"] == "default")
            .and_then(|key| key["key_value"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("the server has no API key named default (DEFAULT_API_KEY)"))
    }

    async fn configs(&self, api_key: &str) -> anyhow::Result<Vec<Value>> {
        let list: Value = self
            .json(
                self.request(Method::GET, "/api/warm-runtime-configs")
                    .header("X-API-Key", api_key),
                "listing configurations",
            )
            .await?;
        match list.get("configs") {
            Some(Value::Array(configs)) => Ok(configs.clone()),
            _ => bail!("listing configurations: the answer has no `configs` list"),
        }
    }
}

/// `template`: the configuration `name` without its identity fields, with another image
/// and count.
fn template(configs: &[Value], name: &str, image: &str, count: u32) -> anyhow::Result<Value> {
    let Some(Value::Object(found)) = configs.iter().find(|config| config["name"] == name) else {
        let names: Vec<&str> = configs
            .iter()
            .filter_map(|config| config["name"].as_str())
            .collect();
        bail!(
            "no configuration named {name:?} (there are: {})",
            names.join(", ")
        );
    };
    let mut body = found.clone();
    for identity in ["name", "source", "warnings"] {
        body.remove(identity);
    }
    body.insert("image".into(), image.into());
    body.insert("count".into(), count.into());
    Ok(Value::Object(body))
}

fn print_json(out: &mut impl Write, value: &Value) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Runs one `sandgate admin` command; what it prints goes to `out`, warnings to `err`.
pub async fn run(
    args: AdminClientArgs,
    input: &mut impl Read,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<()> {
    let client = Client::new(&args)?;
    match &args.command {
        AdminCommand::List => {
            let key = client.api_key(args.api_key.as_deref()).await?;
            let configs = client.configs(&key).await?;
            print_json(out, &serde_json::json!({ "configs": configs }))
        }
        AdminCommand::Template { name, image, count } => {
            let key = client.api_key(args.api_key.as_deref()).await?;
            let configs = client.configs(&key).await?;
            print_json(out, &template(&configs, name, image, *count)?)
        }
        AdminCommand::Save { name } => {
            let mut text = String::new();
            input
                .read_to_string(&mut text)
                .context("cannot read the configuration from stdin")?;
            let body: Value =
                serde_json::from_str(&text).context("the configuration on stdin is not JSON")?;
            let token = client.login().await?;
            let saved: Value = client
                .json(
                    client
                        .request(
                            Method::PUT,
                            &format!("/api/admin/warm-runtime-configs/{}", encode(name)),
                        )
                        .bearer_auth(token)
                        .json(&body),
                    &format!("saving {name}"),
                )
                .await?;
            for key in saved["warnings"].as_array().into_iter().flatten() {
                writeln!(
                    err,
                    "warning: environment lacks {}, which the installer default v1_current sets; sandboxes may not show agent output",
                    key.as_str().unwrap_or_default()
                )?;
            }
            print_json(out, &saved)
        }
        AdminCommand::Delete { name } => {
            let token = client.login().await?;
            let deleted: Value = client
                .json(
                    client
                        .request(
                            Method::DELETE,
                            &format!("/api/admin/warm-runtime-configs/{}", encode(name)),
                        )
                        .bearer_auth(token),
                    &format!("deleting {name}"),
                )
                .await?;
            writeln!(out, "{}", deleted["message"].as_str().unwrap_or_default())?;
            Ok(())
        }
        AdminCommand::Audit { limit } => {
            let token = client.login().await?;
            let mut before = String::new();
            let mut printed = 0;
            while printed < *limit {
                let page = (*limit - printed).min(1000);
                let mut path = format!("/api/admin/audit?limit={page}");
                if !before.is_empty() {
                    path.push_str(&format!("&before={}", encode(&before)));
                }
                let answer: Value = client
                    .json(
                        client.request(Method::GET, &path).bearer_auth(&token),
                        "reading the audit log",
                    )
                    .await?;
                for entry in answer["entries"].as_array().into_iter().flatten() {
                    writeln!(out, "{entry}")?;
                    printed += 1;
                }
                match answer["next"].as_str() {
                    Some(next) if printed < *limit => before = next.to_owned(),
                    _ => break,
                }
            }
            Ok(())
        }
    }
}

/// An admin token from the server at `url`, logged in with `admin_password`; with the
/// client's answer-time limit `timeout` (a support bundle takes longer than a list).
pub(crate) async fn admin_session(
    url: &str,
    admin_password: Option<String>,
    timeout: Duration,
) -> anyhow::Result<(reqwest::Client, String)> {
    let client = Client {
        http: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            .build()?,
        base: url.trim_end_matches('/').to_owned(),
        admin_password: admin_password.filter(|p| !p.is_empty()),
    };
    let token = client.login().await?;
    Ok((client.http, token))
}

/// The server's `detail` of a failed answer, as a line a person can act on.
pub(crate) fn detail(body: &str) -> String {
    describe(body)
}

/// A name as one path segment.
fn encode(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_drops_identity_and_overrides_image_and_count() {
        let configs = vec![serde_json::json!({
            "name": "v1_current", "source": "file", "image": "old", "count": 3,
            "working_dir": "/w", "command": ["c"], "environment": {"A": "1"}, "run_as_user": 1000
        })];
        assert_eq!(
            template(&configs, "v1_current", "new", 2).expect("found"),
            serde_json::json!({
                "image": "new", "count": 2, "working_dir": "/w", "command": ["c"],
                "environment": {"A": "1"}, "run_as_user": 1000
            })
        );
        let missing = template(&configs, "nope", "x", 1).expect_err("absent");
        assert!(missing.to_string().contains("v1_current"), "{missing}");
    }

    #[test]
    fn server_details_read_as_one_line() {
        assert_eq!(
            describe(r#"{"detail":"Invalid admin password"}"#),
            "Invalid admin password"
        );
        assert_eq!(
            describe(
                r#"{"detail":[{"loc":["body","count"],"msg":"Input should be greater than or equal to 0"}]}"#
            ),
            "body.count: Input should be greater than or equal to 0"
        );
        assert_eq!(describe("bad gateway\n"), "bad gateway");
    }
}
