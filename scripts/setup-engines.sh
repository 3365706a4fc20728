#!/usr/bin/env bash
# Install and start what the docker, podman, bwrap and ssh backends need, then build the images.
#
#   sudo scripts/setup-engines.sh [--no-images]
#
# Idempotent, needs root, never reads stdin; when everything is already up it only checks (~1 s).
#  1. installs from Debian's packages what is missing: docker.io podman runc catatonit bubblewrap
#     libseccomp2 (bwrap's seccomp filter, through pyseccomp) openssh-server debootstrap
#     busybox-static, and docker-registry (the CNCF Distribution registry: the pull tests start
#     one on loopback themselves; services are not started by the packages);
#  2. user namespaces (a sandbox's root is never the host's root, DESIGN.md §5): subordinate id
#     ranges in /etc/subuid and /etc/subgid, added once and never changed: "dockremap" (created, a
#     system user) 900000000:65536 for Docker's --userns-remap=default, "containers"
#     1000000000:1000000000 for Podman's per-container userns=auto (65536 ids per running
#     sandbox); both below bwrap's own host uids (2000000000 on). An entry already there for either
#     name is kept; a range overlapping another entry is an error, not a guess;
#  3. starts the Docker daemon when none answers (no systemd needed: dockerd in the background,
#     log in $LOG_DIR/dockerd.log) with --userns-remap=default (unless /etc/docker/daemon.json sets
#     userns-remap), and waits until `docker info` answers. A dockerd this script started earlier
#     without remapping is restarted with it (its running containers end); one started otherwise
#     is left alone, with a warning (docker sandboxes then refuse to start, saying how to fix it);
#  4. builds swe-sandbox/base and swe-sandbox/nopython when absent (images/build-offline.sh); a
#     daemon that starts remapping keeps its images apart, so they are imported again there;
#  5. Podman: checks that a container starts with the configured OCI runtime; where it does not
#     (crun refuses a cgroup v1 / hybrid layout), writes a containers.conf drop-in that selects
#     runc with explicit nofile/nproc ulimits, and checks again; then (once, or when the ranges
#     were just added) that a container starts with its own user namespace;
#  6. starts the Podman API socket (`podman system service`) at $PODMAN_SOCK.
#
# Environment: SWE_SANDBOX_LOG_DIR (default /var/log/swe-sandbox), SWE_SANDBOX_PODMAN_SOCK
# (default /run/podman/podman.sock), SWE_SANDBOX_ENGINES (default "docker podman"),
# SWE_SANDBOX_RECHECK=1 re-runs the podman runtime checks even if they were done before.
set -euo pipefail
exec </dev/null

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
LOG_DIR="${SWE_SANDBOX_LOG_DIR:-/var/log/swe-sandbox}"
PODMAN_SOCK="${SWE_SANDBOX_PODMAN_SOCK:-/run/podman/podman.sock}"
ENGINES="${SWE_SANDBOX_ENGINES:-docker podman}"
PODMAN_CONF=/etc/containers/containers.conf.d/50-swe-sandbox.conf
STATE_DIR=/run/swe-sandbox
BUILD_IMAGES=1
[ "${1:-}" = "--no-images" ] && BUILD_IMAGES=0
# Subordinate ids (start:count): one range for the dockremap user (Docker maps every container onto
# it), a large one for Podman's per-container user namespaces; bwrap's pool starts at 2000000000.
DOCKREMAP_RANGE=900000000:65536
CONTAINERS_RANGE=1000000000:1000000000
USERNS_SIZE=65536  # ids per Podman container (as src/swe_sandbox/environments/container/podman.py)

PACKAGES=(docker.io podman runc catatonit bubblewrap libseccomp2 openssh-server debootstrap busybox-static docker-registry)

