//! The Pool Service (Azure ML "Batch Pool processing"): create, get, list, resize and delete
//! pools tied to a web service's billing plan, with `Authorization: Bearer <pool service key>`.
//! Microsoft never published this API's shape; this one is ours (see README).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{BesError, BesResult};
use super::{bearer, same_key, BesJson};
use crate::api::state::AppState;
use crate::api::{rfc3339, BaseUrl};
use crate::domain::bes;
use crate::domain::pool::{AllocationState, PoolState, Targets};
use crate::domain::vm_size::VmSize;
use crate::store;
use crate::store::pools::{NewPool, PoolRow, Refused};
use crate::store::services::{PoolServiceAccount, ServiceRow};

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pools", get(list).post(create))
        .route("/pools/{id}", get(get_pool).delete(delete))
        .route("/pools/{id}/resize", post(resize))
}

/// The account whose pool service key the request carries.
async fn authorize(app: &AppState, headers: &HeaderMap) -> BesResult<PoolServiceAccount> {
    let given = bearer(headers).ok_or_else(BesError::unauthorized)?;
    store::services::pool_service_accounts(&app.db)
        .await?
        .into_iter()
        .find(|a| same_key(given, &a.pool_service_key))
        .ok_or_else(BesError::unauthorized)
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CreateBody {
    id: Option<String>,
    #[serde(
        default,
        rename = "NumberOfVMs",
        deserialize_with = "crate::domain::lenient::opt_i32"
    )]
    number_of_vms: Option<i32>,
    vm_size: Option<String>,
    swagger_location: Option<String>,
    /// How many BES jobs one VM runs at once (its task slots); 1 unless given.
    #[serde(
        default,
        rename = "JobsPerVM",
        deserialize_with = "crate::domain::lenient::opt_i32"
    )]
    jobs_per_vm: Option<i32>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ResizeBody {
    #[serde(
        default,
        rename = "NumberOfVMs",
        deserialize_with = "crate::domain::lenient::opt_i32"
    )]
    number_of_vms: Option<i32>,
}

fn check_vms(n: Option<i32>, account: &PoolServiceAccount, server_max: i32) -> BesResult<i32> {
    let n = n.ok_or_else(|| {
        BesError::bad("MissingNumberOfVMs", "NumberOfVMs is required.").target("NumberOfVMs")
    })?;
    if n < 0 {
        return Err(BesError::bad(
            "InvalidNumberOfVMs",
            format!("NumberOfVMs {n} must not be negative."),
        )
        .target("NumberOfVMs"));
    }
    let quota = account.max_vms_per_pool.min(server_max);
    if n > quota {
        return Err(BesError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "MaxVMsPerPoolExceeded",
            format!("NumberOfVMs {n} exceeds this account's quota of {quota} VMs per pool."),
        )
        .target("NumberOfVMs"));
    }
    Ok(n)
}

/// `.../subscriptions/{ns}/services/{svc}/swagger.json` (or `/workspaces/...`) -> (ns, svc).
fn parse_swagger_url(s: &str) -> Option<(String, String)> {
    let url = url::Url::parse(s).ok()?;
    let segments: Vec<String> = url
        .path_segments()?
        .map(|p| {
            form_urlencoded::parse(p.as_bytes())
                .map(|(k, _)| k.into_owned())
                .collect::<String>()
        })
        .collect();
    match segments.as_slice() {
        [.., kind, ns, services, svc, file]
            if (kind == "subscriptions" || kind == "workspaces")
                && services == "services"
                && file == "swagger.json" =>
        {
            Some((ns.clone(), svc.clone()))
        }
        _ => None,
    }
}

const SWAGGER_METADATA: &str = "swaggerLocation";

fn pool_json(p: &PoolRow) -> Value {
    let swagger = p
        .metadata
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == SWAGGER_METADATA)
        .map(|m| m["value"].clone())
        .unwrap_or(Value::Null);
    json!({
        "Id": p.id,
        "NumberOfVMs": p.target_dedicated_nodes,
        "CurrentVMs": p.current_dedicated_nodes,
        "VmSize": p.vm_size,
        "JobsPerVM": p.task_slots_per_node,
        "SwaggerLocation": swagger,
        "BillingPlan": p.billing_plan,
        "State": if p.state == PoolState::Deleting { "Deleting" } else { "Active" },
        "AllocationState": match p.allocation_state { AllocationState::Steady => "Steady", AllocationState::Stopping => "Stopping", AllocationState::Resizing => "Resizing" },
        "ResizeErrors": p.resize_errors,
        "CreationTime": rfc3339(p.creation_time),
        "LastModified": rfc3339(p.last_modified),
    })
}

