//! The troubleshoot.sh preflight the chart ships (issue 44): it checks the Kubernetes
//! version, every secret and key the install reads (and collects none's value), the storage
//! class, the ingress class, the sandbox namespace, and ephemeral storage for every warm
//! sandbox.

use std::collections::BTreeSet;

use serde_json::Value;

use super::troubleshoot::{PREFLIGHT, each_entry_mut, edit_spec, entries, first_spec};
use super::*;

/// (namespace, secret, key) the workloads and ingresses read; key None for a whole secret.
fn referenced_secrets(
    install: &Install,
) -> BTreeSet<(Option<String>, Option<String>, Option<String>)> {
    let mut refs = BTreeSet::new();
    for w in install
        .workloads()
        .into_iter()
        .filter(|w| hook(w.meta).is_none())
    {
        let ns = Some(w.namespace().to_owned());
        for c in w.containers() {
            for e in c.env.iter().flatten() {
                if let Some(r) = e
                    .value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref())
                {
                    refs.insert((ns.clone(), Some(r.name.clone()), Some(r.key.clone())));
                }
            }
            for from in c.env_from.iter().flatten() {
                if let Some(r) = &from.secret_ref {
                    refs.insert((ns.clone(), Some(r.name.clone()), None));
                }
            }
        }
    }
    for ingress in &install.ingresses {
        for tls in ingress.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
            refs.insert((
                ingress.metadata.namespace.clone(),
                tls.secret_name.clone(),
                Some("tls.crt".into()),
            ));
        }
    }
    if let Some(secret) = install.service_env("runtime-api", "SANDBOX_TLS_SECRET") {
        refs.insert((
            Some(SANDBOX_NS.into()),
            Some(secret.into()),
            Some("tls.crt".into()),
        ));
    }
    refs
}

/// Bytes in a Kubernetes quantity (`25Gi`, `500M`).
fn quantity_bytes(text: &str) -> f64 {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "Ki" => 1024.0,
        "M" => 1e6,
        "Mi" => 1024.0 * 1024.0,
        "G" => 1e9,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1e12,
        "Ti" => 1024.0f64.powi(4),
        _ => f64::NAN,
    };
    number.parse::<f64>().unwrap_or(f64::NAN) * scale
}

const CAPACITY: &str = "sum(ephemeralStorageAllocatable) < ";

