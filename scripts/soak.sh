#!/usr/bin/env bash
# The chaos soak (tests/soak.rs; RELIABILITY.md, "The chaos soak"): a mixed workload on two
# servers sharing one PostgreSQL while a seeded nemesis injects faults, then a checker.
#   scripts/soak.sh --seed N --minutes M
# A seed replays the same choices of work and faults. CI runs seed 1 for 90 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=1 minutes=10
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seed) seed="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        *) echo "usage: scripts/soak.sh [--seed N] [--minutes M]" >&2; exit 2 ;;
    esac
done
export BATCHPOOL_SOAK_SEED="$seed" BATCHPOOL_SOAK_SECONDS=$((minutes * 60))
exec scripts/test.sh --test soak -- --nocapture
