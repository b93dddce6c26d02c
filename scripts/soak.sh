#!/usr/bin/env bash
# The chaos soak (tests/soak.rs; RELIABILITY.md, "The chaos soak"): a mixed workload on two
# servers sharing one PostgreSQL while a seeded nemesis injects faults, then a checker.
#   scripts/soak.sh [--seed N] [--minutes M] [--runtime local|docker|both]
# A seed replays the same choices of work and faults. CI runs seed 1 for 90 seconds on both.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=1 minutes=10 runtime=both
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seed) seed="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        *) echo "usage: scripts/soak.sh [--seed N] [--minutes M] [--runtime local|docker|both]" >&2; exit 2 ;;
    esac
done
case "$runtime" in
    local) filter=(--exact a_seeded_nemesis_breaks_no_rule) ;;
    docker) filter=(--exact a_seeded_nemesis_breaks_no_rule_on_docker) ;;
    both) filter=(a_seeded_nemesis_breaks_no_rule) ;;
    *) echo "--runtime is local, docker or both" >&2; exit 2 ;;
esac
export BATCHPOOL_SOAK_SEED="$seed" BATCHPOOL_SOAK_SECONDS=$((minutes * 60))
exec scripts/test.sh --test soak -- --nocapture "${filter[@]}"
