//! Logging: `tracing` to stderr, as text or JSON. Nothing logged carries a secret: keys,
//! passwords and record contents are never passed to a log macro.

use tracing_subscriber::EnvFilter;

use crate::cli::{LogArgs, LogFormat};

pub fn init(args: &LogArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&args.log)
        .map_err(|err| anyhow::anyhow!("invalid --log filter {:?}: {err}", args.log))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let installed = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|err| anyhow::anyhow!("cannot install the logger: {err}"))
}
