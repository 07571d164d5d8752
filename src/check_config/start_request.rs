//! `check-config --start-request FILE`: holds a `/start` body (as the app server sends it,
//! saved to a file) against each installer warm configuration, and names the fields in
//! which it differs, so that an operator sees why starts cold-start before deploying.
//! The comparison is the claim's own (`sandboxes::matching`): a configuration personalised
//! at claim compares what shapes the process, an exact one the environment too.

use sandgate_runtime_api::admin::installer::Installer;
use sandgate_runtime_api::sandboxes::matching::{differences, is_deferred, personal};
use sandgate_store::SandboxSpec;
use serde_json::Value;

use super::{Finding, RuntimeApiSettings, Severity};

const SETTING: &str = "--start-request";

/// What `settings.start_request` would claim of `installer`'s configurations.
pub fn start_request(settings: &RuntimeApiSettings, installer: Option<&Installer>) -> Vec<Finding> {
    let Some(path) = &settings.start_request else {
        return Vec::new();
    };
    let spec = match std::fs::read_to_string(path)
        .map_err(|err| err.to_string())
        .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|err| err.to_string()))
        .and_then(|body| spec(&body))
    {
        Ok(spec) => spec,
        Err(err) => {
            return vec![Finding::new(
                Severity::Error,
                SETTING,
                format!("cannot read the start request {}: {err}", path.display()),
            )];
        }
    };
    let Some(installer) = installer.filter(|installer| !installer.configs.is_empty()) else {
        return vec![Finding::new(
            Severity::Error,
            SETTING,
            "no warm configuration (WARM_RUNTIMES_FILE) to claim: every start cold-starts",
        )];
    };
    let mut findings = Vec::new();
    let mut claimed = false;
    for (name, config) in &installer.configs {
        let pool = SandboxSpec {
            image: config.image.clone(),
            command: config.command.clone(),
            working_dir: config.working_dir.clone(),
            environment: config.environment.clone(),
            run_as_user: config.run_as_user,
            run_as_group: config.run_as_group,
            fs_group: config.fs_group,
            fuse_s3_mount: config.fuse_s3_mount,
            resource_factor: None,
        };
        let found = differences(&spec, &pool);
        if found.is_empty() {
            claimed = true;
            continue;
        }
        let kind = if is_deferred(&pool) {
            "personalised at claim"
        } else {
            "exact"
        };
        let details: Vec<String> = found.into_iter().map(|found| found.detail).collect();
        findings.push(Finding::new(
            Severity::Warning,
            SETTING,
            format!(
                "the start differs from {name} ({kind}): {}",
                details.join("; ")
            ),
        ));
    }
    if !claimed {
        findings.push(Finding::new(
            Severity::Error,
            SETTING,
            "no warm configuration matches the start: it would cold-start",
        ));
    }
    findings
}

/// The spec of a `/start` body: what the claim compares.
fn spec(body: &Value) -> Result<SandboxSpec, String> {
    let text = |field: &str| body[field].as_str().unwrap_or_default().to_owned();
    let command = match &body["command"] {
        Value::Array(parts) => parts
            .iter()
            .map(|part| part.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("command: a list of strings")?,
        Value::String(line) => line.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let environment = match &body["environment"] {
        Value::Object(entries) => entries
            .iter()
            .map(|(key, value)| value.as_str().map(|value| (key.clone(), value.to_owned())))
            .collect::<Option<_>>()
            .ok_or("environment: an object of strings")?,
        _ => Default::default(),
    };
    Ok(personal(SandboxSpec {
        image: text("image"),
        command,
        working_dir: text("working_dir"),
        environment,
        run_as_user: body["run_as_user"].as_i64(),
        run_as_group: body["run_as_group"].as_i64(),
        fs_group: body["fs_group"].as_i64(),
        fuse_s3_mount: body["fuse_s3_mount"].as_bool(),
        resource_factor: body["resource_factor"].as_f64(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(start: Value, configs: Value) -> Vec<Finding> {
        let request = tempfile::NamedTempFile::new().expect("file");
        std::fs::write(request.path(), start.to_string()).expect("write");
        let installer: Installer = Installer::parse(&json_text(&configs)).expect("configs");
        start_request(
            &RuntimeApiSettings {
                start_request: Some(request.path().to_owned()),
                ..RuntimeApiSettings::default()
            },
            Some(&installer),
        )
    }

    fn json_text(value: &Value) -> String {
        value.to_string()
    }

    #[test]
    fn each_configuration_that_differs_is_named_with_its_fields() {
        let start = serde_json::json!({
            "image": "agent:1", "command": ["agent", "--port", "60000"],
            "working_dir": "/workspace", "environment": {"WORKER_1": "12000"},
            "run_as_user": 10001, "run_as_group": 10001, "resource_factor": 1,
        });
        let configs = serde_json::json!({"configs": [
            {"name": "exact", "image": "agent:0", "command": ["agent", "--port", "60000"],
             "working_dir": "/workspace/project", "environment": {}},
            {"name": "dormant", "image": "agent:1", "command": ["agent", "--port", "60000"],
             "working_dir": "/workspace", "environment": {"OH_DEFERRED_INIT": "true"},
             "run_as_user": 10001, "run_as_group": 10001},
        ]});
        let findings = check(start.clone(), configs);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let message = &findings[0].message;
        assert!(message.contains("exact (exact)"), "{message}");
        assert!(message.contains("image"), "{message}");
        assert!(message.contains("working_dir"), "{message}");
        assert!(message.contains("environment WORKER_1"), "{message}");
        assert!(!findings[0].is_error());

        let only_exact = serde_json::json!({"configs": [
            {"name": "exact", "image": "agent:1", "command": ["agent"],
             "working_dir": "/workspace", "environment": {}},
        ]});
        let findings = check(start, only_exact);
        assert!(findings.iter().any(Finding::is_error), "{findings:?}");
    }
}
