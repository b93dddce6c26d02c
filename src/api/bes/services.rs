//! Web services: register (PUT), get, list, delete, regenerate a key; and each service's
//! swagger.json describing its BES API.

use std::collections::HashSet;

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
use crate::domain::bes::{self, Placeholder};
use crate::store::services::{self as store, ServiceDef, ServiceRow};

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ServiceBody {
    title: Option<String>,
    description: Option<String>,
    image: Option<String>,
    command: Option<String>,
    #[serde(default)]
    inputs: Vec<Port>,
    #[serde(default)]
    outputs: Vec<Port>,
    #[serde(default)]
    global_parameters: Vec<Param>,
    billing_plan: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Port {
    name: String,
    extension: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Param {
    name: String,
    default: Option<Value>,
    required: Option<bool>,
}

/// A parameter value as a string: BES clients send strings, some send numbers.
pub fn param_string(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn check_ports(what: &str, ports: &[Port]) -> BesResult<Value> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let target = format!("{what}[{i}]");
        bes::check_port_name(&p.name).map_err(|why| {
            BesError::bad(
                "InvalidServiceDefinition",
                format!("{target}.Name {:?} {why}", p.name),
            )
            .target(format!("{target}.Name"))
        })?;
        if !seen.insert(p.name.clone()) {
            return Err(BesError::bad(
                "InvalidServiceDefinition",
                format!("{what} names {:?} twice", p.name),
            )
            .target(target));
        }
        if let Some(ext) = &p.extension {
            bes::check_extension(ext).map_err(|why| {
                BesError::bad(
                    "InvalidServiceDefinition",
                    format!("{target}.Extension {ext:?} {why}"),
                )
                .target(format!("{target}.Extension"))
            })?;
        }
        out.push(json!({"Name": p.name, "Extension": p.extension}));
    }
    Ok(Value::Array(out))
}

fn definition(body: ServiceBody) -> BesResult<ServiceDef> {
    let command = body
        .command
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| BesError::bad("InvalidServiceDefinition", "Command is required: the shell command a job runs, with {in:NAME}, {out:NAME} and {param:NAME} placeholders.").target("Command"))?;
    let billing_plan = body
        .billing_plan
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            BesError::bad(
                "InvalidServiceDefinition",
                "BillingPlan is required: the plan its Pool Service pools' compute hours bill to.",
            )
            .target("BillingPlan")
        })?;
    if let Some(image) = &body.image {
        if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
            return Err(BesError::bad(
                "InvalidServiceDefinition",
                format!("Image {image:?} is not a Docker image reference"),
            )
            .target("Image"));
        }
    }
    let inputs = check_ports("Inputs", &body.inputs)?;
    let outputs = check_ports("Outputs", &body.outputs)?;
    let mut params = Vec::new();
    let mut seen = HashSet::new();
    for (i, p) in body.global_parameters.iter().enumerate() {
        if p.name.trim().is_empty() || p.name.contains('}') || !seen.insert(p.name.clone()) {
            return Err(BesError::bad(
                "InvalidServiceDefinition",
                format!(
                    "GlobalParameters[{i}].Name {:?} must be non-empty, unique and free of '}}'",
                    p.name
                ),
            )
            .target(format!("GlobalParameters[{i}].Name")));
        }
        let default = p.default.as_ref().and_then(param_string);
        let required = p.required.unwrap_or(default.is_none());
        params.push(json!({"Name": p.name, "Default": default, "Required": required}));
    }
    let parts = bes::parse(&command).map_err(|why| {
        BesError::bad("InvalidServiceDefinition", format!("Command: {why}")).target("Command")
    })?;
    let declared = |list: &[Port], n: &str| list.iter().any(|p| p.name == n);
    for part in parts {
        let missing = match part {
            Ok(_) => None,
            Err(Placeholder::Input(n)) => {
                (!declared(&body.inputs, &n)).then(|| format!("{{in:{n}}} names no declared input"))
            }
            Err(Placeholder::Output(n)) => (!declared(&body.outputs, &n))
                .then(|| format!("{{out:{n}}} names no declared output")),
            Err(Placeholder::Param(n)) => (!seen.contains(&n))
                .then(|| format!("{{param:{n}}} names no declared global parameter")),
        };
        if let Some(why) = missing {
            return Err(
                BesError::bad("InvalidServiceDefinition", format!("Command: {why}"))
                    .target("Command"),
            );
        }
    }
    Ok(ServiceDef {
        title: body.title,
        description: body.description,
        image: body.image,
        command,
        inputs,
        outputs,
        global_parameters: Value::Array(params),
        billing_plan,
    })
}

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
        super::jobs::cancel_in(&mut tx, &job).await?;
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

