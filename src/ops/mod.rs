//! State changes that both the API and the scheduler start, so neither imports the other:
//! ending jobs and tasks, and waking the scheduler's loops.

pub mod applications;
pub mod autoscale;
pub mod bes;
pub mod budgets;
pub mod jobs;
pub mod preempt;
pub mod schedules;
pub mod wake;
