//! Which warm sandbox a start may claim, and, when none, why it cold-starts.
//!
//! Two kinds of pools, told apart by their configuration's environment:
//! - **Personalised at claim.** A configuration whose environment sets `OH_DEFERRED_INIT`
//!   true (as the agent-server reads it: `1` or `true`, any case) runs agent-servers that
//!   start dormant and take their per-user configuration later, at `POST /api/init`
//!   (`init.rs`). A start claims one of them when what shapes the process matches: image,
//!   command, working directory, user and group, and resource factor. The environment
//!   does not count: it is delivered at claim. The operator says so where the agent-server
//!   reads it, in the environment it boots with, because only the operator knows which
//!   images have an agent-server that supports it (1.34 and later): an older one ignores
//!   the variable and never answers `/api/init`, and a claim of it fails over to a cold
//!   start, saying why.
//! - **Exact.** Any other configuration: a start claims one of its sandboxes only when
//!   image, command, working directory and environment match exactly, less the
//!   per-deployment keys (`spec.rs`), since its sandboxes run with the pool's environment.
//!
//! `OH_DEFERRED_INIT` itself belongs to the warm pool, not to a conversation: the app
//! server copies a configuration's environment into its starts, and a sandbox started
//! dormant that nobody initialises would never answer. It is dropped from what a claimed
//! or cold-started sandbox runs ([`personal`]).

use sha2::{Digest, Sha256};

use super::spec::PER_DEPLOYMENT_KEYS;
use sandgate_store::SandboxSpec;

/// The agent-server's switch to start dormant (`Config.deferred_init`).
pub const DEFERRED_INIT_ENV: &str = "OH_DEFERRED_INIT";

/// Whether sandboxes of `spec` start dormant, to be personalised at claim.
pub fn is_deferred(spec: &SandboxSpec) -> bool {
    spec.environment
        .get(DEFERRED_INIT_ENV)
        .is_some_and(|value| matches!(value.to_ascii_uppercase().as_str(), "1" | "TRUE"))
}

/// What a start's sandbox runs: `spec` without the warm pools' dormant switch.
pub fn personal(mut spec: SandboxSpec) -> SandboxSpec {
    spec.environment.remove(DEFERRED_INIT_ENV);
    spec
}

/// A digest of what shapes a sandbox's process, the claim key of a personalised pool:
/// image, command, working directory, user, group and resource factor (unset is 1).
pub fn shape_key(spec: &SandboxSpec) -> String {
    let mut digest = Sha256::new();
    let mut field = |bytes: &[u8]| {
        digest.update((bytes.len() as u64).to_be_bytes());
        digest.update(bytes);
    };
    // A label of its own: a shape key never equals an exact one.
    field(b"shape");
    field(spec.image.as_bytes());
    field(spec.working_dir.as_bytes());
    field(&(spec.command.len() as u64).to_be_bytes());
    for part in &spec.command {
        field(part.as_bytes());
    }
    for id in [spec.run_as_user, spec.run_as_group] {
        field(id.map(|id| id.to_string()).unwrap_or_default().as_bytes());
    }
    field(&factor(spec).to_bits().to_be_bytes());
    hex::encode(&digest.finalize()[..16])
}

fn factor(spec: &SandboxSpec) -> f64 {
    spec.resource_factor.unwrap_or(1.0)
}

/// One field in which a start differs from a warm configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The field, as a start names it (`environment` for any key of it): the label of the
    /// cold-start metric, so a bounded set.
    pub field: &'static str,
    /// What differs, for people: values that are not secrets (an environment key's name,
    /// never its value).
    pub detail: String,
}

/// How `start` differs from the warm configuration whose sandboxes run `pool`, in what a
/// claim of that pool compares; empty: a claim may take its sandboxes.
pub fn differences(start: &SandboxSpec, pool: &SandboxSpec) -> Vec<Difference> {
    let start = personal(start.clone());
    let mut found = Vec::new();
    let mut differ = |field: &'static str, detail: String| {
        found.push(Difference { field, detail });
    };
    if start.image != pool.image {
        differ(
            "image",
            format!("image {:?}, the pool's {:?}", start.image, pool.image),
        );
    }
    if start.command != pool.command {
        differ(
            "command",
            format!("command {:?}, the pool's {:?}", start.command, pool.command),
        );
    }
    if start.working_dir != pool.working_dir {
        differ(
            "working_dir",
            format!(
                "working_dir {:?}, the pool's {:?}",
                start.working_dir, pool.working_dir
            ),
        );
    }
    if is_deferred(pool) {
        let ids = [
            ("run_as_user", start.run_as_user, pool.run_as_user),
            ("run_as_group", start.run_as_group, pool.run_as_group),
        ];
        for (field, asked, pooled) in ids {
            if asked != pooled {
                differ(
                    field,
                    format!("{field} {}, the pool's {}", show(asked), show(pooled)),
                );
            }
        }
        if factor(&start) != factor(pool) {
            differ(
                "resource_factor",
                format!(
                    "resource_factor {}, the pool's {}",
                    factor(&start),
                    factor(pool)
                ),
            );
        }
    } else {
        let counted = |key: &&String| !PER_DEPLOYMENT_KEYS.contains(&key.as_str());
        let mut keys: Vec<&String> = start
            .environment
            .keys()
            .chain(pool.environment.keys())
            .filter(counted)
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let detail = match (start.environment.get(key), pool.environment.get(key)) {
                (Some(asked), Some(pooled)) if asked == pooled => continue,
                (Some(_), Some(_)) => format!("environment {key} has another value"),
                (Some(_), None) => format!("environment {key} is not in the pool's"),
                (None, _) => format!("environment {key} is the pool's only"),
            };
            differ("environment", detail);
        }
    }
    found
}

