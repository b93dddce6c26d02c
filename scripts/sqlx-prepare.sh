#!/usr/bin/env bash
# Refreshes .sqlx/, the query descriptions the checked sqlx macros (query!, query_as!) compile
# against, so that a build needs no database (.cargo/config.toml sets SQLX_OFFLINE=true).
#
#   scripts/sqlx-prepare.sh          # after changing a query or a migration; commit .sqlx/
#   scripts/sqlx-prepare.sh --check  # fail if .sqlx/ is not what the queries and migrations give
#
# It describes every query against a fresh database made from migrations/ on the throwaway
# PostgreSQL of scripts/test-env.sh, with the macros writing their descriptions (SQLX_OFFLINE_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
[[ "${1:-}" == --check ]] && check=true

# shellcheck source=scripts/test-env.sh
source scripts/test-env.sh
: "${BATCHPOOL_TEST_DATABASE_URL:?scripts/test-env.sh did not provide a database}"

db=batchpool_sqlx
admin_url=$BATCHPOOL_TEST_DATABASE_URL
url=${admin_url/\/postgres\?//$db?}
psql -q -v ON_ERROR_STOP=1 "$admin_url" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
for migration in migrations/*.sql; do
    psql -q -v ON_ERROR_STOP=1 -1 "$url" -f "$migration" >/dev/null
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The macros expand again only in files that changed: make every file that has one change.
grep -rlE 'sqlx::query(_as|_scalar)?!' src | xargs touch
SQLX_OFFLINE=false DATABASE_URL=$url SQLX_OFFLINE_DIR=$out cargo build --locked --lib --quiet

if $check; then
    if ! diff -r -q .sqlx "$out" >&2; then
        echo "sqlx-prepare: .sqlx/ is out of date: run scripts/sqlx-prepare.sh and commit .sqlx/" >&2
        exit 1
    fi
    echo "sqlx-prepare: .sqlx/ matches the queries and migrations"
else
    rm -rf .sqlx
    mkdir .sqlx
    cp "$out"/query-*.json .sqlx/
    echo "sqlx-prepare: $(ls .sqlx | wc -l) queries described in .sqlx/"
fi