T0=${EPOCHREALTIME/./}
log() { local t=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf 'setup-engines [%d.%ds]: %s\n' $((t / 10)) $((t % 10)) "$*" >&2; }
die() { log "error: $*"; exit 1; }
has() { command -v "$1" >/dev/null 2>&1; }
wait_for() {  # seconds description command...
    local limit="$1" what="$2" i; shift 2
    for ((i = 0; i < limit * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

if [ "$(id -u)" != 0 ]; then
    if has sudo && sudo -n true 2>/dev/null; then exec sudo -n "$0" "$@"; fi
    die "run as root (it installs packages and starts daemons)"
fi
mkdir -p "$LOG_DIR" "$STATE_DIR"
# The daemons started below inherit our working directory, and some of their helpers write files
# relative to it (conmon leaves an `oom` file after an out-of-memory kill): start them from /.
cd /

# --- 1. packages --------------------------------------------------------------------------------
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} ..."
    export DEBIAN_FRONTEND=noninteractive
    # Packages must not start services: there may be no init system, and we start them below.
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
    apt-get update -qq >"$LOG_DIR/apt.log" 2>&1 || { tail -n 20 "$LOG_DIR/apt.log" >&2; die "apt-get update failed"; }
    apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "${missing[@]}" \
        >>"$LOG_DIR/apt.log" 2>&1 || { tail -n 30 "$LOG_DIR/apt.log" >&2; die "apt-get install failed (log: $LOG_DIR/apt.log)"; }
    [ "$own_policy" = 1 ] && rm -f "$policy"
    trap - EXIT
    # The package's own service would serve on every interface (:5000) at the next boot; the tests
    # start their registries themselves, on 127.0.0.1 only.
    if [[ " ${missing[*]} " == *" docker-registry "* ]] && has systemctl; then
        systemctl disable docker-registry.service >/dev/null 2>&1 || true
    fi
    log "installed"
fi

# --- 2. subordinate ids for user namespaces -----------------------------------------------------
SUBIDS_ADDED=0
ensure_subids() {  # name start:count -> a range for name in /etc/subuid and /etc/subgid
    local name="$1" start="${2%%:*}" count="${2##*:}" file
    for file in /etc/subuid /etc/subgid; do
        [ -e "$file" ] || { : >"$file"; chmod 644 "$file"; }
        grep -q "^$name:" "$file" && continue  # the admin's or ours: kept as it is
        if awk -F: -v s="$start" -v c="$count" \
            'NF >= 3 && $2 + 0 < s + c && s < $2 + $3 {print "  " FILENAME ": " $0; hit = 1} END {exit !hit}' \
            "$file" >&2; then
            die "$file: $name:$start:$count would overlap the entries above; add a $name:START:COUNT line of your own"
        fi
        [ -s "$file" ] && [ "$(tail -c 1 "$file")" != "" ] && echo >>"$file"  # a last line without its newline
        echo "$name:$start:$count" >>"$file"
        log "$file: added $name:$start:$count"
        SUBIDS_ADDED=1
    done
}
if [[ " $ENGINES " == *" docker "* ]]; then
    getent group dockremap >/dev/null || groupadd --system dockremap
    getent passwd dockremap >/dev/null \
        || useradd --system --gid dockremap --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin dockremap
    ensure_subids dockremap "$DOCKREMAP_RANGE"
fi
[[ " $ENGINES " == *" podman "* ]] && ensure_subids containers "$CONTAINERS_RANGE"

# --- 3. Docker daemon ---------------------------------------------------------------------------
docker_up() { timeout 10 docker info >/dev/null 2>&1; }
docker_remapped() { timeout 10 docker info --format '{{range .SecurityOptions}}{{.}} {{end}}' 2>/dev/null | grep -q 'name=userns'; }
# userns-remap in daemon.json: the admin's choice (the same setting as a flag too stops dockerd)
daemon_json_userns() { grep -qs '"userns-remap"' /etc/docker/daemon.json; }
warn_not_remapped() {  # why
    log "WARNING: $1 does not remap user namespaces, so a container's root would be the host's root:"
    log "WARNING: docker sandboxes refuse to start. Enable it with \"userns-remap\": \"default\" in"
    log "WARNING: /etc/docker/daemon.json, restart dockerd and run this script again (it imports the images"
    log "WARNING: into the remapped storage); or opt out, knowingly, per sandbox: userns: host"
}
start_dockerd() {  # extra dockerd flags...
    local remap=(--userns-remap=default)
    daemon_json_userns && remap=()
    log "starting dockerd${remap:+ ${remap[*]}}${*:+ $*} (log: $LOG_DIR/dockerd.log)"
    setsid nohup dockerd --log-level=warn "${remap[@]}" "$@" >>"$LOG_DIR/dockerd.log" 2>&1 </dev/null &
    echo $! >"$STATE_DIR/dockerd.pid"
    wait_for 60 "docker info" docker_up
}
if [[ " $ENGINES " == *" docker "* ]] && docker_up && ! docker_remapped; then
    pid=$(pgrep -xo dockerd || true)
    if [ -n "$pid" ] && [ "$pid" = "$(cat "$STATE_DIR/dockerd.pid" 2>/dev/null)" ] && ! daemon_json_userns; then
        log "dockerd (pid $pid, started by this script) does not remap user namespaces: restarting it with them; its containers end"
        kill "$pid"
        wait_for 60 "dockerd exit" bash -c "! kill -0 $pid" || { kill -9 "$pid" 2>/dev/null || true; sleep 1; }
        rm -f "$STATE_DIR/dockerd.pid"
    else
        warn_not_remapped "the running dockerd (pid ${pid:-?}, not started by this script or set so in daemon.json)"
    fi
fi
if [[ " $ENGINES " == *" docker "* ]] && ! docker_up; then
    if pgrep -x dockerd >/dev/null; then
        log "a dockerd is running but does not answer yet; waiting"
        wait_for 60 "docker info" docker_up || die "dockerd runs but does not answer (see $LOG_DIR/dockerd.log)"
    elif ! start_dockerd; then
        # Hosts without usable iptables/netfilter: run without managed iptables rules. Sandboxes
        # default to network "none", which needs no iptables at all.
        if grep -qiE 'iptables|nf_tables|netfilter|bridge' "$LOG_DIR/dockerd.log"; then
            pid=$(cat "$STATE_DIR/dockerd.pid"); kill "$pid" 2>/dev/null || true
            wait_for 10 "dockerd exit" bash -c "! kill -0 $pid" || true
            start_dockerd --iptables=false --ip-masq=false \
                || { tail -n 20 "$LOG_DIR/dockerd.log" >&2; die "dockerd did not come up"; }
        else
            tail -n 20 "$LOG_DIR/dockerd.log" >&2
            die "dockerd did not come up within 60 s"
        fi
    fi
    if docker_remapped; then
        log "docker: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}'), userns-remap on"
    else
        warn_not_remapped "dockerd (as /etc/docker/daemon.json sets it)"
    fi
fi

# --- 4. images ------------------------------------------------------------------------------------
# build-offline.sh is idempotent: it only checks (image inspect) when an image is up to date with
# its recipe, re-imports from the cached rootfs when only the engine lacks it, and runs
# debootstrap only when the recipe changed or nothing is cached.
if [ "$BUILD_IMAGES" = 1 ]; then
    for engine in $ENGINES; do
        "$REPO/images/build-offline.sh" --engine "$engine" --quiet \
            || die "building the $engine images failed"
    done
fi

# --- 5. Podman: OCI runtime and user namespace checks; 6. the API socket --------------------------
podman_probe() {  # [podman run options...] -> 0 when a container starts with the configured runtime
    local image
    for image in swe-sandbox/nopython swe-sandbox/base; do
        if podman image exists "$image"; then
            timeout 60 podman run --rm --network none "$@" "$image" true >"$LOG_DIR/podman-probe.log" 2>&1
            return
        fi
    done
    log "no local podman image to probe the runtime with; assuming the default runtime works"
    return 0
}
write_podman_conf() {  # nofile nproc
    mkdir -p "$(dirname "$PODMAN_CONF")"
    cat >"$PODMAN_CONF" <<EOF
# written by swe-sandbox scripts/setup-engines.sh: the default OCI runtime failed here with
# ${PROBE_ERROR:-?}
[containers]
default_ulimits = ["nofile=$1:$1", "nproc=$2:$2"]

[engine]
runtime = "runc"
EOF
}
if [[ " $ENGINES " == *" podman "* ]]; then
    if [ ! -e "$PODMAN_CONF" ] || [ "${SWE_SANDBOX_RECHECK:-0}" = 1 ]; then
        rm -f "$PODMAN_CONF"
        if podman_probe; then
            mkdir -p "$(dirname "$PODMAN_CONF")"
            printf '# written by swe-sandbox scripts/setup-engines.sh: the default OCI runtime (%s) works here.\n' \
                "$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null || echo '?')" >"$PODMAN_CONF"
            log "podman: the default OCI runtime works"
        else
            PROBE_ERROR=$(tail -n 1 "$LOG_DIR/podman-probe.log" | tr -d '\n' | cut -c1-300)
            log "podman: a container does not start with the default runtime: $PROBE_ERROR"
            has runc || die "podman needs runc here (apt-get install runc)"
            # runc with explicit limits: podman otherwise asks for rlimits (nofile 1048576, nproc
            # 4194304) above the hard limits, and without CAP_SYS_RESOURCE they cannot be raised.
            nofile=$(ulimit -Hn); nproc=$(ulimit -Hu); pid_max=$(cat /proc/sys/kernel/pid_max)
            [ "$nofile" = unlimited ] && nofile=1048576
            [ "$nproc" = unlimited ] && nproc=4194304
            [ "$nproc" -gt "$pid_max" ] && nproc=$pid_max  # conmon runs with nproc <= pid_max
            ok=0
            for try in "$nproc" 4096 1024; do
                write_podman_conf "$nofile" "$try"
                if podman_probe; then ok=1; nproc=$try; break; fi
            done
            [ "$ok" = 1 ] || { cat "$LOG_DIR/podman-probe.log" >&2; rm -f "$PODMAN_CONF"; die "podman containers do not start even with runc"; }
            log "podman: configured runc with nofile=$nofile nproc=$nproc ($PODMAN_CONF)"
            # A running API service read the old config: restart it.
            if [ -s "$STATE_DIR/podman-service.pid" ]; then
                kill "$(cat "$STATE_DIR/podman-service.pid")" 2>/dev/null || true
                rm -f "$PODMAN_SOCK" "$STATE_DIR/podman-service.pid"
            fi
        fi
    fi
    # The backend's default: a user namespace per container (userns=auto from the containers ranges).
    if [ "$SUBIDS_ADDED" = 1 ] || [ "${SWE_SANDBOX_RECHECK:-0}" = 1 ] || [ ! -e "$STATE_DIR/podman-userns.ok" ]; then
        if podman_probe --userns="auto:size=$USERNS_SIZE"; then
            touch "$STATE_DIR/podman-userns.ok"
            log "podman: containers get a user namespace of their own (userns=auto, from the containers ranges)"
        else
            cat "$LOG_DIR/podman-probe.log" >&2
            die "podman containers do not start with a user namespace of their own (--userns=auto:size=$USERNS_SIZE); check the containers entries of /etc/subuid and /etc/subgid"
        fi
    fi
    podman_up() { timeout 10 podman --url "unix://$PODMAN_SOCK" version >/dev/null 2>&1; }
    if ! podman_up; then
        log "starting the podman API service at unix://$PODMAN_SOCK (log: $LOG_DIR/podman-service.log)"
        mkdir -p "$(dirname "$PODMAN_SOCK")"
        rm -f "$PODMAN_SOCK"
        setsid nohup podman system service --time=0 "unix://$PODMAN_SOCK" \
            >>"$LOG_DIR/podman-service.log" 2>&1 </dev/null &
        echo $! >"$STATE_DIR/podman-service.pid"
        wait_for 30 "podman socket" podman_up \
            || { tail -n 20 "$LOG_DIR/podman-service.log" >&2; die "the podman API service did not come up"; }
    fi
    log "podman: $(podman version --format '{{.Client.Version}}'), runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'), socket unix://$PODMAN_SOCK"
fi

log "ready"
