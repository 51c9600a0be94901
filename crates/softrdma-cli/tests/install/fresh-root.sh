#!/usr/bin/env bash
# The Debian package on a fresh Debian 12 root (tests/install.rs runs this, as root).
#
#   fresh-root.sh DEB
#
# Runs lintian on the package. Makes a minimal Debian 12 root with mmdebstrap (from Debian's packages), installs the
# package there with `apt install ./softrdma_*.deb`, runs `softrdma doctor`, `softrdma exec
# -- ibv_devinfo`, an `ibv_rc_pingpong` pair and `softrdma demo` inside it (in a network
# namespace of their own, so only the root's loopback is used), removes the package and
# checks that nothing of it is left behind. Each step prints a line `== STEP SECONDS`.
set -euo pipefail
deb="$(realpath "$1")"
work="$(mktemp -d /tmp/softrdma-fresh.XXXXXX)"
root="$work/root"
trap 'rm -rf --one-file-system "$work"' EXIT
# A timeout's TERM ends the script through its EXIT trap too.
trap 'exit 1' TERM INT
export DEBIAN_FRONTEND=noninteractive
t0=$SECONDS
step() { echo "== $1 $((SECONDS - t0))"; t0=$SECONDS; }

need=()
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
        || { echo "fresh-root.sh: cannot install ${need[*]} from Debian's packages" >&2; exit 1; }
fi

# Debian's own checks of the package: no error and no warning, but the one about the
# archive (a first upload closes no bug report, which is not this package's to fix).
lintian --fail-on error,warning --suppress-tags initial-upload-closes-no-bugs "$deb" 2>&1 \
    | { grep -v "running with root privileges" || true; }
step lintian
timeout 600 mmdebstrap --quiet --variant=apt --mode=root bookworm "$root"
step bootstrap

# Inside the root, with a clean environment. apt and dpkg need /proc and /dev only for a
# few maintainer scripts; the programs need /proc (their own path), /sys (doctor) and
# /dev/shm (the same-host path), so every command runs in a mount namespace that has them.
# The root is made a mount point, as a container's is, so that `softrdma exec` can make
# its private view of the devices there.
in_root() {
    unshare --mount --fork -- bash -c '
        r=$1; shift
        mount --bind "$r" "$r"
        mount -t proc proc "$r/proc"
        mount -t sysfs sysfs "$r/sys"
        mkdir -p "$r/dev/shm" "$r/dev/pts"
        mount -t tmpfs tmpfs "$r/dev/shm"
        mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"
        mount -t tmpfs tmpfs "$r/run"
        exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
            DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"' in_root "$root" "$@"
}
# What the root holds, less what apt, dpkg and ld.so keep about themselves, the backups
# that groupadd leaves (`/etc/gshadow-`: a dependency's maintainer script adds a group), and
# the runtime state of the programs run (`/tmp/softrdma-UID`: device locks, and the QPNs
# retired by a process that closed a device, which the next one must not reuse; /tmp is
# theirs, not the package's, and is emptied at boot).
listing() {
    (cd "$root" && find . -xdev \( -path ./var/lib/apt -o -path ./var/cache -o -path ./var/log \
        -o -path ./var/lib/dpkg -o -path ./proc -o -path ./sys -o -path ./run \
        -o -path ./dev -o -path ./etc/ld.so.cache -o -path './etc/*-' \
        -o -path './tmp/softrdma-[0-9]*' \) -prune -o -print | sort)
}

in_root timeout 300 apt-get update -qq
listing >"$work/before"
cp "$deb" "$root/tmp/"
in_root timeout 600 sh -c "cd /tmp && apt install -y -q ./$(basename "$deb")" >"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log"; exit 1; }
rm "$root/tmp/$(basename "$deb")"
step install

# The package's files: the private library folder, and rdma-core's own libibverbs (which
# ibverbs-utils brought) untouched beside it.
in_root dpkg -L softrdma >"$work/files"
for f in /usr/bin/softrdma /usr/lib/softrdma/libibverbs.so.1 /usr/lib/softrdma/librdmacm.so.1 \
    /usr/lib/softrdma/libmlx5.so.1 /usr/lib/softrdma/libefa.so.1 \
    /usr/lib/softrdma/fabric/libsoftrdma-fi.so \
    /usr/share/man/man1/softrdma.1.gz /usr/share/man/man1/softrdma-exec.1.gz \
    /usr/share/bash-completion/completions/softrdma /usr/share/zsh/vendor-completions/_softrdma \
    /usr/share/fish/vendor_completions.d/softrdma.fish /usr/share/doc/softrdma/examples/softrdma; do
    grep -qx "$f" "$work/files" || { echo "the package does not install $f" >&2; exit 1; }
done
in_root dpkg -S '/usr/lib/*/libibverbs.so.1'
echo "man pages: $(grep -c '^/usr/share/man/man1/.*\.1\.gz$' "$work/files")"

# The programs, in a network namespace whose loopback is the only interface.
unshare --net --fork -- bash -c "ip link set lo up && $(declare -f in_root); $(declare -f step); t0=\$SECONDS; root='$root'; "'
set -euo pipefail
in_root softrdma --version
in_root softrdma doctor
step doctor
in_root timeout 60 softrdma exec -- ibv_devinfo
step ibv_devinfo
# The server, then the client once the server listens on its TCP port (18515, 0x4853;
# on IPv4 or IPv6, whichever getaddrinfo gave it first).
in_root timeout 60 softrdma exec -- ibv_rc_pingpong -g 1 >"$root/tmp/server.log" 2>&1 &
server=$!
listening=""
for _ in $(seq 1 600); do
    grep -qE ":4853 0+:0000 0A" /proc/net/tcp /proc/net/tcp6 && { listening=1; break; }
    kill -0 $server 2>/dev/null || break
    sleep 0.05
done
[ -n "$listening" ] || { echo "the ibv_rc_pingpong server never listened:"; cat "$root/tmp/server.log"; exit 1; }
in_root timeout 60 softrdma exec -- ibv_rc_pingpong -g 1 127.0.0.1
wait $server || { echo "the ibv_rc_pingpong server failed:"; cat "$root/tmp/server.log"; exit 1; }
echo "--- server"; cat "$root/tmp/server.log"; rm "$root/tmp/server.log"
step ibv_rc_pingpong
in_root timeout 120 softrdma demo
step demo
'

in_root timeout 300 apt-get purge -y -qq softrdma >/dev/null
in_root timeout 300 apt-get autoremove --purge -y -qq >/dev/null
step remove
listing >"$work/after"
echo "runtime state the programs left in /tmp: $(cd "$root/tmp" && echo softrdma-*/*)"
if ! diff "$work/before" "$work/after"; then
    echo "left behind after apt purge and autoremove (> lines above)" >&2
    exit 1
fi
echo "nothing left behind"
