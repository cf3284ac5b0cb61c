#!/usr/bin/env bash
# Kernel modules Debian trixie does not ship, built out of tree from trixie's own
# linux-source-6.12 against the exact kernel they will load into. A trixie amd64 build root
# (mmdebstrap, cached) holds gcc, the aarch64 cross compiler, the kernel headers and the
# source.
#
#   image/kbuild.sh amd64 lab         the lab: prints the dir holding vmlinux (trixie's amd64
#                                     kernel), root/ (its modules, depmod'ed) and extra/: visl.ko
#                                     (+ v4l2-mem2mem.ko when the kernel lacks it), vimc.ko
#                                     (virtual media pipelines trixie does not build) and
#                                     dummy_hcd.ko with isochronous IN emulation
#                                     (tests/vm/kernel/dummy_hcd-iso.patch: UVC gadgets stream)
#                                     (`amd64 visl` is the old name of the same)
#   image/kbuild.sh arm64 csi KVER    the image: prints the dir holding tc358743.ko and
#                                     bcm2835-unicam.ko for trixie's arm64 kernel KVER
#                                     (e.g. 6.12.117+deb13-arm64)
#
# Needs root the first time (mmdebstrap into a directory, chroot); later runs use the cache.
# Environment: TETHER_KBUILD_CACHE (default ~/.cache/tether-kbuild), TETHER_DEBIAN_MIRROR.
set -euo pipefail

usage() { echo "usage: image/kbuild.sh amd64 lab | arm64 csi KVER" >&2; exit 2; }
arch=${1:-}
what=${2:-}
cache=${TETHER_KBUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-kbuild}
mirror=${TETHER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${TETHER_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
say() { echo "kbuild: $*" >&2; }
case "$arch $what" in
    "amd64 lab"|"amd64 visl") ;;
    "arm64 csi") [ -n "${3:-}" ] || usage ;;
    *) usage ;;
esac

# --- the build root ---------------------------------------------------------------------
packages=gcc,make,libc6-dev,bc,kmod,xz-utils,linux-headers-amd64,linux-source-6.12,gcc-aarch64-linux-gnu
root="$cache/root-amd64"
stamp="$root/.tether-packages"
need_root() {
    [ "$(id -u)" = 0 ] || { say "$1 needs root (the trixie build root is made once and cached)"; exit 1; }
}
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$packages $mirror" ]; then
    need_root "the first build"
    command -v mmdebstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }
    say "mmdebstrap: trixie amd64 build root ($packages; a few minutes, once)"
    rm -rf "$root"
    mkdir -p "$cache"
    # The amd64 image package of the kernel the headers are for, fetched while apt's lists
    # exist (the lab boots it).
    hook=$(mktemp)
    cat > "$hook" <<'HOOK'
