//! A task's `userIdentity`: the user its command runs as. Every task of a node runs as the
//! node's one user, its administrator: root in a Docker node, and on a local node the server's
//! own user (root when the server runs as root). So what Azure calls an auto-user with
//! `elevationLevel: admin` is carried out, of `pool` scope (the tasks of a node share it) or
//! `task` scope (an administrator isolates nothing from another anyway). Named users (a
//! pool's `userAccounts`) and non-administrator auto-users are refused, and so is `admin` where
//! tasks do not run as root.

use serde_json::{json, Map, Value};

use crate::api::error::{ApiError, ApiResult};

static TASKS_RUN_AS_ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Records whether the tasks of this server's nodes run as root: always in a Docker node (its
/// container's user is root, whatever its image names); on a local node, when the server runs
/// as root.
pub fn record_task_user(runtime: &str) {
    // SAFETY: geteuid has no preconditions.
    let root = runtime != "local" || unsafe { libc::geteuid() } == 0;
    let _ = TASKS_RUN_AS_ROOT.set(root);
}

/// Whether tasks run as root ([`record_task_user`]); before that, whether this process does.
fn tasks_run_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    *TASKS_RUN_AS_ROOT.get_or_init(|| unsafe { libc::geteuid() } == 0)
}

/// The `userIdentity` of `body` (a task, or a start, job manager, preparation or release task),
/// checked, as it is kept and shown: `{"autoUser": {"scope", "elevationLevel": "admin"}}`.
/// None when it asks for nothing. `prefix` names the body ("startTask.", say).
pub fn checked(body: &Map<String, Value>, prefix: &str) -> ApiResult<Option<Value>> {
    checked_for(body, prefix, tasks_run_as_root())
}

fn checked_for(body: &Map<String, Value>, prefix: &str, root: bool) -> ApiResult<Option<Value>> {
    let at = |name: &str| format!("{prefix}userIdentity{name}");
    let Some(identity) = body.get("userIdentity").filter(|v| super::support::asks(v)) else {
        return Ok(None);
    };
    let Some(identity) = identity.as_object() else {
        return Err(ApiError::invalid_property(
            &at(""),
            identity.to_string(),
            "must be an object",
        ));
    };
    if let Some(name) = identity.get("userName").filter(|v| !v.is_null()) {
        return Err(ApiError::invalid_property(
            &at(".userName"),
            name.to_string(),
            "not supported by this server: named user accounts (a pool's userAccounts); \
             give an autoUser with elevationLevel admin",
        ));
    }
    let auto = match identity.get("autoUser") {
        None | Some(Value::Null) => &Map::new(),
        Some(Value::Object(auto)) => auto,
        Some(other) => {
            return Err(ApiError::invalid_property(
                &at(".autoUser"),
                other.to_string(),
                "must be an object",
            ))
        }
    };
    let word = |name: &str, allowed: [&str; 2], default: &str| -> ApiResult<String> {
        match auto.get(name) {
            None | Some(Value::Null) => Ok(default.to_string()),
            Some(Value::String(s)) if allowed.iter().any(|a| a.eq_ignore_ascii_case(s)) => {
                Ok(s.to_ascii_lowercase())
            }
            Some(other) => Err(ApiError::invalid_property(
                &at(&format!(".autoUser.{name}")),
                other.to_string(),
                format!("must be {} or {}", allowed[0], allowed[1]),
            )),
        }
    };
    let scope = word("scope", ["pool", "task"], "pool")?;
    // Azure's default is a non-administrator.
    let elevation = word("elevationLevel", ["admin", "nonadmin"], "nonadmin")?;
    let level = at(".autoUser.elevationLevel");
    if elevation != "admin" {
        return Err(ApiError::invalid_property(
            &level,
            elevation,
            "not supported by this server: non-administrator users (every task runs as its \
             node's administrator, root); give admin, or leave userIdentity out",
        ));
    }
    if !root {
        return Err(ApiError::invalid_property(
            &level,
            elevation,
            "not supported by this server: its local nodes run tasks as the server's own user, \
             which is not root",
        ));
    }
    Ok(Some(
        json!({"autoUser": {"scope": scope, "elevationLevel": "admin"}}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(identity: Value, root: bool) -> Result<Option<Value>, (String, String)> {
        let body = json!({ "userIdentity": identity });
        checked_for(body.as_object().unwrap(), "startTask.", root).map_err(|e| {
            let named = e.values.iter().find(|(k, _)| k == "PropertyName");
            (named.map(|(_, v)| v.clone()).unwrap_or_default(), e.message)
        })
    }

    #[test]
    fn an_admin_auto_user_is_kept_in_azure_s_shape() {
        let admin = json!({"autoUser": {"elevationLevel": "Admin"}});
        assert_eq!(
            check(admin, true).unwrap(),
            Some(json!({"autoUser": {"scope": "pool", "elevationLevel": "admin"}}))
        );
        let task = json!({"autoUser": {"scope": "task", "elevationLevel": "admin"}});
        assert_eq!(
            check(task, true).unwrap().unwrap()["autoUser"]["scope"],
            "task"
        );
        assert_eq!(check(json!(null), false).unwrap(), None);
        assert_eq!(check(json!({}), false).unwrap(), None);
    }

    #[test]
    fn what_cannot_be_carried_out_is_refused_by_name() {
        let cases = [
            (
                json!({"userName": "alice"}),
                true,
                "startTask.userIdentity.userName",
            ),
            (
                json!({"autoUser": {"scope": "pool"}}),
                true,
                "startTask.userIdentity.autoUser.elevationLevel",
            ),
            (
                json!({"autoUser": {"elevationLevel": "nonadmin"}}),
                true,
                "startTask.userIdentity.autoUser.elevationLevel",
            ),
            (
                json!({"autoUser": {"elevationLevel": "admin"}}),
                false,
                "startTask.userIdentity.autoUser.elevationLevel",
            ),
            (
                json!({"autoUser": {"elevationLevel": "root"}}),
                true,
                "startTask.userIdentity.autoUser.elevationLevel",
            ),
            (
                json!({"autoUser": {"scope": "node", "elevationLevel": "admin"}}),
                true,
                "startTask.userIdentity.autoUser.scope",
            ),
            (
                json!({"autoUser": "admin"}),
                true,
                "startTask.userIdentity.autoUser",
            ),
            (json!("admin"), true, "startTask.userIdentity"),
        ];
        for (identity, root, property) in cases {
            let (named, _) = check(identity.clone(), root).unwrap_err();
            assert_eq!(named, property, "{identity}");
        }
        let (_, why) = check(json!({"autoUser": {"elevationLevel": "admin"}}), false).unwrap_err();
        assert!(why.contains("not root"), "{why}");
    }
}