async fn find(app: &AppState, account: &str, id: &str) -> BesResult<PoolRow> {
    match store::pools::get(&app.db, account, id).await? {
        Some(p) if p.pool_service => Ok(p),
        _ => Err(BesError::not_found(
            "PoolNotFound",
            format!("The pool {id:?} does not exist."),
        )),
    }
}

pub async fn create(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    BaseUrl(_base): BaseUrl,
    BesJson(body): BesJson<CreateBody>,
) -> BesResult<Response> {
    let account = authorize(&app, &headers).await?;
    let new = new_pool(&app, &account, body).await?;
    insert_within_quota(&app, &account, &new).await?;
    // Read before the allocator wakes: the answer is the pool as the request left it.
    let pool = find(&app, &account.name, &new.id).await?;
    app.wake_allocator();
    Ok((StatusCode::CREATED, Json(pool_json(&pool))).into_response())
}

/// The pool a create request describes, checked; it runs the image of the web service whose
/// swagger.json it names and bills to that service's plan.
async fn new_pool(
    app: &AppState,
    account: &PoolServiceAccount,
    body: CreateBody,
) -> BesResult<NewPool> {
    let id = body
        .id
        .filter(|i| !i.is_empty())
        .unwrap_or_else(bes::new_id);
    crate::domain::ids::check_id(&id)
        .map_err(|why| BesError::bad("InvalidPoolId", format!("Id {id:?}: {why}")).target("Id"))?;
    let target = check_vms(body.number_of_vms, account, app.settings.max_nodes_per_pool)?;
    let slots = check_jobs_per_vm(body.jobs_per_vm)?;
    let swagger = body.swagger_location.filter(|s| !s.trim().is_empty()).ok_or_else(|| {
        BesError::bad("MissingSwaggerLocation", "SwaggerLocation is required: the URL of a web service's swagger.json, which ties the pool to its billing plan.").target("SwaggerLocation")
    })?;
    let service = swagger_service(app, account, &swagger).await?;
    let (vm_size, size) = vm_size(app, body.vm_size)?;
    let image = service
        .image
        .clone()
        .unwrap_or_else(|| app.settings.default_image.clone());
    let size = (vm_size.as_str(), size.vcpus, size.memory_mib as i64);
    Ok(NewPool {
        display_name: service.title.clone(),
        task_slots_per_node: slots,
        metadata: json!([{"name": SWAGGER_METADATA, "value": swagger}]),
        billing_plan: Some(service.billing_plan.clone()),
        service_pk: Some(service.pk),
        pool_service: true,
        ..NewPool::internal((&account.name, &id), size, image, target)
    })
}

fn check_jobs_per_vm(n: Option<i32>) -> BesResult<i32> {
    let slots = n.unwrap_or(1);
    if !(1..=256).contains(&slots) {
        return Err(BesError::bad(
            "InvalidJobsPerVM",
            format!("JobsPerVM {slots} must be between 1 and 256."),
        )
        .target("JobsPerVM"));
    }
    Ok(slots)
}

/// The account's web service whose swagger.json `swagger` is.
async fn swagger_service(
    app: &AppState,
    account: &PoolServiceAccount,
    swagger: &str,
) -> BesResult<ServiceRow> {
    let unknown = || {
        BesError::bad("InvalidSwaggerLocation", format!("SwaggerLocation {swagger:?} is not the swagger.json of a web service of this account.")).target("SwaggerLocation")
    };
    let (ns, svc) = parse_swagger_url(swagger).ok_or_else(unknown)?;
    store::services::get(&app.db, &account.name, &ns, &svc)
        .await?
        .ok_or_else(unknown)
}

/// The size's name as the table keeps it, and its CPU and memory; unnamed, a D2 v3.
fn vm_size(app: &AppState, given: Option<String>) -> BesResult<(String, VmSize)> {
    let size_name = given.unwrap_or_else(|| "standard_d2_v3".to_string());
    app.settings.vm_sizes.usable(&size_name).map_err(|why| {
        BesError::bad("InvalidVmSize", format!("VmSize {size_name:?}: {why}.")).target("VmSize")
    })
}

