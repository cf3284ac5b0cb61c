#!/usr/bin/env bash
# The QEMU lab: boots Debian's own amd64 kernel with a busybox initramfs and runs tether's
# hardware paths against real kernel drivers.
#
#   tests/vm/run.sh hid      USB HID gadget on dummy_hcd, read back through usbhid/hidraw
#   tests/vm/run.sh video    vivid HDMI loop: capture equality, signal loss, YUYV→NV12, multi-planar
#   tests/vm/run.sh m2m      vicodec (built here): M2M encode/decode round trips, resolution change,
#                            single- and multi-planar queues
#   tests/vm/run.sh stateless  visl (built from trixie's linux-source, image/kbuild.sh) on
#                            trixie's kernel: our request-API H.264 decoder drives a real
#                            stream; the controls visl traced must match ffmpeg's trace_headers
#                            (tests/vm/visl_compare.py)
#   tests/vm/run.sh csi      vimc (built like visl) on trixie's kernel: the daemon walks a
#                            media graph of sensors, debayers and a scaler, enables the path's
#                            links, sets every pad's format (read back here) and captures
#   tests/vm/run.sh uvc      a UVC gadget (usb_f_uvc) on dummy_hcd with isochronous IN
#                            (tests/vm/kernel/dummy_hcd-iso.patch) fed by our frame source,
#                            captured through the same VM's uvcvideo like an HDMI dongle:
#                            negotiation, JPEG equality, a live viewer getting the JPEGs,
#                            corrupt frames, stall, replug, YUYV, a changed resolution
#                            (TETHER_VM_BENCH=1: also the uvcvideo-vs-replay bench)
#   tests/vm/run.sh image    flash.sh build --board rpi4, then boot the image under
#                            qemu-system-aarch64 and check it from outside (tests/vm/image.sh)
#   tests/vm/run.sh all      hid, video, m2m, stateless, csi, uvc and image
#
# Fetches what it needs (Debian packages: qemu-system-x86, busybox-static, kmod, cpio, the
# kernel image) and caches the kernel under $TETHER_VM_CACHE (default ~/.cache/tether-vm).
# Exit 0 = pass. Needs no root on the host (root only to apt-get install missing tools).
set -euo pipefail

suite=${1:-all}
case "$suite" in
    hid|video|m2m|stateless|csi|uvc) suites=("$suite") ;;
    # The image suite builds and boots the appliance image (tests/vm/image.sh).
    all) suites=(hid video m2m stateless csi uvc) ;;
    image) exec "$(dirname "$0")/image.sh" ;;
    *) echo "usage: tests/vm/run.sh [hid|video|m2m|stateless|csi|uvc|image|all]" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${TETHER_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-vm}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
started=$(date +%s)
say() { echo "tests/vm: $* ($(( $(date +%s) - started )) s)"; }

# --- tools ------------------------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -x insmod >/dev/null || need+=(busybox-static)
command -v depmod >/dev/null || need+=(kmod)
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
# The stateless suite's stream and its reference parse come from Debian's ffmpeg.
command -v ffmpeg >/dev/null || need+=(ffmpeg)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian's busybox package is dynamic; the initramfs needs the static one.
if ldd /bin/busybox >/dev/null 2>&1; then
    say "installing busybox-static"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi

