//! Warm runtime configurations: what one in effect is, and the checks a configuration
//! passes, whether saved through the API, listed in the installer's file (`installer`) or
//! given to a start.

use sandgate_conversation::{LocItem, ValidationError};
use sandgate_store::StoredWarmConfig;

/// Where an effective configuration comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    File,
    Db,
}

/// A configuration in effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    pub name: String,
    pub source: Source,
    pub config: StoredWarmConfig,
    /// The pool size after the fallbacks: the entry's, else the installer's, else 3.
    pub count: i64,
}

pub(crate) fn error(
    loc: &[&str],
    error_type: &'static str,
    msg: impl Into<String>,
) -> ValidationError {
    ValidationError {
        error_type,
        loc: loc
            .iter()
            .map(|key| LocItem::Key((*key).to_owned()))
            .collect(),
        msg: msg.into(),
        input: serde_json::Value::Null,
        ctx: None,
    }
}

/// A configuration name: it becomes part of Kubernetes labels, so a label value's rules
/// (1–63 characters, alphanumeric at both ends, `-`, `_` and `.` inside).
pub fn check_name(name: &str) -> Option<ValidationError> {
    let bytes = name.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    (name.is_empty() || name.len() > 63 || !inner_ok || !ends_ok).then(|| {
        error(
            &["path", "name"],
            "string_pattern_mismatch",
            "A configuration name has 1 to 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
        )
    })
}

/// An environment variable name as Kubernetes accepts it.
fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || matches!(first, b'_' | b'-' | b'.'))
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
}

/// How many warm sandboxes the pools may hold: a `count` is an admin's input, and a
/// typo (`1000000`) would have the reconciler start sandboxes until the store and the
/// cluster give out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmLimits {
    /// `WARM_POOL_MAX_SIZE`: the most warm sandboxes one configuration may ask for.
    pub max_per_pool: i64,
    /// `WARM_POOLS_MAX_TOTAL`: the most warm sandboxes all configurations together may ask for.
    pub max_total: i64,
}

impl Default for WarmLimits {
    fn default() -> Self {
        Self {
            max_per_pool: 100,
            max_total: 1000,
        }
    }
}

impl WarmLimits {
    /// The errors of a configuration `name` whose pool would hold `count` sandboxes,
    /// when the other effective configurations hold `others` together.
    pub fn check(&self, count: i64, others: i64) -> Vec<ValidationError> {
        if count > self.max_per_pool {
            return vec![ValidationError {
                input: count.into(),
                ctx: Some(serde_json::json!({ "le": self.max_per_pool })),
                ..error(
                    &["count"],
                    "less_than_equal",
                    format!(
                        "Input should be less than or equal to {} (WARM_POOL_MAX_SIZE)",
                        self.max_per_pool
                    ),
                )
            }];
        }
        let total = others.saturating_add(count);
        if total > self.max_total {
            return vec![ValidationError {
                input: count.into(),
                ctx: Some(
                    serde_json::json!({ "le": self.max_total.saturating_sub(others).max(0) }),
                ),
                ..error(
                    &["count"],
                    "value_error",
                    format!(
                        "Value error, the warm pools would hold {total} sandboxes, more than the limit of {} (WARM_POOLS_MAX_TOTAL)",
                        self.max_total
                    ),
                )
            }];
        }
        Vec::new()
    }
}

/// Every rule a configuration's body breaks, each at its field.
pub fn check(config: &StoredWarmConfig) -> Vec<ValidationError> {
    rules(config, true)
}

/// Every rule a start's spec breaks: a configuration's, except that a start may leave the
/// command out (the image's own entrypoint runs).
pub fn check_start(config: &StoredWarmConfig) -> Vec<ValidationError> {
    rules(config, false)
}

fn rules(config: &StoredWarmConfig, command_required: bool) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    if config.image.trim().is_empty() {
        errors.push(error(
            &["image"],
            "string_too_short",
            "The image reference is required",
        ));
    } else if config.image.chars().any(char::is_whitespace) {
        errors.push(error(
            &["image"],
            "value_error",
            "Value error, an image reference has no whitespace",
        ));
    }
    if !config.working_dir.starts_with('/') {
        errors.push(error(
            &["working_dir"],
            "value_error",
            "Value error, working_dir must be an absolute path",
        ));
    }
    if command_required && config.command.is_empty() {
        errors.push(error(
            &["command"],
            "too_short",
            "List should have at least 1 item after validation, not 0",
        ));
    }
    if let Some(key) = config.environment.keys().find(|key| !is_env_name(key)) {
        errors.push(ValidationError {
            loc: vec![
                LocItem::Key("environment".into()),
                LocItem::Key(key.clone()),
            ],
            ..error(
                &[],
                "value_error",
                "Value error, an environment variable name has letters, digits, '_', '-' and '.', and does not start with a digit",
            )
        });
    }
    for (field, value) in [
        ("count", config.count),
        ("run_as_user", config.run_as_user),
        ("run_as_group", config.run_as_group),
        ("fs_group", config.fs_group),
    ] {
        if let Some(value) = value.filter(|value| *value < 0) {
            errors.push(ValidationError {
                input: value.into(),
                ctx: Some(serde_json::json!({ "ge": 0 })),
                ..error(
                    &[field],
                    "greater_than_equal",
                    "Input should be greater than or equal to 0",
                )
            });
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(image: &str, environment: &[&str]) -> StoredWarmConfig {
        StoredWarmConfig {
            image: image.into(),
            working_dir: "/workspace".into(),
            command: vec!["/usr/local/bin/openhands-agent-server".into()],
            environment: environment
                .iter()
                .map(|key| ((*key).to_owned(), "1".to_owned()))
                .collect(),
            ..StoredWarmConfig::default()
        }
    }

    #[test]
    fn checks_name_each_wrong_field() {
        let mut bad = config(" ", &["1BAD"]);
        bad.working_dir = "relative".into();
        bad.command.clear();
        bad.count = Some(-1);
        bad.fs_group = Some(-5);
        let fields: Vec<String> = check(&bad)
            .iter()
            .map(|error| format!("{:?}", error.loc))
            .collect();
        assert_eq!(fields.len(), 6, "{fields:?}");
        assert!(check(&config("img:ok", &["OK_NAME"])).is_empty());
        assert!(check_name("v1_current").is_none());
        for bad in ["", "-x", "x-", "a b", "é", &"a".repeat(64)] {
            assert!(check_name(bad).is_some(), "{bad:?}");
        }
    }
}
