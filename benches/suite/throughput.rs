//! End to end: BENCH_TASKS no-op tasks (`true`) added through addtaskcollection while a local pool
//! of 2 nodes x BENCH_SLOTS (16) slots runs them, the server with its default tasks ahead
//! (`auto`), or BENCH_AHEAD's `--tasks-ahead-per-slot` where it is set; next to the same number of `/bin/sh -c true`
//! processes started by `xargs -P` the pool's slots (32) in the same run, just before and just
//! after.

use std::time::Instant;

use super::{add_tasks, cpu, pass_summary, timed_shell, Server};

pub async fn run(tasks: usize, clients: usize, (slots, ahead): (usize, Option<String>)) {
    let args: Vec<String> = match &ahead {
        Some(ahead) => vec!["--tasks-ahead-per-slot".into(), ahead.clone()],
        None => Vec::new(),
    };
    let ahead = ahead.unwrap_or_else(|| "auto".into());
    let s = Server::with_pool_and(&args, ("local", "bench", 2, slots), "run").await;
    let parallel = 2 * slots;
    // The baseline runs before and after, so a machine that gets busier or quieter during the
    // run moves both sides of the ratio alike.
    let (before, xargs_before) = cpu::children_ms(|| xargs_baseline(tasks, parallel));
    let (pid, dir) = (s.pid(), s.data_dir().to_path_buf());
    let cpu_before = cpu::sample(pid, &dir);
    let started = Instant::now();
    let submit = add_tasks(&s, "run", tasks, clients, "true").await;
    s.wait_completed("run", tasks).await;
    let total = started.elapsed().as_secs_f64();
    let cpu_after = cpu::sample(pid, &dir);
    let passes = s.take_passes();
    s.stop().await;
    let (after, xargs_after) = cpu::children_ms(|| xargs_baseline(tasks, parallel));
    let baseline = (before + after) / 2.0;
    println!(
        "throughput: submit while running {:.0} tasks/s ({tasks} in {submit:.1} s, {clients} clients)",
        tasks as f64 / submit
    );
    println!(
        "throughput: end to end {:.0} tasks/s ({tasks} in {total:.1} s, {ahead} ahead a slot); xargs -P {parallel} baseline {:.0} tasks/s ({before:.1} s before, {after:.1} s after); ratio {:.2}",
        tasks as f64 / total,
        tasks as f64 / baseline,
        baseline / total
    );
    println!(
        "throughput: CPU ms a task: {}; xargs -P {parallel} with its shells {:.2}",
        cpu_after.since(&cpu_before, tasks),
        (xargs_before + xargs_after) / 2.0 / tasks as f64
    );
    println!("throughput: {}", pass_summary(&passes));
}

/// The physical floor: the same number of `/bin/sh -c true` processes, `parallel` at a time.
pub fn xargs_baseline(count: usize, parallel: usize) -> f64 {
    timed_shell(&format!(
        "seq {count} | xargs -P {parallel} -n 1 sh -c 'true' >/dev/null"
    ))
}