fn troubleshoot_preflight(install: &Install) -> Vec<String> {
    let at = format!("Secret/{PREFLIGHT} ({APP_NS})");
    let spec = first_spec(install, PREFLIGHT, "preflight.yaml");
    let mut out = vec![];
    if entries(&spec, "analyzers", "clusterVersion").is_empty() {
        out.push(format!("{at}: no clusterVersion analyzer"));
    }
    let text = |v: &Value| v.as_str().map(String::from);
    let checked: BTreeSet<_> = entries(&spec, "analyzers", "secret")
        .iter()
        .map(|a| {
            (
                text(&a["namespace"]),
                text(&a["secretName"]),
                text(&a["key"]),
            )
        })
        .collect();
    let collected: BTreeSet<_> = entries(&spec, "collectors", "secret")
        .iter()
        .map(|c| (text(&c["namespace"]), text(&c["name"]), text(&c["key"])))
        .collect();
    for r in referenced_secrets(install) {
        if !checked.contains(&r) {
            out.push(format!("{at}: the install reads secret {:?} key {:?} in {:?}: no secret analyzer checks it", r.1, r.2, r.0));
        } else if !collected.contains(&r) {
            out.push(format!(
                "{at}: secret {:?} key {:?} in {:?} is analyzed but never collected",
                r.1, r.2, r.0
            ));
        }
    }
    for c in entries(&spec, "collectors", "secret")
        .into_iter()
        .filter(|c| c["includeValue"] == true)
    {
        out.push(format!(
            "{at}: the preflight collects secret {}'s value",
            c["name"]
        ));
    }
    if let Some(class) = install
        .service_env("runtime-api", "STORAGE_CLASS")
        .filter(|c| !c.is_empty())
        && !entries(&spec, "analyzers", "storageClass")
            .iter()
            .any(|a| a["storageClassName"] == class)
    {
        out.push(format!("{at}: no storageClass analyzer for {class:?}"));
    }
    if !entries(&spec, "analyzers", "textAnalyze")
        .iter()
        .any(|a| a["fileName"] == "cluster-resources/ingress-classes.json")
    {
        out.push(format!("{at}: no ingress class analyzer (textAnalyze of cluster-resources/ingress-classes.json)"));
    }
    if !entries(&spec, "analyzers", "clusterResource")
        .iter()
        .any(|a| a["kind"] == "Namespace" && a["name"] == SANDBOX_NS)
    {
        out.push(format!(
            "{at}: no clusterResource analyzer for Namespace {SANDBOX_NS}"
        ));
    }
    // The pools' ephemeral storage: EPHEMERAL_STORAGE_SIZE times the warm sandboxes asked for.
    let warm_file = find(&install.config_maps, "warm-runtimes", APP_NS)
        .and_then(|m| m.data.as_ref()?.get("warm-runtimes.json").cloned());
    let warm: i64 = warm_file.map_or(0, |text| {
        let doc: Value = serde_json::from_str(&text).expect("warm-runtimes.json");
        let count = doc["count"].as_i64().unwrap_or(1);
        doc["configs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["count"].as_i64().unwrap_or(count))
            .sum()
    });
    let size = install
        .service_env("runtime-api", "EPHEMERAL_STORAGE_SIZE")
        .unwrap_or("25Gi");
    let needed = quantity_bytes(size) * warm as f64;
    let whens: Vec<&str> = entries(&spec, "analyzers", "nodeResources")
        .iter()
        .flat_map(|a| a["outcomes"].as_array().into_iter().flatten())
        .filter_map(|o| o["fail"]["when"].as_str())
        .collect();
    let sized = whens.iter().any(|w| {
        w.strip_prefix(CAPACITY)
            .and_then(|n| n.parse::<f64>().ok())
            .is_some_and(|n| (n - needed).abs() < 1.0)
    });
    if !sized {
        out.push(format!("{at}: no nodeResources analyzer failing when {CAPACITY}{needed:.0} ({warm} warm sandboxes x {size}): {whens:?}"));
    }
    out
}

#[test]
fn troubleshoot_preflight_checks_what_the_install_needs() {
    verify(&Check {
        title: "troubleshoot.sh preflight: the Kubernetes version, every secret and key the install reads, the storage class, the ingress class, the sandbox namespace, and ephemeral storage for every warm sandbox",
        run: troubleshoot_preflight,
        profiles: BOTH,
        mutations: &[
            ("the preflight no longer checks secret jwt-secret", |i| {
                edit_spec(i, PREFLIGHT, "preflight.yaml", |doc| {
                    let analyzers = doc["spec"]["analyzers"].as_array_mut().expect("analyzers");
                    analyzers.retain(|a| a["secret"]["secretName"] != "jwt-secret");
                })
            }),
            (
                "the node capacity check asks for one warm sandbox less",
                |i| {
                    edit_spec(i, PREFLIGHT, "preflight.yaml", |doc| {
                        each_entry_mut(doc, "analyzers", "nodeResources", |a| {
                            for outcome in a["outcomes"].as_array_mut().into_iter().flatten() {
                                let when = outcome["fail"]["when"]
                                    .as_str()
                                    .and_then(|w| w.strip_prefix(CAPACITY)?.parse::<i64>().ok());
                                if let Some(bytes) = when {
                                    outcome["fail"]["when"] =
                                        format!("{CAPACITY}{}", bytes - 1).into();
                                }
                            }
                        })
                    })
                },
            ),
            ("the preflight forgets the sandbox namespace", |i| {
                edit_spec(i, PREFLIGHT, "preflight.yaml", |doc| {
                    each_entry_mut(doc, "analyzers", "clusterResource", |a| {
                        if a["kind"] == "Namespace" {
                            a["kind"] = "Node".into();
                        }
                    })
                })
            }),
        ],
    });
}
