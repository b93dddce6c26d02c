//! Who a task's command runs as on its node: Azure's auto-users. An administrator is the
//! node's root. A non-administrator is a user of its own, with no other group and no
//! capability: one user for every `pool`-scope task of the node, and one for each task of
//! `task` scope. Its task directory and working directory are its own.

use serde_json::Value;

/// The uid (and gid) of a node's pool-scope non-administrator auto-user. High enough that no
/// image names it.
pub const POOL_UID: u32 = 1_000_000;

/// Task-scope auto-users take this many uids above [`POOL_UID`], one for each command (below):
/// the highest is well below `u32::MAX`, which is no uid.
const TASK_UIDS: u64 = 4_000_000_000;

/// Which of its job's or node's commands a task-scope user is for: its uid is made from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// A job's task, by its pk.
    Task(i64),
    /// A job's preparation task, by its job's pk.
    Preparation(i64),
    /// A job's release task, by its job's pk.
    Release(i64),
    /// The pool's start task.
    Start,
}

/// Who a command runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// The node's administrator: root. What a command without a `userIdentity` runs as.
    Admin,
    /// The node's pool-scope non-administrator.
    PoolUser,
    /// A non-administrator of the command's own.
    TaskUser(Command),
}

/// A non-administrator as a node's agent starts a command as it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskUser {
    /// Its uid, and its only gid.
    pub uid: u32,
    /// Whether its task directory is closed to the node's other users (a task-scope user's).
    pub private: bool,
}

impl RunAs {
    /// Who `command` runs as, by the `userIdentity` it was given, as `api::batch::identity`
    /// checked and kept it: `{"autoUser": {"scope", "elevationLevel"}}`, or none (an
    /// administrator).
    pub fn of(identity: Option<&Value>, command: Command) -> Self {
        let auto = identity.and_then(|i| i.get("autoUser"));
        let word = |name: &str| auto.and_then(|a| a.get(name)).and_then(Value::as_str);
        match (word("elevationLevel"), word("scope")) {
            (Some("nonadmin"), Some("task")) => RunAs::TaskUser(command),
            (Some("nonadmin"), _) => RunAs::PoolUser,
            _ => RunAs::Admin,
        }
    }

    /// The user a node starts the command as; None for its administrator.
    pub fn user(self) -> Option<TaskUser> {
        let key = |k: i64, n: u64| k.unsigned_abs() % (TASK_UIDS / 4) * 4 + n;
        let task_uid = |key: u64| POOL_UID + 1 + key as u32;
        match self {
            RunAs::Admin => None,
            RunAs::PoolUser => Some(TaskUser {
                uid: POOL_UID,
                private: false,
            }),
            RunAs::TaskUser(command) => {
                let key = match command {
                    Command::Task(pk) => key(pk, 0),
                    Command::Preparation(job) => key(job, 1),
                    Command::Release(job) => key(job, 2),
                    Command::Start => 3,
                };
                // Only a job's task keeps its directory to itself: the others' are read by
                // the tasks that follow them (a preparation task's, say).
                let private = matches!(command, Command::Task(_));
                Some(TaskUser {
                    uid: task_uid(key),
                    private,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_identity_names_who_its_command_runs_as() {
        let auto = |scope: &str, level: &str| json!({"autoUser": {"scope": scope, "elevationLevel": level}});
        let task = Command::Task(7);
        assert_eq!(RunAs::of(None, task), RunAs::Admin);
        assert_eq!(RunAs::of(Some(&auto("task", "admin")), task), RunAs::Admin);
        assert_eq!(
            RunAs::of(Some(&auto("pool", "nonadmin")), task),
            RunAs::PoolUser
        );
        assert_eq!(
            RunAs::of(Some(&auto("task", "nonadmin")), task),
            RunAs::TaskUser(task)
        );
    }

    #[test]
    fn each_task_scope_user_is_its_own_and_none_is_root_or_the_pool_s() {
        let uid = |c| RunAs::TaskUser(c).user().unwrap().uid;
        let uids = [
            uid(Command::Task(1)),
            uid(Command::Task(2)),
            uid(Command::Preparation(1)),
            uid(Command::Release(1)),
            uid(Command::Start),
            uid(Command::Task(i64::MAX)),
        ];
        for (i, a) in uids.iter().enumerate() {
            assert!(*a > POOL_UID && *a < u32::MAX, "{a}");
            assert!(uids[i + 1..].iter().all(|b| b != a), "{uids:?}");
        }
        assert_eq!(RunAs::Admin.user(), None);
        assert!(!RunAs::PoolUser.user().unwrap().private);
        assert!(RunAs::TaskUser(Command::Task(1)).user().unwrap().private);
        assert!(!RunAs::TaskUser(Command::Start).user().unwrap().private);
    }
}
