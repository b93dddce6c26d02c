#!/usr/bin/env bash
# scripts/test-env.sh - prepare everything batchpool's integration tests need on
# a Debian 12 machine (root, no init system, no Docker registry access):
#
#   * Debian packages: docker.io (engine) and busybox-static (the tests build
#     their task image FROM scratch around Debian's static busybox, because no
#     registry can be reached to pull a base image);
#   * a running Docker engine (dockerd is started in the background if needed);
#   * a throwaway PostgreSQL 15 server listening only on a unix socket.
#
# Usage:
#   source scripts/test-env.sh         # prepare, then export the variables below
#   bash scripts/test-env.sh           # prepare, then print `export ...` lines
#                                      #   (eval "$(bash scripts/test-env.sh)")
#   bash scripts/test-env.sh stop      # stop the throwaway Postgres (dockerd keeps running)
#
# Exported: BATCHPOOL_TEST_DATABASE_URL (a sqlx-compatible postgres:// URL),
# BATCHPOOL_SDK15_PYTHON / BATCHPOOL_SDK14_PYTHON / BATCHPOOL_AZ (the official
# SDKs and CLI), BATCHPOOL_SDK_DIR / BATCHPOOL_SDK_MATRIX (older azure-batch
# releases, each in $BATCHPOOL_SDK_DIR/azure-batch-<version>), BATCHPOOL_JS_DIR
# (@azure/batch, the JavaScript SDK, in its node_modules), BATCHPOOL_SCHEMATHESIS (the schema-driven fuzzer's `st`),
# BATCHPOOL_TEST_AZURITE (the Azure Storage emulator's blob URL),
# BATCHPOOL_TEST_S3 (an S3 emulator's URL, with a bucket batchpool-test),
# BATCHPOOL_TEST_DOCKER_HOSTS (two more Docker engines' sockets, as extra hosts),
# BATCHPOOL_DEBIAN_ROOTFS (where the tests keep the Debian node image's root filesystem).
#
# Knobs (environment):
#   BATCHPOOL_TEST_PG_DIR    socket + data directory (default /tmp/batchpool-test-pg)
#   BATCHPOOL_TEST_PG_PORT   port number, only used in the socket file name (default 5432)
#   BATCHPOOL_DOCKERD_ARGS   extra arguments for dockerd when this script starts it
#   BATCHPOOL_DOCKERD_LOG    dockerd log file (default /tmp/batchpool-dockerd.log)
#
# Idempotent: every step first checks whether it is already done, so a second
# run only costs a few cheap probes. All progress messages go to stderr; only
# the `export` lines go to stdout.
#
# Everything runs inside a subshell function with its own `set -euo pipefail`,
# so sourcing this file never changes the caller's shell options and a failure
# never exits the caller's shell.

