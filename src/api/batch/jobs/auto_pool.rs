//! A job's auto pool (`poolInfo.autoPoolSpecification`): checked as the job is added, made as a
//! pool add makes a pool, and owned by the job, or by the job schedule whose jobs share it.
//! Housekeeping deletes it when its owner has completed (`store::auto_pools::expire`), unless
//! it is kept alive.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::batch::pools::{insert_pool, new_pool, PoolCreate};
use crate::api::error::{ApiError, ApiResult};
use crate::api::state::Settings;
use crate::domain::ids::check_id;
use crate::store::auto_pools::{self, Owner};

const AT: &str = "poolInfo.autoPoolSpecification";

/// Azure's limit on autoPoolIdPrefix.
const MAX_PREFIX: usize = 20;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    auto_pool_id_prefix: Option<String>,
    pool_lifetime_option: Option<String>,
    keep_alive: Option<bool>,
    pool: Option<Value>,
}

/// An auto pool specification, checked.
pub struct AutoPool {
    /// As given, to show in the job's poolInfo.
    pub shown: Value,
    /// Whether the pool is shared by a job schedule's jobs (`jobschedule`), or the job's own.
    shared: bool,
    keep_alive: bool,
    prefix: Option<String>,
    /// The pool add body, without its id.
    pool: Value,
}

impl AutoPool {
    /// Checks `spec` as Azure does, and its pool as a pool add would be; `in_schedule`: whether
    /// the job is made by a job schedule (only those share a pool).
    pub fn check(spec: Value, settings: &Settings, in_schedule: bool) -> ApiResult<AutoPool> {
        let given: Spec = serde_json::from_value(spec.clone())
            .map_err(|e| ApiError::invalid_property(AT, spec.to_string(), e.to_string()))?;
        let lifetime = given
            .pool_lifetime_option
            .ok_or_else(|| ApiError::missing_property(&format!("{AT}.poolLifetimeOption")))?;
        let shared = match lifetime.to_ascii_lowercase().as_str() {
            "job" => false,
            "jobschedule" if in_schedule => true,
            "jobschedule" => {
                return Err(ApiError::invalid_property(
                    &format!("{AT}.poolLifetimeOption"),
                    &lifetime,
                    "jobschedule applies only to a job schedule's jobSpecification; a job's own auto pool lives for the job",
                ))
            }
            _ => {
                return Err(ApiError::invalid_property(
                    &format!("{AT}.poolLifetimeOption"),
                    &lifetime,
                    "must be job or jobschedule",
                ))
            }
        };
        if let Some(prefix) = &given.auto_pool_id_prefix {
            check_prefix(prefix)?;
        }
        let pool = given
            .pool
            .ok_or_else(|| ApiError::missing_property(&format!("{AT}.pool")))?;
        if pool.get("id").is_some() {
            return Err(ApiError::invalid_property(
                &format!("{AT}.pool.id"),
                "",
                "an auto pool's id is made by the server, from autoPoolIdPrefix",
            ));
        }
        let auto = AutoPool {
            shown: spec,
            shared,
            keep_alive: given.keep_alive.unwrap_or(false),
            prefix: given.auto_pool_id_prefix,
            pool,
        };
        new_pool(settings, "", auto.body(auto.pool_id())?).map_err(in_pool)?;
        Ok(auto)
    }

    /// The id of the pool for a job of `account` (made by the schedule `schedule`, if it was):
    /// a new pool, or the one a schedule's earlier job made for its jobs to share.
    pub async fn pool_for(
        &self,
        tx: &mut sqlx::PgConnection,
        (settings, account): (&Settings, &str),
        schedule: Option<i64>,
    ) -> ApiResult<String> {
        let owner = schedule.filter(|_| self.shared).map(Owner::Schedule);
        if let Some(owner) = owner {
            if let Some(id) = auto_pools::of(&mut *tx, owner).await? {
                return Ok(id);
            }
        }
        let id = insert_pool(&mut *tx, (settings, account), self.body(self.pool_id())?)
            .await
            .map_err(in_pool)?;
        if let Some(owner) = owner {
            auto_pools::set_owner(&mut *tx, (account, &id), owner, self.keep_alive).await?;
        }
        Ok(id)
    }

