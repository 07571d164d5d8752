//! Replays the differential corpus (`tests/differential/corpus.jsonl.gz`, written by
//! `scripts/differential`): bodies generated from the schemas and fixtures, each judged by
//! the real `ConversationInfo` of agent-server 1.34.0 and 1.58.2. Sandgate must answer
//! every one as the releases do together:
//!
//! - a body either release accepts is accepted (real senders of both must get through);
//! - a body both refuse is refused with the first error of 1.34.0, the reference receiver
//!   (its `loc` and `type`), or 1.58.2's where 1.34.0 crashed; a crash of both is a 422
//!   anywhere; a body Python cannot decode as text (400) may be a 400 or a 422.
//!
//! Both of Sandgate's paths are held to it: the fast one (`validate_body`) may only accept
//! what the full one accepts.
#![expect(
    clippy::expect_used,
    reason = "the corpus is the test's input: one that does not read fails the test"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;

use base64::Engine;
use sandgate_conversation::{LocItem, parse_json, validate_body, validate_conversation};
use serde_json::Value;

const RELEASES: [&str; 2] = ["1.34.0", "1.58.2"];

struct Case {
    id: String,
    what: String,
    body: Vec<u8>,
    verdicts: Vec<Value>,
}

/// Another corpus than the committed one (`scripts/test` replays a fresh one the real
/// models judged in the same run): every case of it must agree, `known.txt` aside.
const CORPUS_VAR: &str = "SANDGATE_DIFFERENTIAL_CORPUS";

