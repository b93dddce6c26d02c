//! A task's resource and output files and application packages as a request sends them, checked.

use axum::http::StatusCode;
use serde_json::Value;

use crate::api::error::{ApiError, ApiResult};
use crate::domain::container::{ContainerSettings, PoolContainers};
use crate::domain::files::{
    Invalid, OutputFile, PackageReference, PoolPackage, ResourceFile, TaskFiles,
};
use crate::store::{self, applications::ApplicationRow, jobs::JobRow};

/// What a batch of tasks' files may name: whether the account has a linked storage account, and
/// its applications. Each is read only when a task of the batch names it.
#[derive(Default)]
pub(super) struct FileContext {
    pub(super) linked_storage: bool,
    applications: Vec<ApplicationRow>,
    /// Whether the job's pool runs containers (has a containerConfiguration); None when the
    /// pool does not exist (yet).
    pub(super) container_pool: Option<bool>,
}

impl FileContext {
    pub(super) async fn read(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        job: &JobRow,
        linked_storage: bool,
        packages: bool,
        containers: bool,
    ) -> ApiResult<FileContext> {
        let mut context = FileContext::default();
        if linked_storage {
            context.linked_storage = store::accounts::storage(&mut **tx, &job.account)
                .await?
                .is_some();
        }
        if packages {
            context.applications = store::applications::list(&mut **tx, &job.account, None).await?;
        }
        if containers {
            context.container_pool = store::pools::get(&mut **tx, &job.account, &job.pool_id)
                .await?
                .map(|p| PoolContainers::of(p.vm_config.as_ref()).is_some());
        }
        Ok(context)
    }

    fn check_packages(&self, refs: &[PackageReference]) -> ApiResult<()> {
        checked_packages(refs, &self.applications).map(|_| ())
    }
}

/// Each reference names an application of the account and a version it has (or, without one,
/// the application has a default version); the references with the versions they resolve to.
pub(crate) fn checked_packages(
    refs: &[PackageReference],
    applications: &[ApplicationRow],
) -> ApiResult<Vec<PoolPackage>> {
    let mut resolved = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        let found = applications
            .iter()
            .find(|a| a.id.eq_ignore_ascii_case(&r.application_id))
            .ok_or_else(|| format!("the account has no application {:?}", r.application_id))
            .and_then(|a| {
                Ok(PoolPackage {
                    application_id: a.id.clone(),
                    version: r.version.clone(),
                    resolved: a.version_for(r.version.as_deref())?,
                })
            });
        match found {
            Ok(p) => resolved.push(p),
            Err(why) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidApplicationPackageReferences",
                    format!("The specified application package reference is invalid: {why}."),
                )
                .with("PropertyName", format!("applicationPackageReferences[{i}]")))
            }
        }
    }
    Ok(resolved)
}

/// A task's resource and output files and application packages, checked; None when it has none.
pub(super) fn task_files(
    resource_files: Option<Vec<ResourceFile>>,
    output_files: Option<Vec<OutputFile>>,
    packages: Option<Vec<PackageReference>>,
    container_settings: Option<ContainerSettings>,
    context: &FileContext,
) -> ApiResult<Option<Value>> {
    let files = TaskFiles {
        resource_files: resource_files.unwrap_or_default(),
        output_files: output_files.unwrap_or_default(),
        application_package_references: packages.unwrap_or_default(),
        container_settings,
    };
    context.check_packages(&files.application_package_references)?;
    check_resource_files("resourceFiles", &files.resource_files)?;
    for (i, o) in files.output_files.iter().enumerate() {
        o.check(&format!("outputFiles[{i}]")).map_err(invalid)?;
    }
    Ok((!files.is_empty()).then(|| serde_json::to_value(&files).expect("serializable")))
}

/// A task's containerSettings, checked: its pool must run containers, as on Azure.
pub(super) fn container_settings(
    raw: Value,
    context: &FileContext,
) -> ApiResult<ContainerSettings> {
    let settings: ContainerSettings = serde_json::from_value(raw.clone()).map_err(|e| {
        ApiError::invalid_property("containerSettings", raw.to_string(), e.to_string())
    })?;
    settings
        .check("containerSettings")
        .map_err(|(property, value, why)| ApiError::invalid_property(&property, value, why))?;
    if context.container_pool == Some(false) {
        return Err(ApiError::invalid_property(
            "containerSettings",
            &settings.image_name,
            "the job's pool has no virtualMachineConfiguration.containerConfiguration; a task runs in a container of its own only on a pool that has one, as on Azure",
        ));
    }
    Ok(settings)
}

/// Checks resource files; `property` names the list (`resourceFiles`, `startTask.resourceFiles`).
pub(crate) fn check_resource_files(property: &str, files: &[ResourceFile]) -> ApiResult<()> {
    for (i, r) in files.iter().enumerate() {
        r.check(&format!("{property}[{i}]")).map_err(invalid)?;
    }
    Ok(())
}

/// Refuses a resource file that names the account's linked storage when there is none.
pub(crate) fn refuse_auto_storage(property: &str, files: &[ResourceFile]) -> ApiResult<()> {
    let named = files.iter().enumerate().find_map(|(i, r)| {
        let name = r.auto_storage_container_name.as_deref()?;
        (!name.trim().is_empty()).then_some((i, name))
    });
    match named {
        Some((i, name)) => Err(ApiError::invalid_property(
            &format!("{property}[{i}].autoStorageContainerName"),
            name,
            "the account has no linked storage account (the operator links one with `batchpool account storage <account> <connection string>`); give storageContainerUrl with a SAS instead",
        )),
        None => Ok(()),
    }
}

fn invalid(e: Invalid) -> ApiError {
    ApiError::invalid_property(&e.property, e.value, e.reason)
}
