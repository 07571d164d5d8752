//! The troubleshoot.sh specs the chart ships (issue 44): Secrets `sandgate-preflight` and
//! `sandgate-support-bundle`, labelled `troubleshoot.sh/kind`, holding a Preflight that
//! checks what the install needs (every secret it reads, the storage and ingress classes,
//! the sandbox namespace, ephemeral storage for every warm sandbox), and a SupportBundle
//! with a Redactor that collects bounded logs, both namespaces and `sandgate
//! support-bundle` (the preflight's own rules are in troubleshoot_preflight.rs). Each spec
//! is validated against troubleshoot.sh's published v1beta2 schemas, vendored by
//! scripts/vendor-troubleshoot-schemas (which scripts/check-k8s runs before the tests), by
//! the jsonschema CLI of `.tools/k8s-venv`: a schema that is not there is a failure, never
//! a skipped check.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::*;

/// The keys `kubectl preflight` and `kubectl support-bundle` read in the Secrets.
pub const TROUBLESHOOT_KEYS: [&str; 3] = ["preflight.yaml", "support-bundle-spec", "redactor-spec"];
const SCHEMAS: &str = "k8s/schemas/troubleshoot";
pub(super) const PREFLIGHT: &str = "sandgate-preflight";
const SUPPORT_BUNDLE: &str = "sandgate-support-bundle";

pub fn troubleshoot_kind(meta: &ObjectMeta) -> Option<&str> {
    meta.labels
        .as_ref()?
        .get("troubleshoot.sh/kind")
        .map(String::as_str)
}

/// The documents under each key of Secret `name`; a problem unless it is labelled
/// troubleshoot.sh/kind: `kind`.
fn specs(
    install: &Install,
    name: &str,
    kind: &str,
    out: &mut Vec<String>,
) -> BTreeMap<String, Vec<Value>> {
    let Some(secret) = find(&install.secrets, name, APP_NS) else {
        out.push(format!("no Secret {name} in {APP_NS}"));
        return BTreeMap::new();
    };
    if troubleshoot_kind(&secret.metadata) != Some(kind) {
        out.push(format!(
            "{} is labelled troubleshoot.sh/kind={:?}, want {kind:?}",
            reference(secret),
            troubleshoot_kind(&secret.metadata)
        ));
    }
    secret
        .string_data
        .iter()
        .flatten()
        .map(|(key, text)| (key.clone(), yaml_documents(text)))
        .collect()
}

pub(super) fn first_spec(install: &Install, name: &str, key: &str) -> Value {
    let kind = if name == PREFLIGHT {
        "preflight"
    } else {
        "support-bundle"
    };
    let docs = specs(install, name, kind, &mut vec![])
        .remove(key)
        .unwrap_or_default();
    docs.into_iter()
        .next()
        .map_or(Value::Null, |d| d["spec"].clone())
}

/// The entries of one kind in a spec's `analyzers` or `collectors`.
pub(super) fn entries<'a>(spec: &'a Value, list: &str, kind: &str) -> Vec<&'a Value> {
    spec[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get(kind))
        .collect()
}

/// For mutations: rewrites the first document under a key of a troubleshoot Secret.
pub(super) fn edit_spec(
    install: &mut Install,
    name: &str,
    key: &str,
    edit: impl FnOnce(&mut Value),
) {
    let secret = find_mut(&mut install.secrets, name, APP_NS);
    let text = secret
        .string_data
        .as_mut()
        .and_then(|d| d.get_mut(key))
        .expect("mutation: the spec");
    let mut doc = yaml_documents(text)
        .into_iter()
        .next()
        .expect("mutation: a document");
    edit(&mut doc);
    *text = serde_norway::to_string(&doc).expect("YAML");
}

pub(super) fn each_entry_mut(
    doc: &mut Value,
    list: &str,
    kind: &str,
    mut edit: impl FnMut(&mut Value),
) {
    for entry in doc["spec"][list].as_array_mut().into_iter().flatten() {
        if let Some(inner) = entry.get_mut(kind) {
            edit(inner);
        }
    }
}

/// `doc` against troubleshoot.sh's published schema of its kind (v1beta2); a problem when
/// that schema is not vendored.
fn schema_problems(doc: &Value, at: &str) -> Vec<String> {
    let file = match (doc["apiVersion"].as_str(), doc["kind"].as_str()) {
        (Some("troubleshoot.sh/v1beta2"), Some("Preflight")) => {
            "preflight-troubleshoot-v1beta2.json"
        }
        (Some("troubleshoot.sh/v1beta2"), Some("SupportBundle")) => {
            "supportbundle-troubleshoot-v1beta2.json"
        }
        (Some("troubleshoot.sh/v1beta2"), Some("Redactor")) => "redactor-troubleshoot-v1beta2.json",
        (api, kind) => {
            return vec![format!(
                "{at}: {api:?}/{kind:?} is not a troubleshoot.sh/v1beta2 Preflight, SupportBundle or Redactor"
            )];
        }
    };
    let schema = repository(SCHEMAS).join(file);
    if !schema.is_file() {
        return vec![missing_schema(&schema, at)];
    }
    json_schema_problems(doc, &schema, at)
}