# --- kernel -----------------------------------------------------------------------------
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$kpkg" ]; then apt-get update -qq; kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); fi
kver=${kpkg#linux-image-}
kdir="$cache/$kver"
if [ ! -f "$kdir/vmlinux" ]; then
    say "fetching $kpkg"
    rm -rf "$kdir" && mkdir -p "$kdir/deb"
    (cd "$kdir/deb" && apt-get download "$kpkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    dpkg-deb -x "$kdir"/deb/*.deb "$kdir/root"
    depmod -b "$kdir/root" "$kver"
    # vmlinuz → vmlinux: direct ELF boot skips the decompressor and firmware (~6 s to /init).
    vmlinuz="$kdir/root/boot/vmlinuz-$kver"
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1)
    if [ -n "$off" ]; then
        tail -c +$((off + 1)) "$vmlinuz" | xz -dc > "$kdir/vmlinux" 2>/dev/null || true
    fi
    if [ ! -s "$kdir/vmlinux" ] || ! head -c 4 "$kdir/vmlinux" | grep -q ELF; then
        cp "$vmlinuz" "$kdir/vmlinux" # fall back to the bzImage: slower but boots
    fi
    rm -rf "$kdir/deb"
fi
say "kernel $kver ready"

# --- out-of-tree M2M modules (m2m suite) ------------------------------------------------
# Debian's kernel has neither vicodec nor v4l2-mem2mem: build both from Debian's
# linux-source against the lab kernel's headers (cached).
extra="$kdir/extra"
if [[ " ${suites[*]} " == *" m2m "* ]] && [ ! -f "$extra/vicodec.ko" ]; then
    say "building vicodec and v4l2-mem2mem out of tree"
    [ -d "/usr/src/linux-headers-$kver" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "linux-headers-$kver" >/dev/null
    srcpkg=$(apt-cache depends linux-source 2>/dev/null | awk '/Depends: linux-source-[0-9]/{print $2; exit}')
    srcpkg=${srcpkg:-linux-source-${kver%%.0-*}}
    (cd "$cache" && ls "$srcpkg"_*.deb >/dev/null 2>&1 || apt-get download "$srcpkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    src="$work/src"; mkdir -p "$src" "$extra"
    dpkg-deb --fsys-tarfile "$cache/$srcpkg"_*.deb | tar -xO "./usr/src/$srcpkg.tar.xz" | xz -dc \
        | tar -x -C "$src" "$srcpkg/drivers/media/test-drivers/vicodec" "$srcpkg/drivers/media/v4l2-core/v4l2-mem2mem.c"
    mkdir -p "$src/m2m" && cp "$src/$srcpkg/drivers/media/v4l2-core/v4l2-mem2mem.c" "$src/m2m/"
    echo 'obj-m += v4l2-mem2mem.o' > "$src/m2m/Makefile"
    make -s -C "/usr/src/linux-headers-$kver" M="$src/m2m" modules 2>&1 | grep -v 'Skipping BTF' || true
    make -s -C "/usr/src/linux-headers-$kver" M="$src/$srcpkg/drivers/media/test-drivers/vicodec" \
        CONFIG_VIDEO_VICODEC=m KBUILD_EXTRA_SYMBOLS="$src/m2m/Module.symvers" modules 2>&1 | grep -v 'Skipping BTF' || true
    cp "$src/m2m/v4l2-mem2mem.ko" "$src/$srcpkg/drivers/media/test-drivers/vicodec/vicodec.ko" "$extra/"
fi

# --- trixie's kernel with visl, vimc and dummy_hcd with iso (stateless, csi, uvc) ---------
if [[ " ${suites[*]} " =~ " "(stateless|csi|uvc)" " ]]; then
    say "trixie kernel, visl, vimc and dummy_hcd with iso (image/kbuild.sh; cached after the first run)"
    tdir=$("$root/image/kbuild.sh" amd64 lab)
    tkver=${tdir##*/amd64-}
    say "kernel $tkver with the lab's modules ready"
fi
if [[ " ${suites[*]} " == *" uvc "* ]]; then
    # The dongle's known pictures: ffmpeg's test pattern (a counter in it), 30 of each size,
    # 4:2:0 like many dongles (ffmpeg writes its 4:4:4 with every component sampled 1x2,
    # which the daemon refuses before its decoder sees it).
    for size in 1920x1080 1280x720; do
        d="$work/uvc/${size#*x}"
        mkdir -p "$d"
        ffmpeg -v error -f lavfi -i "testsrc=size=$size:rate=30" -frames:v 30 -c:v mjpeg -pix_fmt yuvj420p -q:v 5 "$d/%03d.jpg"
    done
fi
if [[ " ${suites[*]} " == *" stateless "* ]]; then
    # The stream: 320x240 High (CABAC, B-frames, weighted prediction, 3 references), then
    # 176x144 Constrained Baseline: a resolution change mid-stream.
    ffmpeg -v error -f lavfi -i testsrc=size=320x240:rate=10 -frames:v 12 -c:v libx264 -profile:v high \
        -pix_fmt yuv420p -bf 2 -refs 3 -g 12 -y "$work/a.h264"
    ffmpeg -v error -f lavfi -i testsrc=size=176x144:rate=10 -frames:v 6 -c:v libx264 -profile:v baseline \
        -pix_fmt yuv420p -g 6 -y "$work/b.h264"
    cat "$work/a.h264" "$work/b.h264" > "$work/stream.h264"
    ffmpeg -hide_banner -i "$work/stream.h264" -c:v copy -bsf:v trace_headers -f null - 2> "$work/headers.txt" >/dev/null
fi

# --- binaries ---------------------------------------------------------------------------
# Exactly tests/run's build step (the same targets, so the same features: dev-dependencies
# unify them, and building only the two binaries would compile our crates a second time with
# another feature set): nothing to do after cargo test, one build when run alone.
say "building tether and vmcheck (tests/run's dev build; nothing to do after cargo test)"
(cd "$root" && cargo build --workspace --all-targets --locked -q) || { echo "tests/vm: build failed" >&2; exit 1; }
bin="${CARGO_TARGET_DIR:-$root/target}/debug"
[ -x "$bin/tether" ] && [ -x "$bin/vmcheck" ] || { echo "tests/vm: no $bin/tether or $bin/vmcheck" >&2; exit 1; }

ir="$work/initramfs"
mkdir -p "$ir"/{bin,proc,sys,dev,run,tmp,lib/modules}
cp /bin/busybox "$ir/bin/busybox"
# The host's binaries as they are, without debug info, with the shared libraries they load
# at their own paths (the initramfs is a tiny root: the loader finds them where ldd did).
for b in tether vmcheck; do
    strip -o "$ir/$b" "$bin/$b"
    ldd "$bin/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while read -r lib; do
    mkdir -p "$ir$(dirname "$lib")" && cp -L "$lib" "$ir$lib"
done
[ -f "$work/stream.h264" ] && cp "$work/stream.h264" "$ir/"
[ -d "$work/uvc" ] && cp -r "$work/uvc" "$ir/"
# modules.<suite>: one "file.ko [params]" per line, dependencies first.
modules_for() {
    local d=${MODROOT:-$kdir/root} v=${MODVER:-$kver}
    for m in "$@"; do
        modprobe -d "$d" -S "$v" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
    done | awk '!seen[$0]++'
}
modules_for configfs dummy_hcd libcomposite usb_f_hid hid usbhid hid_generic > "$work/hid.list"
modules_for vivid > "$work/video.list"
if [ -f "$extra/vicodec.ko" ]; then
    modules_for videodev videobuf2-v4l2 videobuf2-vmalloc videobuf2-memops > "$work/m2m.list"
    echo "$extra/v4l2-mem2mem.ko" >> "$work/m2m.list"
    echo "$extra/vicodec.ko" >> "$work/m2m.list"
fi
if [ -n "${tdir:-}" ]; then
    MODROOT="$tdir/root" MODVER="$tkver" modules_for videodev videobuf2-v4l2 videobuf2-vmalloc v4l2-tpg mc \
        > "$work/stateless.list"
    [ -f "$tdir/extra/v4l2-mem2mem.ko" ] && echo "$tdir/extra/v4l2-mem2mem.ko" >> "$work/stateless.list"
    MODROOT="$tdir/root" MODVER="$tkver" modules_for v4l2-mem2mem >> "$work/stateless.list" 2>/dev/null || true
    echo "$tdir/extra/visl.ko" >> "$work/stateless.list"
    MODROOT="$tdir/root" MODVER="$tkver" modules_for videodev videobuf2-v4l2 videobuf2-vmalloc videobuf2-dma-contig \
        v4l2-tpg mc > "$work/csi.list"
    echo "$tdir/extra/vimc.ko" >> "$work/csi.list"
    # The stock dummy_hcd has no isochronous transfers: ours replaces it.
    MODROOT="$tdir/root" MODVER="$tkver" modules_for configfs libcomposite usb_f_uvc uvcvideo dummy_hcd \
        | grep -v '/dummy_hcd\.ko' > "$work/uvc.list"
    echo "$tdir/extra/dummy_hcd.ko" >> "$work/uvc.list"
fi
# Each suite's modules in a directory of their own (two kernels' modules share names).
for s in hid video m2m stateless csi uvc; do
    [ -f "$work/$s.list" ] || continue
    : > "$ir/modules.$s"
    mkdir -p "$ir/lib/modules/$s"
    awk '!seen[$0]++' "$work/$s.list" | while read -r ko; do
        [ -n "$ko" ] || continue
        name=$(basename "$ko" .xz)
        # trixie compresses its modules; busybox's insmod wants them plain.
        case "$ko" in
            *.xz) xz -dc "$ko" > "$ir/lib/modules/$s/$name" ;;
            *) cp "$ko" "$ir/lib/modules/$s/$name" ;;
        esac
        case "$name" in
            # One HDMI input (input 1; input 0 is a webcam) and one HDMI output, looped back.
            vivid.ko) echo "$name n_devs=1 node_types=0x101 num_inputs=2 input_types=0x0c num_outputs=1 output_types=0x01" ;;
            *) echo "$name" ;;
        esac >> "$ir/modules.$s"
    done
