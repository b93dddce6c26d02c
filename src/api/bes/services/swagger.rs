//! A web service's swagger.json: a Swagger 2.0 document of its BES API, with its inputs,
//! outputs and global parameters.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{json, Value};

use super::authorize;
use crate::api::bes::error::BesResult;
use crate::api::state::AppState;
use crate::api::BaseUrl;

/// A Swagger 2.0 document of the service's BES API, with its inputs, outputs and parameters.
pub async fn swagger(
    State(app): State<Arc<AppState>>,
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
