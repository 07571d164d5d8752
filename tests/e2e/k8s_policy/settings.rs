//! The services' settings as the chart renders them: the store's URL and password, the
//! sandbox driver's settings, the DNS layout of spec 2.9, and the installer's files
//! (warm-runtimes.json, gateway.yaml) mounted where the environment says.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;

fn redis_url(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let mut urls = BTreeSet::new();
    for service in SERVICES {
        let Some(c) = install.service_container(service) else {
            out.push(format!("no Deployment {service}"));
            continue;
        };
        let at = format!("Deployment/{service}");
        let url = env_value(c, "REDIS_URL").unwrap_or_default();
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            out.push(format!("{at}: REDIS_URL is {url:?}"));
            continue;
        }
        urls.insert(url.to_owned());
        if !url.contains("$(REDIS_PASSWORD)") {
            out.push(format!(
                "{at}: REDIS_URL does not take its password from $(REDIS_PASSWORD)"
            ));
        }
        let names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
        let key = env_var(c, "REDIS_PASSWORD")
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref());
        let position = |name: &str| names.iter().position(|n| *n == name);
        if key.is_none_or(|k| (k.name.as_str(), k.key.as_str()) != ("cache", "redis-password")) {
            out.push(format!(
                "{at}: REDIS_PASSWORD is not secret cache, key redis-password"
            ));
        } else if position("REDIS_PASSWORD") > position("REDIS_URL") {
            out.push(format!("{at}: REDIS_PASSWORD is declared after REDIS_URL, so $(REDIS_PASSWORD) is not expanded"));
        }
    }
    if urls.len() > 1 {
        out.push(format!("the services use different stores: {urls:?}"));
    }
    out
}

#[test]
fn services_read_the_store_password_from_its_secret() {
    verify(&Check {
        title: "the store: every service reads REDIS_URL with $(REDIS_PASSWORD) from secret cache",
        run: redis_url,
        profiles: BOTH,
        mutations: &[
            ("model-gw's REDIS_URL carries the password inline", |i| {
                set_env(i, "model-gw", "REDIS_URL", "redis://:hunter2@redis:6379/0")
            }),
            ("REDIS_PASSWORD is declared after REDIS_URL", |i| {
                let env = container_mut(i, "edge").env.as_mut().expect("env");
                let at = env
                    .iter()
                    .position(|e| e.name == "REDIS_PASSWORD")
                    .expect("REDIS_PASSWORD");
                let password = env.remove(at);
                env.push(password);
            }),
        ],
    });
}

fn runtime_api_settings(install: &Install) -> Vec<String> {
    let Some(c) = install.service_container("runtime-api") else {
        return vec!["no Deployment runtime-api".into()];
    };
    let at = "Deployment/runtime-api";
    let mut out = vec![];
    for (name, want) in [
        ("SANDBOX_DRIVER", "kubernetes"),
        ("SANDBOX_NAMESPACE", SANDBOX_NS),
        ("SANDBOX_TLS_SECRET", TLS_SECRET),
    ] {
        if env_value(c, name) != Some(want) {
            out.push(format!(
                "{at}: {name} is {:?}, want {want:?}",
                env_value(c, name)
            ));
        }
    }
    for name in [
        "STORAGE_CLASS",
        "EPHEMERAL_STORAGE_SIZE",
        "RECONCILE_INTERVAL",
        "RUNTIME_DEAD_SECONDS",
        "WARM_RUNTIME_CONFIG_OVERLAY",
    ] {
        if env_value(c, name).is_none_or(str::is_empty) {
            out.push(format!("{at}: {name} is not set"));
        }
    }
    let classes: BTreeSet<Option<&str>> = install
        .ingresses
        .iter()
        .filter(|i| namespace_of(&i.metadata) == APP_NS)
        .map(|i| {
            i.spec
                .as_ref()
                .and_then(|s| s.ingress_class_name.as_deref())
        })
        .collect();
    let class = env_value(c, "SANDBOX_INGRESS_CLASS");
    if !classes.contains(&class) {
        out.push(format!(
            "{at}: SANDBOX_INGRESS_CLASS {class:?} is not the app Ingresses' class {classes:?}"
        ));
    }
    for name in ["RECONCILE_INTERVAL", "RUNTIME_DEAD_SECONDS"] {
        if let Some(value) = env_value(c, name).filter(|v| !v.bytes().all(|b| b.is_ascii_digit())) {
            out.push(format!("{at}: {name} is {value:?}, want seconds"));
        }
    }
    for name in [
        "ADMIN_PASSWORD",
        "JWT_SECRET",
        "DEFAULT_API_KEY",
        "SANDGATE_WEBHOOK_API_KEYS",
    ] {
        if env_var(c, name)
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .is_none()
        {
            out.push(format!("{at}: {name} does not come from a secret"));
        }
    }
    out
}

