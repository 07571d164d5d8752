//! Who may do what: no cluster-wide RBAC, the sandbox namespace's rights bound to
//! runtime-api alone (and all that its sandbox driver needs), no Role that reads secrets,
//! and API tokens only where they are used.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

/// What runtime-api's Kubernetes sandbox driver manages in the sandbox namespace.
const SANDBOX_RESOURCES: [&str; 7] = [
    "deployments",
    "replicasets",
    "pods",
    "persistentvolumeclaims",
    "services",
    "ingresses",
    "secrets",
];
/// (api group, resource, verbs that must all be granted) in the sandbox namespace.
const RUNTIME_API_NEEDS: [(&str, &str, &[&str]); 10] = [
    (
        "apps",
        "deployments",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    ("apps", "deployments/scale", &["get", "patch"]),
    ("apps", "replicasets", &["list"]),
    // Each sandbox's session key lives in a Secret of its own: written, never read.
    ("", "secrets", &["create", "patch", "delete"]),
    ("", "pods", &["get", "list", "watch"]),
    ("", "pods/log", &["get"]),
    (
        "",
        "persistentvolumeclaims",
        &["get", "list", "create", "delete"],
    ),
    ("", "services", &["get", "list", "create", "delete"]),
    (
        "networking.k8s.io",
        "ingresses",
        &["get", "list", "create", "delete"],
    ),
    ("", "events", &["get", "list", "watch"]),
];
/// What runtime-api's sandbox Role may do to secrets: write each sandbox's session-key
/// Secret, never read one (the sandbox namespace also holds the wildcard certificate).
const SANDBOX_SECRET_VERBS: [&str; 3] = ["create", "patch", "delete"];

fn sandbox_role(install: &mut Install) -> &mut Role {
    find_mut(&mut install.roles, "runtime-api-sandboxes", SANDBOX_NS)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn no_cluster_rbac(install: &Install) -> Vec<String> {
    let mut out: Vec<String> = install.cluster_roles.iter().map(reference).collect();
    out.extend(install.cluster_role_bindings.iter().map(reference));
    for binding in install
        .role_bindings
        .iter()
        .filter(|b| b.role_ref.kind != "Role")
    {
        out.push(format!(
            "{} binds ClusterRole {}",
            reference(binding),
            binding.role_ref.name
        ));
    }
    out
}

#[test]
fn no_cluster_wide_rbac() {
    verify(&Check {
        title: "no ClusterRole or ClusterRoleBinding, and no RoleBinding to a ClusterRole",
        run: no_cluster_rbac,
        profiles: BOTH,
        mutations: &[
            ("a ClusterRole is rendered", |i| {
                let metadata = ObjectMeta {
                    name: Some("x".into()),
                    ..Default::default()
                };
                i.cluster_roles.push(ClusterRole {
                    metadata,
                    rules: Some(vec![]),
                    ..Default::default()
                });
            }),
            ("runtime-api is bound to ClusterRole edit", |i| {
                let binding = find_mut(&mut i.role_bindings, "runtime-api-sandboxes", SANDBOX_NS);
                binding.role_ref.kind = "ClusterRole".into();
                binding.role_ref.name = "edit".into();
            }),
        ],
    });
}

/// Which of `resources` a rule grants rights on.
fn grants(rule: &PolicyRule, resources: &[&str]) -> BTreeSet<String> {
    let listed = rule.resources.iter().flatten();
    if rule.resources.iter().flatten().any(|r| r == "*") {
        return resources.iter().map(|r| r.to_string()).collect();
    }
    listed
        .filter(|r| resources.contains(&r.split('/').next().unwrap_or_default()))
        .cloned()
        .collect()
}

fn subjects(subjects: &[Subject]) -> Vec<(String, String, String)> {
    subjects
        .iter()
        .map(|s| {
            (
                s.kind.clone(),
                s.name.clone(),
                s.namespace.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn sandbox_rbac(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let want = vec![(
        "ServiceAccount".to_owned(),
        "runtime-api".to_owned(),
        APP_NS.to_owned(),
    )];
    for role in &install.roles {
        let granted: BTreeSet<String> = role
            .rules
            .iter()
            .flatten()
            .flat_map(|r| grants(r, &SANDBOX_RESOURCES))
            .collect();
        if granted.is_empty() {
            continue;
        }
        if namespace_of(&role.metadata) != SANDBOX_NS {
            out.push(format!(
                "{} grants {granted:?} outside {SANDBOX_NS}",
                reference(role)
            ));
        }
        for binding in &install.role_bindings {
            if binding.role_ref.name != name_of(&role.metadata)
                || binding.metadata.namespace != role.metadata.namespace
            {
                continue;
            }
            let bound = subjects(binding.subjects.as_deref().unwrap_or_default());
            if bound != want {
                out.push(format!(
                    "{} binds {} to {bound:?}, want only runtime-api's ServiceAccount",
                    reference(binding),
                    reference(role)
                ));
            }
        }
    }
    out
}

#[test]
fn sandbox_rights_are_runtime_apis_alone() {
    verify(&Check {
        title: "rights on sandbox resources are in the sandbox namespace, bound only to runtime-api",
        run: sandbox_rbac,
        profiles: BOTH,
        mutations: &[
            ("the sandbox Role is in the app namespace", |i| {
                sandbox_role(i).metadata.namespace = Some(APP_NS.into())
            }),
            ("the edge is bound to the sandbox Role", |i| {
                let binding = find_mut(&mut i.role_bindings, "runtime-api-sandboxes", SANDBOX_NS);
                let edge = Subject {
                    kind: "ServiceAccount".into(),
                    name: "edge".into(),
                    namespace: Some(APP_NS.into()),
                    api_group: None,
                };
                binding.subjects.get_or_insert_with(Vec::new).push(edge);
            }),
        ],
    });
}

fn runtime_api_rights(install: &Install) -> Vec<String> {
    let mut rules: Vec<&PolicyRule> = vec![];
    for binding in install
        .role_bindings
        .iter()
        .filter(|b| namespace_of(&b.metadata) == SANDBOX_NS)
    {
        let runtime_api = binding.subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == "runtime-api"
                && s.namespace.as_deref() == Some(APP_NS)
        });
        if let Some(role) =
            find(&install.roles, &binding.role_ref.name, SANDBOX_NS).filter(|_| runtime_api)
        {
            rules.extend(role.rules.iter().flatten());
        }
    }
    let mut out = vec![];
    for (group, resource, verbs) in RUNTIME_API_NEEDS {
        let have: BTreeSet<&str> = rules
            .iter()
            .filter(|r| {
                r.api_groups.iter().flatten().any(|g| g == group)
                    && r.resources.iter().flatten().any(|x| x == resource)
            })
            .flat_map(|r| r.verbs.iter().map(String::as_str))
            .collect();
        let lacking: Vec<&str> = verbs
            .iter()
            .copied()
            .filter(|v| !have.contains(v))
            .collect();
        if !have.contains("*") && !lacking.is_empty() {
            let group = if group.is_empty() { "core" } else { group };
            out.push(format!(
                "runtime-api lacks {lacking:?} on {group}/{resource} in {SANDBOX_NS}"
            ));
        }
    }
    out
}

#[test]
fn runtime_api_has_what_its_driver_needs() {
    verify(&Check {
        title: "runtime-api is granted what its sandbox driver needs in the sandbox namespace",
        run: runtime_api_rights,
        profiles: BOTH,
        mutations: &[("the Role lacks ingresses", |i| {
            let rules = sandbox_role(i).rules.get_or_insert_with(Vec::new);
            rules.retain(|r| !r.resources.iter().flatten().any(|x| x == "ingresses"));
        })],
    });
}

fn no_secret_rights(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let roles = install
        .roles
        .iter()
        .map(|r| (reference(r), &r.metadata, &r.rules));
    let cluster_roles = install
        .cluster_roles
        .iter()
        .map(|r| (reference(r), &r.metadata, &r.rules));
    for (at, meta, rules) in roles.chain(cluster_roles) {
        let is_sandbox_role = at.starts_with("Role/")
            && name_of(meta) == "runtime-api-sandboxes"
            && namespace_of(meta) == SANDBOX_NS;
        for rule in rules.iter().flatten() {
            let groups = rule
                .api_groups
                .iter()
                .flatten()
                .any(|g| g.is_empty() || g == "*");
            let resources: BTreeSet<&str> = rule
                .resources
                .iter()
                .flatten()
                .map(String::as_str)
                .collect();
            if !(groups && (resources.contains("secrets") || resources.contains("*"))) {
                continue;
            }
            let only_writes = rule
                .verbs
                .iter()
                .all(|v| SANDBOX_SECRET_VERBS.contains(&v.as_str()));
            if is_sandbox_role && resources == BTreeSet::from(["secrets"]) && only_writes {
                continue;
            }
            out.push(format!("{at} grants {:?} on {resources:?}", rule.verbs));
        }
    }
    out
}

#[test]
fn no_role_reads_secrets() {
    verify(&Check {
        title: "no Role (or ClusterRole) can read secrets; only runtime-api's sandbox Role writes them",
        run: no_secret_rights,
        profiles: BOTH,
        mutations: &[
            ("the sandbox Role can read secrets", |i| {
                let rule = PolicyRule {
                    api_groups: Some(strings(&[""])),
                    resources: Some(strings(&["secrets"])),
                    verbs: strings(&["get"]),
                    ..Default::default()
                };
                sandbox_role(i)
                    .rules
                    .get_or_insert_with(Vec::new)
                    .push(rule);
            }),
            ("the sandbox Role lists secrets", |i| {
                let rule = PolicyRule {
                    api_groups: Some(strings(&[""])),
                    resources: Some(strings(&["secrets"])),
                    verbs: strings(&["list", "create"]),
                    ..Default::default()
                };
                sandbox_role(i)
                    .rules
                    .get_or_insert_with(Vec::new)
                    .push(rule);
            }),
        ],
    });
}

fn service_accounts(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let accounts: BTreeMap<(&str, &str), Option<bool>> = install
        .service_accounts
        .iter()
        .map(|s| {
            (
                (namespace_of(&s.metadata), name_of(&s.metadata)),
                s.automount_service_account_token,
            )
        })
        .collect();
    for w in install.workloads() {
        let account = w.spec.service_account_name.as_deref().unwrap_or("default");
        if account == "model-gw" && w.name() != "model-gw" {
            out.push(format!(
                "{} runs as model-gw's ServiceAccount",
                w.reference()
            ));
        }
        if SERVICES.contains(&w.name()) && account != w.name() {
            out.push(format!(
                "{} runs as ServiceAccount {account:?}, want {:?}",
                w.reference(),
                w.name()
            ));
        }
        let token = w
            .spec
            .automount_service_account_token
            .or_else(|| accounts.get(&(w.namespace(), account)).copied().flatten())
            .unwrap_or(true);
        if token && w.name() != "runtime-api" {
            out.push(format!(
                "{}: its pods get a Kubernetes API token (automountServiceAccountToken)",
                w.reference()
            ));
        }
    }
    out
}

#[test]
fn only_runtime_api_gets_an_api_token() {
    verify(&Check {
        title: "model-gw's ServiceAccount is its own; only runtime-api's pods get an API token",
        run: service_accounts,
        profiles: BOTH,
        mutations: &[
            ("the edge runs as model-gw's ServiceAccount", |i| {
                pod_spec_mut(i, "edge").service_account_name = Some("model-gw".into())
            }),
            ("model-gw's pods get a token", |i| {
                pod_spec_mut(i, "model-gw").automount_service_account_token = Some(true)
            }),
        ],
    });
}
