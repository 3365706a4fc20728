#!/usr/bin/env bash
# Build the swe-sandbox images without a container registry: debootstrap a Debian rootfs from the
# host's Debian mirror, tar it, and import the tarball into Docker and/or Podman.
#
#   images/build-offline.sh [--engine docker|podman|all] [--image base|nopython|all] [--force] [--quiet]
#
# Images (both carry the label org.swe-sandbox.recipe=<hash of this recipe>):
#   swe-sandbox/base      Debian bookworm minbase + bash coreutils procps git python3 ca-certificates,
#                         plus less, man-db and vim-tiny (the pager/editor a command may call, so
#                         "nothing waits for a terminal" is checked with the real tools).
#                         The runner (python3) works; the same image as images/Containerfile.
#   swe-sandbox/nopython  ~3 MB: busybox-static (sh, timeout, mktemp, cat, tr, ...) plus bash and the
#                         two libraries bash needs. No python3: exercises the exec fallback.
#
# The rootfs tarballs are cached in $SWE_SANDBOX_CACHE (default /var/cache/swe-sandbox), keyed by
# the recipe, so a second build (or a build for the other engine) only re-imports (seconds).
# Environment: SWE_SANDBOX_MIRROR (default: the host's configured Debian mirror, else
# http://deb.debian.org/debian), SWE_SANDBOX_SUITE (default bookworm), SWE_SANDBOX_CACHE.
# Needs root, debootstrap and busybox-static (scripts/setup-engines.sh installs them).
set -euo pipefail

ENGINES=all
IMAGES=all
FORCE=0
QUIET=0
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) ENGINES="$2"; shift 2 ;;
        --image) IMAGES="$2"; shift 2 ;;
        --force) FORCE=1; shift ;;
        --quiet) QUIET=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "build-offline.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$ENGINES" = all ] && ENGINES="docker podman"
[ "$IMAGES" = all ] && IMAGES="base nopython"

SUITE="${SWE_SANDBOX_SUITE:-bookworm}"
CACHE="${SWE_SANDBOX_CACHE:-/var/cache/swe-sandbox}"
BASE_PACKAGES="bash,coreutils,procps,git,python3,ca-certificates,less,man-db,vim-tiny"
SANDBOX_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECIPE_VERSION=1  # bump when the recipe below changes in a way the inputs do not show

log() { echo "build-offline: $*" >&2; }
die() { log "error: $*"; exit 1; }

host_mirror() {
    # The first non-security Debian URI the host's apt is configured with.
    local uri=""
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/debian.sources | grep -v -- '-security' | head -n1 || true)
    fi
    if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list || true)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}
MIRROR="${SWE_SANDBOX_MIRROR:-$(host_mirror)}"

recipe_hash() {  # what determines an image's content
    printf '%s\n' "$RECIPE_VERSION" "$SUITE" "$1" "$BASE_PACKAGES" "$(uname -m)" | sha256sum | cut -c1-12
}

has_image() {  # engine image recipe: present and built from this recipe (or from images/Containerfile)
    local labels
    labels=$("$1" image inspect --format '{{ index .Config.Labels "org.swe-sandbox.recipe" }}/{{ index .Config.Labels "org.swe-sandbox.containerfile" }}' "$2" 2>/dev/null) || return 1
    case "$labels" in "$3/"*|*/yes) return 0 ;; *) return 1 ;; esac
}

