#!/usr/bin/env bash
# scripts/slurm.sh - a one-node Slurm (Debian's slurm-wlm) to compare batchpool with, as the
# benchmark's peer (`BENCH_ONLY=slurm cargo bench --bench scheduler`):
#
#   scripts/slurm.sh start     # munged, slurmctld and slurmd, configured below (idempotent)
#   scripts/slurm.sh run N     # N no-op tasks as one job array; prints the seconds it took
#   scripts/slurm.sh stop
#
# The node is this machine, declared with 32 CPUs (oversubscribed, as batchpool's pool of 2 x 16
# slots is), so 32 array tasks run at a time. The configuration follows Slurm's high-throughput
# guide: no accounting, no job completion log, no cgroups (proctrack/linuxproc, task/none), the
# backfill scheduler run without delay (sched_min_interval=0, batch_sched_delay=0), finished jobs
# forgotten after 2 s (MinJobAge), and select/cons_tres over CPUs.
set -euo pipefail

dir=${BATCHPOOL_SLURM_DIR:-/tmp/batchpool-slurm}
export SLURM_CONF="$dir/slurm.conf"
host=$(hostname -s)

start() {
    command -v slurmctld >/dev/null || { echo "slurm.sh: slurm-wlm is not installed (apt-get install slurm-wlm)" >&2; exit 1; }
    mkdir -p "$dir"/{spool,state,log}
    cat >"$SLURM_CONF" <<CONF
ClusterName=bench
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=defer,sched_min_interval=0,batch_sched_delay=0
MaxArraySize=1000001
MaxJobCount=1000000
MinJobAge=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=32 State=UNKNOWN
PartitionName=bench Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        chown munge:munge /run/munge /var/log/munge /var/lib/munge
        runuser -u munge -- munged
    fi
    pgrep -x slurmctld >/dev/null || (setsid slurmctld -D -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &)
    pgrep -x slurmd >/dev/null || (setsid slurmd -D -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmd.out" 2>&1 &)
    local deadline=$((SECONDS + 60))
    until sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed|allocated'; do
        ((SECONDS < deadline)) || { echo "slurm.sh: the node did not come up (see $dir/log)" >&2; exit 1; }
        scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
        sleep 0.5
    done
}

run() {
    local n=$1 start end job
    start=$(date +%s.%N)
    job=$(cd "$dir" && sbatch --parsable --array=0-$((n - 1)) -o /dev/null -e /dev/null --wrap true)
    while [[ -n "$(squeue -h -j "$job" 2>/dev/null | head -1)" ]]; do sleep 0.2; done
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

stop() {
    pkill -x slurmd || true
    pkill -x slurmctld || true
}

case "${1:-}" in
    start) start ;;
    run) run "${2:?how many tasks}" ;;
    stop) stop ;;
    *) echo "usage: $0 start | run N | stop" >&2; exit 2 ;;
esac