/// The quota check and the insert are one step per account.
async fn insert_within_quota(
    app: &AppState,
    account: &PoolServiceAccount,
    new: &NewPool,
) -> BesResult<()> {
    let mut tx = app.db.begin().await?;
    store::pools::lock_pool_service_account(&mut *tx, &account.name).await?;
    let count = store::pools::count_pool_service(&mut *tx, &account.name).await?;
    if count >= account.max_pools as i64 {
        return Err(BesError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "MaxPoolsExceeded",
            format!(
                "This account has {count} pools, its quota; delete one or ask for a larger quota."
            ),
        ));
    }
    match store::pools::insert(&mut *tx, new).await {
        Err(e) if store::is_unique_violation(&e) => {
            return Err(BesError::new(
                StatusCode::CONFLICT,
                "Conflict",
                "PoolExists",
                format!("A pool {:?} exists already.", new.id),
            )
            .target("Id"))
        }
        other => other?,
    }
    tx.commit().await?;
    Ok(())
}

pub async fn list(State(app): State<Arc<AppState>>, headers: HeaderMap) -> BesResult<Json<Value>> {
    let account = authorize(&app, &headers).await?;
    let pools = store::pools::list(&app.db, &account.name).await?;
    Ok(Json(
        json!({"value": pools.iter().filter(|p| p.pool_service).map(pool_json).collect::<Vec<_>>()}),
    ))
}

pub async fn get_pool(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> BesResult<Json<Value>> {
    let account = authorize(&app, &headers).await?;
    Ok(Json(pool_json(&find(&app, &account.name, &id).await?)))
}

fn refused(id: &str, r: Refused) -> BesError {
    match r {
        Refused::NotFound => {
            BesError::not_found("PoolNotFound", format!("The pool {id:?} does not exist."))
        }
        Refused::BeingDeleted => BesError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "PoolBeingDeleted",
            format!("The pool {id:?} is being deleted."),
        ),
        Refused::NotSteady(state) => BesError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "PoolNotSteady",
            format!("The pool {id:?} is {state}; resize it again when the current resize is done."),
        ),
        Refused::NotEmpty => BesError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "PoolNotEmpty",
            format!("The pool {id:?} has nodes; resize it to 0 first."),
        ),
    }
}

pub async fn resize(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    BesJson(body): BesJson<ResizeBody>,
) -> BesResult<Response> {
    let account = authorize(&app, &headers).await?;
    let pool = find(&app, &account.name, &id).await?;
    let target = check_vms(
        body.number_of_vms,
        &account,
        app.settings.max_nodes_per_pool,
    )?;
    if let Err(r) = store::pools::resize(
        &app.db,
        &account.name,
        &pool.id,
        Targets::dedicated(target),
        None,
        None,
    )
    .await?
    {
        return Err(refused(&id, r));
    }
    // As for a create: the pool as the request left it.
    let pool = find(&app, &account.name, &id).await?;
    app.wake_allocator();
    Ok((StatusCode::ACCEPTED, Json(pool_json(&pool))).into_response())
}

pub async fn delete(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> BesResult<StatusCode> {
    let account = authorize(&app, &headers).await?;
    let pool = find(&app, &account.name, &id).await?;
    match store::pools::mark_deleting(&app.db, &account.name, &pool.id).await? {
        Ok(()) | Err(Refused::BeingDeleted) => {
            app.wake_allocator();
            Ok(StatusCode::ACCEPTED)
        }
        Err(r) => Err(refused(&id, r)),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_swagger_url;

    #[test]
    fn swagger_urls_name_a_service() {
        assert_eq!(
            parse_swagger_url("http://h:1/subscriptions/s1/services/svc/swagger.json"),
            Some(("s1".into(), "svc".into()))
        );
        assert_eq!(
            parse_swagger_url(
                "https://ussouthcentral.services.azureml.net/workspaces/w/services/x/swagger.json"
            ),
            Some(("w".into(), "x".into()))
        );
        assert_eq!(
            parse_swagger_url("http://h/subscriptions/s1/services/svc"),
            None
        );
        assert_eq!(parse_swagger_url("not a url"), None);
    }
}
