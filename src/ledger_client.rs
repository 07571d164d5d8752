//! `sandgate ledger`: the ledger of a running Sandgate, read with the admin's token over
//! the REST edge: one conversation as JSON, or a rollup as CSV, every page of it.

use std::io::Write;

use anyhow::Context;
use reqwest::Method;
use serde_json::Value;

use crate::admin_client::Client;
use crate::cli::{LedgerArgs, LedgerCommand};

/// The rows a rollup page asks for: the server's most.
const PAGE: u32 = 1000;

/// Runs one `sandgate ledger` command; what it prints goes to `out`.
pub async fn run(args: LedgerArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let client = Client::to(&args.url, args.admin_password.clone())?;
    let token = client.login().await?;
    let mut days = String::new();
    for (name, value) in [("from", &args.from), ("to", &args.to)] {
        if let Some(value) = value {
            let value: String = form_urlencoded::byte_serialize(value.as_bytes()).collect();
            days.push_str(&format!("&{name}={value}"));
        }
    }
    match &args.command {
        LedgerCommand::Conversation { id } => {
            let id: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
            let path = format!(
                "/api/ledger/conversations/{}?{days}",
                id.replace('+', "%20")
            );
            let ledger: Value = client
                .json(
                    client.request(Method::GET, &path).bearer_auth(&token),
                    "reading the ledger",
                )
                .await?;
            serde_json::to_writer_pretty(&mut *out, &ledger)?;
            writeln!(out)?;
        }
        LedgerCommand::Rollup { by } => {
            let by: String = form_urlencoded::byte_serialize(by.as_bytes()).collect();
            let mut after = String::new();
            let mut first = true;
            loop {
                let path = format!(
                    "/api/ledger/rollup?by={by}&format=csv&limit={PAGE}&after={after}{days}"
                );
                let response = client
                    .send(
                        client.request(Method::GET, &path).bearer_auth(&token),
                        "reading the ledger",
                    )
                    .await?;
                let next = response
                    .headers()
                    .get("x-next-after")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let text = response.text().await.context("reading the ledger")?;
                // The header line once, then every page's rows.
                let rows = if first {
                    text.as_str()
                } else {
                    text.split_once("\r\n").map_or("", |(_, rows)| rows)
                };
                out.write_all(rows.as_bytes())?;
                first = false;
                if next.is_empty() {
                    break;
                }
                after = next;
            }
        }
    }
    Ok(())
}
