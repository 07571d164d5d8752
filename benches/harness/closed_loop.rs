//! A closed-loop HTTP/1.1 load generator: each worker sends its next request as soon as
//! the previous answer arrived.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::Full;

pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
}

impl Outcome {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at `quantile`, in milliseconds.
    pub fn ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// A latency histogram in µs, from 1 µs to a minute.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")
}

/// Closed-loop load on `base` (`http://host:port`): `concurrency` workers, each on its
/// own connection ([`connect`]), sending the request `next` makes as soon as the previous answer (a
/// 200 counts as success) arrived, for `seconds`.
pub async fn load<F>(base: &str, concurrency: usize, seconds: u64, next: F) -> Outcome
where
    F: Fn() -> http::Request<Full<Bytes>> + Clone + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let mut sender = connect(base).await;
        let (stop, next) = (stop.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut latency = histogram();
            let (mut requests, mut errors) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let request = next();
                let sent = Instant::now();
                let ok = match sender.send_request(request).await {
                    Ok(response) => {
                        response.status() == 200
                            && http_body_util::BodyExt::collect(response.into_body())
                                .await
                                .is_ok()
                    }
                    Err(_) => false,
                };
                latency.saturating_record(sent.elapsed().as_micros() as u64);
                requests += 1;
                errors += u64::from(!ok);
            }
            (requests, errors, latency)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcome = Outcome {
        requests: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency: histogram(),
    };
    for worker in workers {
        let (requests, errors, latency) = worker.await.expect("worker");
        outcome.requests += requests;
        outcome.errors += errors;
        outcome.latency.add(latency).expect("same bounds");
    }
    outcome.elapsed = started.elapsed();
    outcome
}

/// A keep-alive HTTP/1.1 connection to `base` (`http://host:port`), without Nagle's delay,
/// on hyper's bare client: the generator costs the machine little.
pub async fn connect(base: &str) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// `BENCH_CONCURRENCY`: the concurrency levels to run, default `1,16,64`.
pub fn concurrency_levels() -> Vec<usize> {
    std::env::var("BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "1,16,64".into())
        .split(',')
        .filter_map(|level| level.trim().parse().ok())
        .collect()
}
