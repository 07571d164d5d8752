//! Replays the shared webhook fixtures: every body must get the status its sidecar
//! expects, reference rejections must match the reference's first error (loc and type),
//! and no secret from an accepted body may survive into the stored record.

use std::path::{Path, PathBuf};

use sandgate_conversation::{LocItem, REDACTED, parse_json, validate_conversation};
use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    std::env::var_os("SANDGATE_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/webhook")
        })
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (name, body bytes, sidecar) for every fixture in `folder`.
fn cases(folder: &str) -> Vec<(String, Vec<u8>, Value)> {
    let dir = fixtures_dir().join(folder);
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if stem.ends_with(".expected") {
            continue;
        }
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let sidecar = read_json(&dir.join(format!("{stem}.expected.json")));
        out.push((format!("{folder}/{stem}"), body, sidecar));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn loc_json(loc: &[LocItem]) -> Value {
    Value::Array(
        loc.iter()
            .map(|l| match l {
                LocItem::Key(k) => Value::String(k.clone()),
                LocItem::Index(i) => Value::from(*i),
            })
            .collect(),
    )
}

#[test]
fn every_fixture_gets_its_expected_status() {
    let mut failures = Vec::new();
    let mut count = 0;
    for folder in ["accept", "reject", "either"] {
        for (name, body, sidecar) in cases(folder) {
            count += 1;
            let expected: Vec<u64> = sidecar["expected_status"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let result = parse_json(&body)
                .map_err(|e| vec![e])
                .and_then(validate_conversation);
            let status = if result.is_ok() { 200 } else { 422 };
            let status_ok =
                expected.contains(&status) || (status == 422 && expected.contains(&400));
            if !status_ok {
                let detail = result
                    .err()
                    .map(|e| format!("{:?}", e.first()))
                    .unwrap_or_default();
                failures.push(format!(
                    "{name}: got {status}, expected {expected:?} {detail}"
                ));
                continue;
            }
            if sidecar["reference_verdict"] == "invalid"
                && let Err(errors) = &result
            {
                let reference = &sidecar["reference_errors"][0];
                let ours = &errors[0];
                if loc_json(&ours.loc) != reference["loc"] || ours.error_type != reference["type"] {
                    failures.push(format!(
                        "{name}: first error {} {:?} ({}), reference {} {} ({})",
                        loc_json(&ours.loc),
                        ours.error_type,
                        ours.msg,
                        reference["loc"],
                        reference["type"],
                        reference["msg"]
                    ));
                }
            }
        }
    }
    assert!(
        count >= 100,
        "only {count} fixtures found under {}",
        fixtures_dir().display()
    );
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Strings at the positions that must be redacted, collected from the raw body by key
/// name, independently of the validator's schema walk.
fn collect_secrets(v: &Value, parent: &str, out: &mut Vec<String>) {
    const SECRET_KEYS: [&str; 10] = [
        "api_key",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "acp_resume_session_id",
        "password",
        "client_secret",
        "access_token",
        "refresh_token",
        "value",
    ];
    const SECRET_MAPS: [&str; 3] = ["env", "headers", "secrets"];
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                // `value` is a secret only in StaticSecret and MCP auth credentials.
                let holds_value_secret = map.get("kind").and_then(Value::as_str)
                    == Some("StaticSecret")
                    || map.contains_key("strategy");
                let is_secret_key =
                    SECRET_KEYS.contains(&k.as_str()) && (k != "value" || holds_value_secret);
                if let Value::String(s) = child
                    && (is_secret_key || SECRET_MAPS.contains(&parent))
                    && s.len() >= 4
                    && s != REDACTED
                {
                    out.push(s.clone());
                }
                collect_secrets(child, k, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_secrets(i, parent, out)),
        _ => {}
    }
}

#[test]
fn accepted_records_hold_no_secret() {
    let mut leaks = Vec::new();
    let mut secrets_seen = 0;
    for (name, body, _) in cases("accept") {
        let Ok(parsed) = parse_json(&body) else {
            continue;
        };
        let mut secrets = Vec::new();
        collect_secrets(&parsed, "", &mut secrets);
        secrets_seen += secrets.len();
        let Ok(valid) = validate_conversation(parsed) else {
            continue;
        };
        let stored = serde_json::to_string(&valid.record).unwrap_or_default();
        for s in secrets {
            if stored.contains(&format!("\"{}\"", s.replace('"', "\\\""))) {
                leaks.push(format!("{name}: {s}"));
            }
        }
    }
    assert!(
        secrets_seen > 0,
        "the accept fixtures carry no secret to check"
    );
    assert!(
        leaks.is_empty(),
        "secrets stored in clear:\n{}",
        leaks.join("\n")
    );
}