fn corpus() -> Vec<Case> {
    let path = match std::env::var_os(CORPUS_VAR) {
        Some(path) => std::path::PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/corpus.jsonl.gz"),
    };
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = BufReader::new(flate2::read::GzDecoder::new(file)).lines();
    let mut next = || -> Option<Value> {
        let line = lines.next()?.expect("the corpus reads");
        Some(serde_json::from_str(&line).expect("a corpus line is JSON"))
    };
    let head = next().expect("the seeds line");
    let seeds = head["seeds"].as_object().expect("seeds").clone();
    let mut cases = Vec::new();
    while let Some(case) = next() {
        let seed = seeds[case["seed"].as_str().expect("seed")]
            .as_str()
            .expect("a seed is text")
            .as_bytes();
        let keep = case["keep"].as_array().expect("keep");
        let (head, tail) = (as_usize(&keep[0]), as_usize(&keep[1]));
        let middle = match (&case["text"], &case["bytes"]) {
            (Value::String(text), _) => text.as_bytes().to_vec(),
            (_, Value::String(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
            _ => panic!("case {} has no middle", case["id"]),
        };
        let mut body = [&seed[..head], &middle, &seed[seed.len() - tail..]].concat();
        if let Some(encoding) = case["encoding"].as_str() {
            body = encode(&body, encoding);
        }
        cases.push(Case {
            id: case["id"].as_str().expect("id").to_owned(),
            what: case["what"].as_str().unwrap_or_default().to_owned(),
            body,
            verdicts: RELEASES.iter().map(|r| case[*r].clone()).collect(),
        });
    }
    cases
}

fn as_usize(v: &Value) -> usize {
    usize::try_from(v.as_u64().expect("an offset")).expect("an offset")
}

/// What Python's codec of that name writes for the (UTF-8) text: `utf-16` and `utf-32`
/// with a little-endian BOM, `utf-8-sig` with the UTF-8 one.
fn encode(text: &[u8], encoding: &str) -> Vec<u8> {
    let text = std::str::from_utf8(text).expect("an encoded case is text");
    let utf16 = |big: bool| -> Vec<u8> {
        text.encode_utf16()
            .flat_map(|u| {
                if big {
                    u.to_be_bytes()
                } else {
                    u.to_le_bytes()
                }
            })
            .collect()
    };
    let utf32 = |big: bool| -> Vec<u8> {
        text.chars()
            .flat_map(|c| {
                let c = u32::from(c);
                if big {
                    c.to_be_bytes()
                } else {
                    c.to_le_bytes()
                }
            })
            .collect()
    };
    match encoding {
        "utf-8-sig" => [b"\xEF\xBB\xBF".as_slice(), text.as_bytes()].concat(),
        "utf-16" => [b"\xFF\xFE".as_slice(), &utf16(false)].concat(),
        "utf-16-le" => utf16(false),
        "utf-16-be" => utf16(true),
        "utf-32" => [b"\xFF\xFE\x00\x00".as_slice(), &utf32(false)].concat(),
        "utf-32-le" => utf32(false),
        "utf-32-be" => utf32(true),
        other => panic!("unknown encoding {other}"),
    }
}

/// Sandgate's answer, as the webhook gives it: (status, loc, type) of the first error.
fn sandgate(body: &[u8]) -> (u16, Value, String) {
    if body.is_empty() {
        return (422, Value::Array(Vec::new()), "missing".to_owned());
    }
    let fast = validate_body(body).is_some();
    let full = parse_json(body)
        .map_err(|e| vec![e])
        .and_then(validate_conversation);
    match full {
        Ok(_) => (200, Value::Null, String::new()),
        Err(errors) => {
            assert!(!fast, "the fast path accepted what the full path refuses");
            let first = &errors[0];
            let loc = first
                .loc
                .iter()
                .map(|l| match l {
                    LocItem::Key(k) => Value::String(k.clone()),
                    LocItem::Index(i) => Value::from(*i),
                })
                .collect();
            (422, Value::Array(loc), first.error_type.to_owned())
        }
    }
}

/// Why Sandgate's answer differs from what the releases say together, if it does.
fn disagreement(case: &Case) -> Option<String> {
    let (status, loc, kind) = sandgate(&case.body);
    let status_of = |v: &Value| v["status"].as_u64().unwrap_or(0);
    if case.verdicts.iter().any(|v| status_of(v) == 200) {
        return (status != 200)
            .then(|| format!("accepted by a release; Sandgate {status} {kind} at {loc}"));
    }
    if status == 200 {
        return Some(format!(
            "refused by both ({}); Sandgate accepts",
            summary(&case.verdicts)
        ));
    }
    let Some(reference) = case.verdicts.iter().find(|v| status_of(v) != 500) else {
        return None; // both crashed: any 422 will do
    };
    if status_of(reference) == 400 {
        return None; // not text: 400 or 422
    }
    (reference["loc"] != loc || reference["type"] != kind.as_str()).then(|| {
        format!(
            "first error {kind} at {loc}; reference {} at {}",
            reference["type"], reference["loc"]
        )
    })
}

fn summary(verdicts: &[Value]) -> String {
    RELEASES
        .iter()
        .zip(verdicts)
        .map(|(r, v)| format!("{r}: {} {} at {}", v["status"], v["type"], v["loc"]))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How many disagreements a failure lists: 60, or `SANDGATE_DIFFERENTIAL_SHOW`.
fn shown() -> usize {
    std::env::var("SANDGATE_DIFFERENTIAL_SHOW")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60)
}

/// The disagreements not mended yet (`tests/differential/known.txt`: a case id per line, then
/// why), each listed so that a new one fails the test, and so does one that is mended and
/// still listed.
fn known() -> std::collections::BTreeSet<String> {
    if std::env::var_os(CORPUS_VAR).is_some() {
        return Default::default();
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/known.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn sandgate_judges_every_generated_body_as_the_real_models_do() {
    let cases = corpus();
    // The committed corpus is 24,000; the fresh one the test command judges, 6,000.
    let least = if std::env::var_os(CORPUS_VAR).is_some() {
        5_000
    } else {
        20_000
    };
    assert!(
        cases.len() >= least,
        "only {} cases in the corpus",
        cases.len()
    );
    let accepted = cases
        .iter()
        .filter(|c| c.verdicts.iter().any(|v| v["status"] == 200))
        .count();
    // A corpus of one verdict would test little: it holds both answers in quantity.
    assert!(
        accepted > 1_000 && cases.len() - accepted > 1_000,
        "{accepted} accepted"
    );
    let mut known = known();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let why = disagreement(case);
            let listed = known.remove(&case.id);
            match why {
                Some(why) if !listed => Some(format!("{} ({}): {why}", case.id, case.what)),
                None if listed => Some(format!(
                    "{} ({}): agrees now; take it off known.txt",
                    case.id, case.what
                )),
                _ => None,
            }
        })
        .collect();
    assert!(
        known.is_empty(),
        "known.txt lists cases the corpus lacks: {known:?}"
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with the real models, and known.txt does not list them:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(shown())
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
