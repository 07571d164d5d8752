//! Warm runtime configurations: the installer's file, the rules that merge it with the
//! configurations saved through the API (spec 2.1), and the checks a saved one passes.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Deserialize;

use sandgate_conversation::{LocItem, ValidationError};
use sandgate_store::StoredWarmConfig;

/// The installer's default configuration, whose environment others should start from.
pub const INSTALLER_DEFAULT: &str = "v1_current";
/// Pool size when neither the entry nor the installer sets one.
pub const FALLBACK_COUNT: i64 = 3;

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

/// What the installer's file holds: `{"count": N, "configs": [{name, image, …}]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installer {
    /// The installer-wide pool size.
    pub count: Option<i64>,
    pub configs: BTreeMap<String, StoredWarmConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstallerDocument {
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    configs: Vec<InstallerEntry>,
}

#[derive(Deserialize)]
struct InstallerEntry {
    name: String,
    #[serde(flatten)]
    config: StoredWarmConfig,
}

impl Installer {
    /// Parses and checks the file's contents; the error says what to fix.
    pub fn parse(text: &str) -> Result<Self, String> {
        let document: InstallerDocument =
            serde_json::from_str(text).map_err(|err| format!("not a warm runtimes file: {err}"))?;
        if let Some(count) = document.count.filter(|count| *count < 0) {
            return Err(format!("count must be 0 or more, not {count}"));
        }
        let mut configs = BTreeMap::new();
        let mut images = HashSet::new();
        for entry in document.configs {
            if let Some(error) = check_name(&entry.name)
                .into_iter()
                .chain(check(&entry.config))
                .next()
            {
                return Err(format!("configuration {:?}: {}", entry.name, error.msg));
            }
            if !images.insert(entry.config.image.clone()) {
                return Err(format!(
                    "configuration {:?}: image {} is used by another entry",
                    entry.name, entry.config.image
                ));
            }
            if configs.insert(entry.name.clone(), entry.config).is_some() {
                return Err(format!("configuration {:?} is listed twice", entry.name));
            }
        }
        Ok(Self {
            count: document.count,
            configs,
        })
    }

    /// The pool size of `config`: its own, else the installer-wide one, else 3.
    pub fn count_of(&self, config: &StoredWarmConfig) -> i64 {
        config.count.or(self.count).unwrap_or(FALLBACK_COUNT)
    }

    /// The effective configurations, ordered by name (spec 2.1 rules 5–7): outside overlay
    /// mode, saved configurations take pool management over from the installer while any
    /// exists; otherwise the installer's entries apply, a saved one of the same name
    /// overriding its entry.
    pub fn merge(&self, saved: &[(String, StoredWarmConfig)], overlay: bool) -> Vec<Effective> {
        let mut effective = BTreeMap::new();
        if overlay || saved.is_empty() {
            for (name, config) in &self.configs {
                effective.insert(name.clone(), (Source::File, config));
            }
        }
        for (name, config) in saved {
            effective.insert(name.clone(), (Source::Db, config));
        }
        effective
            .into_iter()
            .map(|(name, (source, config))| Effective {
                name,
                source,
                count: self.count_of(config),
                config: config.clone(),
            })
            .collect()
    }

    /// The installer entry that would stay in effect beside a saved `name` and uses
    /// `image`, if any: saving would make two selectable configurations share it.
    pub fn image_clash(&self, name: &str, image: &str, overlay: bool) -> Option<&str> {
        if !overlay {
            // A save takes pool management over: no installer entry stays in effect.
            return None;
        }
        self.configs
            .iter()
            .find(|(other, config)| other.as_str() != name && config.image == image)
            .map(|(other, _)| other.as_str())
    }

