#!/usr/bin/env bash
# Install and start what the docker, podman, bwrap and ssh backends need, then build the images.
#
#   sudo scripts/setup-engines.sh [--no-images]
#
# Idempotent, needs root, never reads stdin; when everything is already up it only checks (~1 s).
#  1. installs from Debian's packages what is missing: docker.io podman runc catatonit bubblewrap
#     libseccomp2 (bwrap's seccomp filter, through pyseccomp) openssh-server debootstrap
#     busybox-static (services are not started by the packages);
#  2. starts the Docker daemon when none answers (no systemd needed: dockerd in the background,
#     log in $LOG_DIR/dockerd.log) and waits until `docker info` answers;
#  3. Podman: checks that a container starts with the configured OCI runtime; where it does not
#     (crun refuses a cgroup v1 / hybrid layout), writes a containers.conf drop-in that selects
#     runc with explicit nofile/nproc ulimits, and checks again;
#  4. starts the Podman API socket (`podman system service`) at $PODMAN_SOCK;
#  5. builds swe-sandbox/base and swe-sandbox/nopython when absent (images/build-offline.sh).
#
# Environment: SWE_SANDBOX_LOG_DIR (default /var/log/swe-sandbox), SWE_SANDBOX_PODMAN_SOCK
# (default /run/podman/podman.sock), SWE_SANDBOX_ENGINES (default "docker podman"),
# SWE_SANDBOX_RECHECK=1 re-runs the podman runtime check even if it was done before.
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

PACKAGES=(docker.io podman runc catatonit bubblewrap libseccomp2 openssh-server debootstrap busybox-static)

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
    log "installed"
fi

# --- 2. Docker daemon ---------------------------------------------------------------------------
docker_up() { timeout 10 docker info >/dev/null 2>&1; }
start_dockerd() {  # extra dockerd flags...
    log "starting dockerd${*:+ $*} (log: $LOG_DIR/dockerd.log)"
    setsid nohup dockerd --log-level=warn "$@" >>"$LOG_DIR/dockerd.log" 2>&1 </dev/null &
    echo $! >"$STATE_DIR/dockerd.pid"
    wait_for 60 "docker info" docker_up
}
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
    log "docker: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
fi

# --- 3. images ------------------------------------------------------------------------------------
# build-offline.sh is idempotent: it only checks (image inspect) when an image is up to date with
# its recipe, re-imports from the cached rootfs when only the engine lacks it, and runs
# debootstrap only when the recipe changed or nothing is cached.
if [ "$BUILD_IMAGES" = 1 ]; then
    for engine in $ENGINES; do
        "$REPO/images/build-offline.sh" --engine "$engine" --quiet \
            || die "building the $engine images failed"
    done
fi

# --- 4. Podman: OCI runtime check, then the API socket -------------------------------------------
podman_probe() {  # -> 0 when a container starts with the configured runtime
    local image
    for image in swe-sandbox/nopython swe-sandbox/base; do
        if podman image exists "$image"; then
            timeout 60 podman run --rm --network none "$image" true >"$LOG_DIR/podman-probe.log" 2>&1
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
