//! `batchpool account ...`: accounts, their keys, their Pool Service quotas, changed in the
//! database directly (see [`super::open_database`]), so it works with or without a running server.

use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use crate::config::{AccountAction, AccountConfig, DatabaseArgs};
use crate::{api, store};

/// `batchpool account ...`.
pub async fn account_command(config: AccountConfig) -> anyhow::Result<()> {
    let config = &config;
    with_database(&config.db, |db| async move { run(&db, config).await }).await
}

/// Runs `work` on the database `args` name, then closes it (and stops the embedded PostgreSQL if
/// this command started it).
pub(super) async fn with_database<F, Fut>(args: &DatabaseArgs, work: F) -> anyhow::Result<()>
where
    F: FnOnce(PgPool) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let (db, embedded) = super::open_database(
        args.database_url.as_ref(),
        &args.data_dir,
        2,
        Duration::from_secs(30),
    )
    .await?;
    let result = work(db.clone()).await;
    db.close().await;
    if let Some(pg) = embedded {
        pg.stop_if_started_here().await;
    }
    result
}

async fn run(db: &PgPool, config: &AccountConfig) -> anyhow::Result<()> {
    match &config.action {
        AccountAction::List => list(db).await,
        AccountAction::Show { name } => show(db, name).await,
        AccountAction::Create { name, storage } => {
            create(db, name).await?;
            match storage {
                Some(conn) => link_storage(db, name, Some(conn)).await,
                None => Ok(()),
            }
        }
        AccountAction::Storage {
            name,
            connection_string,
            ..
        } => link_storage(db, name, connection_string.as_deref()).await,
        AccountAction::Rotate { name, key } if key == "pool-service" => {
            rotate_pool_service_key(db, name).await
        }
        AccountAction::Quota {
            name,
            max_pools,
            max_vms_per_pool,
        } => set_quota(db, name, *max_pools, *max_vms_per_pool).await,
        AccountAction::Rotate { name, key } => rotate_key(db, config, name, key).await,
        price @ AccountAction::Price { .. } => super::price::command(db, price).await,
        budget @ AccountAction::Budget { .. } => super::budget::command(db, budget).await,
        AccountAction::Package {
            name,
            application,
            version,
            file,
            default,
            display_name,
        } => {
            let package = Package {
                account: name,
                application,
                version,
                display_name: display_name.as_deref(),
                make_default: *default,
            };
            add_package(db, &config.db.data_dir, &package, file).await
        }
    }
}

async fn list(db: &PgPool) -> anyhow::Result<()> {
    for name in store::accounts::names(db).await? {
        println!("{name}");
    }
    Ok(())
}

async fn show(db: &PgPool, name: &str) -> anyhow::Result<()> {
    let keys = store::accounts::get(db, name)
        .await?
        .with_context(|| format!("no account {name:?}"))?;
    let ps = pool_service_account(db, name).await?;
    println!(
        "account:          {}\nprimary key:      {}\nsecondary key:    {}\npool service key: {}\nmax pools:        {}\nmax VMs per pool: {}",
        keys.name, keys.primary_key, keys.secondary_key, ps.pool_service_key, ps.max_pools, ps.max_vms_per_pool
    );
    // The connection string holds the storage account's key: only its name and endpoint show.
    let linked = store::accounts::storage(db, name).await?.map(|conn| {
        match crate::storage::parse_connection_string(&conn) {
            Ok(a) => format!("{} ({})", a.name, a.endpoint),
            Err(e) => format!("unreadable: {}", e.message),
        }
    });
    println!("linked storage:   {}", linked.as_deref().unwrap_or("none"));
    Ok(())
}

async fn create(db: &PgPool, name: &str) -> anyhow::Result<()> {
    crate::domain::ids::check_id(name).map_err(|why| anyhow::anyhow!("account name: {why}"))?;
    let (primary, secondary) = (api::auth::new_key(), api::auth::new_key());
    anyhow::ensure!(
        store::accounts::create(db, name, &primary, &secondary).await?,
        "account {name:?} exists already"
    );
    println!("account:       {name}\nprimary key:   {primary}\nsecondary key: {secondary}");
    Ok(())
}

/// A package version `batchpool account package` adds.
struct Package<'a> {
    account: &'a str,
    application: &'a str,
    version: &'a str,
    display_name: Option<&'a str>,
    make_default: bool,
}