done
cat > "$ir/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs run /run
# Loopback, for the daemon's HTTPS port (the uvc suite's viewer); no other network.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
suite=$(sed -n 's/.*tether\.suite=\([a-z0-9]*\).*/\1/p' /proc/cmdline)
while read -r m args; do insmod "/lib/modules/$suite/$m" $args || echo "insmod $m failed"; done < "/modules.$suite"
[ -d /sys/kernel/config ] && mount -t configfs none /sys/kernel/config
[ -d /sys/kernel/tracing ] && mount -t tracefs nodev /sys/kernel/tracing
echo "vm: kernel $(uname -r) up, running suite $suite"
/vmcheck "$suite"
echo "VMCHECK EXIT $?"
poweroff -f
INIT
chmod +x "$ir/init"
(cd "$ir" && find . | cpio -o -H newc --quiet) | gzip -1 > "$work/initrd.gz"
say "initramfs $(du -h "$work/initrd.gz" | cut -f1)"

# --- boot -------------------------------------------------------------------------------
accel="tcg,thread=multi"
if [ -w /dev/kvm ] && grep -qE 'vmx|svm' /proc/cpuinfo; then accel=kvm; fi
status=0
for s in "${suites[@]}"; do
    say "booting ($accel) for suite $s"
    log="$work/$s.log"
    vmlinux="$kdir/vmlinux"
    case "$s" in stateless|csi|uvc) vmlinux="$tdir/vmlinux" ;; esac
    # The uvc suite runs seven cases with three daemons; the others are shorter.
    limit=240
    [ "$s" = uvc ] && limit=480
    timeout "$limit" qemu-system-x86_64 -M pc -accel "$accel" -cpu max -m 512M -smp 2 -nodefaults -no-user-config \
        -display none -serial stdio -no-reboot -kernel "$vmlinux" -initrd "$work/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1 tether.suite=$s${TETHER_VM_BENCH:+ tether.bench=1}" > "$log" 2>&1 || true
    grep -E '^(vm|vmcheck):|VMCHECK|^BENCH' "$log" || true
    # The whole console, for a look after the run.
    cp "$log" "$cache/$s-last.log"
    compared=true
    if [ "$s" = stateless ] && grep -q '^VMCHECK PASS' "$log"; then
        tr -d '\r' < "$log" | sed -n '/^VISL TRACE BEGIN/,/^VISL TRACE END/p' > "$work/visl-trace.txt"
        python3 "$root/tests/vm/visl_compare.py" "$work/headers.txt" "$work/visl-trace.txt" || compared=false
        # Kept for a look after the run (and for refreshing tests/fixtures/visl).
        mkdir -p "$cache/stateless-last" && cp "$work/headers.txt" "$work/visl-trace.txt" "$work/stream.h264" "$cache/stateless-last/"
    fi
    if grep -q '^VMCHECK PASS' "$log" && $compared; then
        say "suite $s: PASS"
    else
        say "suite $s: FAIL; last lines of the console (all of it: $cache/$s-last.log):"
        tail -n 40 "$log"
        status=1
    fi
done
if [ "$suite" = all ]; then
    "$root/tests/vm/image.sh" || status=1
fi
exit $status
