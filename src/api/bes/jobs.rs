//! BES jobs: submit, start, status, cancel (DELETE), list. Authenticated with the service's key.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::{Postgres, Transaction};

use super::error::{BesError, BesResult};
use super::services::{authorize, param_string};
use super::{check_version, BesJson};
use crate::api::rfc3339;
use crate::api::state::AppState;
use crate::domain::bes;
use crate::domain::bes::Phase;
use crate::domain::bes::CLASSIC_ACCOUNT;
use crate::domain::job::JobState;
use crate::storage::{self, DataReference};
use crate::store;
use crate::store::services::BesJobRow;

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "PascalCase")]
pub struct SubmitBody {
    input: Option<DataReference>,
    inputs: Option<BTreeMap<String, Option<DataReference>>>,
    /// The 2015 single-output form.
    output: Option<DataReference>,
    outputs: Option<BTreeMap<String, Option<DataReference>>>,
    global_parameters: Option<serde_json::Map<String, Value>>,
    azure_batch_pool_id: Option<String>,
}

/// A declared input or output: name and extension.
fn ports(v: &Value) -> Vec<(String, Option<String>)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["Name"].as_str()?.to_string(),
                p["Extension"].as_str().map(String::from),
            ))
        })
        .collect()
}

/// The extension a file gets: the declared one, else the blob's own.
fn extension(declared: &Option<String>, r: Option<&DataReference>) -> String {
    if let Some(ext) = declared {
        return ext.clone();
    }
    r.and_then(|r| r.relative_location.as_deref())
        .and_then(|rel| rel.rsplit('/').next())
        .and_then(|name| name.rsplit_once('.').map(|(_, e)| e))
        .filter(|e| !e.is_empty() && e.len() <= 16 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|e| format!(".{e}"))
        .unwrap_or_default()
}

/// Reads an input's properties: a missing blob, a wrong key or an unreachable store is found now,
/// not when the job runs.
async fn check_readable(name: &str, b: &storage::Blob) -> BesResult<()> {
    use object_store::{Error as E, ObjectStoreExt};
    let head =
        tokio::time::timeout(std::time::Duration::from_secs(20), b.store.head(&b.path)).await;
    let (code, why) = match head {
        Ok(Ok(_)) => return Ok(()),
        Err(_) => (
            "InvalidBlob",
            "the storage did not answer in 20 s".to_string(),
        ),
        Ok(Err(E::NotFound { .. })) => ("InvalidBlob", "the blob does not exist".to_string()),
        Ok(Err(e @ (E::Unauthenticated { .. } | E::PermissionDenied { .. })))
            if matches!(b.place, storage::Place::AzureKey { .. }) =>
        {
            (
                "InvalidBlobConnectionString",
                format!("the storage refused the account key: {e}"),
            )
        }
        Ok(Err(e)) => ("InvalidBlob", e.to_string()),
    };
    Err(BesError::bad(
        code,
        format!("Input {name:?} cannot be read: {why}. Verify that connection string / relative path or SAS token specification is correct."),
    )
    .target(format!("Inputs.{name}")))
}

