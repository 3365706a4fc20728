#!/usr/bin/env bash
# Install OpenSSH's server for the ssh backend's tests (tests/ssh/sshd.py starts its own sshd on
# loopback; this script only makes the binary available). Idempotent, never reads stdin, does not
# start or enable the system's sshd service.
#
#   sudo scripts/setup-sshd.sh
set -euo pipefail
exec </dev/null
say() { echo "setup-sshd.sh: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then exec sudo -n bash "$0" "$@"; fi
    say "run as root (it installs openssh-server)"
    exit 1
fi
if ! [ -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || { say "no apt-get: install OpenSSH's server (sshd, ssh-keygen) yourself"; exit 1; }
    say "installing openssh-server"
    export DEBIAN_FRONTEND=noninteractive
    policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then  # the package must not start the system's sshd
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold openssh-server >/dev/null
fi
mkdir -p /run/sshd && chmod 755 /run/sshd  # sshd's privilege separation directory
# An unprivileged login for the tests of `remote_sandbox: bwrap`, which refuses a root SSH user.
# Password '*': none can be used, and the account is not "locked" ('!'), which sshd refuses even
# for key logins (without PAM).
if ! id -u swe-sandbox-test >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash --password '*' --comment "swe-sandbox tests" swe-sandbox-test
    say "created the unprivileged test user swe-sandbox-test"
elif [ "$(passwd --status swe-sandbox-test | cut -d' ' -f2)" = L ]; then
    usermod --password '*' swe-sandbox-test
fi
say "sshd: $(/usr/sbin/sshd -V 2>&1 | head -n 1 || true)"
