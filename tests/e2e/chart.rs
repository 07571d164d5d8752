//! The Helm chart's preflight hook, run as the cluster would run it: its Jobs rendered by
//! the real `helm` 4 (`.tools/helm/helm`, installed by `scripts/check-k8s`), each container
//! started with its args and its environment, the secrets it references filled in and the
//! hook's ConfigMap mounted, against the real `sandgate` binary and a real Redis. A good
//! values file passes; a bad one fails the Job, which fails `helm install`.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{RedisServer, repository, run_sandgate, tool};

/// A secret as strong as `gen-secrets` makes them: what every referenced secret holds.
const SECRET: &str = "5f0c6a1d2b3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccdd";

/// The preflight hook's objects, `helm template` of the prod example values with `sets`
/// (`--set-json` pairs) as JSON values.
fn render_preflight(sets: &[String]) -> Vec<Value> {
    let mut command = std::process::Command::new(tool("helm/helm", "scripts/check-k8s"));
    command
        .args(["template", "sandgate"])
        .arg(repository("k8s/chart"))
        .args([
            "--namespace",
            "sandgate",
            "--show-only",
            "templates/preflight.yaml",
        ])
        .arg("--values")
        .arg(repository("k8s/values/prod.yaml"));
    for set in sets {
        command.args(["--set-json", set]);
    }
    let output = command.output().expect("run helm");
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    serde_norway::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).expect("a YAML object"))
        .filter(|value: &Value| !value.is_null())
        .collect()
}

/// What one preflight container printed, and whether it passed.
struct Checked {
    service: String,
    passed: bool,
    report: String,
}

/// Runs every container of the preflight Jobs as the kubelet would: its args, its `env`
/// (`$(NAME)` expanded from the variables before it, every secretKeyRef holding `SECRET`),
/// `envFrom` gateway-env-secrets holding `env_secrets`, and the hook's ConfigMap at its
/// mount path (a directory of its own here, the paths in the environment rewritten to it).
async fn run_preflight(sets: &[String], env_secrets: &[(&str, &str)]) -> Vec<Checked> {
    let objects = render_preflight(sets);
    let config = objects
        .iter()
        .find(|object| object["kind"] == "ConfigMap")
        .expect("the preflight ConfigMap");
    let files = tempfile::tempdir().expect("temp dir");
    for (name, content) in config["data"].as_object().expect("data") {
        std::fs::write(files.path().join(name), content.as_str().expect("text")).expect("write");
    }
    let mut checked = Vec::new();
    let jobs = objects.iter().filter(|object| object["kind"] == "Job");
    for job in jobs {
        let hook = &job["metadata"]["annotations"]["helm.sh/hook"];
        assert_eq!(hook, "pre-install,pre-upgrade", "{job}");
        let pod = &job["spec"]["template"]["spec"];
        for container in pod["containers"].as_array().expect("containers") {
            let mount = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|mount| mount["name"] == "config")
                .and_then(|mount| mount["mountPath"].as_str());
            let mut env: Vec<(String, String)> = Vec::new();
            if container["envFrom"].is_array() {
                env.extend(
                    env_secrets
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
                );
            }
            for variable in container["env"].as_array().expect("env") {
                let name = variable["name"].as_str().expect("name").to_owned();
                let value = match variable["value"].as_str() {
                    Some(value) => {
                        let defined: HashMap<&str, &str> =
                            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                        let mut value = value.to_owned();
                        for (k, v) in defined {
                            value = value.replace(&format!("$({k})"), v);
                        }
                        match mount {
                            Some(path) if value.starts_with(path) => {
                                value.replacen(path, &files.path().display().to_string(), 1)
                            }
                            _ => value,
                        }
                    }
                    None => {
                        assert!(
                            variable["valueFrom"]["secretKeyRef"].is_object(),
                            "{variable}"
                        );
                        SECRET.to_owned()
                    }
                };
                env.push((name, value));
            }
            let args: Vec<&str> = container["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|arg| arg.as_str().expect("an arg"))
                .collect();
            let envs: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let output = run_sandgate(&args, &envs).await;
            checked.push(Checked {
                service: container["name"].as_str().expect("name").to_owned(),
                passed: output.status.success(),
                report: String::from_utf8_lossy(&output.stdout).into_owned(),
            });
        }
    }
    checked
}

/// The external Redis of the values: a real one on a free port, with the `cache` secret's
/// password, named as the prod example names its own.
fn redis_url_set(redis: &RedisServer) -> String {
    let url = redis.url().replace(SECRET, "$(REDIS_PASSWORD)");
    format!("sandgate.redis.url={}", serde_json::json!(url))
}

#[tokio::test]
async fn the_preflight_hook_passes_the_prod_example_with_its_store_reachable() {
    let redis = RedisServer::start_with_password(SECRET).await;
    let checked = run_preflight(&[redis_url_set(&redis)], &[]).await;
    let services: Vec<&str> = checked.iter().map(|c| c.service.as_str()).collect();
    assert_eq!(services, ["runtime-api", "edge", "model-gw"]);
    for check in &checked {
        assert!(check.passed, "{}: {}", check.service, check.report);
        assert!(
            check.report.contains(": 0 errors"),
            "{}: {}",
            check.service,
            check.report
        );
    }
}

#[tokio::test]
async fn the_preflight_hook_fails_the_install_naming_what_is_wrong() {
    let redis = RedisServer::start_with_password(SECRET).await;
    // A model list naming a provider key that gateway-env-secrets does not hold.
    let model = serde_json::json!([{
        "model_name": "m",
        "gateway_params": {
            "model": "openai/azure/gpt-4o",
            "api_base": "https://gateway.example.com/v1",
            "api_key": "os.environ/AZURE_KEY",
        },
    }]);
    let sets = [
        redis_url_set(&redis),
        format!("gateway-helm.proxy_config.model_list={model}"),
    ];
    let checked = run_preflight(&sets, &[("OTHER_KEY", "sk-other")]).await;
    let model_gw = checked
        .iter()
        .find(|c| c.service == "model-gw")
        .expect("model-gw");
    assert!(!model_gw.passed, "{}", model_gw.report);
    assert!(model_gw.report.contains("AZURE_KEY"), "{}", model_gw.report);
    // With the key in the secret, the same values pass.
    let checked = run_preflight(&sets, &[("AZURE_KEY", "sk-azure")]).await;
    assert!(checked.iter().all(|c| c.passed));

    // An external Redis that does not answer: runtime-api's check connects and fails.
    drop(redis);
    let closed = RedisServer::start_with_password(SECRET).await;
    let url = redis_url_set(&closed);
    drop(closed);
    let checked = run_preflight(&[url], &[]).await;
    let runtime_api = checked
        .iter()
        .find(|c| c.service == "runtime-api")
        .expect("runtime-api");
    assert!(!runtime_api.passed, "{}", runtime_api.report);
    assert!(
        runtime_api.report.contains("REDIS_URL"),
        "{}",
        runtime_api.report
    );
}