/// A Swagger 2.0 document of the service's BES API, with its inputs, outputs and parameters.
pub async fn swagger(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<AppState>>,
    headers: HeaderMap,
    BaseUrl(base): BaseUrl,
    Path((ns, svc)): Path<(String, String)>,
) -> BesResult<Json<Value>> {
    let s = authorize(&app, &headers, &ns, &svc).await?;
    let blob_ref = json!({"type": "object", "properties": {
        "ConnectionString": {"type": "string"}, "RelativeLocation": {"type": "string"},
        "BaseLocation": {"type": "string"}, "SasBlobToken": {"type": "string"}}});
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["Name"].as_str().map(String::from))
            .collect()
    };
    let refs = |list: Vec<String>| -> Value {
        Value::Object(
            list.into_iter()
                .map(|n| (n, json!({"$ref": "#/definitions/AzureBlobDataReference"})))
                .collect(),
        )
    };
    let params: serde_json::Map<String, Value> = s
        .global_parameters
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["Name"].as_str()?.to_string(),
                json!({"type": "string", "default": p["Default"], "x-required": p["Required"]}),
            ))
        })
        .collect();
    let host = base.trim_start_matches("http://").to_string();
    let root = format!("/subscriptions/{}/services/{}", s.namespace, s.id);
    Ok(Json(json!({
        "swagger": "2.0",
        "info": {"title": s.title.clone().unwrap_or_else(|| s.id.clone()), "description": s.description, "version": "2.0",
                 "x-billing-plan": s.billing_plan},
        "host": host,
        "schemes": ["http"],
        "basePath": root,
        "securityDefinitions": {"apikey": {"type": "apiKey", "name": "Authorization", "in": "header", "description": "Bearer <service key>"}},
        "security": [{"apikey": []}],
        "paths": {
            "/jobs": {
                "post": {"operationId": "SubmitJob", "parameters": [{"name": "api-version", "in": "query", "type": "string", "default": "2.0"},
                    {"name": "body", "in": "body", "schema": {"$ref": "#/definitions/BatchExecutionRequest"}}],
                    "responses": {"200": {"description": "the job id", "schema": {"type": "string"}}}},
                "get": {"operationId": "ListJobs", "responses": {"200": {"description": "the service's jobs"}}}
            },
            "/jobs/{jobId}/start": {"post": {"operationId": "StartJob", "responses": {"200": {"description": "started"}}}},
            "/jobs/{jobId}": {
                "get": {"operationId": "GetJobStatus", "responses": {"200": {"description": "status", "schema": {"$ref": "#/definitions/BatchJobStatus"}}}},
                "delete": {"operationId": "CancelJob", "responses": {"200": {"description": "cancelled"}}}
            }
        },
        "definitions": {
            "AzureBlobDataReference": blob_ref,
            "BatchExecutionRequest": {"type": "object", "properties": {
                "Inputs": {"type": "object", "properties": refs(names(&s.inputs))},
                "Outputs": {"type": "object", "properties": refs(names(&s.outputs))},
                "GlobalParameters": {"type": "object", "properties": params},
                "AzureBatchPoolId": {"type": "string"}}},
            "BatchJobStatus": {"type": "object", "properties": {
                "StatusCode": {"type": "string", "enum": ["NotStarted", "Running", "Failed", "Cancelled", "Finished"]},
                "Results": {"type": "object", "additionalProperties": {"$ref": "#/definitions/AzureBlobDataReference"}},
                "Details": {"type": "string"}}}
        }
    })))
}
