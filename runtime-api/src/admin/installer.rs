//! The installer's warm runtimes file: its contents, re-read when it changes, and the
//! rules that merge it with the configurations saved through the API (spec 2.1).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sandgate_store::StoredWarmConfig;
use serde::Deserialize;

use super::configs::{Effective, Source, check, check_name};

/// The installer's default configuration, whose environment others should start from.
pub const INSTALLER_DEFAULT: &str = "v1_current";
/// Pool size when neither the entry nor the installer sets one.
pub const FALLBACK_COUNT: i64 = 3;

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
}
