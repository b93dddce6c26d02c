//! Web services: register (PUT), get, list, delete, regenerate a key; and each service's
//! swagger.json describing its BES API.

mod definition;
mod swagger;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{BesError, BesResult};
use super::{bearer, same_key, BesJson};
use crate::api::state::AppState;
use crate::api::{rfc3339, BaseUrl, Ctx};
use crate::store::services::{self as store, ServiceRow};
pub use definition::param_string;
use definition::{definition, ServiceBody};
pub use swagger::swagger;

/// The path prefix a service is addressed under (subscriptions or workspaces) from the request.
fn urls(base: &str, s: &ServiceRow) -> (String, String) {
    let root = format!("{base}/subscriptions/{}/services/{}", s.namespace, s.id);
    (
        format!("{root}/swagger.json"),
        format!("{root}/jobs?api-version=2.0"),
    )
}

pub fn service_json(s: &ServiceRow, base: &str, with_keys: bool) -> Value {
    let (swagger, jobs) = urls(base, s);
    let mut v = json!({
        "Id": s.id,
        "SubscriptionId": s.namespace,
        "Title": s.title,
        "Description": s.description,
        "Image": s.image,
        "Command": s.command,
        "Inputs": s.inputs,
        "Outputs": s.outputs,
        "GlobalParameters": s.global_parameters,
        "BillingPlan": s.billing_plan,
        "SwaggerLocation": swagger,
        "BatchRequestsUrl": jobs,
        "CreationTime": rfc3339(s.creation_time),
        "LastModified": rfc3339(s.last_modified),
    });
    if with_keys {
        v["PrimaryKey"] = json!(s.primary_key);
        v["SecondaryKey"] = json!(s.secondary_key);
    }
    v
}

fn not_found(svc: &str) -> BesError {
    BesError::not_found(
        "WebServiceNotFound",
        format!("The web service {svc:?} does not exist."),
    )
}

/// A service of the signing account.
async fn owned(app: &Ctx, ns: &str, svc: &str) -> BesResult<ServiceRow> {
    store::get(&app.db, &app.account, ns, svc)
        .await?
        .ok_or_else(|| not_found(svc))
}

pub async fn put(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((ns, svc)): Path<(String, String)>,
    BesJson(body): BesJson<ServiceBody>,
) -> BesResult<Response> {
    for (what, v) in [("subscription or workspace id", &ns), ("service id", &svc)] {
        crate::domain::ids::check_id(v).map_err(|why| {
            BesError::bad("InvalidServiceDefinition", format!("The {what}: {why}"))
        })?;
    }
    let def = definition(body)?;
    let (row, created) = store::upsert(&app.db, &app.account, &ns, &svc, &def).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(service_json(&row, &base, true))).into_response())
}

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((ns, svc)): Path<(String, String)>,
) -> BesResult<Json<Value>> {
    let s = owned(&app, &ns, &svc).await?;
    Ok(Json(service_json(&s, &base, true)))
}

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(ns): Path<String>,
) -> BesResult<Json<Value>> {
    let rows = store::list(&app.db, &app.account, &ns).await?;
    Ok(Json(
        json!({"value": rows.iter().map(|s| service_json(s, &base, false)).collect::<Vec<_>>()}),
    ))
}

/// Deleting a service cancels its unfinished jobs and deletes them with it.
pub async fn delete(app: Ctx, Path((ns, svc)): Path<(String, String)>) -> BesResult<StatusCode> {
    let s = owned(&app, &ns, &svc).await?;
    let mut tx = app.db.begin().await?;
    for job in store::list_jobs(&mut *tx, s.pk).await? {
        crate::ops::bes::cancel(&mut tx, &job).await?;
    }
    store::delete(&mut *tx, s.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    Ok(StatusCode::OK)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RegenerateBody {
    key_type: Option<String>,
}

pub async fn regenerate_key(
    app: Ctx,
    Path((ns, svc)): Path<(String, String)>,
    BesJson(body): BesJson<RegenerateBody>,
) -> BesResult<Json<Value>> {
    let s = owned(&app, &ns, &svc).await?;
    let secondary = match body
        .key_type
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("primary") => false,
        Some("secondary") => true,
        Some(other) => {
            return Err(BesError::bad(
                "RequestBodyInvalid",
                format!("KeyType {other:?} must be Primary or Secondary"),
            )
            .target("KeyType"))
        }
    };
    let key = store::regenerate_key(&app.db, s.pk, secondary).await?;
    let name = if secondary {
        "SecondaryKey"
    } else {
        "PrimaryKey"
    };
    Ok(Json(json!({ name: key })))
}

/// The service a BES request names, if the Bearer key is one of its two keys. An unknown service
/// answers 401 like a wrong key, so keys cannot be used to probe for services.
pub async fn authorize(
    app: &AppState,
    headers: &HeaderMap,
    ns: &str,
    svc: &str,
) -> BesResult<ServiceRow> {
    let given = bearer(headers).ok_or_else(BesError::unauthorized)?;
    // Each account may have a service of this name; the key says which one is meant. Every
    // candidate's keys are compared, so the time taken does not tell which key matched.
    let mut found = None;
    for s in store::named(&app.db, ns, svc).await? {
        if same_key(given, &s.primary_key) | same_key(given, &s.secondary_key) {
            found = Some(s);
        }
    }
    found.ok_or_else(BesError::unauthorized)
}
