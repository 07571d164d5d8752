//! Parse + validate throughput on real webhook bodies.

use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sandgate_conversation::{parse_json, validate_body, validate_conversation};

fn fixture(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("SANDGATE_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/webhook")
        });
    let path = dir.join("accept").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_validate");
    for name in [
        "sdk158_stats_metrics.json",
        "kitchen_sink.json",
        "agent_basic_idle.json",
        "status_idle.json",
    ] {
        let body = fixture(name);
        assert!(
            parse_json(&body)
                .map_err(|e| vec![e])
                .and_then(validate_conversation)
                .is_ok(),
            "{name} must validate"
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let value = parse_json(std::hint::black_box(&body));
                value
                    .map_err(|e| vec![e])
                    .and_then(validate_conversation)
                    .is_ok()
            })
        });
        // What a delivery that validates costs: the borrowed fast path, which also
        // serializes the redacted record.
        assert!(validate_body(&body).is_some(), "{name} takes the fast path");
        group.bench_function(format!("{name} (fast path)"), |b| {
            b.iter(|| validate_body(std::hint::black_box(&body)).is_some())
        });
        group.bench_function(format!("{name} (parse only)"), |b| {
            b.iter(|| parse_json(std::hint::black_box(&body)).is_ok())
        });
        let parsed = parse_json(&body).unwrap_or_default();
        group.bench_function(format!("{name} (validate only)"), |b| {
            b.iter_batched(
                || parsed.clone(),
                |v| validate_conversation(v).is_ok(),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
