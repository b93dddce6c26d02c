//! The command line client in the server's binary: `batchpool pool|job|task|queue|status`. It
//! speaks the same Azure Batch API as the SDKs, signed with Shared Key by the server's own code
//! (`domain::signing`), with the account settings `az batch` users know (docs/cli.md).
//!
//! Each command prints a table or a line for people, or JSON with `--output json`; an error is
//! one line on stderr with the server's code and message, and exit status 1.

pub mod client;
mod control;
mod jobs;
mod logs;
mod pools;
mod table;
mod watch;

use std::time::Duration;

pub use client::ClientArgs;
use client::{CliResult, Client};
pub use jobs::Submit;
pub use logs::Logs;
pub use pools::PoolCommand;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum JobCommand {
    /// Submits a job of tasks: one command, `--array 1-1000` of it, or `--file` of commands.
    Submit(Submit),
    /// Shows a job's progress until its tasks are done. Exit status 0 when every task
    /// succeeded, 1 when one failed (they are named), 124 when `--timeout` passed first.
    Watch {
        job: String,
        /// Seconds to wait at most.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Ends a job before its tasks are done: those not started never run, those running are
    /// killed, and the job completes (Azure's terminate; `scancel`).
    Terminate {
        job: String,
        /// Why, as the job's `terminateReason` (Azure's default: UserTerminate).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deletes a job, its tasks and their files; running tasks are killed.
    Delete { job: String },
    /// A job: its state, pool, priority, its tasks by state, why they wait, and (where the
    /// account has prices) what it has cost and what it will.
    Show { job: String },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum TaskCommand {
    /// A task's stdout, or stderr; `-f` follows it until the task completes.
    Logs(Logs),
    /// A task's state, how it ended and why (exit code, failure), where and when it ran.
    Show { job: String, task: String },
    /// A job's tasks, one line each: state, result, exit code, node.
    List {
        job: String,
        /// Only the tasks in this state.
        #[arg(long, value_enum)]
        state: Option<control::TaskState>,
        /// Only the tasks that failed.
        #[arg(long)]
        failed: bool,
    },
}

/// The client commands, each with where the server is and who signs (`config::Command`
/// flattens them in among the server's own).
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ClientCommand {
    /// Pools: create, list, show, resize (to 0 when the work is done), delete. A client of a
    /// server, as the commands below (docs/cli.md).
    Pool {
        #[command(subcommand)]
        command: PoolCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Jobs: submit tasks (an array of them, a file of commands), watch their progress,
    /// terminate or delete them.
    Job {
        #[command(subcommand)]
        command: JobCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Tasks: their logs, how they ended, a job's tasks by state.
    Task {
        #[command(subcommand)]
        command: TaskCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The jobs still going and their tasks by state (as squeue shows).
    Queue {
        /// Completed jobs too.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The pools and their nodes by state (as sinfo shows).
    Status {
        #[command(flatten)]
        client: ClientArgs,
    },
}

impl ClientCommand {
    fn args(&self) -> &ClientArgs {
        match self {
            ClientCommand::Pool { client, .. }
            | ClientCommand::Job { client, .. }
            | ClientCommand::Task { client, .. }
            | ClientCommand::Queue { client, .. }
            | ClientCommand::Status { client } => client,
        }
    }
}

/// Runs a client command; its exit status. Errors are printed here, as one line.
pub async fn run(command: ClientCommand) -> u8 {
    let outcome = match Client::new(command.args()) {
        Ok(client) => dispatch(&client, command).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(status) => status,
        Err(e) => {
            eprintln!("batchpool: {e}");
            1
        }
    }
}

async fn dispatch(client: &Client, command: ClientCommand) -> CliResult<u8> {
    match command {
        ClientCommand::Pool { command, .. } => pools::run(client, command).await.map(|()| 0),
        ClientCommand::Job {
            command: JobCommand::Submit(s),
            ..
        } => {
            let job = jobs::submit(client, &s).await?;
            if s.watch {
                return watch::watch(client, &job, None).await;
            }
            Ok(0)
        }
        ClientCommand::Job {
            command: JobCommand::Watch { job, timeout },
            ..
        } => watch::watch(client, &job, timeout.map(Duration::from_secs)).await,
        ClientCommand::Job {
            command: JobCommand::Terminate { job, reason },
            ..
        } => control::terminate(client, &job, reason.as_deref())
            .await
            .map(|()| 0),
        ClientCommand::Job {
            command: JobCommand::Delete { job },
            ..
        } => control::delete(client, &job).await.map(|()| 0),
        ClientCommand::Job {
            command: JobCommand::Show { job },
            ..
        } => control::show_job(client, &job).await.map(|()| 0),
        ClientCommand::Task {
            command: TaskCommand::Show { job, task },
            ..
        } => control::show(client, &job, &task).await.map(|()| 0),
        ClientCommand::Task {
            command: TaskCommand::List { job, state, failed },
            ..
        } => control::list(client, &job, state, failed).await.map(|()| 0),
        ClientCommand::Task {
            command: TaskCommand::Logs(l),
            ..
        } => logs::logs(client, &l).await.map(|()| 0),
        ClientCommand::Queue { all, .. } => jobs::queue(client, all).await.map(|()| 0),
        ClientCommand::Status { .. } => pools::status(client).await.map(|()| 0),
    }
}
