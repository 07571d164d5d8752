//! What the spend log, the metrics and the access log learn of one forwarded call: one
//! record per client request, however many attempts it took, finished once its status is
//! known.

use std::time::Instant;

use sandgate_proto::models::v1::Api;
use sandgate_proto::trace::set_current_attributes;
use sandgate_store::SpendLogEntry;

use crate::admit::Charge;
use crate::budget::Prices;
use crate::rewrite::Usage;
use crate::spend::Finished;
use crate::usage::{Evidence, charged};

/// What the spend log learns from a request before it is forwarded: one entry per
/// client request, however many attempts it took.
pub(crate) struct CallRecord {
    /// Holds the call's sandbox active until the call is over (idle pause).
    #[expect(dead_code, reason = "held for its drop, which marks the call's end")]
    pub(crate) active: Option<sandgate_store::activity::Held>,
    pub(crate) entry: SpendLogEntry,
    /// The routing entry's name: the calls' metrics label.
    pub(crate) model_entry: String,
    /// Where the call's metrics count.
    pub(crate) series: std::sync::Arc<crate::metrics::CallSeries>,
    pub(crate) started: Instant,
    /// For the access log line: the API, what the upstream answered, the bytes each way.
    pub(crate) api: Api,
    pub(crate) upstream_status: Option<u16>,
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: u64,
    /// The bytes of the answer read from the upstream, relayed or not.
    pub(crate) bytes_read: u64,
    /// The client's bound on the output tokens.
    pub(crate) max_output: Option<u64>,
    /// What the call costs per token.
    pub(crate) prices: Prices,
    /// What the call is charged to (its virtual key's scopes), and its hold.
    pub(crate) charge: Option<Charge>,
}

impl CallRecord {
    /// The entry of a call the upstream answered with success (`complete`: read to its
    /// end), charged what its usage says or, where that is missing or partial, the
    /// estimate of [`charged`]; an estimate is named in the entry's metadata
    /// (`usage_estimated`).
    pub(crate) fn finish_answered(
        mut self,
        status: u16,
        reported: Option<Usage>,
        complete: bool,
    ) -> Finished {
        let evidence = Evidence {
            request_bytes: self.bytes_in as u64,
            answer_bytes: self.bytes_read,
            max_output: self.max_output,
            complete,
        };
        let (usage, estimated) = charged(reported, &evidence);
        if estimated {
            tracing::info!(
                prompt_tokens = usage.prompt_tokens,
                completion_tokens = usage.completion_tokens,
                "the upstream reported no (or partial) usage: the call is charged an estimate"
            );
            let metadata = self
                .entry
                .metadata
                .get_or_insert_with(|| serde_json::json!({}));
            match metadata.as_object_mut() {
                Some(object) => {
                    object.insert("usage_estimated".to_owned(), serde_json::Value::Bool(true));
                }
                None => {
                    let client = metadata.take();
                    *metadata = serde_json::json!({"usage_estimated": true, "client": client});
                }
            }
        }
        self.finish(status, Some(usage))
    }

    /// The call's spend log entry, once `status` is answered, and what it settles (its
    /// spend, its hold released); its metrics are recorded.
    pub(crate) fn finish(mut self, status: u16, usage: Option<Usage>) -> Finished {
        let elapsed = self.started.elapsed();
        self.series
            .finished(&self.model_entry, status, elapsed, usage);
        crate::access::log(&crate::access::AccessLine {
            api: self.api,
            asked: &self.entry.model,
            entry: &self.model_entry,
            upstream_status: self.upstream_status,
            status,
            latency: elapsed,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            session_id: self.entry.session_id.as_deref(),
            key_alias: self.entry.key_alias.as_deref(),
            reason: None,
        });
        set_current_attributes(|| [("http.response.status_code", i64::from(status).into())]);
        self.entry.status = status;
        self.entry.latency_ms = elapsed.as_millis() as u64;
        let tokens = usage.as_ref().map_or(0, |usage| {
            usage.total_tokens.unwrap_or_else(|| {
                usage.prompt_tokens.unwrap_or(0) + usage.completion_tokens.unwrap_or(0)
            })
        });
        if let Some(usage) = usage {
            self.entry.prompt_tokens = usage.prompt_tokens;
            self.entry.completion_tokens = usage.completion_tokens;
            self.entry.total_tokens = usage.total_tokens;
            self.entry.cache_read_tokens = usage
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .or(usage.cache_read_input_tokens);
            self.entry.cache_write_tokens = usage.cache_creation_input_tokens;
            self.entry.spend = self.prices.cost(&usage);
        }
        let settle = self
            .charge
            .take()
            .and_then(|charge| charge.settle(self.entry.spend, tokens));
        (self.entry, settle)
    }
}
