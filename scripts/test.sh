#!/usr/bin/env bash
# The test command (README, .ci/run): prepares the machine (Docker engine, busybox-static,
# a throwaway PostgreSQL; scripts/test-env.sh), then runs every test. Arguments go to cargo test,
# e.g. scripts/test.sh --test pools.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/test-env.sh
source scripts/test-env.sh
: "${BATCHPOOL_TEST_DATABASE_URL:?scripts/test-env.sh did not provide a database}"
export BATCHPOOL_TEST_DATABASE_URL BATCHPOOL_SDK15_PYTHON BATCHPOOL_SDK14_PYTHON BATCHPOOL_AZ BATCHPOOL_SCHEMATHESIS \
    BATCHPOOL_SDK_DIR BATCHPOOL_SDK_MATRIX BATCHPOOL_JS_DIR BATCHPOOL_DEBIAN_ROOTFS

if ! command -v cargo >/dev/null; then
    echo "cargo is not installed: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
# The full suite (CI) also checks that .sqlx/ describes the queries as they are now.
# And that the code is formatted as rustfmt has it, where rustfmt is installed.
if [[ $# -eq 0 ]]; then
    scripts/sqlx-prepare.sh --check
    if cargo fmt --version >/dev/null 2>&1; then
        cargo fmt --check
    else
        echo "rustfmt is not installed: formatting not checked" >&2
    fi
fi
# The totals of every test binary, on one closing line.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# Every test binary runs, whatever an earlier one did, so one run shows every failure.
cargo test --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
