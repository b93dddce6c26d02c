//! A task's `userIdentity`: the user its command runs as ([`crate::domain::run_as`]). An
//! auto-user with `elevationLevel: admin` is its node's administrator: root in a Docker node,
//! and on a local node the server's own user (root when the server runs as root). One with
//! `nonadmin` is a user of its own in a Docker node, the node's one for `pool` scope, the
//! task's for `task` scope; on a local node, the server's own user where that is not root
//! (of `pool` scope: tasks share it). What a server's nodes cannot run a task as is refused,
//! and so are named users (a pool's `userAccounts`). A `userIdentity` left out is the node's
//! administrator, where Azure's default is a non-administrator.

use serde_json::{json, Map, Value};

use crate::api::error::{ApiError, ApiResult};

/// Who this server's nodes can run a task as.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Users {
    /// Root, or a user of its own (a Docker node's agent is root).
    Any,
    /// Root only: local nodes of a server that runs as root.
    Root,
    /// The server's own user only, which is not root (local nodes).
    Server,
}

static TASK_USERS: std::sync::OnceLock<Users> = std::sync::OnceLock::new();

/// Records who the tasks of this server's nodes can run as: in a Docker node anyone; on a
/// local node, the server's own user.
pub fn record_task_user(runtime: &str) {
    let _ = TASK_USERS.set(users(runtime));
}

fn users(runtime: &str) -> Users {
    // SAFETY: geteuid has no preconditions.
    match (runtime, unsafe { libc::geteuid() } == 0) {
        ("local", true) => Users::Root,
        ("local", false) => Users::Server,
        _ => Users::Any,
    }
}

/// The `userIdentity` of `body` (a task, or a start, job manager, preparation or release task),
/// checked, as it is kept and shown: `{"autoUser": {"scope", "elevationLevel"}}`. None when it
/// asks for nothing. `prefix` names the body ("startTask.", say).
pub fn checked(body: &Map<String, Value>, prefix: &str) -> ApiResult<Option<Value>> {
    // Before the runtime is known, as if this process ran local nodes.
    let users = *TASK_USERS.get_or_init(|| users("local"));
    checked_for(body, prefix, users)
}

fn checked_for(body: &Map<String, Value>, prefix: &str, users: Users) -> ApiResult<Option<Value>> {
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
             give an autoUser",
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
    if let Some(why) = cannot_run_as(users, &elevation, &scope) {
        let level = at(".autoUser.elevationLevel");
        return Err(ApiError::invalid_property(&level, elevation, why));
    }
    let in_container = body
        .get("containerSettings")
        .is_some_and(super::support::asks);
    if elevation == "nonadmin" && in_container {
        return Err(ApiError::invalid_property(
            &at(".autoUser.elevationLevel"),
            elevation,
            "not supported by this server: a non-administrator in a task's own container \
             (containerSettings); give admin, or run the task in its node",
        ));
    }
    Ok(Some(
        json!({"autoUser": {"scope": scope, "elevationLevel": elevation}}),
    ))
}

