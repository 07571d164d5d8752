//! Metrics and traces of the real binary: `/metrics` counts requests by route template,
//! the runtime API's `--metrics-listen` shows its reconciler's passes, and one chat
//! completion is one trace across the edge, the gateway's gRPC service and the upstream,
//! exported over OTLP/HTTP to a fake collector.
//!
//! This file holds the readers of a metrics exposition (other tests use them too); the
//! tests are in `metrics.rs` and `traces.rs`.

mod metrics;
mod traces;

use std::time::Duration;

/// How long a test waits for what a process does on its own (a pass, an export).
const PATIENCE: Duration = Duration::from_secs(20);

/// The value of the sample `name{labels…}` in a text exposition, when it is there.
pub(crate) fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let rest = series.strip_prefix(name)?;
        let wanted = rest.is_empty() && labels.is_empty()
            || rest.starts_with('{')
                && labels
                    .iter()
                    .all(|(key, value)| rest.contains(&format!("{key}=\"{value}\"")));
        wanted.then(|| value.parse().ok()).flatten()
    })
}

pub(crate) async fn scrape(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.expect("scrape");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ASCII")
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.expect("exposition")
}
