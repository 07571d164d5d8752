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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    sandgate::telemetry::init(&cli.log)?;
    let result = match cli.command {
        Command::Serve(args) => {
            let listener = bind(args.listen).await?;
            sandgate::serve(args, listener, sandgate::signal()).await
        }
        Command::RuntimeApi(args) => {
            let listener = bind(args.grpc_listen).await?;
            sandgate::runtime_api(args, listener, sandgate::signal()).await
        }
        Command::Edge(args) => {
            let listener = bind(args.listen).await?;
            sandgate::edge(args, listener, sandgate::signal()).await
        }
    };
    if let Err(err) = &result {
        tracing::error!("{err:#}");
    }
    result
}
