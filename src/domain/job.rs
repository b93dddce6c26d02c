//! Jobs and tasks: states, and what a task's exit code means for it, its dependants and its job.

use serde::{Deserialize, Serialize};

wire_enum!(JobState {
    Active = "active",
    Disabling = "disabling",
    Disabled = "disabled",
    Enabling = "enabling",
    Terminating = "terminating",
    Completed = "completed",
    Deleting = "deleting",
});

wire_enum!(TaskState { Active = "active", Preparing = "preparing", Running = "running", Completed = "completed" });

impl TaskState {
    /// The states of a task that is on a node: `preparing` while its resource files download,
    /// then `running`.
    pub const ON_NODE: &'static [TaskState] = &[TaskState::Preparing, TaskState::Running];
}

wire_enum!(AllTasksComplete { NoAction = "noaction", TerminateJob = "terminatejob" });

wire_enum!(TaskFailureMode { NoAction = "noaction", PerformExitOptionsJobAction = "performexitoptionsjobaction" });

wire_enum!(DisableTasks { Requeue = "requeue", Terminate = "terminate", Wait = "wait" });

wire_enum!(JobAction { None = "none", Disable = "disable", Terminate = "terminate" });

wire_enum!(DependencyAction { Satisfy = "satisfy", Block = "block" });

/// Azure's `exitConditions` on a task.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitConditions {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exit_codes: Vec<ExitCodeMapping>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exit_code_ranges: Vec<ExitCodeRangeMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_processing_error: Option<ExitOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_upload_error: Option<ExitOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<ExitOptions>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitCodeMapping {
    pub code: i64,
    pub exit_options: ExitOptions,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitCodeRangeMapping {
    pub start: i64,
    pub end: i64,
    pub exit_options: ExitOptions,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_action: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_action: Option<String>,
}

/// What a finished attempt leads to.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    pub succeeded: bool,
    pub dependency: DependencyAction,
    /// Applies only when the job's onTaskFailure is performexitoptionsjobaction.
    pub job_action: JobAction,
}

impl ExitConditions {
    /// Azure's rules: an exit code listed in exitCodes, else in a range, else `default`; without
    /// a match, success satisfies dependants and failure blocks them and terminates the job.
    pub fn verdict(&self, exit_code: i64) -> Verdict {
        let succeeded = exit_code == 0;
        let options = self.for_code(exit_code).or(if succeeded {
            None
        } else {
            self.default.as_ref()
        });
        Self::judged(succeeded, options)
    }

    /// The options an exit code names in exitCodes or exitCodeRanges.
    fn for_code(&self, exit_code: i64) -> Option<&ExitOptions> {
        self.exit_codes
            .iter()
            .find(|m| m.code == exit_code)
            .map(|m| &m.exit_options)
            .or_else(|| {
                self.exit_code_ranges
                    .iter()
                    .find(|r| (r.start..=r.end).contains(&exit_code))
                    .map(|r| &r.exit_options)
            })
    }

    /// A task whose resource files could not be downloaded (its command never ran):
    /// preProcessingError, else default.
    pub fn pre_processing_verdict(&self) -> Verdict {
        let options = self.pre_processing_error.as_ref().or(self.default.as_ref());
        Self::judged(false, options)
    }

    /// A task whose output files could not be uploaded after it exited with `exit_code`: what
    /// exitCodes or exitCodeRanges say of the code comes first, then fileUploadError, then default.
    pub fn file_upload_verdict(&self, exit_code: i64) -> Verdict {
        let options = self
            .for_code(exit_code)
            .or(self.file_upload_error.as_ref())
            .or(self.default.as_ref());
        Self::judged(false, options)
    }

    fn judged(succeeded: bool, options: Option<&ExitOptions>) -> Verdict {
        let dependency = options
            .and_then(|o| o.dependency_action.as_deref())
            .and_then(DependencyAction::parse)
            .unwrap_or(if succeeded {
                DependencyAction::Satisfy
            } else {
                DependencyAction::Block
            });
        let job_action = options
            .and_then(|o| o.job_action.as_deref())
            .and_then(JobAction::parse)
            .unwrap_or(if succeeded {
                JobAction::None
            } else {
                JobAction::Terminate
            });
        Verdict {
            succeeded,
            dependency,
            job_action,
        }
    }

    /// Checks the enum strings; returns the property at fault.
    pub fn check(&self) -> Result<(), (String, String)> {
        let all = self
            .exit_codes
            .iter()
            .map(|m| &m.exit_options)
            .chain(self.exit_code_ranges.iter().map(|r| &r.exit_options))
            .chain(self.pre_processing_error.iter())
            .chain(self.file_upload_error.iter())
            .chain(self.default.iter());
        for options in all {
            if let Some(a) = &options.job_action {
                if JobAction::parse(a).is_none() {
                    return Err(("exitConditions.jobAction".into(), a.clone()));
                }
            }
            if let Some(d) = &options.dependency_action {
                if DependencyAction::parse(d).is_none() {
                    return Err(("exitConditions.dependencyAction".into(), d.clone()));
                }
            }
        }
        if let Some(r) = self.exit_code_ranges.iter().find(|r| r.start > r.end) {
            return Err((
                "exitConditions.exitCodeRanges".into(),
                format!("{}-{}", r.start, r.end),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conditions(json: serde_json::Value) -> ExitConditions {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn defaults_follow_azure() {
        let none = ExitConditions::default();
        assert_eq!(
            none.verdict(0),
            Verdict {
                succeeded: true,
                dependency: DependencyAction::Satisfy,
                job_action: JobAction::None
            }
        );
        assert_eq!(
            none.verdict(2),
            Verdict {
                succeeded: false,
                dependency: DependencyAction::Block,
                job_action: JobAction::Terminate
            }
        );
    }

    #[test]
    fn codes_then_ranges_then_default() {
        let c = conditions(serde_json::json!({
            "exitCodes": [{"code": 3, "exitOptions": {"dependencyAction": "satisfy", "jobAction": "none"}}],
            "exitCodeRanges": [{"start": 2, "end": 5, "exitOptions": {"jobAction": "disable"}}],
            "default": {"dependencyAction": "satisfy"}
        }));
        assert_eq!(c.verdict(3).dependency, DependencyAction::Satisfy);
        assert_eq!(c.verdict(3).job_action, JobAction::None);
        assert_eq!(c.verdict(4).job_action, JobAction::Disable);
        assert_eq!(c.verdict(4).dependency, DependencyAction::Block);
        assert_eq!(c.verdict(9).dependency, DependencyAction::Satisfy);
        assert!(c.check().is_ok());
        assert!(
            conditions(serde_json::json!({"default": {"jobAction": "explode"}}))
                .check()
                .is_err()
        );
    }
}