#!/bin/sh
set -e
kpkg=$(chroot "$1" apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
mkdir -p "$1/kernel"
chroot "$1" sh -c "cd /kernel && apt-get download -q $kpkg" >/dev/null 2>&1
HOOK
    chmod +x "$hook"
    mmdebstrap --quiet --variant=apt --include="$packages" --customize-hook="$hook" \
        trixie "$root" "deb $mirror trixie main" "deb $mirror trixie-updates main" \
        "deb $security_mirror trixie-security main" >&2
    rm -f "$hook"
    echo "$packages $mirror" > "$stamp"
fi
# make in the chroot wants /dev/null.
[ -c "$root/dev/null" ] || mknod -m 666 "$root/dev/null" c 1 3

# Runs apt-get in the build root (for packages fetched on demand, e.g. arm64 headers).
# The image's base takes its kernel from trixie-security too (build.sh), so its headers
# may be only there.
root_apt() {
    need_root "fetching $*"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    grep -rqs trixie-security "$root/etc/apt/sources.list" "$root/etc/apt/sources.list.d" ||
        echo "deb $security_mirror trixie-security main" > "$root/etc/apt/sources.list.d/tether-security.list"
    mount -t proc proc "$root/proc"
    local rc=0
    chroot "$root" sh -c "$*" >&2 || rc=$?
    umount "$root/proc"
    return $rc
}

# Extracts the named directories/files of linux-source-6.12 into DIR.
source_files() {
    local dir=$1; shift
    local paths=()
    for p in "$@"; do paths+=("linux-source-6.12/$p"); done
    tar -xJf "$root/usr/src/linux-source-6.12.tar.xz" -C "$dir" "${paths[@]}"
}

# --- amd64 visl and vimc (the lab) -----------------------------------------------------------------
if [ "$arch" = amd64 ]; then
    kver=$(find "$root/usr/src" -maxdepth 1 -name 'linux-headers-*-amd64' -printf '%f\n' | sed 's/^linux-headers-//' | sort -V | tail -n1)
    [ -n "$kver" ] || { say "no amd64 headers in the build root"; exit 1; }
    out="$cache/amd64-$kver"
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
    if [ ! -f "$out/extra/visl.ko" ]; then
        say "building visl out of tree from linux-source-6.12 for $kver"
        b="$root/build"
        rm -rf "$b" && mkdir -p "$b"
        source_files "$b" drivers/media/test-drivers/visl drivers/media/v4l2-core/v4l2-mem2mem.c
        mv "$b/linux-source-6.12/drivers/media/test-drivers/visl" "$b/visl"
        # The trace headers name their own path inside the kernel tree; out of tree they sit
        # beside the sources, which the include path gets.
        sed -i 's|^#define TRACE_INCLUDE_PATH .*|#define TRACE_INCLUDE_PATH .|' "$b"/visl/visl-trace-*.h
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
    if [ ! -f "$out/extra/vimc.ko" ]; then
        # vimc: sensors, a debayer and a scaler as subdevices behind video nodes, the media
        # graph the lab's csi suite configures (Debian builds no test driver but vivid).
        say "building vimc out of tree from linux-source-6.12 for $kver"
        b="$root/build"
        rm -rf "$b" && mkdir -p "$b"
        source_files "$b" drivers/media/test-drivers/vimc
        mv "$b/linux-source-6.12/drivers/media/test-drivers/vimc" "$b/vimc"
        chroot "$root" make -s -C "/usr/src/linux-headers-$kver" M=/build/vimc CONFIG_VIDEO_VIMC=m modules >&2
        mkdir -p "$out/extra"
        cp "$b/vimc/vimc.ko" "$out/extra/"
        rm -rf "$b"
    fi
    # dummy_hcd with tests/vm/kernel/dummy_hcd-iso.patch, rebuilt when the patch changes.
    patch_file="$(cd "$(dirname "$0")/.." && pwd)/tests/vm/kernel/dummy_hcd-iso.patch"
    want_stamp=$(sha256sum "$patch_file" | cut -d' ' -f1)
    if [ ! -f "$out/extra/dummy_hcd.ko" ] || [ "$(cat "$out/extra/dummy_hcd.stamp" 2>/dev/null)" != "$want_stamp" ]; then
        command -v patch >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patch >/dev/null; }
        say "building dummy_hcd with isochronous IN (tests/vm/kernel/dummy_hcd-iso.patch) for $kver"
        b="$root/build"
        rm -rf "$b" && mkdir -p "$b/dummy"
        source_files "$b" drivers/usb/gadget/udc/dummy_hcd.c
        # The host applies it (the build root has no patch); a patch that no longer applies to
        # trixie's source fails here, loudly.
        patch -d "$b/linux-source-6.12" -p1 --no-backup-if-mismatch --forward -s < "$patch_file" ||
            { say "tests/vm/kernel/dummy_hcd-iso.patch does not apply to this linux-source-6.12"; exit 1; }
        cp "$b/linux-source-6.12/drivers/usb/gadget/udc/dummy_hcd.c" "$b/dummy/"
        echo 'obj-m += dummy_hcd.o' > "$b/dummy/Makefile"
        chroot "$root" make -s -C "/usr/src/linux-headers-$kver" M=/build/dummy modules >&2
        chroot "$root" strip --strip-debug /build/dummy/dummy_hcd.ko
        mkdir -p "$out/extra"
        cp "$b/dummy/dummy_hcd.ko" "$out/extra/"
        echo "$want_stamp" > "$out/extra/dummy_hcd.stamp"
        rm -rf "$b"
    fi
    echo "$out"
    exit 0
fi

# --- arm64 tc358743 + bcm2835-unicam (the image) ------------------------------------------
kver=$3
case "$kver" in *-arm64) ;; *) say "KVER must be an arm64 kernel release (…-arm64), not '$kver'"; exit 2 ;; esac
kbase=${kver%-arm64}
out="$cache/arm64-$kver"
if [ ! -f "$out/tc358743.ko" ] || [ ! -f "$out/bcm2835-unicam.ko" ]; then
    hdr="/usr/src/linux-headers-$kver"
    if [ ! -f "$root$hdr/Makefile" ]; then
        say "fetching linux-headers-$kver (arm64) and its common part and kbuild tools"
        root_apt "dpkg --add-architecture arm64 && apt-get update -qq && mkdir -p /kernel-arm64 && cd /kernel-arm64 && \
            apt-get download -q linux-headers-$kver:arm64 linux-headers-$kbase-common linux-kbuild-$kbase" ||
            { say "trixie has no linux-headers-$kver any more: rebuild the image's base rootfs (newer kernel)"; exit 1; }
        for deb in "$root"/kernel-arm64/linux-headers-"$kver"_*.deb "$root"/kernel-arm64/linux-headers-"$kbase"-common_*.deb \
            "$root"/kernel-arm64/linux-kbuild-"$kbase"_*.deb; do
            dpkg-deb -x "$deb" "$root"
        done
    fi
    say "building tc358743 and bcm2835-unicam out of tree from linux-source-6.12 for $kver"
    b="$root/build-csi"
    rm -rf "$b" && mkdir -p "$b"
    source_files "$b" drivers/media/i2c/tc358743.c drivers/media/i2c/tc358743_regs.h \
        drivers/media/platform/broadcom
    mkdir -p "$b/csi"
    cp "$b"/linux-source-6.12/drivers/media/i2c/tc358743* "$b"/linux-source-6.12/drivers/media/platform/broadcom/bcm2835-unicam* "$b/csi/"
    printf 'obj-m += tc358743.o bcm2835-unicam.o\n' > "$b/csi/Makefile"
    chroot "$root" make -s -C "$hdr" M=/build-csi/csi ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- modules >&2
    # Debug info is most of their size (0.9 MiB each → ~0.1 MiB).
    chroot "$root" aarch64-linux-gnu-strip --strip-debug /build-csi/csi/tc358743.ko /build-csi/csi/bcm2835-unicam.ko
    mkdir -p "$out"
    cp "$b/csi/tc358743.ko" "$b/csi/bcm2835-unicam.ko" "$out/"
    rm -rf "$b"
fi
echo "$out"