#[test]
fn runtime_api_drives_the_sandbox_namespace() {
    verify(&Check {
        title: "runtime-api's sandbox settings: kubernetes driver, sandbox namespace, storage class, sandbox ingress class and TLS",
        run: runtime_api_settings,
        profiles: BOTH,
        mutations: &[
            ("SANDBOX_NAMESPACE is the app namespace", |i| {
                set_env(i, "runtime-api", "SANDBOX_NAMESPACE", APP_NS)
            }),
            ("sandbox Ingresses use another TLS secret", |i| {
                set_env(i, "runtime-api", "SANDBOX_TLS_SECRET", "other-tls")
            }),
        ],
    });
}

/// What follows the first label of a host name.
fn parent(host: &str) -> &str {
    host.split_once('.').map_or(host, |(_, rest)| rest)
}

fn dns_layout(install: &Install) -> Vec<String> {
    let hosts: Vec<(String, &str)> = install
        .ingresses
        .iter()
        .filter(|i| namespace_of(&i.metadata) == APP_NS)
        .flat_map(|i| {
            i.spec
                .iter()
                .flat_map(|s| s.rules.iter().flatten())
                .map(move |r| (reference(i), r.host.as_deref().unwrap_or_default()))
        })
        .collect();
    let app = find(&install.ingresses, "app", APP_NS);
    let Some(app_host) =
        app.and_then(|a| a.spec.as_ref()?.rules.as_ref()?.first()?.host.as_deref())
    else {
        return vec!["no Ingress app".into()];
    };
    let base = parent(app_host);
    let mut out = vec![];
    for (at, host) in &hosts {
        if parent(host) != base || host.contains('*') {
            out.push(format!(
                "{at}: host {host:?} is not one label under {base:?}"
            ));
        }
    }
    let Some(c) = install.service_container("runtime-api") else {
        out.push("no Deployment runtime-api".into());
        return out;
    };
    let at = "Deployment/runtime-api";
    let base_url = env_value(c, "RUNTIME_BASE_URL").unwrap_or_default();
    let separator = env_value(c, "RUNTIME_URL_SEPARATOR");
    let pattern = env_value(c, "RUNTIME_URL_PATTERN");
    if base_url.is_empty()
        || parent(base_url) != base
        || base_url.matches('.').count() != base.matches('.').count() + 1
    {
        out.push(format!(
            "{at}: RUNTIME_BASE_URL {base_url:?} is not <label>.{base}"
        ));
    }
    if separator.is_none_or(|s| s.contains('.')) {
        out.push(format!("{at}: RUNTIME_URL_SEPARATOR {separator:?} would put sandbox hosts more than one label under {base}"));
    }
    let want = format!(
        "https://{{runtime_id}}{}{base_url}",
        separator.unwrap_or_default()
    );
    if pattern != Some(want.as_str()) {
        out.push(format!("{at}: RUNTIME_URL_PATTERN {pattern:?} does not match separator and base URL: want {want:?}"));
    }
    if env_value(c, "RUNTIME_DISABLE_SSL") != Some("false") {
        out.push(format!(
            "{at}: RUNTIME_DISABLE_SSL is {:?}: must be \"false\" for https sandbox URLs",
            env_value(c, "RUNTIME_DISABLE_SSL")
        ));
    }
    out
}