/// Copies the zip into the data directory (whole, or not at all), then records it.
async fn add_package(
    db: &PgPool,
    data_dir: &std::path::Path,
    p: &Package<'_>,
    file: &std::path::Path,
) -> anyhow::Result<()> {
    crate::domain::ids::check_id(p.application)
        .map_err(|why| anyhow::anyhow!("application: {why}"))?;
    crate::domain::files::check_version(p.version)
        .map_err(|why| anyhow::anyhow!("version: {why}"))?;
    anyhow::ensure!(
        store::accounts::get(db, p.account).await?.is_some(),
        "no account {:?}",
        p.account
    );
    let mut magic = [0u8; 4];
    std::io::Read::read_exact(
        &mut std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?,
        &mut magic,
    )
    .with_context(|| format!("reading {}", file.display()))?;
    anyhow::ensure!(
        &magic == b"PK\x03\x04",
        "{} is not a zip file",
        file.display()
    );
    let id = crate::ops::applications::canonical_id(db, p.account, p.application).await?;
    let target = crate::runtime::Layout::new(data_dir).package_file(p.account, &id, p.version);
    let dir = target.parent().expect("a package file has a directory");
    std::fs::create_dir_all(dir)?;
    let partial = target.with_extension("zip.partial");
    let size = std::fs::copy(file, &partial)?;
    std::fs::rename(&partial, &target)?;
    let is_default = crate::ops::applications::record_package(
        db,
        p.account,
        &id,
        p.version,
        size as i64,
        p.make_default,
        p.display_name,
    )
    .await?;
    let default = is_default.then_some(p.version);
    println!("application:     {id}\nversion:         {}\nsize:            {size} bytes\ndefault version: {}",
        p.version, default.map_or("unchanged", |_| p.version));
    Ok(())
}

/// Links (or with None unlinks) the account's storage account, once its connection string parses.
async fn link_storage(db: &PgPool, name: &str, conn: Option<&str>) -> anyhow::Result<()> {
    let account = conn
        .map(crate::storage::parse_connection_string)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    anyhow::ensure!(
        store::accounts::set_storage(db, name, conn).await?,
        "no account {name:?}"
    );
    match account {
        Some(a) => println!("linked storage: {} ({})", a.name, a.endpoint),
        None => println!("linked storage: none"),
    }
    Ok(())
}

async fn rotate_pool_service_key(db: &PgPool, name: &str) -> anyhow::Result<()> {
    let new = store::services::rotate_pool_service_key(db, name)
        .await?
        .with_context(|| format!("no account {name:?}"))?;
    println!("new pool service key of {name}: {new}");
    Ok(())
}

async fn set_quota(
    db: &PgPool,
    name: &str,
    max_pools: Option<i32>,
    max_vms_per_pool: Option<i32>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        max_pools.unwrap_or(0) >= 0 && max_vms_per_pool.unwrap_or(0) >= 0,
        "quotas must not be negative"
    );
    anyhow::ensure!(
        store::services::set_quotas(db, name, max_pools, max_vms_per_pool).await?,
        "no account {name:?}"
    );
    let ps = pool_service_account(db, name).await?;
    println!(
        "{name}: at most {} Pool Service pools of at most {} VMs each",
        ps.max_pools, ps.max_vms_per_pool
    );
    Ok(())
}

async fn rotate_key(
    db: &PgPool,
    config: &AccountConfig,
    name: &str,
    key: &str,
) -> anyhow::Result<()> {
    let new = api::auth::new_key();
    anyhow::ensure!(
        store::accounts::rotate(db, name, key == "secondary", &new).await?,
        "no account {name:?}"
    );
    // The key file a first start wrote follows the primary key.
    let key_file = config.db.data_dir.join(format!("{name}.key"));
    if key == "primary" && config.db.database_url.is_none() && key_file.exists() {
        std::fs::write(&key_file, &new)?;
    }
    println!("new {key} key of {name}: {new}");
    Ok(())
}

async fn pool_service_account(
    db: &PgPool,
    name: &str,
) -> anyhow::Result<store::services::PoolServiceAccount> {
    store::services::pool_service_account(db, name)
        .await?
        .with_context(|| format!("no account {name:?}"))
}
