//! The node's load, as autoscale formulas read it (`$CPUPercent`, `$MemoryBytes`): what the
//! commands this agent started use. Their process groups are read from `/proc` (in a Docker
//! node, the container's own), and what ended is counted from what the reaper was told.

use std::time::Duration;

use super::procs::Procs;
use super::Link;
use crate::domain::agent::{Events, Load, EVENTS_PATH, LOAD_PERIOD_SECS};

/// Reports the load every [`LOAD_PERIOD_SECS`] for ever. A report that does not arrive is not
/// sent again: the next one says more.
pub async fn report(link: std::sync::Arc<Link>, procs: Procs) {
    let mut every = tokio::time::interval(Duration::from_secs(LOAD_PERIOD_SECS));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let groups = procs.groups();
        let live = tokio::task::spawn_blocking(move || in_groups(&groups))
            .await
            .unwrap_or_default();
        let batch = Events {
            boot: link.boot.clone(),
            events: Vec::new(),
            load: Some(Load {
                cpu_ms: procs.reaped_cpu_ms() + live.cpu_ms,
                memory_bytes: live.memory_bytes,
            }),
        };
        if let Err(e) = link
            .post::<_, serde::de::IgnoredAny>(EVENTS_PATH, &batch)
            .await
        {
            tracing::debug!(error = %format!("{e:#}"), "reporting the node's load failed");
        }
    }
}

/// What the running processes of `groups` use: their CPU time so far (with the children they
/// waited for) and their resident memory.
fn in_groups(groups: &[i32]) -> Load {
    let mut load = Load::default();
    if groups.is_empty() {
        return load;
    }
    // SAFETY: sysconf with constant names.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return load;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(p) = parse_stat(&stat).filter(|p| groups.contains(&p.group)) {
            load.cpu_ms += p.cpu_ticks * 1000 / ticks;
            load.memory_bytes += p.rss_pages * page;
        }
    }
    load
}

/// Of one `/proc/{pid}/stat`: the process group, CPU ticks (its own and its waited-for
/// children's, user and kernel) and resident pages.
#[derive(Debug, PartialEq)]
struct Stat {
    group: i32,
    cpu_ticks: u64,
    rss_pages: u64,
}

fn parse_stat(stat: &str) -> Option<Stat> {
    // The command's name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        group: fields.get(2)?.parse().ok()?,
        cpu_ticks: number(11)? + number(12)? + number(13)? + number(14)?,
        rss_pages: number(21)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_group_cpu_and_memory() {
        let line = "4242 (sh -c (x)) S 1 4240 4240 0 -1 4194560 120 0 0 0 \
                    150 30 12 8 20 0 1 0 3551 2330624 213 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                group: 4240,
                cpu_ticks: 200,
                rss_pages: 213
            })
        );
        assert_eq!(parse_stat("4242 (sh) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_found_in_its_own_group() {
        // SAFETY: getpgrp has no arguments.
        let group = unsafe { libc::getpgrp() };
        let load = in_groups(&[group]);
        assert!(load.memory_bytes > 0, "{load:?}");
    }
}
