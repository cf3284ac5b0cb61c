#!/usr/bin/env bash
# Debian trixie's own kernel for the lab, with kernel modules Debian does not ship built out
# of tree from trixie's linux-source: a trixie amd64 build root (mmdebstrap, cached) holds
# gcc, the kernel headers and the source, so module and kernel always match.
#
#   tests/vm/kbuild.sh amd64 visl   prints KVER; leaves in $cache/trixie-<KVER>/:
#                                   vmlinux, root/ (the image package, depmod'ed),
#                                   extra/visl.ko (+ extra/v4l2-mem2mem.ko if the kernel lacks it)
#
# Needs root the first time (mmdebstrap into a directory, chroot); later runs use the cache.
# Environment: TETHER_VM_CACHE (default ~/.cache/tether-vm), TETHER_DEBIAN_MIRROR.
set -euo pipefail

arch=${1:?usage: tests/vm/kbuild.sh amd64 visl}
what=${2:?usage: tests/vm/kbuild.sh amd64 visl}
[ "$arch" = amd64 ] && [ "$what" = visl ] || { echo "kbuild: only 'amd64 visl' is known" >&2; exit 2; }
cache=${TETHER_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-vm}
mirror=${TETHER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "kbuild: $*" >&2; }

# --- the build root ---------------------------------------------------------------------
packages=gcc,make,libc6-dev,bc,kmod,xz-utils,linux-headers-amd64,linux-source-6.12
root="$cache/trixie-kbuild-amd64"
stamp="$root/.tether-packages"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$packages $mirror" ]; then
    [ "$(id -u)" = 0 ] || { say "the first build of the trixie build root runs mmdebstrap as root"; exit 1; }
    command -v mmdebstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }
    say "mmdebstrap: trixie amd64 build root ($packages; a few minutes, once)"
    rm -rf "$root"; mkdir -p "$cache"
    # The image package of the kernel the headers are for, fetched while apt's lists exist.
    hook=$(mktemp)
    cat > "$hook" <<'HOOK'
#!/bin/sh
set -e
kpkg=$(chroot "$1" apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
mkdir -p "$1/kernel"
chroot "$1" sh -c "cd /kernel && apt-get download $kpkg"
HOOK
    chmod +x "$hook"
    mmdebstrap --quiet --variant=apt --include="$packages" --customize-hook="$hook" \
        trixie "$root" "deb $mirror trixie main" "deb $mirror trixie-updates main" >&2
    rm -f "$hook"
    echo "$packages $mirror" > "$stamp"
fi
kver=$(find "$root/usr/src" -maxdepth 1 -name 'linux-headers-*-amd64' -printf '%f\n' | sed 's/^linux-headers-//' | sort -V | tail -n1)
[ -n "$kver" ] || { say "no amd64 headers in the build root"; exit 1; }
out="$cache/trixie-$kver"

# --- the kernel -------------------------------------------------------------------------
if [ ! -f "$out/vmlinux" ]; then
    command -v depmod >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kmod >/dev/null; }
    say "unpacking linux-image-$kver"
    rm -rf "$out" && mkdir -p "$out"
    dpkg-deb -x "$root"/kernel/linux-image-"$kver"_*.deb "$out/root"
    # trixie is merged-/usr: depmod and modprobe -d look in DIR/lib/modules.
    [ -e "$out/root/lib" ] || ln -s usr/lib "$out/root/lib"
    depmod -b "$out/root" "$kver"
    # vmlinuz → vmlinux (direct ELF boot, as run.sh does for the bookworm kernel).
    vmlinuz="$out/root/boot/vmlinuz-$kver"
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then tail -c +$((off + 1)) "$vmlinuz" | xz -dc > "$out/vmlinux" 2>/dev/null || true; fi
    if [ ! -s "$out/vmlinux" ] || ! head -c 4 "$out/vmlinux" | grep -q ELF; then cp "$vmlinuz" "$out/vmlinux"; fi
fi

# --- visl (and v4l2-mem2mem when the kernel has no module of it) --------------------------
if [ ! -f "$out/extra/visl.ko" ]; then
    say "building visl out of tree from linux-source-6.12 for $kver"
    b="$root/build"
    rm -rf "$b" && mkdir -p "$b"
    tar -xJf "$root/usr/src/linux-source-6.12.tar.xz" -C "$b" \
        linux-source-6.12/drivers/media/test-drivers/visl linux-source-6.12/drivers/media/v4l2-core/v4l2-mem2mem.c
    mv "$b/linux-source-6.12/drivers/media/test-drivers/visl" "$b/visl"
    # The trace headers name their own path inside the kernel tree; out of tree they sit
    # beside the sources, which the include path gets.
    sed -i 's|^#define TRACE_INCLUDE_PATH .*|#define TRACE_INCLUDE_PATH .|' "$b"/visl/visl-trace-*.h
    # make in the chroot wants /dev/null.
    [ -c "$root/dev/null" ] || mknod -m 666 "$root/dev/null" c 1 3
    symvers=""
    if ! find "$out/root/lib/modules/$kver" -name 'v4l2-mem2mem.ko*' | grep -q .; then
        mkdir -p "$b/m2m" && cp "$b/linux-source-6.12/drivers/media/v4l2-core/v4l2-mem2mem.c" "$b/m2m/"
        echo 'obj-m += v4l2-mem2mem.o' > "$b/m2m/Makefile"
        chroot "$root" make -s -C "/usr/src/linux-headers-$kver" M=/build/m2m modules >&2
        symvers="KBUILD_EXTRA_SYMBOLS=/build/m2m/Module.symvers"
    fi
    chroot "$root" make -s -C "/usr/src/linux-headers-$kver" M=/build/visl CONFIG_VIDEO_VISL=m \
        KCFLAGS=-I/build/visl $symvers modules >&2
    mkdir -p "$out/extra"
    [ -z "$symvers" ] || cp "$b/m2m/v4l2-mem2mem.ko" "$out/extra/"
    cp "$b/visl/visl.ko" "$out/extra/"
    rm -rf "$b"
fi
echo "$kver"