_batchpool_test_env() (
    set -euo pipefail
    # Keep stdout clean for the final `export` lines: fd 3 is the real stdout,
    # everything else (apt-get, docker, pg_ctl chatter) goes to stderr.
    exec 3>&1 1>&2

    local mode="${1:-start}"
    local pg_dir="${BATCHPOOL_TEST_PG_DIR:-/tmp/batchpool-test-pg}"
    local pg_port="${BATCHPOOL_TEST_PG_PORT:-5432}"
    local pg_data="$pg_dir/data"
    local pg_log="$pg_dir/postgres.log"
    local pg_superuser="postgres" # created by `initdb -U`, independent of the OS user
    local dockerd_log="${BATCHPOOL_DOCKERD_LOG:-/tmp/batchpool-dockerd.log}"

    log() { printf '[test-env] %s\n' "$*" >&2; }
    die() { printf '[test-env] ERROR: %s\n' "$*" >&2; exit 1; }

    # ------------------------------------------------------------------
    # Helpers
    # ------------------------------------------------------------------

    # True if some process holds a lock on one of the given files. Reads
    # /proc/locks (dpkg/apt use fcntl locks), so it needs no extra tools
    # such as fuser. Matching on the inode number alone can in theory
    # false-positive; the only consequence is waiting a bit longer.
    lock_held() {
        local f ino
        for f in "$@"; do
            [[ -e "$f" ]] || continue
            ino=$(stat -c %i "$f")
            grep -q ":${ino} " /proc/locks && return 0
        done
        return 1
    }

    # Wait (max ~10 min) for another apt-get/dpkg run (e.g. a provisioning
    # step running in the background) instead of fighting it for the lock.
    wait_for_apt() {
        local locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock
                     /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
        local waited=0
        while lock_held "${locks[@]}"; do
            ((waited == 0)) && log "another apt/dpkg run holds the lock; waiting for it to finish..."
            ((waited >= 600)) && die "apt/dpkg lock still held after ${waited}s"
            sleep 1
            waited=$((waited + 1))
        done
    }

    # A process counts as alive only if it exists and is not a zombie: in
    # this kind of sandbox PID 1 reaps orphans lazily, so a crashed daemon
    # can linger as a zombie for a moment and fool `kill -0`.
    proc_alive() {
        local state
        state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
        [[ -n "$state" && "$state" != Z ]]
    }

    # Wait (max 10 s) until a dead process has really gone from /proc.
    wait_reaped() {
        local i
        for ((i = 0; i < 50; i++)); do
            [[ -e "/proc/$1" ]] || return 0
            proc_alive "$1" && return 0 # a live process: nothing to wait for
            sleep 0.2
        done
    }

    pkg_installed() {
        [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
    }

    missing_pkgs() {
        local p
        for p in "$@"; do pkg_installed "$p" || printf '%s\n' "$p"; done
    }

    # Postgres refuses to run as root, so as root we run its programs as an
    # unprivileged OS user. `cd /` because that user may not be able to
    # access the caller's working directory (e.g. /root). `3>&-`: the
    # postmaster must not inherit our stdout pipe, or `$(...)` around this
    # script would wait for it forever.
    pg_os_user=""
    run_pg() {
        if [[ -n "$pg_os_user" ]]; then
            (cd / && runuser -u "$pg_os_user" -- "$@") 3>&-
        else
            "$@" 3>&-
        fi
    }

    choose_pg_os_user() {
        if ((EUID != 0)); then
            pg_os_user=""
        elif [[ -d "$pg_data" ]]; then
            # Reuse whoever owns an existing cluster (it may predate a
            # `postgres` user being created).
            pg_os_user=$(stat -c %U "$pg_data")
            [[ "$pg_os_user" != root ]] || die "$pg_data is owned by root; remove $pg_dir and rerun"
        elif id -u postgres >/dev/null 2>&1; then
            pg_os_user=postgres
        else
            pg_os_user=nobody
        fi
    }

    # Locate the PostgreSQL 15 server programs: PATH first, then Debian's
    # versioned directory (which is not on PATH by default).
    pg_bin=""
    find_pg_bin() {
        local d prog
        for d in "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")" \
                 /usr/lib/postgresql/15/bin; do
            for prog in initdb pg_ctl postgres; do
                [[ -x "$d/$prog" ]] || continue 2
            done
            pg_bin="$d"
            break
        done
        [[ -n "$pg_bin" ]] || die "PostgreSQL 15 server binaries (initdb, pg_ctl, postgres) not found on PATH or in /usr/lib/postgresql/15/bin. Install them, e.g. 'apt-get install postgresql-15', and put them on PATH."
        local version
        version=$("$pg_bin/postgres" --version) || die "'$pg_bin/postgres --version' failed"
        [[ "$version" =~ \ 15\. ]] || die "expected PostgreSQL 15, found: $version ($pg_bin)"
        command -v psql >/dev/null || die "psql not found (install postgresql-client-15)"
        command -v pg_isready >/dev/null || die "pg_isready not found (install postgresql-client-15)"
    }

    # URL understood by sqlx 0.8 (a `host` query parameter starting with '/'
    # selects the unix-socket directory; the authority part is ignored for
    # the connection) and by libpq/psql alike.
    database_url() {
        local port_part=""
        [[ "$pg_port" == 5432 ]] || port_part=":$pg_port"
        printf 'postgres://%s@localhost%s/postgres?host=%s' "$pg_superuser" "$port_part" "$pg_dir"
    }

    pg_ready() {
        pg_isready -q -h "$pg_dir" -p "$pg_port" -U "$pg_superuser" -d postgres -t 2
    }

    # Networks of nodes that a killed test run left behind: no container in them, made over an
    # hour ago (a running test's network is younger, or has its nodes). Left, they use up the
    # engine's address pools, and a test that makes networks fails.
    sweep_networks() {
        local id count created now
        now=$(date +%s)
        DOCKER_HOST=$1 docker network ls -q --filter name=batchpool- 2>/dev/null | while read -r id; do
            read -r count created < <(DOCKER_HOST=$1 docker network inspect \
                --format '{{len .Containers}} {{.Created.Unix}}' "$id" 2>/dev/null) || continue
            if [[ "$count" == 0 ]] && ((now - created > 3600)); then
                DOCKER_HOST=$1 docker network rm "$id" >/dev/null 2>&1 \
                    && log "removed network $id, left by an earlier run"
            fi
        done
    }

    # ------------------------------------------------------------------
    # stop mode
    # ------------------------------------------------------------------
    if [[ "$mode" == stop ]]; then
        find_pg_bin
        if [[ ! -f "$pg_data/PG_VERSION" ]]; then
            log "no test cluster at $pg_data; nothing to stop"
            return 0
        fi
        choose_pg_os_user
        if run_pg "$pg_bin/pg_ctl" status -D "$pg_data" >/dev/null 2>&1; then
            run_pg "$pg_bin/pg_ctl" stop -D "$pg_data" -m fast -w -t 60 >&2
            log "stopped test Postgres in $pg_data (dockerd left running)"
        else
            log "test Postgres in $pg_data is not running"
        fi
        return 0
    fi
    [[ "$mode" == start ]] || die "unknown mode '$mode' (expected: start | stop)"

    # ------------------------------------------------------------------
    # 1. Debian packages
    # ------------------------------------------------------------------
    # docker-compose: the deployment test validates docker-compose.yml with it.
    # chromium: the dashboard's test drives it headless (tests/ui.rs).
    # debootstrap: the Debian node image (pools naming a marketplace image) is built with it.
    local pkgs=(docker.io busybox-static docker-compose chromium debootstrap)
    local -a missing
    mapfile -t missing < <(missing_pkgs "${pkgs[@]}")
    if ((${#missing[@]})); then
        # Maybe an install of exactly these is running right now: let it
        # finish, then look again before doing anything ourselves.
        wait_for_apt
        mapfile -t missing < <(missing_pkgs "${pkgs[@]}")
    fi
    if ((${#missing[@]})); then
        ((EUID == 0)) || die "missing Debian packages: ${missing[*]}; rerun as root"
        log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        # needrestart (if installed) would otherwise scan/restart services
        # after the install; nothing here runs under an init system anyway.
        export NEEDRESTART_SUSPEND=1
        # `update` only when we actually need to install something; the lock
        # timeout covers a concurrent apt run that starts after our check.
        apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >&2
    fi
    [[ -x /bin/busybox ]] || die "/bin/busybox missing although busybox-static is installed"

    # ------------------------------------------------------------------
    # 2. Docker engine
    # ------------------------------------------------------------------
    # In this kind of sandbox (Firecracker VM, cgroup v1, ext4 root, nf_tables
    # iptables) a plain `dockerd` works: overlay2, cgroupfs driver, the
    # default bridge with iptables NAT, and --cpus/--memory limits all work,
    # so no special flags are needed. BATCHPOOL_DOCKERD_ARGS is an escape
    # hatch for machines where e.g. `--iptables=false --bridge=none` or
    # `--storage-driver=vfs` is required.
    command -v docker >/dev/null || die "docker CLI not found (docker.io should provide /usr/bin/docker)"
    if ! docker info >/dev/null 2>&1; then
        ((EUID == 0)) || die "Docker engine not reachable and not root, cannot start dockerd"
        local dpid="" started=0 log_offset deadline=$((SECONDS + 60))
        log_offset=$(stat -c %s "$dockerd_log" 2>/dev/null || echo 0)
        until docker info >/dev/null 2>&1; do
            ((SECONDS < deadline)) || die "dockerd did not answer within 60s (see $dockerd_log)"
            if [[ -z "$dpid" ]] || ! proc_alive "$dpid"; then
                if ((started)); then
                    tail -c +"$((log_offset + 1))" "$dockerd_log" | tail -n 30 >&2 || true
                    die "dockerd exited during startup (see $dockerd_log)"
                fi
                # Don't start a second daemon if one is still coming up.
                dpid=$(cat /var/run/docker.pid 2>/dev/null || true)
                if [[ -n "$dpid" ]] && proc_alive "$dpid" \
                    && [[ "$(cat "/proc/$dpid/comm" 2>/dev/null)" == dockerd ]]; then
                    log "dockerd (pid $dpid) is running but not answering yet; waiting"
                else
                    # A crashed dockerd leaves its pid file behind; dockerd
                    # refuses to start while that pid still exists in /proc,
                    # which includes a not-yet-reaped zombie.
                    [[ -z "$dpid" ]] || wait_reaped "$dpid"
                    log "starting dockerd (log: $dockerd_log)"
                    # setsid: own session, so the daemon outlives this shell
                    # and is not hit by signals sent to the caller's process
                    # group; all fds redirected/closed so it holds no pipe of
                    # ours open.
                    # shellcheck disable=SC2086 # extra args are a word list
                    setsid dockerd ${BATCHPOOL_DOCKERD_ARGS:-} >>"$dockerd_log" 2>&1 </dev/null 3>&- &
                    dpid=$!
                    started=1
                fi
            fi
            sleep 0.2
        done
    fi
    local dinfo
    dinfo=$(docker info --format 'Docker {{.ServerVersion}}, storage {{.Driver}}, cgroup v{{.CgroupVersion}} ({{.CgroupDriver}}), memory limits: {{.MemoryLimit}}, cpu quota: {{.CPUCfsQuota}}')
    log "$dinfo"
    # Container limits are part of what batchpool tests; say loudly if the
    # engine can't enforce them.
    [[ "$dinfo" == *"memory limits: true"*"cpu quota: true"* ]] \
        || log "WARNING: this Docker engine cannot enforce CPU/memory limits"

    # ------------------------------------------------------------------
    # 2b. Two more Docker engines, standing in for two more hosts
    # ------------------------------------------------------------------
    # Each has its own socket, data root, exec root, pid file and address
    # pool, no default bridge and no iptables rules (the first engine owns
    # those); their nodes share this machine's filesystem, as the server's
    # bind mounts need.
    local hosts="" n
    for n in 1 2; do
        local dir="${BATCHPOOL_TEST_ENGINES_DIR:-/tmp/batchpool-engines}/$n"
        local sock="unix://$dir/docker.sock"
        mkdir -p "$dir"
        if ! DOCKER_HOST="$sock" docker info >/dev/null 2>&1; then
            local epid
            epid=$(cat "$dir/docker.pid" 2>/dev/null || true)
            if [[ -z "$epid" ]] || ! proc_alive "$epid"; then
                [[ -z "$epid" ]] || wait_reaped "$epid"
                # A containerd pid file left by an engine that died with the machine may name
                # an unrelated process by now; dockerd would wait on it and never start.
                local cpid_file="$dir/exec/containerd/containerd.pid" cpid
                cpid=$(cat "$cpid_file" 2>/dev/null || true)
                if [[ -n "$cpid" ]] && [[ "$(cat "/proc/$cpid/comm" 2>/dev/null)" != containerd ]]; then
                    rm -f "$cpid_file"
                fi
                log "starting extra Docker engine $n (log: $dir/dockerd.log)"
                setsid dockerd -H "$sock" --data-root "$dir/data" --exec-root "$dir/exec" \
                    --pidfile "$dir/docker.pid" --bridge none --iptables=false --ip-masq=false \
                    --default-address-pool "base=10.$((200 + n)).0.0/16,size=24" \
                    >>"$dir/dockerd.log" 2>&1 </dev/null 3>&- &
            fi
            local deadline=$((SECONDS + 60))
            until DOCKER_HOST="$sock" docker info >/dev/null 2>&1; do
                ((SECONDS < deadline)) || die "extra Docker engine $n did not answer within 60s (see $dir/dockerd.log)"
                sleep 0.2
            done
        fi
        hosts="$hosts $sock"
    done
    printf "export BATCHPOOL_TEST_DOCKER_HOSTS='%s'\n" "${hosts# }" >&3
    for n in "${DOCKER_HOST:-unix:///var/run/docker.sock}" $hosts; do
        sweep_networks "$n"
    done
    # What the suite needs of the disk (its build 5 GB, its databases 3 GB, engines, WAL): say
    # so before the tests fail on a full disk one by one.
    local free_kb
    free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
    ((free_kb > 10 * 1024 * 1024)) \
        || log "WARNING: $((free_kb / 1024)) MB free here; the full suite needs about 10 GB"

    # ------------------------------------------------------------------
    # 3. Throwaway PostgreSQL 15
    # ------------------------------------------------------------------
    find_pg_bin
    # unix socket paths are limited to 107 bytes
    ((${#pg_dir} + 20 < 108)) || die "BATCHPOOL_TEST_PG_DIR is too long for a unix socket path: $pg_dir"

    if pg_ready; then
        log "reusing running test Postgres (socket in $pg_dir)"
    else
        choose_pg_os_user
        # Directory layout: $pg_dir (socket + log, 0755, readable by root
        # and the tests) and $pg_dir/data (0700, as initdb requires).
        mkdir -p "$pg_dir"
        if [[ -n "$pg_os_user" ]]; then
            chown "$pg_os_user:" "$pg_dir"
        fi
        chmod 0755 "$pg_dir"

        if [[ ! -f "$pg_data/PG_VERSION" ]]; then
            log "initdb $pg_data (as ${pg_os_user:-$(id -un)})"
            rm -rf "$pg_data"
            # trust auth: the server is only reachable through a socket in
            # a directory we control, and tests must not need a password.
            run_pg "$pg_bin/initdb" -D "$pg_data" -U "$pg_superuser" --auth=trust \
                -E UTF8 --no-locale --no-sync >/dev/null
            echo "include_if_exists = 'batchpool-test.conf'" >>"$pg_data/postgresql.conf"
        fi
        local cluster_version
        cluster_version=$(cat "$pg_data/PG_VERSION")
        [[ "$cluster_version" == 15 ]] || die "$pg_data is a PostgreSQL $cluster_version cluster; remove $pg_dir and rerun"

        # Rewritten on every (re)start so settings track this script.
        run_pg tee "$pg_data/batchpool-test.conf" >/dev/null <<EOF
# Written by scripts/test-env.sh - throwaway server for integration tests.
# Unix socket only: no TCP port to collide with anything else on the host.
listen_addresses = ''
port = $pg_port
unix_socket_directories = '$pg_dir'
unix_socket_permissions = 0777
# Many test databases in parallel, each with its own small pool.
max_connections = 300
shared_buffers = 128MB
# Durability is worthless for throwaway data; speed matters.
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
# The suite's WAL reached 1.6 GB under 2GB: the disk is worth more than the checkpoints.
max_wal_size = 256MB
checkpoint_timeout = 30min
timezone = 'UTC'
log_min_messages = warning
EOF

        # After a crash the old postmaster may still be an unreaped zombie;
        # Postgres would then take its stale postmaster.pid for a live server.
        if [[ -f "$pg_data/postmaster.pid" ]]; then
            wait_reaped "$(head -n 1 "$pg_data/postmaster.pid")"
        fi
        log "starting test Postgres (log: $pg_log)"
        # setsid: keep the postmaster out of the caller's session/process
        # group; -w waits until it accepts connections.
        if ! run_pg setsid -w "$pg_bin/pg_ctl" start -D "$pg_data" -l "$pg_log" -w -t 60 -s; then
            tail -n 30 "$pg_log" >&2 || true
            die "could not start Postgres (see $pg_log)"
        fi
        pg_ready || die "Postgres started but does not answer on $pg_dir"
        # Each test makes a database of its own (bp_*) and leaves it; a server
        # that was not running serves no suite, so the last runs' go now (else
        # they fill the disk: ~8 MB each, ~200 a run).
        local stale
        stale=$(psql "$(database_url)" -X -q -A -t \
            -c "select datname from pg_database where datname like 'bp\\_%'") || true
        if [[ -n "$stale" ]]; then
            log "dropping $(wc -l <<<"$stale") test databases left by earlier runs"
            local db
            for db in $stale; do
                psql "$(database_url)" -X -q -c "DROP DATABASE IF EXISTS $db" >/dev/null || true
            done
        fi
    fi

    local url
    url=$(database_url)
    # End-to-end check with the exact URL the tests will get.
    psql "$url" -X -q -A -t -c 'select 1' >/dev/null \
        || die "psql could not connect with $url"
    log "Postgres ready: $url"

    # Single-quoted so the line can be eval'd or pasted as is ('\'' escapes
    # a quote, should the directory name ever contain one).
    printf "export BATCHPOOL_TEST_DATABASE_URL='%s'\n" "${url//\'/\'\\\'\'}" >&3

    # ------------------------------------------------------------------
    # The official Azure Batch SDKs, from PyPI, each in its own
    # virtualenv: the conformance suite (tests/sdk.rs) drives the server
    # through both. Reused when already installed.
    # ------------------------------------------------------------------
    local sdk_dir="${BATCHPOOL_SDK_DIR:-/tmp/batchpool-sdk}" version
    # Where the tests keep the Debian root filesystem the Debian node image is built from
    # (`batchpool build-node-image --debian --rootfs`): debootstrap runs once a machine.
    printf "export BATCHPOOL_DEBIAN_ROOTFS='%s'\n" "$sdk_dir/debian-bookworm" >&3
    for version in 15.1.0 14.2.0; do
        local venv="$sdk_dir/azure-batch-$version"
        # azure-storage-blob beside it: the data tests upload inputs and read outputs with it;
        # and Prometheus' own Python client, whose OpenMetrics parser reads /metrics (tests/metrics.rs).
        if ! "$venv/bin/python" -c "import azure.batch, azure.storage.blob, prometheus_client" 2>/dev/null; then
            log "installing azure-batch $version, azure-storage-blob and prometheus-client into $venv"
            python3 -m venv "$venv" || die "python3 -m venv failed (install python3-venv)"
            "$venv/bin/pip" install -q --disable-pip-version-check "azure-batch==$version" \
                "azure-storage-blob>=12.19,<13" "prometheus-client>=0.20,<1" \
                || die "pip could not install azure-batch==$version, azure-storage-blob and prometheus-client"
        fi
        printf "export BATCHPOOL_SDK%s_PYTHON='%s'\n" "${version%%.*}" "$venv/bin/python" >&3
    done
    # Older releases, each speaking an older api-version (5.1.1: 2018-08-01.7.0 ... 14.0.0:
    # 2023-05-01.17.0), for Microsoft's Python quickstart (tests/sdk.rs): azure-batch alone,
    # installed side by side.
    local matrix="5.1.1 9.0.0 11.0.0 12.0.0 13.0.0 14.0.0" pids=()
    for version in $matrix; do
        local venv="$sdk_dir/azure-batch-$version"
        "$venv/bin/python" -c "import azure.batch" 2>/dev/null && continue
        log "installing azure-batch $version into $venv"
        (python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check \
            "azure-batch==$version") &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || die "pip could not install one of azure-batch $matrix"
    done
    printf "export BATCHPOOL_SDK_DIR='%s'\n" "$sdk_dir" >&3
    printf "export BATCHPOOL_SDK_MATRIX='%s'\n" "$matrix" >&3
    # The Azure CLI (about 1.5 minutes to install the first time): `az batch` is
    # driven with --account-name/--account-key/--account-endpoint.
    local az_venv="$sdk_dir/azure-cli"
    if ! "$az_venv/bin/az" version >/dev/null 2>&1; then
        log "installing azure-cli into $az_venv"
        python3 -m venv "$az_venv" || die "python3 -m venv failed"
        "$az_venv/bin/pip" install -q --disable-pip-version-check azure-cli \
            || die "pip could not install azure-cli"
    fi
    printf "export BATCHPOOL_AZ='%s'\n" "$az_venv/bin/az" >&3

    # Schemathesis, the schema-driven API fuzzer (tests/fuzz.rs runs it over
    # openapi/openapi.yaml), pinned so a seed gives the same requests on every machine.
    local st_version=4.32.5
    local st_venv="$sdk_dir/schemathesis-$st_version"
    if ! "$st_venv/bin/st" --version 2>/dev/null | grep -q " $st_version\$"; then
        log "installing schemathesis $st_version into $st_venv"
        python3 -m venv "$st_venv" || die "python3 -m venv failed"
        "$st_venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$st_version" \
            || die "pip could not install schemathesis==$st_version"
    fi
    printf "export BATCHPOOL_SCHEMATHESIS='%s'\n" "$st_venv/bin/st" >&3

    # ------------------------------------------------------------------
    # Azurite, Microsoft's Azure Storage emulator, from npm: the BES tests
    # read inputs from it and write outputs to it with real connection
    # strings and SAS tokens. Blob service only, on 127.0.0.1:10000, data in
    # memory (nothing survives a restart of the emulator, nothing is needed). With
    # --disableTelemetry: otherwise it looks up and posts to a telemetry host on the internet,
    # and nothing the tests start may reach outside this machine.
    # ------------------------------------------------------------------
    local azurite_dir="${BATCHPOOL_AZURITE_DIR:-/tmp/batchpool-azurite}"
    local azurite_port="${BATCHPOOL_AZURITE_PORT:-10000}" i
    command -v npm >/dev/null || die "npm not found (install nodejs and npm)"
    # Pinned: --disableTelemetry (below) needs 3.33 or later, and a seed gives the same emulator
    # on every machine.
    local azurite_version=3.35.0
    if [[ ! -x "$azurite_dir/node_modules/.bin/azurite-blob" || ! -x "$azurite_dir/node_modules/.bin/s3rver" ]] \
        || ! grep -q "\"version\": \"$azurite_version\"" "$azurite_dir/node_modules/azurite/package.json"; then
        log "installing azurite $azurite_version and s3rver into $azurite_dir"
        mkdir -p "$azurite_dir"
        (cd "$azurite_dir" && npm install --no-audit --no-fund --silent "azurite@$azurite_version" s3rver@3 >&2) \
            || die "npm could not install azurite and s3rver"
    fi
    if ! (exec 9<>"/dev/tcp/127.0.0.1/$azurite_port") 2>/dev/null; then
        log "starting azurite on 127.0.0.1:$azurite_port (log: $azurite_dir/azurite.log)"
        setsid "$azurite_dir/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 \
            --blobPort "$azurite_port" --inMemoryPersistence --skipApiVersionCheck --loose \
            --disableTelemetry \
            >>"$azurite_dir/azurite.log" 2>&1 </dev/null 3>&- &
        for ((i = 0; i < 100; i++)); do
            (exec 9<>"/dev/tcp/127.0.0.1/$azurite_port") 2>/dev/null && break
            sleep 0.2
        done
        (exec 9<>"/dev/tcp/127.0.0.1/$azurite_port") 2>/dev/null \
            || die "azurite did not listen on $azurite_port (see $azurite_dir/azurite.log)"
    fi
    printf "export BATCHPOOL_TEST_AZURITE='http://127.0.0.1:%s/devstoreaccount1'\n" "$azurite_port" >&3

    # The official JavaScript SDK (tests/sdk.rs runs tests/sdk/flow.js with it), pinned.
    local js_dir="${BATCHPOOL_JS_DIR:-/tmp/batchpool-js}"
    if ! grep -qs '"version": "10.2.0"' "$js_dir/node_modules/@azure/batch/package.json"; then
        log "installing @azure/batch 10.2.0 into $js_dir"
        mkdir -p "$js_dir"
        (cd "$js_dir" && npm install --no-audit --no-fund --silent @azure/batch@10.2.0 >&2) \
            || die "npm could not install @azure/batch"
    fi
    printf "export BATCHPOOL_JS_DIR='%s'\n" "$js_dir" >&3

    # s3rver, an S3 emulator from npm, for s3:// locations; one bucket,
    # batchpool-test, with its well-known credentials S3RVER/S3RVER.
    local s3_port="${BATCHPOOL_S3_PORT:-4568}"
    if ! (exec 9<>"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null; then
        log "starting s3rver on 127.0.0.1:$s3_port (log: $azurite_dir/s3rver.log)"
        rm -rf "$azurite_dir/s3"
        mkdir -p "$azurite_dir/s3"
        setsid "$azurite_dir/node_modules/.bin/s3rver" -d "$azurite_dir/s3" -a 127.0.0.1 \
            -p "$s3_port" --no-vhost-buckets --configure-bucket batchpool-test \
            >>"$azurite_dir/s3rver.log" 2>&1 </dev/null 3>&- &
        for ((i = 0; i < 100; i++)); do
            (exec 9<>"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null && break
            sleep 0.2
        done
        (exec 9<>"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null \
            || die "s3rver did not listen on $s3_port (see $azurite_dir/s3rver.log)"
    fi
    printf "export BATCHPOOL_TEST_S3='http://127.0.0.1:%s'\n" "$s3_port" >&3
)

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # Sourced: note that `source file` without arguments passes on the
    # caller's own positional parameters, so only honour a known mode.
    case "${1:-}" in
        stop) _batchpool_test_env stop ;;
        *)
            if _batchpool_test_env_out=$(_batchpool_test_env start); then
                eval "$_batchpool_test_env_out"
                unset _batchpool_test_env_out
            else
                unset _batchpool_test_env_out
                return 1
            fi
            ;;
    esac
else
    _batchpool_test_env "$@"
fi
