//! Application packages on nodes: a task's `applicationPackageReferences` are installed on its
//! node before its command runs, once per node and version, in `applications/<id>#<version>`
//! below the node's root. The server copies the package's zip into the node; the node's copy of
//! this program unzips it there (so what the zip holds lands inside the node's own view, and a
//! node image needs no unzip), and the task finds it through
//! `AZ_BATCH_APP_PACKAGE_<ID>_<VERSION>` (and `AZ_BATCH_APP_PACKAGE_<ID>` for a reference that
//! names no version).

use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt;
use sqlx::PgPool;

use super::complete::Failure;
use super::environment::{package_dir, pool_package_env, Placement};
use super::special_task::{run_special_task, SpecialTask};
use super::task_files::Fetcher;
use crate::domain::agent::FileOp;
use crate::domain::container::shell_quote;
use crate::domain::files::{package_variable, PackageReference, PoolPackage};
use crate::domain::run_as::RunAs;
use crate::runtime::agents::FileAnswer;
use crate::runtime::keyed_locks::KeyedLocks;
use crate::runtime::safe_fs::Below;
use crate::runtime::{Runtime, TaskDirs, TaskFiles};
use crate::store::{self, tasks::AttemptRow};

/// Written last by the install: a package directory without it is installed again.
const INSTALLED: &str = ".batchpool-installed";

/// A node, an application and a version.
type Install = (String, String, String);

pub struct Packages {
    db: PgPool,
    runtime: Arc<Runtime>,
    fetcher: Fetcher,
    /// One install at a time per node and package version.
    locks: Arc<KeyedLocks<Install>>,
}

impl Packages {
    pub fn new(db: PgPool, runtime: Arc<Runtime>, fetcher: Fetcher) -> Self {
        Self {
            db,
            runtime,
            fetcher,
            locks: KeyedLocks::new(),
        }
    }

    /// Installs the attempt's packages on its node (those not there yet); the variables that
    /// tell the task where they are.
    pub async fn install(&self, a: &AttemptRow) -> Result<Vec<(String, String)>, Failure> {
        let refs = match a.files.as_ref() {
            Some(f) if !f.application_package_references.is_empty() => {
                &f.application_package_references
            }
            _ => return Ok(Vec::new()),
        };
        let at = Placement {
            account: &a.account,
            pool_id: a.pool_id.as_deref().unwrap_or_default(),
            node_id: a.node_id.as_deref().unwrap_or_default(),
        };
        let mut env = Vec::new();
        for r in refs {
            let (id, version) = self.resolve(&a.account, r).await?;
            let dir = self.install_one(&at, &id, &version).await?;
            env.push((package_variable(&id, Some(&version)), dir.clone()));
            if r.version.is_none() {
                env.push((package_variable(&id, None), dir));
            }
        }
        Ok(env)
    }

    /// Installs a pool's packages on one of its nodes as it joins; the variables that tell its
    /// commands where they are.
    pub async fn install_pool(
        &self,
        at: &Placement<'_>,
        packages: &[PoolPackage],
    ) -> Result<Vec<(String, String)>, Failure> {
        let mut env = Vec::new();
        for p in packages {
            let dir = self.install_one(at, &p.application_id, &p.resolved).await?;
            env.extend(pool_package_env(p, &dir));
        }
        Ok(env)
    }

    /// The application's id as created, and the version the reference names or its default.
    async fn resolve(
        &self,
        account: &str,
        r: &PackageReference,
    ) -> Result<(String, String), Failure> {
        let missing = |why: String| Failure::new("ApplicationPackageNotFound", why);
        let apps = store::applications::list(&self.db, account, Some(&r.application_id))
            .await
            .map_err(|e| missing(format!("reading the account's applications failed: {e}")))?;
        let app = apps.into_iter().next().ok_or_else(|| {
            missing(format!(
                "the account has no application {:?}",
                r.application_id
            ))
        })?;
        let version = app.version_for(r.version.as_deref()).map_err(missing)?;
        Ok((app.id, version))
    }

    /// Installs one package version on the node unless it is there; where it is on the node.
    async fn install_one(
        &self,
        at: &Placement<'_>,
        id: &str,
        version: &str,
    ) -> Result<String, Failure> {
        let node_id = at.node_id;
        let name = format!("{id}#{version}");
        let node_root = self.runtime.node_root(node_id);
        let target = package_dir(&self.runtime, node_id, id, version);
        let host_root = self.runtime.host_root(node_id);
        let key = (node_id.to_string(), id.to_lowercase(), version.to_string());
        let _held = self.locks.lock(key).await;
        // Asked of the node's agent, which looks inside the node.
        let marker = Below {
            root: host_root.clone(),
            rel: Path::new("applications").join(&name).join(INSTALLED),
        };
        let installed = matches!(
            self.runtime.file(Some(node_id), &marker, FileOp::Stat).await,
            Ok(FileAnswer::Info(info)) if !info.is_dir
        );
        if installed {
            return Ok(target);
        }
        let failed = |why: String| Failure::new("ApplicationPackageInstallFailed", why);
        let work = Path::new("applications").join(".install").join(&name);
        let dirs = TaskDirs {
            host: Below {
                root: host_root,
                rel: work.clone(),
            },
            node: format!("{node_root}/applications/.install/{name}"),
            node_base: node_root.clone(),
        };
        // The package is the server's own file; the node's agent writes it into the node.
        let zip = self.runtime.layout().package_file(at.account, id, version);
        let copied = match tokio::fs::File::open(&zip).await {
            Ok(source) => {
                let bytes = tokio_util::io::ReaderStream::new(source).boxed();
                let on = TaskFiles {
                    runtime: &self.runtime,
                    node: Some(node_id),
                    dirs: &dirs,
                };
                let to = Path::new("wd").join("package.zip");
                on.write(&to, bytes, None).await.map_err(|e| e.message)
            }
            Err(e) => Err(e.to_string()),
        };
        copied.map_err(|e| {
            failed(format!(
                "copying the package {name} to the node failed: {e}"
            ))
        })?;
        let command_line = install_command(&self.runtime);
        let command = SpecialTask {
            command_line: &command_line,
            dirs,
            env: vec![("TARGET".into(), target.clone())],
            resource_files: &[],
            linked_storage: None,
            max_retries: 0,
            limit: None,
            container: None,
            // Installed for every task of the node, whoever they run as.
            run_as: RunAs::Admin,
        };
        let outcome =
            run_special_task(&self.runtime, &self.fetcher, at, command, |_| async {}).await;
        if outcome.succeeded {
            Ok(target)
        } else {
            Err(failed(format!(
                "unzipping the package {name} on the node failed (see {node_root}/applications/.install/{name}/stderr.txt): {}",
                outcome.info["failureInfo"]["message"].as_str().unwrap_or_default()
            )))
        }
    }
}

/// What installs a package: `package.zip` in its working directory unpacked into `$TARGET`,
/// by the node's own copy of this program (node images need no unzip program).
fn install_command(runtime: &Runtime) -> String {
    let unzip: Vec<String> = runtime
        .program_in_node()
        .iter()
        .map(|w| shell_quote(w))
        .collect();
    format!(
        r#"rm -rf "$TARGET" && mkdir -p "$TARGET" && {} unzip package.zip "$TARGET" && touch "$TARGET/{INSTALLED}" && rm -f package.zip"#,
        unzip.join(" ")
    )
}