    /// Environment keys of the installer default that `config` lacks (spec 2.1 rule 4).
    pub fn missing_defaults(&self, config: &StoredWarmConfig) -> Vec<String> {
        self.configs
            .get(INSTALLER_DEFAULT)
            .map(|default| {
                default
                    .environment
                    .keys()
                    .filter(|key| !config.environment.contains_key(*key))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The installer's file, re-read when it changes (a Kubernetes ConfigMap update swaps
/// the file; a `stat` per read notices), without restart. A file that stops parsing
/// keeps the last good contents in effect, and the reason is logged once.
pub struct InstallerFile {
    path: Option<PathBuf>,
    state: Mutex<FileState>,
}

struct FileState {
    stamp: Option<Stamp>,
    installer: Arc<Installer>,
    /// Bumped whenever `installer` changes.
    generation: u64,
}

/// What identifies one version of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    #[cfg(unix)]
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    #[cfg(unix)]
    let inode = metadata.ino();
    #[cfg(not(unix))]
    let inode = 0;
    Ok(Stamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        inode,
    })
}

impl InstallerFile {
    /// Reads `path` now; a file that is given but unreadable or invalid is an error, so a
    /// typo fails at start rather than silently serving no pools.
    pub fn open(path: Option<PathBuf>) -> Result<Self, String> {
        let (stamp, installer) = match &path {
            Some(path) => {
                let stamp = stamp(path).map_err(|err| format!("{}: {err}", path.display()))?;
                let text = std::fs::read_to_string(path)
                    .map_err(|err| format!("{}: {err}", path.display()))?;
                let installer =
                    Installer::parse(&text).map_err(|err| format!("{}: {err}", path.display()))?;
                (Some(stamp), installer)
            }
            None => (None, Installer::default()),
        };
        Ok(Self {
            path,
            state: Mutex::new(FileState {
                stamp,
                installer: Arc::new(installer),
                generation: 0,
            }),
        })
    }

    /// The installer entries in effect and their generation, re-reading a changed file.
    pub fn current(&self) -> (Arc<Installer>, u64) {
        let Ok(mut state) = self.state.lock() else {
            return (Arc::new(Installer::default()), u64::MAX);
        };
        if let Some(path) = &self.path {
            let now = stamp(path).ok();
            if now != state.stamp {
                state.stamp = now;
                match std::fs::read_to_string(path)
                    .map_err(|err| err.to_string())
                    .and_then(|text| Installer::parse(&text))
                {
                    Ok(installer) => {
                        if installer != *state.installer {
                            tracing::info!(file = %path.display(), configs = installer.configs.len(), "warm runtimes file reloaded");
                            state.installer = Arc::new(installer);
                            state.generation += 1;
                        }
                    }
                    Err(err) => tracing::warn!(
                        file = %path.display(),
                        error = %err,
                        "warm runtimes file is unreadable or invalid; keeping the last good one"
                    ),
                }
            }
        }
        (state.installer.clone(), state.generation)
    }
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

    fn installer() -> Installer {
        Installer::parse(
            r#"{"count": 2, "configs": [
                {"name": "v1_current", "image": "ghcr.io/oh/runtime:1.0", "working_dir": "/workspace",
                 "command": ["server"], "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app", "CA_BUNDLE": "x"}},
                {"name": "gpu", "image": "ghcr.io/oh/gpu:1.0", "working_dir": "/workspace",
                 "command": ["server"], "environment": {}, "count": 1}
            ]}"#,
        )
        .expect("valid file")
    }

    fn names(effective: &[Effective]) -> Vec<(&str, Source, &str, i64)> {
        effective
            .iter()
            .map(|entry| {
                (
                    entry.name.as_str(),
                    entry.source,
                    entry.config.image.as_str(),
                    entry.count,
                )
            })
            .collect()
    }

    #[test]
    fn without_saved_configurations_the_installer_entries_apply() {
        for overlay in [false, true] {
            assert_eq!(
                names(&installer().merge(&[], overlay)),
                [
                    ("gpu", Source::File, "ghcr.io/oh/gpu:1.0", 1),
                    ("v1_current", Source::File, "ghcr.io/oh/runtime:1.0", 2),
                ]
            );
        }
    }

    #[test]
    fn outside_overlay_mode_a_saved_configuration_takes_over() {
        let saved = [("custom".to_owned(), config("img:custom", &[]))];
        assert_eq!(
            names(&installer().merge(&saved, false)),
            [("custom", Source::Db, "img:custom", 2)]
        );
    }

    #[test]
    fn in_overlay_mode_saved_configurations_merge_and_override_by_name() {
        let saved = [
            ("custom".to_owned(), config("img:custom", &[])),
            ("v1_current".to_owned(), config("img:override", &[])),
        ];
        assert_eq!(
            names(&installer().merge(&saved, true)),
            [
                ("custom", Source::Db, "img:custom", 2),
                ("gpu", Source::File, "ghcr.io/oh/gpu:1.0", 1),
                ("v1_current", Source::Db, "img:override", 2),
            ]
        );
        // Deleting the override reveals the installer entry again, as `file`.
        assert_eq!(
            names(&installer().merge(&saved[..1], true))[2],
            ("v1_current", Source::File, "ghcr.io/oh/runtime:1.0", 2)
        );
    }

    #[test]
    fn count_falls_back_from_entry_to_installer_to_three() {
        let mut with_count = config("img:a", &[]);
        with_count.count = Some(0);
        let saved = [
            ("a".to_owned(), with_count),
            ("b".to_owned(), config("img:b", &[])),
        ];
        assert_eq!(
            installer()
                .merge(&saved, false)
                .iter()
                .map(|entry| entry.count)
                .collect::<Vec<_>>(),
            [0, 2]
        );
        assert_eq!(Installer::default().merge(&saved, false)[1].count, 3);
    }

    #[test]
    fn images_clash_with_installer_entries_only_in_overlay_mode() {
        let installer = installer();
        assert_eq!(
            installer.image_clash("custom", "ghcr.io/oh/gpu:1.0", true),
            Some("gpu")
        );
        assert_eq!(
            installer.image_clash("gpu", "ghcr.io/oh/gpu:1.0", true),
            None
        );
        assert_eq!(
            installer.image_clash("custom", "ghcr.io/oh/gpu:1.0", false),
            None
        );
    }

    #[test]
    fn warnings_name_the_defaults_a_configuration_lacks() {
        assert_eq!(
            installer().missing_defaults(&config("img:x", &["CA_BUNDLE"])),
            ["OH_WEBHOOKS_0_BASE_URL"]
        );
        assert!(
            Installer::default()
                .missing_defaults(&config("img:x", &[]))
                .is_empty()
        );
    }

    #[test]
    fn a_broken_installer_file_says_what_is_wrong() {
        for (text, expected) in [
            ("{", "not a warm runtimes file"),
            (r#"{"count": -1}"#, "count must be 0 or more"),
            (
                r#"{"configs": [{"name": "a", "image": "i", "working_dir": "/w", "command": ["c"], "environment": {}},
                                {"name": "a", "image": "j", "working_dir": "/w", "command": ["c"], "environment": {}}]}"#,
                "listed twice",
            ),
            (
                r#"{"configs": [{"name": "a", "image": "i", "working_dir": "/w", "command": ["c"], "environment": {}},
                                {"name": "b", "image": "i", "working_dir": "/w", "command": ["c"], "environment": {}}]}"#,
                "used by another entry",
            ),
            (
                r#"{"configs": [{"name": "a", "image": "i", "working_dir": "w", "command": ["c"], "environment": {}}]}"#,
                "absolute path",
            ),
        ] {
            let err = Installer::parse(text).expect_err(text);
            assert!(err.contains(expected), "{err}");
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