fn show(id: Option<i64>) -> String {
    id.map_or_else(|| "unset".to_owned(), |id| id.to_string())
}

/// Why a start cold-started: the metric's label and the words of the log and listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColdReason {
    /// `no_pool`, `pool_empty`, `init_failed`, or the first differing field.
    pub reason: &'static str,
    /// The configuration it was held against; `None` for `no_pool`.
    pub pool: Option<String>,
    pub detail: String,
}

/// Why a start of `start` claims nothing from `pools` (name and what its sandboxes run):
/// no pool of its image, the nearest pool's first difference, or, when one matches, that
/// it had no sandbox to give.
pub fn cold_reason<'a>(
    start: &SandboxSpec,
    pools: impl IntoIterator<Item = (&'a str, &'a SandboxSpec)>,
) -> ColdReason {
    let nearest = pools
        .into_iter()
        .filter(|(_, pool)| pool.image == start.image)
        .map(|(name, pool)| (name, differences(start, pool)))
        .min_by_key(|(_, differences)| differences.len());
    match nearest {
        None => ColdReason {
            reason: "no_pool",
            pool: None,
            detail: format!("no warm configuration runs image {:?}", start.image),
        },
        Some((name, differences)) => match differences.into_iter().next() {
            None => ColdReason {
                reason: "pool_empty",
                pool: Some(name.to_owned()),
                detail: format!("the pool {name} had no ready sandbox to give"),
            },
            Some(first) => ColdReason {
                reason: first.field,
                pool: Some(name.to_owned()),
                detail: format!("the pool {name} differs: {}", first.detail),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> SandboxSpec {
        SandboxSpec {
            image: "ghcr.io/acme/agent:1".into(),
            command: vec!["/usr/bin/agent".into(), "--port".into(), "60000".into()],
            working_dir: "/workspace".into(),
            environment: [
                (DEFERRED_INIT_ENV.to_owned(), "true".to_owned()),
                ("LOG_JSON".to_owned(), "true".to_owned()),
            ]
            .into(),
            run_as_user: Some(10001),
            run_as_group: Some(10001),
            ..SandboxSpec::default()
        }
    }

    #[test]
    fn deferred_init_is_read_as_the_agent_server_reads_it() {
        for (value, deferred) in [("true", true), ("TRUE", true), ("1", true), ("yes", false)] {
            let mut spec = pool();
            spec.environment
                .insert(DEFERRED_INIT_ENV.into(), value.into());
            assert_eq!(is_deferred(&spec), deferred, "{value}");
        }
        assert!(!is_deferred(&personal(pool())));
    }

    #[test]
    fn a_personalised_pool_matches_on_the_process_not_the_environment() {
        let mut start = pool();
        start.environment = [("WORKER_1".to_owned(), "12000".to_owned())].into();
        start.resource_factor = Some(1.0);
        assert_eq!(differences(&start, &pool()), []);
        assert_eq!(shape_key(&personal(start.clone())), shape_key(&pool()));
        type Change = (&'static str, fn(&mut SandboxSpec));
        let changes: [Change; 6] = [
            ("image", |spec| spec.image.push('2')),
            ("command", |spec| spec.command.push("--debug".into())),
            ("working_dir", |spec| spec.working_dir.push_str("/project")),
            ("run_as_user", |spec| spec.run_as_user = Some(1000)),
            ("run_as_group", |spec| spec.run_as_group = None),
            ("resource_factor", |spec| spec.resource_factor = Some(2.0)),
        ];
        for (field, change) in changes {
            let mut other = start.clone();
            change(&mut other);
            let found = differences(&other, &pool());
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].field, field);
            assert_ne!(shape_key(&other), shape_key(&pool()), "{field}");
        }
    }

    #[test]
    fn an_exact_pool_names_each_environment_key_that_differs_never_its_value() {
        let mut exact = personal(pool());
        exact
            .environment
            .insert("OH_WEBHOOKS_0_BASE_URL".into(), "https://a".into());
        let mut start = exact.clone();
        start
            .environment
            .insert("OH_WEBHOOKS_0_BASE_URL".into(), "https://b".into());
        start.run_as_user = None;
        assert_eq!(
            differences(&start, &exact),
            [],
            "exact pools ignore the user"
        );
        start.environment.insert("WORKER_1".into(), "12000".into());
        start
            .environment
            .insert("LOG_JSON".into(), "secret-ish".into());
        let found = differences(&start, &exact);
        let details: Vec<_> = found.iter().map(|found| found.detail.as_str()).collect();
        assert_eq!(
            details,
            [
                "environment LOG_JSON has another value",
                "environment WORKER_1 is not in the pool's"
            ]
        );
        assert!(found.iter().all(|found| found.field == "environment"));
    }

    #[test]
    fn a_cold_start_names_the_nearest_pool_s_first_difference() {
        let other_image = SandboxSpec {
            image: "other".into(),
            ..pool()
        };
        let start = SandboxSpec {
            working_dir: "/workspace/project".into(),
            ..pool()
        };
        let pooled = pool();
        let reason = cold_reason(&start, [("other", &other_image), ("v1", &pooled)]);
        assert_eq!(reason.reason, "working_dir");
        assert_eq!(reason.pool.as_deref(), Some("v1"));
        assert!(reason.detail.contains("/workspace/project"), "{reason:?}");
        assert_eq!(cold_reason(&pool(), [("v1", &pooled)]).reason, "pool_empty");
        assert_eq!(
            cold_reason(&pool(), [("other", &other_image)]).reason,
            "no_pool"
        );
    }
}
