//! A job's `jobManagerTask`: a task added with the job, first in its queue. With `runExclusive`
//! (the default) it takes every slot of its node; with `killJobOnCompletion` (the default) its
//! completion ends the job.

use serde_json::{json, Value};

use crate::api::batch::support::{refuse_unsupported, JOB_MANAGER_TASK};
use crate::api::batch::tasks::TaskCreate;
use crate::api::error::{ApiError, ApiResult};

pub(super) struct Manager {
    /// As the job shows it: as given, with the defaults filled in.
    pub(super) shown: Value,
    pub(super) task: TaskCreate,
    pub(super) kills_job: bool,
    pub(super) run_exclusive: bool,
    /// allowLowPriorityNode: false keeps it to dedicated nodes.
    pub(super) low_priority: bool,
}

pub(super) fn parse(raw: Option<Value>) -> ApiResult<Option<Manager>> {
    let Some(raw) = super::prep::given(raw) else {
        return Ok(None);
    };
    let Some(mut fields) = raw.as_object().cloned() else {
        return Err(ApiError::invalid_property(
            "jobManagerTask",
            raw.to_string(),
            "must be an object",
        ));
    };
    refuse_unsupported(JOB_MANAGER_TASK, "jobManagerTask.", &fields)?;
    let identity = crate::api::batch::identity::checked(&fields, "jobManagerTask.")?;
    let mut flag = |name: &str| -> ApiResult<bool> {
        match fields.remove(name) {
            None | Some(Value::Null) => Ok(true),
            Some(Value::Bool(b)) => Ok(b),
            Some(v) => Err(ApiError::invalid_property(
                &format!("jobManagerTask.{name}"),
                v.to_string(),
                "must be true or false",
            )),
        }
    };
    let kills_job = flag("killJobOnCompletion")?;
    let run_exclusive = flag("runExclusive")?;
    // False: it runs on a dedicated node only.
    let low_priority = flag("allowLowPriorityNode")?;
    let task: TaskCreate = serde_json::from_value(Value::Object(fields)).map_err(|e| {
        ApiError::invalid_property("jobManagerTask", raw.to_string(), e.to_string())
    })?;
    let mut shown = raw;
    if let Some(identity) = identity {
        shown["userIdentity"] = identity;
    }
    shown["killJobOnCompletion"] = json!(kills_job);
    shown["runExclusive"] = json!(run_exclusive);
    shown["allowLowPriorityNode"] = json!(low_priority);
    Ok(Some(Manager {
        shown,
        task,
        kills_job,
        run_exclusive,
        low_priority,
    }))
}
