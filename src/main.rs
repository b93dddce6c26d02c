use clap::Parser;
use tracing_subscriber::EnvFilter;

use batchpool::config::{Cli, Command, LogFormat};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Unzip { zip, dir } = &cli.command {
        return batchpool::agent::unzip::unzip(zip, dir);
    }
    if let Command::Client(command) = cli.command {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        batchpool::install_tls();
        let status = runtime.block_on(batchpool::cli::run(command));
        std::process::exit(i32::from(status));
    }
    // The node agent shares its node's CPUs and process limit with the node's tasks: one thread
    // is plenty for it, where the server takes one per core of the host unless
    // `--worker-threads` says otherwise.
    let runtime = match &cli.command {
        Command::Agent => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        Command::Serve(config) => {
            let mut server = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = config.worker_threads {
                server.worker_threads(usize::from(n));
            }
            server.enable_all().build()?
        }
        _ => tokio::runtime::Runtime::new()?,
    };
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().with_current_span(false).init(),
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    batchpool::install_tls();
    match cli.command {
        Command::Serve(config) => batchpool::app::serve(*config).await,
        Command::Account(c) => batchpool::app::account_command(c).await,
        Command::Host(c) => batchpool::app::host_command(c).await,
        Command::Health(c) => {
            let path = if c.live { "/health" } else { "/health/ready" };
            let url = format!("{}{path}", c.url.trim_end_matches('/'));
            let answer = reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(5))
                .build()?
                .get(&url)
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => anyhow::bail!("{url} answered {}", r.status()),
                Err(e) => anyhow::bail!("{url}: {e}"),
            }
        }
        Command::Agent => batchpool::agent::run().await,
        Command::FleetSim(c) => batchpool::sim::run(c.listen).await,
        Command::Client(_) | Command::Unzip { .. } => unreachable!("these run in main"),
        Command::BuildNodeImage(c) => {
            let docker = match &c.docker_host {
                Some(host) => batchpool::runtime::docker::connect_host(host).await?,
                None => batchpool::runtime::docker::connect(None).await?,
            };
            let tag = match (&c.tag, c.debian) {
                (Some(tag), _) => tag.clone(),
                (None, true) => batchpool::runtime::docker::DEBIAN_IMAGE.to_string(),
                (None, false) => "batchpool/node:latest".to_string(),
            };
            if c.debian {
                build_debian(&docker, &tag, &c).await?;
            } else {
                batchpool::runtime::docker::build_busybox_image(&docker, &tag, &c.busybox).await?;
            }
            println!("built {tag}");
            Ok(())
        }
    }
}

/// `build-node-image --debian`: from `--rootfs`, or from a temporary root filesystem that is
/// removed afterwards.
async fn build_debian(
    docker: &bollard::Docker,
    tag: &str,
    c: &batchpool::config::BuildImageConfig,
) -> anyhow::Result<()> {
    use batchpool::runtime::docker::build_debian_image;
    let mirror = c.mirror.as_deref();
    if let Some(rootfs) = &c.rootfs {
        return build_debian_image(docker, tag, rootfs, mirror).await;
    }
    let scratch = scratch_dir()?;
    let built = build_debian_image(docker, tag, &scratch.join("rootfs"), mirror).await;
    std::fs::remove_dir_all(&scratch)?;
    built
}

/// A new directory under the temporary directory, for this process only.
fn scratch_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("batchpool-debian-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
