//! The gateway's metrics. `model` is always the `model_name` of the configured entry that
//! routed the call (`*` for the wildcard, `(added)` for models added at runtime), or
//! `unrouted` for calls refused before routing:
//! never a name a client made up, so that label values stay few.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::SharedString;

use crate::rewrite::Usage;
use crate::routing::Upstream;

/// The `model` label of calls refused before an entry was found.
pub const UNROUTED: &str = "unrouted";

/// Registers the gateway's metrics with their help text (after the recorder is installed).
pub fn describe_metrics() {
    metrics::describe_counter!(
        "sandgate_gateway_requests_total",
        "LLM calls (every API), by model entry and the status answered (counted when the call ends)"
    );
    metrics::describe_histogram!(
        "sandgate_upstream_duration_seconds",
        metrics::Unit::Seconds,
        "upstream calls from request to the end of the answer, by model entry and status"
    );
    metrics::describe_counter!(
        "sandgate_upstream_retries_total",
        "upstream calls tried again, by model entry and reason (the status answered, or connect)"
    );
    metrics::describe_counter!(
        "sandgate_spend_tokens_total",
        "tokens the upstreams reported, by model entry and kind (prompt or completion)"
    );
}

/// A call refused before it went upstream (auth, body, unknown model, budget, a request
/// the translation cannot take), under `model`: the entry that routed it, or
/// [`UNROUTED`].
pub fn refused(model: &str, status: u16) {
    metrics::counter!(
        "sandgate_gateway_requests_total",
        "model" => model.to_owned(),
        "status" => status.to_string(),
    )
    .increment(1);
}

/// An upstream call about to be tried again, because of `reason` (`429`, `503`,
/// `connect`, …).
pub fn retried(model: &str, reason: String) {
    metrics::counter!(
        "sandgate_upstream_retries_total",
        "model" => model.to_owned(),
        "reason" => reason,
    )
    .increment(1);
}

/// Label sets whose series [`CallSeries`] keeps at most; past it, calls count through the
/// metrics macros (correct, dearer).
const MAX_KEPT: usize = 4096;

/// The series of one entry's calls answered with one status, registered once.
struct Series {
    requests: metrics::Counter,
    duration: metrics::Histogram,
    prompt_tokens: metrics::Counter,
    completion_tokens: metrics::Counter,
}

impl Series {
    fn register(model: &str, status: u16) -> Self {
        // One copy of each label value, shared by the call's series.
        let model = SharedString::from(Arc::<str>::from(model));
        let status = SharedString::from(Arc::<str>::from(status.to_string()));
        let tokens = |kind: &'static str| {
            metrics::counter!(
                "sandgate_spend_tokens_total",
                "model" => model.clone(),
                "kind" => kind,
            )
        };
        Self {
            requests: metrics::counter!(
                "sandgate_gateway_requests_total",
                "model" => model.clone(),
                "status" => status.clone(),
            ),
            duration: metrics::histogram!(
                "sandgate_upstream_duration_seconds",
                "model" => model.clone(),
                "status" => status,
            ),
            prompt_tokens: tokens("prompt"),
            completion_tokens: tokens("completion"),
        }
    }
}

/// The series routed calls count in, each kept once registered: a metrics macro with
/// labels builds, hashes and looks up its key on every call (about 2 % of a non-streamed
/// call's instructions); a kept series is an atomic add. Made after the recorder is
/// installed (a series registered before counts nowhere), with the gateway.
#[derive(Default)]
pub struct CallSeries(Mutex<foldhash::HashMap<String, foldhash::HashMap<u16, Arc<Series>>>>);

impl CallSeries {
    fn of(&self, model: &str, status: u16) -> Arc<Series> {
        let Ok(mut kept) = self.0.lock() else {
            return Arc::new(Series::register(model, status));
        };
        if let Some(series) = kept.get(model).and_then(|by_status| by_status.get(&status)) {
            return series.clone();
        }
        let series = Arc::new(Series::register(model, status));
        if kept.values().map(foldhash::HashMap::len).sum::<usize>() < MAX_KEPT {
            kept.entry(model.to_owned())
                .or_default()
                .insert(status, series.clone());
        }
        series
    }

    /// A routed call, at its end: `status` is what the client got.
    pub fn finished(&self, model: &str, status: u16, elapsed: Duration, usage: Option<Usage>) {
        let series = self.of(model, status);
        series.requests.increment(1);
        series.duration.record(elapsed);
        let Some(usage) = usage else { return };
        if let Some(tokens) = usage.prompt_tokens {
            series.prompt_tokens.increment(tokens);
        }
        if let Some(tokens) = usage.completion_tokens {
            series.completion_tokens.increment(tokens);
        }
    }
}

/// The metrics label of a call's entry: the configuration's entries by name, every model
/// added at runtime under one label, so that additions make no new series.
pub(crate) fn metric_label(upstream: &Upstream) -> String {
    if upstream.guarded {
        "(added)".to_owned()
    } else {
        upstream.entry.clone()
    }
}
