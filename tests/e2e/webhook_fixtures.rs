//! Every fixture of `shared/fixtures/webhook` through the real HTTP path.

use serde_json::Value;

use crate::common::{Backend, Sandgate, WEBHOOK_KEY, fixtures};

fn expected_statuses(expected: &Value) -> Vec<u64> {
    match &expected["expected_status"] {
        Value::Array(statuses) => statuses.iter().filter_map(Value::as_u64).collect(),
        status => status.as_u64().into_iter().collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_gets_its_expected_status_and_first_error() {
    let backend = Backend::embedded();
    let server = Sandgate::start(&backend).await;
    let mut failures = Vec::new();
    let mut checked = 0;
    for folder in ["accept", "reject", "either"] {
        for (name, body, expected) in fixtures::all(folder) {
            checked += 1;
            let response = server.deliver(WEBHOOK_KEY, body).await;
            let status = u64::from(response.status().as_u16());
            let answer: Value = response.json().await.expect("a JSON answer");
            if !expected_statuses(&expected).contains(&status) {
                failures.push(format!(
                    "{folder}/{name}: got {status} {answer}, expected {}",
                    expected["expected_status"]
                ));
                continue;
            }
            if status == 422 && expected["reference_verdict"] == "invalid" {
                let want = &expected["reference_errors"][0];
                let got = &answer["detail"][0];
                let got_loc: Vec<Value> = got["loc"]
                    .as_array()
                    .expect("loc")
                    .iter()
                    .skip(1)
                    .cloned()
                    .collect();
                if got_loc != want["loc"].as_array().cloned().unwrap_or_default()
                    || got["type"] != want["type"]
                {
                    failures.push(format!(
                        "{folder}/{name}: first error {} at {:?}, reference {} at {}",
                        got["type"], got_loc, want["type"], want["loc"]
                    ));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} fixtures found under {}",
        fixtures::root().display()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} fixtures disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
