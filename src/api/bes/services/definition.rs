//! A web service as its PUT body defines it, checked: a command whose placeholders name only
//! declared inputs, outputs and parameters, and a billing plan.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::bes::error::{BesError, BesResult};
use crate::domain::bes::{self, Placeholder};
use crate::store::services::ServiceDef;

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

fn invalid(message: impl Into<String>) -> BesError {
    BesError::bad("InvalidServiceDefinition", message)
}

/// The service a PUT body defines, checked.
pub(super) fn definition(body: ServiceBody) -> BesResult<ServiceDef> {
    let command = body
        .command
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| invalid("Command is required: the shell command a job runs, with {in:NAME}, {out:NAME} and {param:NAME} placeholders.").target("Command"))?;
    let billing_plan = body
        .billing_plan
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            invalid(
                "BillingPlan is required: the plan its Pool Service pools' compute hours bill to.",
            )
            .target("BillingPlan")
        })?;
    if let Some(image) = &body.image {
        if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
            return Err(
                invalid(format!("Image {image:?} is not a Docker image reference")).target("Image"),
            );
        }
    }
    let inputs = check_ports("Inputs", &body.inputs)?;
    let outputs = check_ports("Outputs", &body.outputs)?;
    let params = check_params(&body.global_parameters)?;
    check_placeholders(
        &command,
        &body.inputs,
        &body.outputs,
        &body.global_parameters,
    )?;
    Ok(ServiceDef {
        title: body.title,
        description: body.description,
        image: body.image,
        command,
        inputs,
        outputs,
        global_parameters: params,
        billing_plan,
    })
}

fn check_ports(what: &str, ports: &[Port]) -> BesResult<Value> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let target = format!("{what}[{i}]");
        bes::check_port_name(&p.name).map_err(|why| {
            invalid(format!("{target}.Name {:?} {why}", p.name)).target(format!("{target}.Name"))
        })?;
        if !seen.insert(p.name.clone()) {
            return Err(invalid(format!("{what} names {:?} twice", p.name)).target(target));
        }
        if let Some(ext) = &p.extension {
            bes::check_extension(ext).map_err(|why| {
                invalid(format!("{target}.Extension {ext:?} {why}"))
                    .target(format!("{target}.Extension"))
            })?;
        }
        out.push(json!({"Name": p.name, "Extension": p.extension}));
    }
    Ok(Value::Array(out))
}

/// The global parameters as stored; one without a default is required unless it says otherwise.
fn check_params(params: &[Param]) -> BesResult<Value> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, p) in params.iter().enumerate() {
        if p.name.trim().is_empty() || p.name.contains('}') || !seen.insert(p.name.clone()) {
            return Err(invalid(format!(
                "GlobalParameters[{i}].Name {:?} must be non-empty, unique and free of '}}'",
                p.name
            ))
            .target(format!("GlobalParameters[{i}].Name")));
        }
        let default = p.default.as_ref().and_then(param_string);
        let required = p.required.unwrap_or(default.is_none());
        out.push(json!({"Name": p.name, "Default": default, "Required": required}));
    }
    Ok(Value::Array(out))
}

/// A placeholder that names nothing declared could never be filled in: it is refused with the
/// service rather than with each of its jobs.
fn check_placeholders(
    command: &str,
    inputs: &[Port],
    outputs: &[Port],
    params: &[Param],
) -> BesResult<()> {
    let parts =
        bes::parse(command).map_err(|why| invalid(format!("Command: {why}")).target("Command"))?;
    let declared = |list: &[Port], n: &str| list.iter().any(|p| p.name == n);
    let param = |n: &str| params.iter().any(|p| p.name == n);
    for part in parts {
        let missing =
            match part {
                Ok(_) => None,
                Err(Placeholder::Input(n)) => {
                    (!declared(inputs, &n)).then(|| format!("{{in:{n}}} names no declared input"))
                }
                Err(Placeholder::Output(n)) => (!declared(outputs, &n))
                    .then(|| format!("{{out:{n}}} names no declared output")),
                Err(Placeholder::Param(n)) => (!param(&n))
                    .then(|| format!("{{param:{n}}} names no declared global parameter")),
            };
        if let Some(why) = missing {
            return Err(invalid(format!("Command: {why}")).target("Command"));
        }
    }
    Ok(())
}