    /// Makes the pool `id` that [`AutoPool::pool_for`] made the job `job_pk`'s own, unless the
    /// job's schedule owns it.
    pub async fn own(
        &self,
        tx: &mut sqlx::PgConnection,
        (account, id): (&str, &str),
        job_pk: i64,
    ) -> ApiResult<()> {
        if !self.shared {
            auto_pools::set_owner(&mut *tx, (account, id), Owner::Job(job_pk), self.keep_alive)
                .await?;
        }
        Ok(())
    }

    /// A new pool id: the prefix, if any, then a GUID, as Azure names auto pools.
    fn pool_id(&self) -> String {
        let guid = uuid::Uuid::new_v4().to_string().to_uppercase();
        match &self.prefix {
            Some(prefix) => format!("{prefix}_{guid}"),
            None => guid,
        }
    }

    fn body(&self, id: String) -> ApiResult<PoolCreate> {
        let mut pool = self.pool.clone();
        let Some(fields) = pool.as_object_mut() else {
            return Err(ApiError::invalid_property(
                &format!("{AT}.pool"),
                pool.to_string(),
                "must be an object",
            ));
        };
        fields.insert("id".into(), json!(id));
        serde_json::from_value(pool)
            .map_err(|e| ApiError::invalid_property(&format!("{AT}.pool"), "", e.to_string()))
    }
}

/// What a PATCH or PUT that sends `spec` for a job whose auto pool was made from `current`
/// changes: only keepAlive may differ, as on Azure. Returns the new keepAlive, if it changes.
pub fn keep_alive_change(current: Option<&Value>, spec: &Value) -> ApiResult<Option<bool>> {
    let without_keep_alive = |v: &Value| {
        let mut v = v.clone();
        if let Some(fields) = v.as_object_mut() {
            fields.remove("keepAlive");
        }
        v
    };
    let keep_alive = |v: &Value| v.get("keepAlive").and_then(Value::as_bool).unwrap_or(false);
    match current {
        Some(current) if without_keep_alive(current) == without_keep_alive(spec) => {
            if spec.get("keepAlive").is_some_and(|k| !k.is_boolean() && !k.is_null()) {
                return Err(ApiError::invalid_property(
                    &format!("{AT}.keepAlive"),
                    spec["keepAlive"].to_string(),
                    "must be true or false",
                ));
            }
            let change = (keep_alive(current) != keep_alive(spec)).then(|| keep_alive(spec));
            let lifetime = current["poolLifetimeOption"].as_str().unwrap_or_default();
            if change.is_some() && !lifetime.eq_ignore_ascii_case("job") {
                return Err(ApiError::invalid_property(
                    &format!("{AT}.keepAlive"),
                    spec["keepAlive"].to_string(),
                    "can be changed only for a poolLifetimeOption of job",
                ));
            }
            Ok(change)
        }
        Some(_) => Err(ApiError::invalid_property(
            AT,
            spec.to_string(),
            "of a job's auto pool, only keepAlive can be changed",
        )),
        None => Err(ApiError::invalid_property(
            AT,
            spec.to_string(),
            "an auto pool is made only when a job is added; give a poolId to move the job to another pool",
        )),
    }
}

fn check_prefix(prefix: &str) -> ApiResult<()> {
    let name = format!("{AT}.autoPoolIdPrefix");
    if prefix.chars().count() > MAX_PREFIX {
        return Err(ApiError::invalid_property(
            &name,
            prefix,
            format!("must be at most {MAX_PREFIX} characters long"),
        ));
    }
    check_id(prefix).map_err(|why| ApiError::invalid_property(&name, prefix, why))
}

/// An error about the pool's specification, naming its property in full.
fn in_pool(e: ApiError) -> ApiError {
    e.prefixed(&format!("{AT}.pool."))
}
