use clap::Parser;
use tracing_subscriber::EnvFilter;

use batchpool::config::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    batchpool::install_tls();
    match Cli::parse().command {
        Command::Serve(config) => batchpool::app::serve(*config).await,
        Command::Account(c) => batchpool::app::account_command(c).await,
        Command::Host(c) => batchpool::app::host_command(c).await,
        Command::Agent => batchpool::agent::run().await,
        Command::BuildNodeImage(c) => {
            let docker = match &c.docker_host {
                Some(host) => batchpool::runtime::docker::connect_host(host).await?,
                None => batchpool::runtime::docker::connect(None).await?,
            };
            batchpool::runtime::docker::build_busybox_image(&docker, &c.tag, &c.busybox).await?;
            println!("built {}", c.tag);
            Ok(())
        }
    }
}