fn missing_schema(schema: &std::path::Path, at: &str) -> String {
    format!(
        "{at}: no schema {} to validate it against (scripts/vendor-troubleshoot-schemas --verify puts it there)",
        schema.display()
    )
}

/// `doc` validated against a JSON schema by the jsonschema CLI: one line per error.
fn json_schema_problems(doc: &Value, schema: &std::path::Path, at: &str) -> Vec<String> {
    let instance = file_of(&doc.to_string());
    let output = std::process::Command::new(tool("k8s-venv/bin/jsonschema", "scripts/check-k8s"))
        .env("PYTHONWARNINGS", "ignore")
        .args([
            "--output",
            "plain",
            "--error-format",
            "{error.json_path}: {error.message}\n",
            "--instance",
        ])
        .arg(instance.path())
        .arg(schema)
        .output()
        .expect("run jsonschema");
    let errors = String::from_utf8_lossy(&output.stderr).into_owned()
        + &String::from_utf8_lossy(&output.stdout);
    if output.status.success() {
        return vec![];
    }
    errors
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{at}: {l}"))
        .collect()
}

fn file_of(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(file.path(), text).expect("write");
    file
}

type Wanted<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

fn troubleshoot_specs(install: &Install) -> Vec<String> {
    let mut out = vec![];
    // (Secret, its troubleshoot.sh/kind, [(key, the kind of spec it holds)])
    let want: [Wanted<'_>; 2] = [
        (PREFLIGHT, "preflight", &[("preflight.yaml", "Preflight")]),
        (
            SUPPORT_BUNDLE,
            "support-bundle",
            &[
                ("support-bundle-spec", "SupportBundle"),
                ("redactor-spec", "Redactor"),
            ],
        ),
    ];
    for (name, kind, keys) in want {
        let found = specs(install, name, kind, &mut out);
        for (key, spec_kind) in keys {
            let Some(docs) = found.get(*key).filter(|d| !d.is_empty()) else {
                out.push(format!("Secret/{name} ({APP_NS}) has no {key}"));
                continue;
            };
            let kinds: Vec<&str> = docs
                .iter()
                .map(|d| d["kind"].as_str().unwrap_or("?"))
                .collect();
            if kinds != [*spec_kind] {
                out.push(format!(
                    "Secret/{name} ({APP_NS}) key {key} holds {kinds:?}, want [{spec_kind:?}]"
                ));
            }
            for doc in docs {
                out.extend(schema_problems(
                    doc,
                    &format!("Secret/{name} ({APP_NS}) key {key}"),
                ));
            }
        }
    }
    out
}

#[test]
fn troubleshoot_specs_are_labelled_and_valid() {
    verify(&Check {
        title: "troubleshoot.sh: Secrets <release>-preflight and <release>-support-bundle, labelled troubleshoot.sh/kind, hold a Preflight, a SupportBundle and a Redactor valid against troubleshoot.sh's v1beta2 schemas",
        run: troubleshoot_specs,
        profiles: BOTH,
        mutations: &[
            (
                "the preflight Secret loses its troubleshoot.sh/kind label",
                |i| {
                    let secret = find_mut(&mut i.secrets, PREFLIGHT, APP_NS);
                    secret
                        .metadata
                        .labels
                        .as_mut()
                        .expect("labels")
                        .remove("troubleshoot.sh/kind");
                },
            ),
            ("the support-bundle Secret has no redactors", |i| {
                let secret = find_mut(&mut i.secrets, SUPPORT_BUNDLE, APP_NS);
                secret
                    .string_data
                    .as_mut()
                    .expect("stringData")
                    .remove("redactor-spec");
            }),
        ],
    });
}

/// The schema's own mutation: the schemas judge the specs.
#[test]
fn troubleshoot_schema_refuses_a_log_limit_that_is_not_a_number() {
    let mut broken = install(Profile::Prod).clone();
    edit_spec(&mut broken, SUPPORT_BUNDLE, "support-bundle-spec", |doc| {
        each_entry_mut(doc, "collectors", "logs", |logs| {
            logs["limits"]["maxLines"] = "lots".into()
        });
    });
    let problems = troubleshoot_specs(&broken);
    assert!(
        problems.iter().any(|p| p.contains("maxLines")),
        "the support bundle's log limit is not a number, and the schema took it: {problems:?}"
    );
}

/// The validator the rule relies on reports an instance its schema refuses, naming where.
#[test]
fn troubleshoot_schema_validation_reports_errors() {
    let schema = file_of(r#"{"type": "object", "properties": {"spec": {"type": "object"}}}"#);
    let problems = json_schema_problems(
        &serde_json::json!({"spec": 5}),
        schema.path(),
        "Secret/x key y",
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("Secret/x key y: $.spec")),
        "{problems:?}"
    );
    assert!(json_schema_problems(&serde_json::json!({"spec": {}}), schema.path(), "x").is_empty());
}