build_base_rootfs() {  # dir
    local root="$1"
    command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
    log "debootstrap $SUITE from $MIRROR (minbase + $BASE_PACKAGES) ..."
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$root" "$MIRROR" \
        >"$CACHE/debootstrap.log" 2>&1 || { tail -n 30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    # Smaller and reproducible-ish: no package cache, lists, docs or man pages.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log \
        "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/tmp/* "$root"/var/tmp/*
    printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$root/etc/apt/sources.list"
    : >"$root/etc/resolv.conf"
    echo swe-sandbox >"$root/etc/hostname"
    mkdir -p "$root/workspace"
}

build_nopython_rootfs() {  # dir base_tar
    local root="$1" base_tar="$2" busybox lib
    busybox=$(command -v busybox || true)
    [ -n "$busybox" ] && file -L "$busybox" 2>/dev/null | grep -q 'statically linked' \
        || busybox=/bin/busybox
    [ -x "$busybox" ] || die "busybox is missing (apt-get install busybox-static)"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,tmp,var/tmp,root,etc,proc,sys,dev,workspace}
    chmod 1777 "$root/tmp" "$root/var/tmp"
    cp "$busybox" "$root/bin/busybox"
    # One symlink per applet, at the path busybox itself reports (bin/sh, usr/bin/timeout, ...).
    "$busybox" --list-full | while read -r applet; do
        [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
    done
    # bash (the contract's `bash -c`) and the libraries it needs, taken from the base rootfs.
    local tmp; tmp=$(mktemp -d "$CACHE/bash.XXXXXX")
    tar -C "$tmp" -xf "$base_tar" ./usr/bin/bash ./usr/lib/x86_64-linux-gnu ./usr/lib64 2>/dev/null \
        || tar -C "$tmp" -xf "$base_tar" ./usr/bin/bash ./usr/lib ./usr/lib64
    rm -f "$root/bin/bash" "$root/usr/bin/bash"
    mkdir -p "$root/usr/lib64"
    cp "$tmp/usr/bin/bash" "$root/usr/bin/bash"
    ln -s /usr/bin/bash "$root/bin/bash"
    for lib in $(LD_LIBRARY_PATH= ldd "$tmp/usr/bin/bash" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i}'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$tmp$lib" "$root$lib" 2>/dev/null || cp -L "$lib" "$root$lib"
    done
    [ -e "$root/lib64" ] || ln -s usr/lib64 "$root/lib64"
    [ -e "$root/lib" ] || ln -s usr/lib "$root/lib"
    rm -rf "$tmp"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    echo swe-sandbox >"$root/etc/hostname"
    : >"$root/etc/resolv.conf"
}

rootfs_tar() {  # image -> path of the cached tarball (built if missing)
    local image="$1" hash tar root
    hash=$(recipe_hash "$image")
    tar="$CACHE/$image-$SUITE-$hash.tar"
    if [ ! -s "$tar" ]; then
        mkdir -p "$CACHE"
        root=$(mktemp -d "$CACHE/rootfs-$image.XXXXXX")
        trap 'rm -rf "$root"' EXIT
        case "$image" in
            base) build_base_rootfs "$root" ;;
            nopython) build_nopython_rootfs "$root" "$(rootfs_tar base)" ;;
        esac
        tar --numeric-owner -C "$root" -cf "$tar.part" .
        mv "$tar.part" "$tar"
        rm -rf "$root"
        trap - EXIT
        # Old recipes' tarballs are dead weight.
        find "$CACHE" -maxdepth 1 -name "$image-$SUITE-*.tar" ! -name "$(basename "$tar")" -delete
        log "cached $tar ($(du -h "$tar" | cut -f1))"
    fi
    echo "$tar"
}

import_image() {  # engine image
    local engine="$1" image="$2" name="swe-sandbox/$2" hash tar cmd old_id
    hash=$(recipe_hash "$image")
    if [ "$FORCE" = 0 ] && has_image "$engine" "$name" "$hash"; then
        [ "$QUIET" = 1 ] || log "$engine: $name is up to date"
        return
    fi
    tar=$(rootfs_tar "$image")
    old_id=$("$engine" image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)
    case "$image" in base) cmd='["bash"]' ;; *) cmd='["sh"]' ;; esac
    log "$engine import $name ..."
    local quiet=(); [ "$engine" = podman ] && quiet=(--quiet)
    "$engine" import "${quiet[@]}" \
        --change "ENV PATH=$SANDBOX_PATH" --change "ENV LANG=C.UTF-8" \
        --change "CMD $cmd" --change "WORKDIR /" \
        --change "LABEL org.swe-sandbox.recipe=$hash" --change "LABEL org.swe-sandbox.image=$image" \
        "$tar" "$name" >/dev/null
    log "$engine: $name imported"
    # The previous build is now untagged: drop it (kept if a container still uses it).
    if [ -n "$old_id" ] && [ "$old_id" != "$("$engine" image inspect --format '{{.Id}}' "$name")" ]; then
        "$engine" image rm "$old_id" >/dev/null 2>&1 || true
    fi
}

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and the import need it)"
if [ "$FORCE" = 1 ]; then
    for image in $IMAGES; do rm -f "$CACHE/$image-$SUITE-"*.tar; done
fi
for engine in $ENGINES; do
    command -v "$engine" >/dev/null || die "$engine is not installed"
    for image in $IMAGES; do
        import_image "$engine" "$image"
    done
done
