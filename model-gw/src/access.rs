//! The gateway's access log: one line per call, at info level under the `sandgate::access`
//! target, when the call ends (answered, failed, refused, or left by its client). It says
//! what an operator asks first about a call: who, which model and entry, what the
//! upstream answered, what the client got, how long and how much. Never content, never a
//! key: the virtual key appears by its alias only.

use std::sync::Arc;
use std::time::Duration;

use sandgate_proto::models::v1::Api;

use crate::call::api_name;
use crate::headers::{SESSION_ID, first_header};
use crate::spend::{SpendLog, bounded, spend_metadata};
use crate::support::now_ms;

/// The path a client calls for `api` (the `/v1` form; the edge also serves it without).
pub fn api_path(api: Api) -> &'static str {
    match api {
        Api::ChatCompletions | Api::Unspecified => "/v1/chat/completions",
        Api::Responses => "/v1/responses",
        Api::Messages => "/v1/messages",
        Api::MessagesCountTokens => "/v1/messages/count_tokens",
        Api::Embeddings => "/v1/embeddings",
        Api::Completions => "/v1/completions",
    }
}

/// One finished call, as its access log line says it.
pub struct AccessLine<'a> {
    pub api: Api,
    /// The model the client asked for; empty when the body did not say.
    pub asked: &'a str,
    /// The routing entry's metrics label; `unrouted` when the call was refused before.
    pub entry: &'a str,
    /// What the upstream answered; none when it was not called or did not answer.
    pub upstream_status: Option<u16>,
    /// What the client got: 499 when it left before the answer's end.
    pub status: u16,
    pub latency: Duration,
    /// The request body's size.
    pub bytes_in: usize,
    /// The answer's bytes relayed to the client.
    pub bytes_out: u64,
    pub session_id: Option<&'a str>,
    pub key_alias: Option<&'a str>,
    /// Why the gateway refused or failed the call, in its own words (never the upstream's
    /// body, which may quote the request).
    pub reason: Option<&'a str>,
}

/// Writes `line`.
pub fn log(line: &AccessLine) {
    tracing::info!(
        target: "sandgate::access",
        method = "POST",
        path = api_path(line.api),
        model = line.asked,
        entry = line.entry,
        upstream_status = line.upstream_status,
        status = line.status,
        latency_ms = line.latency.as_millis() as u64,
        bytes_in = line.bytes_in,
        bytes_out = line.bytes_out,
        session_id = line.session_id,
        key_alias = line.key_alias,
        reason = line.reason,
        "gateway call"
    );
}

/// What the gateway learned of a call before refusing it, filled in as routing goes: a
/// refusal is logged with as much as was known, and labelled with the entry that routed it.
#[derive(Default)]
pub struct Seen {
    pub started: Option<std::time::Instant>,
    pub api: Option<Api>,
    /// The caller presented a key the gateway knows: only then does a refusal get a spend
    /// log entry (an unauthenticated client cannot fill the log).
    pub authenticated: bool,
    /// The virtual key: its token (sha256 hex) and alias.
    pub key: Option<(String, Option<String>)>,
    pub asked: Option<String>,
    /// The routing entry's metrics label, and the model it sends upstream.
    pub entry: Option<(String, String)>,
    pub bytes_in: usize,
    /// Refused for the session it named (not its own): its entry keeps that session in
    /// its error alone, so that it counts towards no conversation.
    pub session_refused: bool,
}

/// The spend log entry of a call refused with `status` for `reason`: LiteLLM's failure
/// entries carry the error as `metadata.error_information` (code and message), so do
/// these, beside the client's own metadata.
pub fn refusal_metadata(
    client: Option<serde_json::Value>,
    status: u16,
    reason: &str,
) -> serde_json::Value {
    let error = serde_json::json!({"error_code": status.to_string(), "error_message": reason});
    match client {
        Some(serde_json::Value::Object(mut object)) => {
            object.insert("error_information".to_owned(), error);
            serde_json::Value::Object(object)
        }
        Some(other) => serde_json::json!({"error_information": error, "client": other}),
        None => serde_json::json!({"error_information": error}),
    }
}

/// A call refused with `status` before it went upstream: its access log line, its metrics
/// (under the entry that routed it, if one did) and, for a caller the gateway knows, its
/// spend log entry (in `spend`).
pub(crate) fn refused(
    spend: &Arc<SpendLog>,
    metadata: &tonic::metadata::MetadataMap,
    seen: Seen,
    status: &tonic::Status,
) {
    let code = sandgate_proto::error::ErrorDetail::from_status(status).code();
    let http_status = code.http_status().as_u16();
    let latency = seen
        .started
        .map(|started| started.elapsed())
        .unwrap_or_default();
    let entry = seen
        .entry
        .as_ref()
        .map_or(crate::metrics::UNROUTED, |(entry, _)| entry.as_str());
    crate::metrics::refused(entry, http_status);
    let headers = metadata.clone().into_headers();
    let session_id = first_header(&headers, &SESSION_ID)
        .map(bounded)
        .filter(|_| !seen.session_refused);
    let key_alias = seen.key.as_ref().and_then(|(_, alias)| alias.clone());
    log(&AccessLine {
        api: seen.api.unwrap_or(Api::Unspecified),
        asked: seen.asked.as_deref().unwrap_or_default(),
        entry,
        upstream_status: None,
        status: http_status,
        latency,
        bytes_in: seen.bytes_in,
        bytes_out: 0,
        session_id: session_id.as_deref(),
        key_alias: key_alias.as_deref(),
        reason: Some(status.message()),
    });
    if !seen.authenticated {
        return;
    }
    let (token, key_alias) = seen.key.unzip();
    let entry = sandgate_store::SpendLogEntry {
        request_id: uuid::Uuid::new_v4().to_string(),
        started_at_ms: now_ms(),
        model: seen.asked.as_deref().map(bounded).unwrap_or_default(),
        upstream_model: seen.entry.map(|(_, model)| model).unwrap_or_default(),
        latency_ms: latency.as_millis() as u64,
        status: http_status,
        session_id,
        metadata: Some(refusal_metadata(
            spend_metadata(&headers),
            http_status,
            status.message(),
        )),
        call_type: seen.api.map(|api| api_name(api).to_owned()),
        api_key: token,
        key_alias: key_alias.flatten(),
        ..sandgate_store::SpendLogEntry::default()
    };
    spend.log_soon((entry, None));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_refusal_keeps_the_clients_metadata_beside_its_error() {
        assert_eq!(
            refusal_metadata(
                Some(json!({"team": "a"})),
                400,
                "`messages[0].role` must be"
            ),
            json!({"team": "a", "error_information": {"error_code": "400", "error_message": "`messages[0].role` must be"}})
        );
        assert_eq!(
            refusal_metadata(None, 429, "over budget"),
            json!({"error_information": {"error_code": "429", "error_message": "over budget"}})
        );
    }
}