/// The labels of a collector's `selector: [k=v, ...]`, as a selector.
fn collector_selector(
    collector: &Value,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    let pairs = collector["selector"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str()?.split_once('='));
    match_labels(&pairs.map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
}

fn troubleshoot_support_bundle(install: &Install) -> Vec<String> {
    let at = format!("Secret/{SUPPORT_BUNDLE} ({APP_NS})");
    let spec = first_spec(install, SUPPORT_BUNDLE, "support-bundle-spec");
    let mut out = vec![];
    let namespaces: BTreeSet<&str> = entries(&spec, "collectors", "clusterResources")
        .iter()
        .flat_map(|c| c["namespaces"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    if !namespaces.contains(APP_NS) || !namespaces.contains(SANDBOX_NS) {
        out.push(format!(
            "{at}: clusterResources collects {namespaces:?}, want {APP_NS} and {SANDBOX_NS}"
        ));
    }
    let logs: Vec<&Value> = entries(&spec, "collectors", "logs")
        .into_iter()
        .filter(|c| c["namespace"] == APP_NS)
        .collect();
    if logs.is_empty() {
        out.push(format!("{at}: no logs collector in {APP_NS}"));
    }
    let deployed: Vec<&str> = SERVICES
        .into_iter()
        .filter(|s| install.deployment(s).is_some())
        .collect();
    let set = |v: &Value| !(v.is_null() || *v == 0 || *v == "");
    for c in logs {
        let limits = &c["limits"];
        if !(set(&limits["maxLines"]) || set(&limits["maxBytes"]))
            || !(set(&limits["maxAge"]) || set(&limits["sinceTime"]))
        {
            out.push(format!(
                "{at}: logs collector {} is unbounded: {limits}",
                c["name"]
            ));
        }
        let selector = collector_selector(c);
        let selected: Vec<&str> = deployed
            .iter()
            .copied()
            .filter(|s| {
                install.deployment(s).is_some_and(|d| {
                    selector_matches(Some(&selector), Workload::of_deployment(d).labels)
                })
            })
            .collect();
        if selected.len() != deployed.len() {
            out.push(format!(
                "{at}: logs collector {} selects {selected:?}, not every Sandgate service",
                c["name"]
            ));
        }
    }
    let execs: Vec<&Value> = entries(&spec, "collectors", "exec")
        .into_iter()
        .filter(|c| c["args"][0] == "support-bundle")
        .collect();
    if execs.is_empty() {
        out.push(format!(
            "{at}: no exec collector runs `sandgate support-bundle`"
        ));
    }
    let runtime_api = install
        .deployment("runtime-api")
        .map(Workload::of_deployment);
    let metrics = listen_port(install.service_env("runtime-api", "SANDGATE_METRICS_LISTEN"));
    for c in execs {
        let selector = collector_selector(c);
        if !runtime_api.is_some_and(|w| selector_matches(Some(&selector), w.labels)) {
            out.push(format!(
                "{at}: exec collector {} does not select runtime-api's pods",
                c["name"]
            ));
        }
        let args: Vec<&str> = c["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let url = args
            .iter()
            .position(|a| *a == "--url")
            .and_then(|n| args.get(n + 1))
            .copied()
            .unwrap_or_default();
        if metrics.is_none_or(|port| !url.ends_with(&format!(":{port}"))) {
            out.push(format!("{at}: exec collector {} asks {url:?}, not runtime-api's metrics listener (:{metrics:?})", c["name"]));
        }
    }
    out
}

#[test]
fn troubleshoot_support_bundle_collects_bounded_diagnostics() {
    verify(&Check {
        title: "troubleshoot.sh support bundle: Sandgate's pods' logs (bounded), both namespaces' resources and events, and `sandgate support-bundle` run in runtime-api's pod",
        run: troubleshoot_support_bundle,
        profiles: BOTH,
        mutations: &[
            ("the support bundle's logs are unbounded", |i| {
                edit_spec(i, SUPPORT_BUNDLE, "support-bundle-spec", |doc| {
                    each_entry_mut(doc, "collectors", "logs", |logs| {
                        logs.as_object_mut().expect("a collector").remove("limits");
                    })
                })
            }),
            ("the sandbox namespace's resources are not collected", |i| {
                edit_spec(i, SUPPORT_BUNDLE, "support-bundle-spec", |doc| {
                    each_entry_mut(doc, "collectors", "clusterResources", |c| {
                        for ns in c["namespaces"]
                            .as_array_mut()
                            .into_iter()
                            .flatten()
                            .filter(|ns| **ns == SANDBOX_NS)
                        {
                            *ns = "elsewhere".into();
                        }
                    })
                })
            }),
            ("Sandgate's own diagnostics are not collected", |i| {
                edit_spec(i, SUPPORT_BUNDLE, "support-bundle-spec", |doc| {
                    each_entry_mut(doc, "collectors", "exec", |c| {
                        c["args"]
                            .as_array_mut()
                            .expect("args")
                            .retain(|a| *a != "support-bundle");
                    })
                })
            }),
        ],
    });
}
