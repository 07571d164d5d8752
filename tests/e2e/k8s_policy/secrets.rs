//! The secrets of the install: none carries a value in the chart, each is referenced by
//! the name INSTALL.md documents, and the gateway's keys go to model-gw alone.

use k8s_openapi::api::core::v1::{SecretVolumeSource, Volume};

use super::troubleshoot::{TROUBLESHOOT_KEYS, troubleshoot_kind};
use super::*;

/// The secrets the install uses (spec 2.8 as it applies to Sandgate, plus the wildcard TLS
/// certificate); INSTALL.md tells how to create each one.
const KNOWN_SECRETS: [&str; 9] = [
    "jwt-secret",
    "admin-password",
    "default-api-key",
    "sandbox-api-key",
    "gateway-api-key",
    "gateway-env-secrets",
    "gateway-master-key",
    "cache",
    TLS_SECRET,
];

const GATEWAY_SECRETS: [&str; 2] = ["gateway-api-key", "gateway-env-secrets"];

fn no_secret_values(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for secret in &install.secrets {
        if secret.data.as_ref().is_some_and(|d| !d.is_empty()) {
            out.push(format!("{} carries data", reference(secret)));
        }
        // A troubleshoot.sh spec is no secret value; its Secret holds the spec's keys only.
        let string_data = secret.string_data.iter().flatten();
        let specs_only = troubleshoot_kind(&secret.metadata).is_some()
            && secret
                .string_data
                .iter()
                .flatten()
                .all(|(k, _)| TROUBLESHOOT_KEYS.contains(&k.as_str()));
        if string_data.count() > 0 && !specs_only {
            out.push(format!("{} carries stringData", reference(secret)));
        }
    }
    out
}

#[test]
fn no_secret_carries_values() {
    verify(&Check {
        title: "no Secret object carries values (data or stringData)",
        run: no_secret_values,
        profiles: BOTH,
        mutations: &[("a Secret with data is rendered", |i| {
            let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "jwt-secret", "namespace": APP_NS}, "data": {"jwt-secret": "c2VjcmV0"}});
            i.secrets
                .push(serde_json::from_value(secret).expect("a Secret"));
        })],
    });
}

fn known_secrets(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for w in install.workloads() {
        for s in secret_refs(w.spec)
            .into_iter()
            .filter(|s| !KNOWN_SECRETS.contains(&s.as_str()))
        {
            out.push(format!(
                "{} references secret {s:?}, not one of INSTALL.md's",
                w.reference()
            ));
        }
    }
    for ingress in &install.ingresses {
        for tls in ingress.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
            if !tls
                .secret_name
                .as_deref()
                .is_some_and(|s| KNOWN_SECRETS.contains(&s))
            {
                out.push(format!(
                    "{} uses TLS secret {:?}",
                    reference(ingress),
                    tls.secret_name
                ));
            }
        }
    }
    out
}

#[test]
fn secrets_have_documented_names() {
    verify(&Check {
        title: "secrets are referenced by the names the install documents",
        run: known_secrets,
        profiles: BOTH,
        mutations: &[("runtime-api reads a secret named admin-pasword", |i| {
            let env = container_mut(i, "runtime-api")
                .env
                .get_or_insert_with(Vec::new);
            env.push(secret_env("Y", "admin-pasword", "admin-password"));
        })],
    });
}

fn gateway_secrets_scoped(install: &Install) -> Vec<String> {
    let mut want: Vec<String> = vec![];
    if let Some(d) = install.deployment("model-gw") {
        want.push(reference(d));
    }
    if let Some(j) = find(&install.jobs, "preflight-model-gw", APP_NS) {
        want.push(reference(j));
    }
    want.sort();
    let mut out = vec![];
    for secret in GATEWAY_SECRETS {
        let mut users: Vec<String> = install
            .workloads()
            .iter()
            .filter(|w| secret_refs(w.spec).contains(secret))
            .map(Workload::reference)
            .collect();
        users.sort();
        if users != want {
            out.push(format!("{secret} is referenced by {users:?}, want only {want:?} (model-gw and its preflight)"));
        }
    }
    out
}

#[test]
fn gateway_secrets_go_to_model_gw_alone() {
    verify(&Check {
        title: "gateway-api-key and gateway-env-secrets are given to model-gw's pods (and its preflight Job) only",
        run: gateway_secrets_scoped,
        profiles: BOTH,
        mutations: &[
            ("the edge reads gateway-api-key", |i| {
                let env = container_mut(i, "edge").env.get_or_insert_with(Vec::new);
                env.push(secret_env(
                    "GATEWAY_API_KEY",
                    "gateway-api-key",
                    "gateway-api-key",
                ));
            }),
            ("runtime-api mounts gateway-env-secrets", |i| {
                let secret = SecretVolumeSource {
                    secret_name: Some("gateway-env-secrets".into()),
                    ..Default::default()
                };
                let volume = Volume {
                    name: "s".into(),
                    secret: Some(secret),
                    ..Default::default()
                };
                pod_spec_mut(i, "runtime-api")
                    .volumes
                    .get_or_insert_with(Vec::new)
                    .push(volume);
            }),
            ("the runtime-api preflight reads gateway-api-key", |i| {
                let env = job_container_mut(i, "preflight")
                    .env
                    .get_or_insert_with(Vec::new);
                env.push(secret_env("K", "gateway-api-key", "gateway-api-key"));
            }),
            ("model-gw no longer loads gateway-env-secrets", |i| {
                container_mut(i, "model-gw").env_from = None
            }),
        ],
    });
}
