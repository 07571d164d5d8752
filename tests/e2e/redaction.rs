//! No secret value reaches the store, the logs or an answer.

use serde_json::{Value, json};

use crate::common::{
    Backend, RUNTIME_KEY, Sandgate, SandgateProcess, WEBHOOK_KEY, conversation, new_id, serve_args,
};

pub(crate) const SECRETS: &[&str] = &[
    "sk-llm-api-key-0001",
    "remote-workspace-key-0002",
    "static-secret-value-0003",
    "mcp-env-secret-0004",
    "mcp-bearer-token-0005",
    "acp-resume-session-0006",
    "lookup-header-secret-0007",
    // What the schema does not mark (issue 16, item 9).
    "extra-header-bearer-0008",
    "url-userinfo-password-0009",
    "undeclared-field-token-0010",
];

/// Native-agent and ACP-agent bodies carrying every kind of secret a sender puts in clear.
pub(crate) fn bodies_with_secrets() -> Vec<Value> {
    let mut native = conversation(&new_id(), "2026-03-01T12:00:00Z", "running");
    native["agent"]["llm"]["api_key"] = SECRETS[0].into();
    native["workspace"] = json!({"kind": "RemoteWorkspace", "working_dir": "/w", "host": "http://h", "api_key": SECRETS[1]});
    native["secret_registry"] = json!({"secret_sources": {
        "TOKEN": {"kind": "StaticSecret", "value": SECRETS[2]},
        "LOOKUP": {"kind": "LookupSecret", "url": "https://vault", "headers": {"Authorization": SECRETS[6]}},
    }});
    native["agent"]["mcp_config"] = json!({
        "fetch": {"command": "uvx", "args": ["mcp-server-fetch"], "env": {"TOKEN": SECRETS[3]}},
        "remote": {"url": "https://mcp.example", "auth": {"strategy": "bearer", "value": SECRETS[4]}},
    });
    native["agent"]["llm"]["extra_headers"] =
        json!({"Authorization": format!("Bearer {}", SECRETS[7])});
    native["agent"]["llm"]["base_url"] =
        format!("https://svc:{}@llm.example/v1", SECRETS[8]).into();
    native["platform_extras"] = json!({"deploy_token": SECRETS[9]});
    let mut acp = conversation(&new_id(), "2026-03-01T12:00:00Z", "running");
    acp["agent"] = json!({"kind": "ACPAgent", "acp_command": ["claude-code-acp"], "acp_resume_session_id": SECRETS[5]});
    vec![native, acp]
}

fn leaked(text: &str) -> Vec<&'static str> {
    SECRETS
        .iter()
        .copied()
        .filter(|secret| text.contains(secret))
        .collect()
}

async fn stored_bytes(backend: &Backend) -> String {
    match backend {
        Backend::Redis(redis) => {
            let mut dump = String::new();
            // Every server that holds data: the server, or each master of a cluster.
            for mut connection in redis.node_connections().await {
                let keys: Vec<String> = ::redis::cmd("KEYS")
                    .arg("*")
                    .query_async(&mut connection)
                    .await
                    .expect("keys");
                for key in keys {
                    // Every value as Redis hands it out (DUMP would compress long strings).
                    let kind: String = ::redis::cmd("TYPE")
                        .arg(&key)
                        .query_async(&mut connection)
                        .await
                        .expect("type");
                    let command = match kind.as_str() {
                        "string" => ::redis::cmd("GET").arg(&key).clone(),
                        "hash" => ::redis::cmd("HGETALL").arg(&key).clone(),
                        "zset" => ::redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).clone(),
                        other => panic!("unexpected key type {other} at {key}"),
                    };
                    let values: Vec<Vec<u8>> = match kind.as_str() {
                        "string" => vec![command.query_async(&mut connection).await.expect("read")],
                        _ => command.query_async(&mut connection).await.expect("read"),
                    };
                    for value in values {
                        dump.push_str(&String::from_utf8_lossy(&value));
                    }
                }
            }
            dump
        }
        Backend::Embedded(dir) => {
            let bytes = std::fs::read(dir.path().join("sandgate.redb")).expect("database file");
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

async fn secrets_never_reach_the_store_or_the_answers(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    for body in bodies_with_secrets() {
        assert_eq!(
            server.deliver(WEBHOOK_KEY, body.to_string()).await.status(),
            200
        );
        let id = body["id"].as_str().expect("id");
        let answer = server.conversation(id).await.text().await.expect("text");
        assert!(
            leaked(&answer).is_empty(),
            "GET leaks {:?}",
            leaked(&answer)
        );
        // A rejected body's error echoes its input: redacted too.
        let mut invalid = body.clone();
        invalid.as_object_mut().expect("object").remove("id");
        let answer = server.deliver(WEBHOOK_KEY, invalid.to_string()).await;
        assert_eq!(answer.status(), 422);
        let answer = answer.text().await.expect("text");
        assert!(
            leaked(&answer).is_empty(),
            "the 422 leaks {:?}",
            leaked(&answer)
        );
    }
    server.stop().await;
    let stored = stored_bytes(&backend).await;
    assert!(
        stored.contains("**********"),
        "redaction markers are stored"
    );
    assert!(
        leaked(&stored).is_empty(),
        "the store holds {:?}",
        leaked(&stored)
    );
}

crate::on_both_backends!(secrets_never_reach_the_store_or_the_answers);

#[tokio::test]
async fn secrets_never_reach_the_logs_even_at_trace_level() {
    let backend = Backend::embedded();
    let mut server =
        SandgateProcess::spawn(&serve_args(&backend), &[("SANDGATE_LOG", "trace")]).await;
    let client = reqwest::Client::new();
    for body in bodies_with_secrets() {
        assert_eq!(server.deliver(&client, &body).await, 200);
        let id = body["id"].as_str().expect("id");
        assert_eq!(server.conversation(&client, id).await.status(), 200);
    }
    assert_eq!(server.terminate().await, Some(0));
    let log = server.log();
    assert!(
        log.contains("conversation recorded"),
        "the deliveries were logged:\n{log}"
    );
    assert!(leaked(&log).is_empty(), "the log holds {:?}", leaked(&log));
    for key in [WEBHOOK_KEY, RUNTIME_KEY] {
        assert!(!log.contains(key), "the log holds an API key");
    }
}
