//! Submitting a BES job: the request's inputs, outputs and global parameters are checked
//! against what its web service declares, and turned into the command the job will run.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::bes::error::{BesError, BesResult};
use crate::api::bes::services::{authorize, param_string};
use crate::api::bes::{check_version, BesJson};
use crate::api::state::AppState;
use crate::domain::bes::{self, CLASSIC_ACCOUNT};
use crate::domain::pool::PoolState;
use crate::storage::{self, DataReference, Roots};
use crate::store::{self, services::ServiceRow};

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
type Port = (String, Option<String>);

/// Data references by port name.
type Refs = BTreeMap<String, DataReference>;

fn ports(v: &Value) -> Vec<Port> {
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
    let given_inputs = given_inputs(body.input, body.inputs, &declared_inputs)?;
    check_input_names(&given_inputs, &declared_inputs)?;
    let given_outputs = given_outputs(body.output, body.outputs, &declared_outputs)?;
    let params = global_parameters(body.global_parameters, &service.global_parameters)?;
    let local = app.settings.allow_local_urls;
    let inputs = readable_inputs(&declared_inputs, &given_inputs, roots, local).await?;
    let outputs = placed_outputs(&declared_outputs, &given_outputs, roots)?;
    for (name, r) in &given_outputs {
        let b = storage::resolve(r, roots)
            .map_err(|e| BesError::from(e).target(format!("Outputs.{name}")))?;
        b.check_host(local)
            .await
            .map_err(|e| BesError::from(e).target(format!("Outputs.{name}")))?;
    }
    let command = bes::render(&service.command, &inputs.files, &outputs.files, &params)
        .map_err(BesError::internal)?;
    let pool_id = body.azure_batch_pool_id.filter(|p| !p.trim().is_empty());
    let run_account = run_account(&app, &service, pool_id.as_deref()).await?;
    let request = bes::JobRequest {
        command,
        image: service.image.clone(),
        inputs: inputs.placed,
        outputs: outputs.placed,
        params,
    };
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

/// The inputs a request gives, by name: `Input` (one) or `Inputs` (by name), never both.
fn given_inputs(
    one: Option<DataReference>,
    named: Option<BTreeMap<String, Option<DataReference>>>,
    declared: &[Port],
) -> BesResult<Refs> {
    let mut given = Refs::new();
    match (one, named) {
        (Some(_), Some(m)) if !m.is_empty() => {
            return Err(BesError::bad(
                "DuplicateInputInBatchCall",
                "Cannot specify both single and multiple input at the same time.",
            ))
        }
        (Some(one), _) => {
            let Some((first, _)) = declared.first() else {
                return Err(BesError::bad(
                    "BatchJobInputsTooManySpecified",
                    "The service declares no input, but the request gives one.",
                ));
            };
            if declared.len() > 1 {
                return Err(BesError::bad(
                    "BatchJobInputsNotSpecified",
                    format!(
                        "The service has {} inputs; name them in Inputs.",
                        declared.len()
                    ),
                ));
            }
            given.insert(first.clone(), one);
        }
        (None, Some(m)) => {
            for (name, r) in m {
                if let Some(r) = r {
                    given.insert(name, r);
                }
            }
        }
        (None, None) => {}
    }
    Ok(given)
}

/// Every input given must be declared, and every one declared given.
fn check_input_names(given: &Refs, declared: &[Port]) -> BesResult<()> {
    if let Some(bad) = given
        .keys()
        .find(|n| !declared.iter().any(|(d, _)| d == *n))
    {
        return Err(BesError::bad("InvalidInputNames", format!(
            "Input {bad:?} is not an input of the service (case sensitivity applies); its inputs: {}.",
            declared.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "))).target(format!("Inputs.{bad}")));
    }
    let missing: Vec<&str> = declared
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !given.contains_key(*n))
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
    Ok(())
}

/// The outputs a request overrides, by name; the rest go to the server's storage.
fn given_outputs(
    one: Option<DataReference>,
    named: Option<BTreeMap<String, Option<DataReference>>>,
    declared: &[Port],
) -> BesResult<Refs> {
    let mut given = Refs::new();
    if let Some(one) = one {
        if let Some((first, _)) = declared.first() {
            given.insert(first.clone(), one);
        }
    }
    for (name, r) in named.unwrap_or_default() {
        if let Some(r) = r {
            given.insert(name, r);
        }
    }
    for name in given.keys() {
        if !declared.iter().any(|(d, _)| d == name) {
            return Err(BesError::bad(
                "InvalidOutputOverrideName",
                format!(
                    "Output {name:?} is not an output of the service (case sensitivity applies)."
                ),
            )
            .target(format!("Outputs.{name}")));
        }
    }
    Ok(given)
}

/// The job's global parameters: known names only, every required one given, the others
/// defaulted (to "" when the service names no default).
fn global_parameters(
    given: Option<serde_json::Map<String, Value>>,
    declared: &Value,
) -> BesResult<BTreeMap<String, String>> {
    let mut params: BTreeMap<String, String> = BTreeMap::new();
    let declared = declared.as_array().cloned().unwrap_or_default();
    for (name, v) in given.unwrap_or_default() {
        if !declared.iter().any(|p| p["Name"] == json!(name)) {
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
    for p in &declared {
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
    Ok(params)
}

/// Where a job's inputs or outputs are, by port name: for the job request, and the file alone
/// for the command template.
#[derive(Default)]
struct Placements {
    placed: BTreeMap<String, bes::Placed>,
    files: BTreeMap<String, String>,
}

impl Placements {
    fn add(&mut self, name: &str, r: Option<&DataReference>, file: String) {
        self.files.insert(name.to_string(), file.clone());
        let placed = bes::Placed {
            reference: r.cloned(),
            file,
        };
        self.placed.insert(name.to_string(), placed);
    }
}

/// Every input resolved and read now (all at once), so that a bad reference is refused here.
async fn readable_inputs(
    declared: &[Port],
    given: &Refs,
    roots: &Roots,
    allow_local: bool,
) -> BesResult<Placements> {
    let mut placed = Placements::default();
    let mut checks = Vec::new();
    for (name, ext) in declared {
        let r = &given[name];
        let b = storage::resolve(r, roots)
            .map_err(|e| BesError::from(e).target(format!("Inputs.{name}")))?;
        b.check_host(allow_local)
            .await
            .map_err(|e| BesError::from(e).target(format!("Inputs.{name}")))?;
        checks.push((name.clone(), b));
        placed.add(
            name,
            Some(r),
            bes::input_path(name, &extension(ext, Some(r))),
        );
    }
    futures_util::future::try_join_all(checks.iter().map(|(n, b)| check_readable(n, b))).await?;
    Ok(placed)
}

/// Every output, with its override (which must resolve, and be a blob of the declared
/// extension) or none (the server's storage).
fn placed_outputs(declared: &[Port], given: &Refs, roots: &Roots) -> BesResult<Placements> {
    let mut placed = Placements::default();
    for (name, ext) in declared {
        let r = given.get(name);
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
        placed.add(name, r, bes::output_path(name, &extension(ext, r)));
    }
    Ok(placed)
}

/// The account the job runs in: the service's, on the pool it names, or the classic
/// environment's.
async fn run_account(
    app: &AppState,
    service: &ServiceRow,
    pool_id: Option<&str>,
) -> BesResult<String> {
    match pool_id {
        Some(id) => {
            match store::pools::get(&app.db, &service.account, id).await? {
                Some(p) if p.state != PoolState::Deleting => {}
                _ => {
                    return Err(BesError::bad("PoolNotFound", format!(
                        "AzureBatchPoolId {id:?} names no pool of this service's account."
                    )).target("AzureBatchPoolId"))
                }
            }
            Ok(service.account.clone())
        }
        None if app.settings.classic_concurrency == 0 => {
            Err(BesError::bad("NoClassicEnvironment", "This server runs no classic batch environment (--classic-concurrency 0); give AzureBatchPoolId.").target("AzureBatchPoolId"))
        }
        None => Ok(CLASSIC_ACCOUNT.to_string()),
    }
}