#[test]
fn sandbox_urls_follow_the_dns_layout() {
    verify(&Check {
        title: "the DNS layout: https sandbox URLs one label under the base domain (spec 2.9)",
        run: dns_layout,
        profiles: BOTH,
        mutations: &[
            ("RUNTIME_URL_PATTERN names another domain", |i| {
                set_env(
                    i,
                    "runtime-api",
                    "RUNTIME_URL_PATTERN",
                    "https://{runtime_id}-runtime.other.example",
                )
            }),
            ("RUNTIME_DISABLE_SSL is true", |i| {
                set_env(i, "runtime-api", "RUNTIME_DISABLE_SSL", "true")
            }),
            ("the app host is two labels down", |i| {
                let app = find_mut(&mut i.ingresses, "app", APP_NS);
                let rules = app
                    .spec
                    .as_mut()
                    .and_then(|s| s.rules.as_mut())
                    .expect("rules");
                rules[0].host = Some("www.app.sandgate.example.com".into());
            }),
        ],
    });
}

/// The ConfigMap file a service's variable names, once it is mounted there (without
/// subPath, so that edits reach the pods); problems otherwise.
fn mounted_file(
    install: &Install,
    service: &str,
    variable: &str,
    config_map: &str,
    out: &mut Vec<String>,
) -> Option<String> {
    let (Some(deployment), Some(c)) = (
        install.deployment(service),
        install.service_container(service),
    ) else {
        out.push(format!("no Deployment {service}"));
        return None;
    };
    let at = reference(deployment);
    let Some(path) = env_value(c, variable).filter(|p| !p.is_empty()) else {
        out.push(format!("{at}: {variable} is not set"));
        return None;
    };
    let (dir, key) = path.rsplit_once('/').unwrap_or(("", path));
    let volumes = Workload::of_deployment(deployment)
        .spec
        .volumes
        .clone()
        .unwrap_or_default();
    let from_config_map = |volume: &str| {
        volumes.iter().any(|v| {
            v.name == volume && v.config_map.as_ref().is_some_and(|m| m.name == config_map)
        })
    };
    let mounts: Vec<_> = c
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| m.mount_path == dir && from_config_map(&m.name))
        .collect();
    if mounts.is_empty() {
        out.push(format!(
            "{at}: no ConfigMap {config_map} mounted at {dir} ({variable}={path})"
        ));
    } else if mounts.iter().any(|m| m.sub_path.is_some()) {
        out.push(format!(
            "{at}: ConfigMap {config_map} is mounted with subPath: edits would never reach the pods"
        ));
    }
    let data = find(&install.config_maps, config_map, APP_NS)
        .and_then(|m| m.data.as_ref()?.get(key).cloned());
    if data.is_none() {
        out.push(format!("no ConfigMap {config_map} with key {key}"));
    }
    data
}

fn warm_runtimes_problems(text: &str, out: &mut Vec<String>) {
    let at = "ConfigMap/warm-runtimes (sandgate): warm-runtimes.json";
    let doc: Value = match serde_json::from_str(text) {
        Ok(doc) => doc,
        Err(error) => return out.push(format!("{at} does not parse: {error}")),
    };
    if doc.get("count").is_some_and(|c| !c.is_i64()) {
        out.push(format!("{at}: count is not an integer"));
    }
    let configs = doc["configs"].as_array().cloned().unwrap_or_default();
    if !configs.iter().any(|c| c["name"] == "v1_current") {
        out.push(format!("{at}: no default entry named v1_current"));
    }
    for c in &configs {
        let missing: Vec<&str> = ["name", "image", "working_dir", "command", "environment"]
            .into_iter()
            .filter(|k| c.get(k).is_none())
            .collect();
        if !missing.is_empty() {
            out.push(format!("{at}: {} lacks {missing:?}", c["name"]));
        }
        if c.get("source").is_some() {
            out.push(format!("{at}: {} has a source field", c["name"]));
        }
    }
    let images: BTreeSet<String> = configs.iter().map(|c| c["image"].to_string()).collect();
    if images.len() != configs.len() {
        out.push(format!(
            "{at}: two configurations share an image (spec 2.1 rule 3)"
        ));
    }
}

