//! The peer: BENCH_SLURM_TASKS no-op tasks as one Slurm job array on a one-node Slurm
//! (scripts/slurm.sh: this machine as a node of 32 CPUs, tuned for throughput), next to the
//! same tasks on batchpool's local pool of 2 nodes x 16 slots, in the same run. Skipped where
//! Slurm is not installed (Debian: apt-get install slurm-wlm).

use std::time::Instant;

use super::{add_tasks, Server};

fn slurm(args: &[&str]) -> Option<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/slurm.sh");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        println!("slurm: {}", String::from_utf8_lossy(&out.stderr).trim());
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub async fn run(tasks: usize, clients: usize) {
    if std::process::Command::new("sbatch")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("slurm: skipped (no sbatch here: apt-get install slurm-wlm)");
        return;
    }
    let Some(()) = slurm(&["start"]).map(|_| ()) else {
        return;
    };
    let peer: f64 = slurm(&["run", &tasks.to_string()])
        .and_then(|s| s.parse().ok())
        .expect("slurm.sh run prints seconds");
    slurm(&["stop"]);

    let s = Server::with_pool("local", "peer", 2, 16, "run").await;
    let started = Instant::now();
    add_tasks(&s, "run", tasks, clients, "true").await;
    s.wait_completed("run", tasks).await;
    let ours = started.elapsed().as_secs_f64();
    s.stop().await;
    println!(
        "slurm: {tasks} no-op tasks, 32 at a time: Slurm job array {:.0} tasks/s ({peer:.1} s); \
         batchpool local pool {:.0} tasks/s ({ours:.1} s); batchpool / Slurm {:.1}x",
        tasks as f64 / peer,
        tasks as f64 / ours,
        peer / ours
    );
}
