//! `sandgate`: parse the command line, start logging, bind, and hand over to the library.

use clap::Parser;
use mimalloc::MiMalloc;
use sandgate::cli::{Cli, Command};
use tokio::net::TcpListener;

/// JSON parsing and validation allocate many small objects per request; mimalloc serves
/// them markedly faster than the system allocator (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: MiMalloc = MiMalloc;

async fn bind(address: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen on {address}: {err}"))
}

/// The metrics listener, when `--metrics-listen` names one.
async fn bind_metrics(args: &sandgate::cli::MetricsArgs) -> anyhow::Result<Option<TcpListener>> {
    match args.metrics_listen {
        Some(address) => bind(address).await.map(Some),
        None => Ok(None),
    }
}

/// `sandgate admin`: a client, whose failures are the server's detail for a person to
/// read, and exit status 1, rather than log records.
async fn admin(args: sandgate::cli::AdminClientArgs) -> anyhow::Result<()> {
    let outcome = sandgate::admin_client::run(
        args,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )
    .await;
    if let Err(err) = outcome {
        use std::io::Write;
        // Nothing more can be said if stderr is gone.
        drop(writeln!(std::io::stderr(), "sandgate admin: {err:#}"));
        std::process::exit(1);
    }
    Ok(())
}

/// Ends a command that speaks through its own output (not log records): a failure is one
/// line on stderr and exit status 1.
fn finish(command: &str, outcome: Result<bool, String>) -> ! {
    let code = match outcome {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(err) => {
            use std::io::Write;
            // Nothing more can be said if stderr is gone.
            drop(writeln!(std::io::stderr(), "sandgate {command}: {err}"));
            1
        }
    };
    std::process::exit(code)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let command = match cli.command {
        // Clients and tools: they speak through their own messages, not log records.
        Command::Admin(args) => return admin(args).await,
        Command::Ledger(args) => {
            if let Err(err) =
                sandgate::ledger_client::run(args, &mut std::io::stdout().lock()).await
            {
                use std::io::Write;
                // Nothing more can be said if stderr is gone.
                drop(writeln!(std::io::stderr(), "sandgate ledger: {err:#}"));
                std::process::exit(1);
            }
            return Ok(());
        }
        Command::CheckConfig(args) => {
            let outcome = sandgate::check_config::run(&args, &mut std::io::stdout().lock()).await;
            finish("check-config", outcome.map_err(|err| err.to_string()))
        }
        Command::GenSecrets(args) => {
            let outcome = sandgate::gen_secrets::run(&args, &mut std::io::stdout().lock());
            finish(
                "gen-secrets",
                outcome.map(|()| true).map_err(|err| err.to_string()),
            )
        }
        Command::HealthCheck(args) => {
            let outcome = sandgate::health_check::run(&args).await;
            finish("health-check", outcome.map(|()| true))
        }
        Command::SupportBundle(args) => {
            let outcome =
                sandgate::support_bundle::client::run(&args, &mut std::io::stdout().lock()).await;
            if let Ok(written) = &outcome
                && written != "stdout"
            {
                use std::io::Write;
                // Nothing more can be said if stderr is gone.
                drop(writeln!(
                    std::io::stderr(),
                    "support bundle written to {written}"
                ));
            }
            finish(
                "support-bundle",
                outcome.map(|_| true).map_err(|err| format!("{err:#}")),
            )
        }
        server => server,
    };
    let telemetry = sandgate::telemetry::init(&cli.log, command.service_name())?;
    let result = match command {
        Command::Serve(args) => {
            let listener = bind(args.listen).await?;
            sandgate::serve(args, listener, sandgate::signal()).await
        }
        Command::RuntimeApi(args) => {
            let listener = bind(args.grpc_listen).await?;
            let metrics = bind_metrics(&args.metrics).await?;
            sandgate::runtime_api(args, listener, metrics, sandgate::signal()).await
        }
        Command::ModelGw(args) => {
            let listener = bind(args.grpc_listen).await?;
            let metrics = bind_metrics(&args.metrics).await?;
            sandgate::model_gw(args, listener, metrics, sandgate::signal()).await
        }
        Command::Edge(args) => {
            let listener = bind(args.listen).await?;
            sandgate::edge(args, listener, sandgate::signal()).await
        }
        Command::Admin(_)
        | Command::Ledger(_)
        | Command::CheckConfig(_)
        | Command::GenSecrets(_)
        | Command::HealthCheck(_)
        | Command::SupportBundle(_) => Ok(()),
    };
    if let Err(err) = &result {
        tracing::error!("{err:#}");
    }
    telemetry.shutdown().await;
    result
}