pub async fn submit(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path((ns, svc)): Path<(String, String)>,
    BesJson(body): BesJson<SubmitBody>,
) -> BesResult<Json<String>> {
    let service = authorize(&app, &headers, &ns, &svc).await?;
    check_version(query.as_deref())?;
    let roots = &app.settings.storage_roots;
    let declared_inputs = ports(&service.inputs);
    let declared_outputs = ports(&service.outputs);

    // Inputs: `Input` (one) or `Inputs` (by name), never both.
    let mut given_inputs: BTreeMap<String, DataReference> = BTreeMap::new();
    match (body.input, body.inputs) {
        (Some(_), Some(m)) if !m.is_empty() => {
            return Err(BesError::bad(
                "DuplicateInputInBatchCall",
                "Cannot specify both single and multiple input at the same time.",
            ))
        }
        (Some(one), _) => {
            let Some((first, _)) = declared_inputs.first() else {
                return Err(BesError::bad(
                    "BatchJobInputsTooManySpecified",
                    "The service declares no input, but the request gives one.",
                ));
            };
            if declared_inputs.len() > 1 {
                return Err(BesError::bad(
                    "BatchJobInputsNotSpecified",
                    format!(
                        "The service has {} inputs; name them in Inputs.",
                        declared_inputs.len()
                    ),
                ));
            }
            given_inputs.insert(first.clone(), one);
        }
        (None, Some(m)) => {
            for (name, r) in m {
                if let Some(r) = r {
                    given_inputs.insert(name, r);
                }
            }
        }
        (None, None) => {}
    }
    if let Some(bad) = given_inputs
        .keys()
        .find(|n| !declared_inputs.iter().any(|(d, _)| d == *n))
    {
        return Err(BesError::bad("InvalidInputNames", format!(
            "Input {bad:?} is not an input of the service (case sensitivity applies); its inputs: {}.",
            declared_inputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "))).target(format!("Inputs.{bad}")));
    }
    let missing: Vec<&str> = declared_inputs
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !given_inputs.contains_key(*n))
        .collect();
    if !missing.is_empty() {
        return Err(BesError::bad(
            "BatchJobInputsNotSpecified",
            format!(
                "The following required input(s) were not specified with the request: {}.",
                missing.join(", ")
            ),
        ));
    }

    // Outputs: overrides by name; the rest go to the server's storage.
    let mut given_outputs: BTreeMap<String, DataReference> = BTreeMap::new();
    if let Some(one) = body.output {
        if let Some((first, _)) = declared_outputs.first() {
            given_outputs.insert(first.clone(), one);
        }
    }
    for (name, r) in body.outputs.unwrap_or_default() {
        if let Some(r) = r {
            given_outputs.insert(name, r);
        }
    }
    for name in given_outputs.keys() {
        if !declared_outputs.iter().any(|(d, _)| d == name) {
            return Err(BesError::bad(
                "InvalidOutputOverrideName",
                format!(
                    "Output {name:?} is not an output of the service (case sensitivity applies)."
                ),
            )
            .target(format!("Outputs.{name}")));
        }
    }

    // Global parameters: known names only, every required one given.
    let mut params: BTreeMap<String, String> = BTreeMap::new();
    let declared_params = service
        .global_parameters
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (name, v) in body.global_parameters.unwrap_or_default() {
        if !declared_params.iter().any(|p| p["Name"] == json!(name)) {
            return Err(BesError::bad(
                "UnexpectedParameter",
                format!("{name:?} is not a global parameter of the service."),
            )
            .target(format!("GlobalParameters.{name}")));
        }
        if let Some(s) = param_string(&v) {
            params.insert(name, s);
        }
    }
    let mut missing = Vec::new();
    for p in &declared_params {
        let name = p["Name"].as_str().unwrap_or_default().to_string();
        if params.contains_key(&name) {
            continue;
        }
        match p["Default"].as_str() {
            Some(d) => {
                params.insert(name, d.to_string());
            }
            None if p["Required"] == json!(true) => missing.push(name),
            None => {
                params.insert(name, String::new());
            }
        }
    }
    if !missing.is_empty() {
        return Err(BesError::bad(
            "MissingRequiredGlobalParameters",
            format!(
                "The following required global parameter(s) were not given: {}.",
                missing.join(", ")
            ),
        ));
    }

    // Every reference must resolve; inputs must be readable now.
    let mut inputs = serde_json::Map::new();
    let mut input_files = BTreeMap::new();
    let mut checks = Vec::new();
    for (name, ext) in &declared_inputs {
        let r = &given_inputs[name];
        let b = storage::resolve(r, roots)
            .map_err(|e| BesError::from(e).target(format!("Inputs.{name}")))?;
        let file = bes::input_path(name, &extension(ext, Some(r)));
        checks.push((name.clone(), b));
        input_files.insert(name.clone(), file.clone());
        inputs.insert(name.clone(), json!({"ref": r, "file": file}));
    }
    futures_util::future::try_join_all(checks.iter().map(|(n, b)| check_readable(n, b))).await?;
    let mut outputs = serde_json::Map::new();
    let mut output_files = BTreeMap::new();
    for (name, ext) in &declared_outputs {
        let r = given_outputs.get(name);
        if let Some(r) = r {
            storage::resolve(r, roots)
                .map_err(|e| BesError::from(e).target(format!("Outputs.{name}")))?;
            let blob_ext = extension(&None, Some(r));
            if let Some(want) = ext {
                if !blob_ext.eq_ignore_ascii_case(want) {
                    return Err(BesError::bad(
                        "InvalidBlobExtension",
                        format!(
                            "Output {name:?} must be a {want} blob; {:?} is not.",
                            r.relative_location.clone().unwrap_or_default()
                        ),
                    )
                    .target(format!("Outputs.{name}")));
                }
            }
        }
        let file = bes::output_path(name, &extension(ext, r));
        output_files.insert(name.clone(), file.clone());
        outputs.insert(name.clone(), json!({"ref": r, "file": file}));
    }
    let command = bes::render(&service.command, &input_files, &output_files, &params)
        .map_err(BesError::internal)?;

    // Where it runs: the pool it names, or the classic environment.
    let pool_id = body.azure_batch_pool_id.filter(|p| !p.trim().is_empty());
    let run_account = match &pool_id {
        Some(id) => {
            match store::pools::get(&app.db, &service.account, id).await? {
                Some(p) if p.state != "deleting" => {}
                _ => {
                    return Err(BesError::bad("PoolNotFound", format!(
                        "AzureBatchPoolId {id:?} names no pool of this service's account."
                    )).target("AzureBatchPoolId"))
                }
            }
            service.account.clone()
        }
        None if app.settings.classic_concurrency == 0 => {
            return Err(BesError::bad("NoClassicEnvironment", "This server runs no classic batch environment (--classic-concurrency 0); give AzureBatchPoolId.").target("AzureBatchPoolId"))
        }
        None => CLASSIC_ACCOUNT.to_string(),
    };
    let request = json!({
        "command": command,
        "image": service.image,
        "inputs": inputs,
        "outputs": outputs,
        "params": params,
    });
    let id = bes::new_id();
    store::services::insert_job(
        &app.db,
        &id,
        service.pk,
        &run_account,
        pool_id.as_deref(),
        &request,
    )
    .await?;
    tracing::info!(job = %id, service = %service.id, pool = ?pool_id, "BES job submitted");
    Ok(Json(id))
}

/// The job a request names, once its Bearer key and api-version pass.
async fn find(
    app: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    (ns, svc, id): &(String, String, String),
) -> BesResult<BesJobRow> {
    let service = authorize(app, headers, ns, svc).await?;
    check_version(query)?;
    store::services::get_job(&app.db, service.pk, id)
        .await?
        .ok_or_else(|| {
            BesError::not_found("JobNotFound", format!("The job {id:?} does not exist."))
        })
}

pub fn status_json(j: &BesJobRow) -> Value {
    json!({
        "StatusCode": j.status_code(),
        "Results": if j.job_phase() == Some(Phase::Finished) { j.results.clone().unwrap_or(Value::Null) } else { Value::Null },
        "Details": j.details,
        "CreatedAt": rfc3339(j.creation_time),
        "StartTime": j.start_time.map(rfc3339),
        "EndTime": j.end_time.map(rfc3339),
    })
}

pub async fn start(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path(path): Path<(String, String, String)>,
) -> BesResult<StatusCode> {
    let job = find(&app, &headers, query.as_deref(), &path).await?;
    if !store::services::set_phase(&app.db, job.pk, &[Phase::NotStarted], Phase::Staging).await? {
        let now = store::services::get_job_by_pk(&app.db, job.pk)
            .await?
            .unwrap_or(job);
        return Err(BesError::new(
            StatusCode::BAD_REQUEST,
            "InvalidOperation",
            "CannotStartJob",
            format!(
                "The job cannot be started because it is in {} state.",
                now.status_code()
            ),
        ));
    }
    app.wake_bes();
    Ok(StatusCode::OK)
}

pub async fn get(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path(path): Path<(String, String, String)>,
) -> BesResult<Json<Value>> {
    Ok(Json(status_json(
        &find(&app, &headers, query.as_deref(), &path).await?,
    )))
}

pub async fn list(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path((ns, svc)): Path<(String, String)>,
) -> BesResult<Json<Value>> {
    let service = authorize(&app, &headers, &ns, &svc).await?;
    check_version(query.as_deref())?;
    let jobs = store::services::list_jobs(&app.db, service.pk).await?;
    Ok(Json(Value::Array(
        jobs.iter()
            .map(|j| {
                let mut v = status_json(j);
                v["Id"] = json!(j.id);
                v["AzureBatchPoolId"] = json!(j.pool_id);
                v
            })
            .collect(),
    )))
}

/// DELETE: an unfinished job is cancelled (its Batch job, if it has one, goes with its running
/// task); a finished one stays as it is, so its status and results can still be read.
pub async fn cancel(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path(path): Path<(String, String, String)>,
) -> BesResult<StatusCode> {
    let job = find(&app, &headers, query.as_deref(), &path).await?;
    let mut tx = app.db.begin().await?;
    cancel_in(&mut tx, &job).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    app.wake_bes();
    Ok(StatusCode::OK)
}

pub async fn cancel_in(tx: &mut Transaction<'_, Postgres>, job: &BesJobRow) -> sqlx::Result<()> {
    // The guarded update waits for a driver that is turning the job into a Batch job, so the
    // Batch job is seen here if it was made at all.
    if store::services::finish(
        &mut **tx,
        job.pk,
        Phase::Cancelled,
        None,
        Some("The job was cancelled."),
    )
    .await?
    {
        if let Some(batch_job) = store::jobs::get(
            &mut **tx,
            &job.run_account,
            &job.id,
            store::jobs::Lock::Update,
        )
        .await?
        {
            store::jobs::set_state(&mut **tx, batch_job.pk, JobState::Deleting).await?;
        }
        tracing::info!(job = %job.id, "BES job cancelled");
    }
    Ok(())
}
