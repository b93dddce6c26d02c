//! A task's resource and output files as a request sends them, checked.

use serde_json::Value;

use crate::api::error::{ApiError, ApiResult};
use crate::domain::files::{Invalid, OutputFile, ResourceFile, TaskFiles};

/// A task's resource and output files, checked; None when it moves none.
pub(crate) fn task_files(
    resource_files: Option<Vec<ResourceFile>>,
    output_files: Option<Vec<OutputFile>>,
) -> ApiResult<Option<Value>> {
    let files = TaskFiles {
        resource_files: resource_files.unwrap_or_default(),
        output_files: output_files.unwrap_or_default(),
    };
    check_resource_files("resourceFiles", &files.resource_files)?;
    for (i, o) in files.output_files.iter().enumerate() {
        o.check(&format!("outputFiles[{i}]")).map_err(invalid)?;
    }
    Ok((!files.is_empty()).then(|| serde_json::to_value(&files).expect("serializable")))
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
