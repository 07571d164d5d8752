//! The reference receiver's answers to header, auth and content-type cases
//! (`http_cases.json`), on both stores.

use serde_json::Value;

use crate::common::{Backend, OTHER_WEBHOOK_KEY, Sandgate, fixtures, new_id};
use crate::on_both_backends;

/// The body of a case; "<corpus file>" cases stand for the body the reference echoed.
fn case_body(case: &Value) -> String {
    match case["request_body"].as_str() {
        Some("<corpus file>") => case["response_body"]["detail"][0]["input"].to_string(),
        Some(body) => body.to_owned(),
        None => String::new(),
    }
}

async fn every_http_case_matches_the_reference(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let cases: Vec<Value> = serde_json::from_slice(
        &std::fs::read(fixtures::root().join("http_cases.json")).expect("http_cases.json"),
    )
    .expect("JSON");
    let mut failures = Vec::new();
    for case in &cases {
        let mut body = case_body(case);
        if case["case"]
            .as_str()
            .is_some_and(|name| name.contains("owned by another"))
        {
            // The reference's store held this conversation for someone else: so does ours.
            let mut record: Value = serde_json::from_str(&body).expect("JSON body");
            record["id"] = new_id().into();
            body = record.to_string();
            assert_eq!(
                server
                    .deliver(OTHER_WEBHOOK_KEY, body.clone())
                    .await
                    .status(),
                200
            );
        }
        let mut request = server.client.request(
            case["method"]
                .as_str()
                .expect("method")
                .parse()
                .expect("method"),
            server.url(case["path"].as_str().expect("path")),
        );
        for (name, value) in case["request_headers"].as_object().expect("headers") {
            request = request.header(name.as_str(), value.as_str().expect("header value"));
        }
        let response = request.body(body).send().await.expect("request");
        let status = response.status().as_u16();
        for (name, want) in case["response_headers"].as_object().expect("headers") {
            let got = response
                .headers()
                .get(name.as_str())
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            let matches = match name.as_str() {
                // The reference ran as http://testserver.
                "location" => want.as_str().is_some_and(|want| {
                    want.ends_with(got.trim_start_matches(&format!("http://{}", server.address)))
                }),
                _ => Some(got) == want.as_str(),
            };
            if !matches {
                failures.push(format!(
                    "{}: header {name} is {got:?}, reference {want}",
                    case["case"]
                ));
            }
        }
        let text = response.text().await.expect("body");
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let want_status = case["status"].as_u64().expect("status");
        let want = &case["response_body"];
        let body_matches = match (&want["detail"], &body["detail"]) {
            (Value::Array(want), Value::Array(got)) => {
                want[0]["type"] == got[0]["type"] && want[0]["loc"] == got[0]["loc"]
            }
            (want_detail, got_detail) => want_detail == got_detail || want == &body,
        };
        if u64::from(status) != want_status || !body_matches {
            failures.push(format!(
                "{}: got {status} {body}, reference {want_status} {want}",
                case["case"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

on_both_backends!(every_http_case_matches_the_reference);
