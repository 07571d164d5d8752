//! The soak's traffics: one kind of request sent on its own fixed clock (an open loop),
//! its latencies and errors per window and after the warm-up, and what an answer must be.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::Value;

/// Requests of one traffic still unanswered past which the next are not sent (and count
/// as errors): an open loop must not pile up without bound when the server stalls.
const MAX_IN_FLIGHT: u64 = 2000;

pub type Outcome = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// One kind of request, sent `per_second` times a second; `call(n)` makes the n-th.
pub struct Traffic {
    pub name: &'static str,
    pub per_second: f64,
    call: Box<dyn Fn(u64) -> Outcome + Send + Sync>,
    pub stats: Mutex<Stats>,
    in_flight: AtomicU64,
}

pub struct Stats {
    /// Latencies of the current window, in µs.
    window: Histogram<u64>,
    window_errors: u64,
    /// Latencies after the warm-up.
    pub steady: Histogram<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram")
}

impl Traffic {
    pub fn new(
        name: &'static str,
        per_second: f64,
        call: impl Fn(u64) -> Outcome + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            per_second,
            call: Box::new(call),
            stats: Mutex::new(Stats {
                window: histogram(),
                window_errors: 0,
                steady: histogram(),
                errors: 0,
                first_error: None,
            }),
            in_flight: AtomicU64::new(0),
        })
    }

    fn record(&self, took: Duration, outcome: Result<(), String>) {
        let mut stats = self.stats.lock().expect("stats");
        stats.window.saturating_record(took.as_micros() as u64);
        if let Err(error) = outcome {
            stats.window_errors += 1;
            stats.errors += 1;
            stats.first_error.get_or_insert(error);
        }
    }

    /// Sends on a fixed clock until `until`, each request on a task of its own.
    pub async fn run(self: Arc<Self>, until: Instant) {
        let mut clock = tokio::time::interval(Duration::from_secs_f64(1.0 / self.per_second));
        let mut n = 0;
        loop {
            clock.tick().await;
            if Instant::now() >= until {
                return;
            }
            if self.in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
                self.record(Duration::ZERO, Err("too many requests in flight".into()));
                continue;
            }
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            let traffic = self.clone();
            let request = (self.call)(n);
            tokio::spawn(async move {
                let sent = Instant::now();
                let outcome = request.await;
                traffic.record(sent.elapsed(), outcome);
                traffic.in_flight.fetch_sub(1, Ordering::Relaxed);
            });
            n += 1;
        }
    }

    /// The window's (requests, errors, p99 ms), and starts the next; the window's
    /// latencies join the steady ones when `steady`.
    pub fn close_window(&self, steady: bool) -> (u64, u64, f64) {
        let mut stats = self.stats.lock().expect("stats");
        let window = std::mem::replace(&mut stats.window, histogram());
        let errors = std::mem::take(&mut stats.window_errors);
        if steady {
            stats.steady.add(&window).expect("same bounds");
        }
        (window.len(), errors, ms(&window, 0.99))
    }
}

pub fn ms(latency: &Histogram<u64>, quantile: f64) -> f64 {
    latency.value_at_quantile(quantile) as f64 / 1000.0
}

/// What an answer must be: `expected`, and a body that reads to its end.
pub async fn answer(
    sent: reqwest::Result<reqwest::Response>,
    expected: u16,
) -> Result<Value, String> {
    let response = sent.map_err(|error| error.to_string())?;
    let status = response.status();
    let body = response.bytes().await.map_err(|error| error.to_string())?;
    if status != expected {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
}
