//! Sandgate's Kubernetes policy, as tests over the Helm chart rendered by the real `helm`
//! (`.tools/helm/helm`, installed by `scripts/check-k8s`) with the example values files
//! (k8s/values/dev.yaml, prod.yaml), each object read into its `k8s-openapi` type.
//!
//! Each test is one rule: it passes on every rendering it applies to (both, or one profile:
//! prod's replicas and autoscalers, dev's bundled Redis), and it proves it can fail: each
//! of its mutations breaks a copy of the rendered objects one way, and the rule must then
//! report a problem. A failure names the values file, the rule and the object.
//!
//! The generic checks stay with maintained tools in `scripts/check-k8s` (`helm lint
//! --strict`, the Kubernetes schemas strictly by kubernetes-validate); what is here is
//! Sandgate's own: its security contexts, RBAC, secrets, network isolation (issue 40),
//! DNS layout, troubleshoot.sh specs (issue 44), profiles and values guards.

mod containers;
mod network;
mod network_checks;
mod objects;
mod profiles;
mod rbac;
mod sandbox_network;
mod secrets;
mod settings;
mod troubleshoot;
mod troubleshoot_preflight;
mod values;
mod wiring;

use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{repository, tool};
pub use objects::*;

/// Which example values file an install was rendered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Dev,
    Prod,
}

pub const BOTH: &[Profile] = &[Profile::Dev, Profile::Prod];
pub const PROD: &[Profile] = &[Profile::Prod];
pub const DEV: &[Profile] = &[Profile::Dev];

impl Profile {
    fn values_file(self) -> &'static str {
        match self {
            Profile::Dev => "k8s/values/dev.yaml",
            Profile::Prod => "k8s/values/prod.yaml",
        }
    }
}

/// A way of breaking a copy of an install that a rule must catch.
pub type Mutation = fn(&mut Install);

/// One rule of the policy: what it says, the problems it finds in an install (empty: it
/// holds), the profiles it applies to, and the ways of breaking an install it must catch.
pub struct Check<'a> {
    pub title: &'a str,
    pub run: fn(&Install) -> Vec<String>,
    pub profiles: &'a [Profile],
    pub mutations: &'a [(&'a str, Mutation)],
}

/// The rule holds on each of its profiles' renderings, and fails on each mutation of them.
pub fn verify(check: &Check<'_>) {
    assert!(
        !check.mutations.is_empty(),
        "\"{}\" has no mutation proving it can fail",
        check.title
    );
    for &profile in check.profiles {
        let install = install(profile);
        let problems = (check.run)(install);
        assert!(
            problems.is_empty(),
            "{}: {}:\n  - {}",
            install.name,
            check.title,
            problems.join("\n  - ")
        );
        for (what, mutate) in check.mutations {
            let mut broken = install.clone();
            mutate(&mut broken);
            assert!(
                !(check.run)(&broken).is_empty(),
                "{}: \"{}\" passed although {what}",
                install.name,
                check.title
            );
        }
    }
}

/// `helm template` of the chart with these values files and `--set-json` pairs, as the
/// release `sandgate` in namespace `sandgate`: every rendered object (hooks and `helm
/// test` pods included), or helm's error.
pub fn render(values: &[&str], sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut command = std::process::Command::new(tool("helm/helm", "scripts/check-k8s"));
    command
        .args(["template", RELEASE])
        .arg(repository("k8s/chart"))
        .args(["--namespace", APP_NS]);
    for file in values {
        command.arg("--values").arg(repository(file));
    }
    for set in sets {
        command.arg("--set-json").arg(set);
    }
    let output = command.output().expect("run helm");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8(output.stdout).expect("helm writes UTF-8");
    Ok(yaml_documents(&text))
}

/// The non-empty documents of a YAML stream, as JSON values.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|document| serde::Deserialize::deserialize(document).expect("a YAML document"))
        .filter(|value: &Value| !value.is_null())
        .collect()
}

/// Helm's merge of values: maps merge key by key, anything else is replaced.
fn merged(base: Value, over: Value) -> Value {
    match (base, over) {
        (Value::Object(mut base), Value::Object(over)) => {
            for (key, value) in over {
                let merged_value = match base.remove(&key) {
                    Some(old) => merged(old, value),
                    None => value,
                };
                base.insert(key, merged_value);
            }
            Value::Object(base)
        }
        (_, over) => over,
    }
}

/// The `sandgate:` section of the chart's values merged with the file's.
fn sandgate_values(file: &str) -> Value {
    let read = |path: &str| {
        let text = std::fs::read_to_string(repository(path)).expect("read a values file");
        yaml_documents(&text)
            .into_iter()
            .next()
            .unwrap_or(Value::Null)
    };
    merged(read("k8s/chart/values.yaml"), read(file))["sandgate"].clone()
}

/// The chart rendered with the profile's example values file, read once per test run.
pub fn install(profile: Profile) -> &'static Install {
    static DEV: OnceLock<Install> = OnceLock::new();
    static PROD: OnceLock<Install> = OnceLock::new();
    let cell = match profile {
        Profile::Dev => &DEV,
        Profile::Prod => &PROD,
    };
    cell.get_or_init(|| {
        let file = profile.values_file();
        let docs =
            render(&[file], &[]).unwrap_or_else(|error| panic!("helm template {file}: {error}"));
        let name = if profile == Profile::Dev {
            "dev"
        } else {
            "prod"
        };
        Install::parse(name, sandgate_values(file), docs)
    })
}