fn gateway_config_problems(install: &Install, text: &str, out: &mut Vec<String>) {
    let at = "ConfigMap/gateway-config (sandgate): gateway.yaml";
    let doc: Value = match serde_norway::from_str(text) {
        Ok(doc) => doc,
        Err(error) => return out.push(format!("{at} does not parse: {error}")),
    };
    let entries = doc["model_list"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        out.push(format!("{at}: empty model_list"));
    }
    let model_gw = install.service_container("model-gw");
    for e in &entries {
        let params = &e["gateway_params"];
        let set = |k: &str| !params[k].is_null() && params[k] != "" && params[k] != false;
        let missing: Vec<&str> = ["model", "api_base", "api_key"]
            .into_iter()
            .filter(|k| !set(k))
            .collect();
        if e["model_name"].as_str().is_none_or(str::is_empty) || !missing.is_empty() {
            out.push(format!(
                "{at}: entry {} lacks {missing:?} or a model_name",
                e["model_name"]
            ));
        }
        let key = params["api_key"].as_str().unwrap_or_default();
        if let Some(variable) = key.strip_prefix("os.environ/") {
            let has_env = model_gw.is_some_and(|c| env_var(c, variable).is_some());
            let has_from = model_gw.is_some_and(|c| {
                c.env_from.iter().flatten().any(|f| {
                    f.secret_ref
                        .as_ref()
                        .is_some_and(|s| s.name == "gateway-env-secrets")
                })
            });
            if !has_env && !has_from {
                out.push(format!(
                    "{at}: {variable} (entry {}) is not in model-gw's environment",
                    e["model_name"]
                ));
            }
        }
    }
    let forward = &doc["general_settings"]["forward_client_headers_to_llm_api"];
    if !(forward.is_null() || forward.is_boolean()) {
        out.push(format!(
            "{at}: forward_client_headers_to_llm_api is not a boolean"
        ));
    }
}

fn installer_files(install: &Install) -> Vec<String> {
    let mut out = vec![];
    if let Some(text) = mounted_file(
        install,
        "runtime-api",
        "WARM_RUNTIMES_FILE",
        "warm-runtimes",
        &mut out,
    ) {
        warm_runtimes_problems(&text, &mut out);
    }
    if let Some(text) = mounted_file(
        install,
        "model-gw",
        "GATEWAY_CONFIG",
        "gateway-config",
        &mut out,
    ) {
        gateway_config_problems(install, &text, &mut out);
    }
    out
}

fn set_config(install: &mut Install, config_map: &str, key: &str, text: &str) {
    let map = find_mut(&mut install.config_maps, config_map, APP_NS);
    map.data
        .get_or_insert_with(Default::default)
        .insert(key.into(), text.into());
}

#[test]
fn installer_files_are_mounted_and_valid() {
    verify(&Check {
        title: "the installer files: warm-runtimes.json with v1_current, gateway.yaml's model list, mounted where the env says",
        run: installer_files,
        profiles: BOTH,
        mutations: &[
            ("warm-runtimes.json has no v1_current", |i| {
                let json = r#"{"count": 1, "configs": [{"name": "other", "image": "i", "working_dir": "/w", "command": [], "environment": {}}]}"#;
                set_config(i, "warm-runtimes", "warm-runtimes.json", json);
            }),
            (
                "the warm-runtimes volume uses subPath (no live reload)",
                |i| {
                    let mounts = container_mut(i, "runtime-api")
                        .volume_mounts
                        .as_mut()
                        .expect("mounts");
                    for m in mounts.iter_mut().filter(|m| m.name == "warm-runtimes") {
                        m.sub_path = Some("warm-runtimes.json".into());
                    }
                },
            ),
            ("a model entry lacks api_base", |i| {
                let yaml = "model_list:\n  - model_name: m\n    gateway_params: {model: openai/x/y, api_key: k}\n";
                set_config(i, "gateway-config", "gateway.yaml", yaml);
            }),
        ],
    });
}
