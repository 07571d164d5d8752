//! The chart's values: bad values files refused by values.schema.json or the render-time
//! guards, naming the key; the switches (TLS off, the default ingress class, no gateway,
//! another sandbox namespace, ...) rendering what they say, and valid against the
//! Kubernetes schemas; the platform-style values file rendering what prod.yaml does; and
//! k8s/namespaces.yaml's Pod Security Standard.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use serde_json::Value;

use super::*;

const EXAMPLE: &str = "k8s/values/prod.yaml";

/// Bad values (as --set-json changes to the prod example) that the schema or the
/// render-time guards must refuse, and what helm's error must name.
const REFUSED: &[(&str, &[&str], &[&str])] = &[
    (
        "a wrong type: runtime-api.replicaCount as a string",
        &[r#"runtime-api.replicaCount="two""#],
        &["replicaCount"],
    ),
    (
        "a wrong type: tls.enabled as a string",
        &[r#"tls.enabled="yes""#],
        &["/tls/enabled"],
    ),
    (
        "a wrong type: a warm configuration's command as a number",
        &["runtime-api.warmRuntimes.configs[0].command=5"],
        &["command"],
    ),
    (
        "a typo in a known section: ingress.hots",
        &[r#"ingress.hots="app.example.com""#],
        &["hots"],
    ),
    (
        "a typo in runtime-api: sandbox_namepsace",
        &[r#"runtime-api.sandbox_namepsace="sandboxes""#],
        &["sandbox_namepsace"],
    ),
    (
        "a typo in runtime-api.env: RUNTIME_BASE_ULR",
        &[r#"runtime-api.env.RUNTIME_BASE_ULR="runtime.example.com""#],
        &["RUNTIME_BASE_ULR"],
    ),
    (
        "a typo at the top: ingres",
        &[r#"ingres={"enabled":true}"#],
        &["ingres"],
    ),
    (
        "a typo in Sandgate's own: sandgate.redis.uri",
        &[r#"sandgate.redis.uri="redis://x""#],
        &["uri"],
    ),
    (
        "a missing required host: ingress.host",
        &[r#"ingress.host="""#],
        &["ingress.host"],
    ),
    (
        "a missing required host: runtime-api.ingress.host (and no sandbox.apiHostname)",
        &[
            r#"runtime-api.ingress.host="""#,
            r#"sandbox.apiHostname="""#,
        ],
        &["runtime-api.ingress.host"],
    ),
    (
        "a host with a scheme: ingress.host",
        &[r#"ingress.host="https://app.example.com""#],
        &["/ingress/host"],
    ),
    (
        "sandbox.apiHostname naming another host than runtime-api.ingress.host",
        &[r#"sandbox.apiHostname="https://api.other.example.com""#],
        &["sandbox.apiHostname", "runtime-api.ingress.host"],
    ),
    (
        "RUNTIME_URL_PATTERN disagreeing with RUNTIME_BASE_URL",
        &[r#"env.RUNTIME_URL_PATTERN="https://{runtime_id}-runtime.other.example.com""#],
        &["env.RUNTIME_URL_PATTERN", "RUNTIME_BASE_URL"],
    ),
    (
        "RUNTIME_URL_PATTERN disagreeing with the separator",
        &[r#"runtime-api.env.RUNTIME_URL_SEPARATOR="--""#],
        &["env.RUNTIME_URL_PATTERN", "RUNTIME_URL_SEPARATOR"],
    ),
    (
        "RUNTIME_URL_PATTERN https while RUNTIME_DISABLE_SSL is true",
        &[r#"runtime-api.env.RUNTIME_DISABLE_SSL="true""#],
        &["env.RUNTIME_URL_PATTERN", "RUNTIME_DISABLE_SSL"],
    ),
    (
        "a missing STORAGE_CLASS",
        &[r#"runtime-api.env.STORAGE_CLASS="""#],
        &["runtime-api.env.STORAGE_CLASS"],
    ),
    (
        "no Redis: neither sandgate.redis.url nor bundled",
        &[r#"sandgate.redis.url="""#],
        &["sandgate.redis.url"],
    ),
    (
        "a model entry without gateway_params",
        &[r#"gateway-helm.proxy_config.model_list=[{"model_name":"m"}]"#],
        &["model_list"],
    ),
    (
        "disruption budgets over a single replica",
        &["runtime-api.replicaCount=1"],
        &["sandgate.podDisruptionBudgets", "runtime-api.replicaCount"],
    ),
    (
        "a support bundle taking no log lines: sandgate.troubleshoot.logs.maxLines 0",
        &["sandgate.troubleshoot.logs.maxLines=0"],
        &["maxLines"],
    ),
    (
        "a typo in the troubleshoot.sh specs' values: sandgate.troubleshoot.enable",
        &["sandgate.troubleshoot.enable=false"],
        &["enable"],
    ),
];

#[test]
fn chart_refuses_bad_values_naming_the_key() {
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = REFUSED
            .iter()
            .map(|(what, sets, names)| {
                scope.spawn(move || match render(&[EXAMPLE], sets) {
                    Ok(_) => Some(format!("{what}: rendered without an error")),
                    Err(error) => {
                        let missing: Vec<&&str> =
                            names.iter().filter(|n| !error.contains(**n)).collect();
                        (!missing.is_empty()).then(|| {
                            format!("{what}: the error does not name {missing:?}: {error}")
                        })
                    }
                })
            })
            .collect();
        runs.into_iter()
            .filter_map(|run| run.join().expect("a render"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "values: bad values files not refused naming the key:\n  - {}",
        failures.join("\n  - ")
    );
}

fn runtime_env(install: &Install, name: &str) -> Option<String> {
    install
        .service_container("runtime-api")
        .and_then(|c| env_var(c, name))
        .map(|e| e.value.clone().unwrap_or_default())
}

/// What a switch's rendering must show: its problems (the parsed install, its documents).
type SwitchRule = fn(&Install, &[Value]) -> Vec<String>;

fn tls_off(i: &Install, _: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = i
        .ingresses
        .iter()
        .filter(|g| g.spec.as_ref().is_some_and(|s| s.tls.is_some()))
        .map(|g| format!("{} has tls", reference(g)))
        .collect();
    out.extend(
        runtime_env(i, "SANDBOX_TLS_SECRET")
            .map(|_| "Deployment/runtime-api: SANDBOX_TLS_SECRET is set".to_owned()),
    );
    out
}

fn default_class(i: &Install, _: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = i
        .ingresses
        .iter()
        .filter(|g| {
            g.spec
                .as_ref()
                .is_some_and(|s| s.ingress_class_name.is_some())
        })
        .map(|g| format!("{} names a class", reference(g)))
        .collect();
    out.extend(
        runtime_env(i, "SANDBOX_INGRESS_CLASS")
            .map(|_| "Deployment/runtime-api: SANDBOX_INGRESS_CLASS is set".to_owned()),
    );
    out
}

fn api_host_from_sandbox(i: &Install, _: &[Value]) -> Vec<String> {
    let host = find(&i.ingresses, "runtime-api", APP_NS)
        .and_then(|g| g.spec.as_ref()?.rules.as_ref()?.first()?.host.clone());
    if host.as_deref() == Some("runtime-api.sandgate.example.com") {
        vec![]
    } else {
        vec![format!(
            "Ingress/runtime-api: host {host:?} is not sandbox.apiHostname's"
        )]
    }
}

fn no_gateway(i: &Install, docs: &[Value]) -> Vec<String> {
    let gateway = [
        "model-gw",
        "gateway-config",
        "preflight-model-gw",
        "test-model-gw",
    ];
    let mut out: Vec<String> = docs
        .iter()
        .filter(|d| gateway.iter().any(|g| d["metadata"]["name"] == *g))
        .map(doc_reference)
        .collect();
    if i.service_container("edge")
        .and_then(|c| env_var(c, "SANDGATE_MODEL_GW_URL"))
        .is_some()
    {
        out.push("Deployment/edge: SANDGATE_MODEL_GW_URL is set".into());
    }
    out
}

fn other_sandbox_namespace(i: &Install, _: &[Value]) -> Vec<String> {
    let mut out = vec![];
    if find(&i.roles, "runtime-api-sandboxes", "agents").is_none() {
        out.push("no Role runtime-api-sandboxes in agents".into());
    }
    if runtime_env(i, "SANDBOX_NAMESPACE").as_deref() != Some("agents") {
        out.push("Deployment/runtime-api: SANDBOX_NAMESPACE is not agents".into());
    }
    let edge =
        find(&i.network_policies, "edge", APP_NS).map(|p| serde_json::to_string(p).expect("JSON"));
    if !edge.is_some_and(|p| p.contains("agents")) {
        out.push("NetworkPolicy/edge (sandgate): does not let agents in".into());
    }
    out
}

fn replica_acks(i: &Install, _: &[Value]) -> Vec<String> {
    SERVICES
        .iter()
        .filter(|s| i.service_env(s, "REDIS_MIN_REPLICAS_ACK") != Some("1"))
        .map(|s| format!("Deployment/{s}: no REDIS_MIN_REPLICAS_ACK=1"))
        .collect()
}

/// Values that switch parts of the install, as changes to the prod example, and what the
/// rendering must then show (no problem).
const SWITCHES: &[(&str, &[&str], SwitchRule)] = &[
    (
        "tls.enabled false: no Ingress serves TLS, sandboxes get no TLS secret",
        &["tls.enabled=false"],
        tls_off,
    ),
    (
        "an empty ingress.class: the cluster's default class, for the sandboxes too",
        &[r#"ingress.class="""#],
        default_class,
    ),
    (
        "runtime-api.ingress.host empty: taken from sandbox.apiHostname",
        &[r#"runtime-api.ingress.host="""#],
        api_host_from_sandbox,
    ),
    (
        "gateway-helm.enabled false: no model-gw, the edge without its URL",
        &["gateway-helm.enabled=false"],
        no_gateway,
    ),
    (
        "another sandbox namespace: the Role, SANDBOX_NAMESPACE and the edge's policy follow",
        &[r#"runtime-api.sandbox_namespace="agents""#],
        other_sandbox_namespace,
    ),
    (
        "sandgate.redis.minReplicasAck 1: every service acknowledges with a replica",
        &["sandgate.redis.minReplicasAck=1"],
        replica_acks,
    ),
];

/// Problems kubernetes-validate (`.tools/k8s-venv`) finds in objects, strictly, against
/// the Kubernetes 1.37 schemas.
fn schema_problems(docs: &[Value]) -> Vec<String> {
    // As JSON documents (JSON is YAML): a string is never read back as another type.
    let text: String = docs.iter().map(|d| format!("---\n{d}\n")).collect();
    let file = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(file.path(), text).expect("write");
    let output = std::process::Command::new(tool(
        "k8s-venv/bin/kubernetes-validate",
        "scripts/check-k8s",
    ))
    .args(["--strict", "--quiet", "--kubernetes-version", "1.37.0"])
    .arg(file.path())
    .output()
    .expect("run kubernetes-validate");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut out: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("ERROR"))
        .map(String::from)
        .collect();
    if !output.status.success() && out.is_empty() {
        out.push(format!(
            "kubernetes-validate failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    out
}

#[test]
fn switches_render_what_they_say() {
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = SWITCHES
            .iter()
            .map(|(what, sets, check)| {
                scope.spawn(move || {
                    let docs = match render(&[EXAMPLE], sets) {
                        Ok(docs) => docs,
                        Err(error) => return vec![format!("{what}: {error}")],
                    };
                    let mut problems = schema_problems(&docs);
                    problems.extend(check(
                        &Install::parse("prod with changes", Value::Null, docs.clone()),
                        &docs,
                    ));
                    problems
                        .into_iter()
                        .map(|p| format!("{what}: {p}"))
                        .collect()
                })
            })
            .collect();
        runs.into_iter()
            .flat_map(|run| run.join().expect("a render"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "values: switches:\n  - {}",
        failures.join("\n  - ")
    );
}

/// The switches' rules and the strict schema validation fail on what they must refuse.
#[test]
fn switch_rules_and_schema_validation_can_fail() {
    let prod = install(Profile::Prod);
    let prod_docs = render(&[EXAMPLE], &[]).expect("render");
    // prod.yaml's runtime-api host is sandbox.apiHostname's already: that rule is proven on
    // an Ingress of another host.
    let mut other_host = prod.clone();
    let ingress = find_mut(&mut other_host.ingresses, "runtime-api", APP_NS);
    ingress
        .spec
        .as_mut()
        .and_then(|s| s.rules.as_mut())
        .expect("rules")[0]
        .host = Some("api.other.example.com".into());
    for (what, _, check) in SWITCHES {
        let install = if what.starts_with("runtime-api.ingress.host empty") {
            &other_host
        } else {
            prod
        };
        assert!(
            !check(install, &prod_docs).is_empty(),
            "\"{what}\" passes on the prod example, which does not switch it"
        );
    }
    let mut docs = prod_docs;
    let edge = docs
        .iter_mut()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "edge")
        .expect("the edge");
    edge["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] =
        true.into();
    let problems = schema_problems(&docs);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("readOnlyRootFileSystem")),
        "a misspelt field passed: {problems:?}"
    );
}

/// `Kind/name (namespace)` of a document.
fn doc_reference(doc: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    format!(
        "{}/{} ({})",
        text(&doc["kind"]),
        text(&doc["metadata"]["name"]),
        text(&doc["metadata"]["namespace"])
    )
}

fn keyed(docs: Vec<Value>) -> BTreeMap<String, Value> {
    docs.into_iter().map(|d| (doc_reference(&d), d)).collect()
}

#[test]
fn platform_values_render_as_prod() {
    let example = keyed(render(&[EXAMPLE], &[]).expect("render prod.yaml"));
    let platform = keyed(render(&["k8s/values/platform.yaml"], &[]).expect("render platform.yaml"));
    let mut problems: Vec<String> = example
        .keys()
        .filter(|k| !platform.contains_key(*k))
        .map(|k| format!("only with prod.yaml: {k}"))
        .collect();
    problems.extend(
        platform
            .keys()
            .filter(|k| !example.contains_key(*k))
            .map(|k| format!("only with platform.yaml: {k}")),
    );
    problems.extend(
        example
            .iter()
            .filter(|(k, v)| platform.get(*k).is_some_and(|p| p != *v))
            .map(|(k, _)| format!("{k} differs")),
    );
    assert!(
        problems.is_empty(),
        "values: the platform-style platform.yaml renders the same objects as prod.yaml:\n  - {}",
        problems.join("\n  - ")
    );
}

fn namespace_problems(docs: &[Value]) -> Vec<String> {
    let mut out = vec![];
    let mut namespaces = BTreeMap::new();
    for doc in docs {
        match serde_json::from_value::<Namespace>(doc.clone()) {
            Ok(ns) => {
                namespaces.insert(name_of(&ns.metadata).to_owned(), ns);
            }
            Err(_) => out.push(format!("{} is not a Namespace", doc_reference(doc))),
        }
    }
    for ns in [APP_NS, SANDBOX_NS] {
        if !namespaces.contains_key(ns) {
            out.push(format!("no Namespace {ns}"));
        }
    }
    let enforce = namespaces.get(APP_NS).and_then(|ns| {
        labels(Some(&ns.metadata))
            .get("pod-security.kubernetes.io/enforce")
            .cloned()
    });
    if enforce.as_deref() != Some("restricted") {
        out.push(format!(
            "Namespace/{APP_NS} does not enforce the restricted Pod Security Standard"
        ));
    }
    out
}

#[test]
fn namespaces_enforce_the_restricted_pod_security_standard() {
    let text =
        std::fs::read_to_string(repository("k8s/namespaces.yaml")).expect("k8s/namespaces.yaml");
    let docs = yaml_documents(&text);
    let problems = namespace_problems(&docs);
    assert!(
        problems.is_empty(),
        "namespaces: {APP_NS} (enforcing the restricted Pod Security Standard) and {SANDBOX_NS}, nothing else:\n  - {}",
        problems.join("\n  - ")
    );
    let mut broken = docs.clone();
    for doc in &mut broken {
        if let Some(labels) = doc["metadata"]["labels"].as_object_mut() {
            labels.remove("pod-security.kubernetes.io/enforce");
        }
    }
    assert!(
        !namespace_problems(&broken).is_empty(),
        "the check passed although the app namespace enforces no Pod Security Standard"
    );
}
