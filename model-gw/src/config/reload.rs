//! The configuration file in effect, re-read when it changes; a broken version keeps the
//! last good one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::model::GatewayConfig;

impl GatewayConfig {
    fn log_warnings(&self, path: &Path) {
        for warning in &self.warnings {
            tracing::warn!(file = %path.display(), "gateway config: {warning}");
        }
    }
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// How often the file is looked at (one `stat`) for a change. Every call reads the
/// configuration: a `stat` each was a system call on every call's path (about 3 % of the
/// gateway's CPU under load). A change is in effect for the calls that start at most this
/// long after it.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The configuration file, re-read when it changes (looked at once every [`LOOK_EVERY`]
/// at most, by the first read due).
pub struct ConfigFile {
    path: Option<PathBuf>,
    look_every: Duration,
    opened: Instant,
    /// When the file is next looked at, in milliseconds after `opened`.
    next_look_ms: AtomicU64,
    state: Mutex<FileState>,
}

struct FileState {
    stamp: Option<Stamp>,
    config: Arc<GatewayConfig>,
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

fn read(path: &Path) -> Result<GatewayConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|err| err.to_string())?;
    GatewayConfig::parse(&text, &process_env)
}

impl ConfigFile {
    /// Reads `path` now: a file that is given but unreadable or invalid is a start error.
    pub fn open(path: Option<PathBuf>) -> Result<Self, String> {
        let (stamp, config) = match &path {
            Some(path) => {
                let stamp = stamp(path).map_err(|err| format!("{}: {err}", path.display()))?;
                let config = read(path).map_err(|err| format!("{}: {err}", path.display()))?;
                config.log_warnings(path);
                (Some(stamp), config)
            }
            None => (None, GatewayConfig::default()),
        };
        Ok(Self::new(path, stamp, config))
    }

    fn new(path: Option<PathBuf>, stamp: Option<Stamp>, config: GatewayConfig) -> Self {
        Self {
            path,
            look_every: LOOK_EVERY,
            opened: Instant::now(),
            next_look_ms: AtomicU64::new(0),
            state: Mutex::new(FileState {
                stamp,
                config: Arc::new(config),
            }),
        }
    }

    /// The same, the file looked at once every `look_every` at most.
    pub fn looked_at_every(mut self, look_every: Duration) -> Self {
        self.look_every = look_every;
        self
    }

    /// A fixed configuration, never re-read.
    pub fn fixed(config: GatewayConfig) -> Self {
        Self::new(None, None, config)
    }

    /// Whether the file is to be looked at now: once the interval since the last look has
    /// passed, by the one read that claims it.
    fn due(&self) -> bool {
        let elapsed = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_look_ms.load(Ordering::Relaxed);
        let every = u64::try_from(self.look_every.as_millis()).unwrap_or(u64::MAX);
        elapsed >= next
            && self
                .next_look_ms
                .compare_exchange(
                    next,
                    elapsed.saturating_add(every),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// The configuration in effect, re-reading a changed file.
    pub fn current(&self) -> Arc<GatewayConfig> {
        // The file is looked at before the lock is taken: concurrent calls do not wait on
        // one another's system call. Two that see stamps in the opposite order to their
        // locking only make the later one read the file again.
        let now = self
            .path
            .as_deref()
            .filter(|_| self.due())
            .map(|path| stamp(path).ok());
        let Ok(mut state) = self.state.lock() else {
            return Arc::new(GatewayConfig::default());
        };
        if let (Some(path), Some(now)) = (&self.path, now)
            && now != state.stamp
        {
            state.stamp = now;
            match read(path) {
                Ok(config) => {
                    if config != *state.config {
                        tracing::info!(file = %path.display(), models = config.models.len(), "gateway config reloaded");
                        config.log_warnings(path);
                        state.config = Arc::new(config);
                    }
                }
                Err(err) => tracing::warn!(
                    file = %path.display(),
                    error = %err,
                    "gateway config is unreadable or invalid; keeping the last good one"
                ),
            }
        }
        state.config.clone()
    }
}