/// Why this server's nodes cannot run a task as the auto-user of `elevation` and `scope`.
fn cannot_run_as(users: Users, elevation: &str, scope: &str) -> Option<&'static str> {
    match (users, elevation, scope) {
        (Users::Any, _, _) | (Users::Root, "admin", _) | (Users::Server, "nonadmin", "pool") => {
            None
        }
        (Users::Server, "admin", _) => Some(
            "not supported by this server: its local nodes run tasks as the server's own user, \
             which is not root; give nonadmin",
        ),
        (Users::Server, _, _) => Some(
            "not supported by this server: its local nodes run every task as the server's own \
             user, so no task has a user of its own (scope task); give scope pool, or run \
             Docker nodes",
        ),
        (Users::Root, _, _) => Some(
            "not supported by this server: its local nodes run every task as root (the \
             server's user); a non-administrator needs Docker nodes (--runtime docker), or give \
             admin",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_in(body: Value, users: Users) -> Result<Option<Value>, (String, String)> {
        checked_for(body.as_object().unwrap(), "startTask.", users).map_err(|e| {
            let named = e.values.iter().find(|(k, _)| k == "PropertyName");
            (named.map(|(_, v)| v.clone()).unwrap_or_default(), e.message)
        })
    }

    fn check(identity: Value, users: Users) -> Result<Option<Value>, (String, String)> {
        check_in(json!({ "userIdentity": identity }), users)
    }

    fn auto(scope: &str, level: &str) -> Value {
        json!({"autoUser": {"scope": scope, "elevationLevel": level}})
    }

    #[test]
    fn an_auto_user_is_kept_in_azure_s_shape() {
        let admin = json!({"autoUser": {"elevationLevel": "Admin"}});
        assert_eq!(
            check(admin, Users::Root).unwrap(),
            Some(auto("pool", "admin"))
        );
        // Azure's defaults: pool scope, a non-administrator.
        let task = json!({"autoUser": {"scope": "Task"}});
        assert_eq!(
            check(task, Users::Any).unwrap(),
            Some(auto("task", "nonadmin"))
        );
        let empty = json!({"autoUser": {}});
        assert_eq!(
            check(empty, Users::Any).unwrap(),
            Some(auto("pool", "nonadmin"))
        );
        // Asking for nothing is as leaving it out.
        assert_eq!(check(json!({}), Users::Any).unwrap(), None);
        assert_eq!(check(json!(null), Users::Server).unwrap(), None);
    }

    #[test]
    fn each_server_takes_the_users_its_nodes_can_run_tasks_as() {
        use Users::{Any, Root, Server};
        let cases = [
            (Any, "pool", "admin", true),
            (Any, "task", "admin", true),
            (Any, "pool", "nonadmin", true),
            (Any, "task", "nonadmin", true),
            (Root, "task", "admin", true),
            (Root, "pool", "nonadmin", false),
            (Root, "task", "nonadmin", false),
            (Server, "pool", "admin", false),
            (Server, "pool", "nonadmin", true),
            (Server, "task", "nonadmin", false),
        ];
        for (users, scope, level, taken) in cases {
            match check(auto(scope, level), users) {
                Ok(kept) => assert!(taken && kept == Some(auto(scope, level))),
                Err((named, why)) => {
                    assert!(!taken, "{users:?} {scope} {level}: {why}");
                    assert_eq!(named, "startTask.userIdentity.autoUser.elevationLevel");
                    assert!(why.contains("not supported by this server"), "{why}");
                }
            }
        }
    }

    #[test]
    fn what_cannot_be_carried_out_is_refused_by_name() {
        let cases = [
            (
                json!({"userName": "alice"}),
                "startTask.userIdentity.userName",
            ),
            (
                json!({"autoUser": {"elevationLevel": "root"}}),
                "startTask.userIdentity.autoUser.elevationLevel",
            ),
            (
                json!({"autoUser": {"scope": "node", "elevationLevel": "admin"}}),
                "startTask.userIdentity.autoUser.scope",
            ),
            (
                json!({"autoUser": "admin"}),
                "startTask.userIdentity.autoUser",
            ),
            (json!("admin"), "startTask.userIdentity"),
        ];
        for (identity, property) in cases {
            let (named, _) = check(identity.clone(), Users::Any).unwrap_err();
            assert_eq!(named, property, "{identity}");
        }
        let in_container = json!({
            "userIdentity": auto("pool", "nonadmin"),
            "containerSettings": {"imageName": "busybox"},
        });
        let (named, why) = check_in(in_container, Users::Any).unwrap_err();
        assert_eq!(named, "startTask.userIdentity.autoUser.elevationLevel");
        assert!(why.contains("containerSettings"), "{why}");
        let admin_in_container = json!({
            "userIdentity": auto("task", "admin"),
            "containerSettings": {"imageName": "busybox"},
        });
        assert!(check_in(admin_in_container, Users::Any).is_ok());
    }
}
