# flash.sh build: the appliance image for one board (sourced by flash.sh).
# shellcheck shell=bash
# shellcheck disable=SC2154  # image_root, image_cache, image_started: from common.sh
# shellcheck disable=SC2016  # the fakeroot scripts expand their variables themselves
#
# Steps: cross-compile tether for aarch64; the Debian trixie arm64 base rootfs (mmdebstrap,
# cached by its inputs); on Pi boards the CSI bridge's modules (image/kbuild.sh) and
# overlay; the root filesystem (base + rootfs/ + board/B + the binary, with
# users, units and the board's device tree change); the owner's pairing code and
# certificates in the data partition; the partitions (FAT boot, ext4 root A, empty root B,
# ext4 data) assembled into out/tether-B.img without loop mounts or root, and a .zst copy.

suite=trixie
mirror=${TETHER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${TETHER_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
target=aarch64-unknown-linux-gnu
tether_uid=500
agent_uid=501

# Packages every board gets (the board adds its kernel, firmware and boot loader).
base_packages=(
    systemd-sysv systemd-resolved systemd-timesyncd udev kmod dbus
    initramfs-tools zstd e2fsprogs fdisk util-linux
    avahi-daemon libnss-mdns openssh-server ca-certificates iproute2
    libstdc++6 wireless-regdb
    # Reading the screen (issue 33): `tether ocr-worker` dlopens libtesseract.so.5 and reads
    # Debian's language data from /usr/share/tesseract-ocr/5/tessdata. English serves the us
    # and uk keyboard layouts, German and French the de and fr ones. Not the `tesseract-ocr`
    # CLI: it would pull cairo, pango, ICU and fontconfig for nothing the daemon uses
    # (mmdebstrap installs no Recommends, so the data packages' Recommends of it stay out).
    libtesseract5 tesseract-ocr-eng tesseract-ocr-deu tesseract-ocr-fra
    # Safe updates (issue 35): RAUC installs signed bundles into the other root slot; its
    # D-Bus service runs as root, the daemon talks to it (rootfs/etc/rauc, docs/updates.md).
    rauc rauc-service
)

build_usage() {
    cat >&2 <<'EOF'
usage: flash.sh build --board BOARD [--out DIR] [--ssh-key FILE] [--host NAME]
                     [--version V] [--update-keys DIR]

  --board BOARD      one of board/*/ (rpi4, cm4, zero2w, rockpi4)
  --out DIR          where tether-BOARD.img goes (default: out/)
  --ssh-key FILE     an OpenSSH public key: SSH is on for it (off otherwise)
  --host NAME        the name in the owner's pairing URL (default: tether.local)
  --version V        the image's version (IMAGE_VERSION in /etc/os-release; what status
                     and the update page show; default: git describe)
  --update-keys DIR  the owner's update keys (flash.sh keygen): the image trusts bundles
                     signed with them (default: ~/.config/tether/update, made on the
                     first build if missing; keep it: docs/updates.md)

Needs: rustup, gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static mmdebstrap
fakeroot dosfstools mtools e2fsprogs fdisk device-tree-compiler zstd python3; root only for
mmdebstrap's chroot (the image itself is assembled without root or loop mounts).
The base root filesystem is cached in ~/.cache/tether-image (TETHER_IMAGE_CACHE).
EOF
}

flash_build() {
    local board="" out="$image_root/out" ssh_key="" host="tether.local"
    image_version="" update_keys=$default_update_keys
    while [ $# -gt 0 ]; do
        case "$1" in
            --board) board=${2:-}; shift 2 ;;
            --out) out=${2:-}; shift 2 ;;
            --ssh-key) ssh_key=${2:-}; shift 2 ;;
            --host) host=${2:-}; shift 2 ;;
            --version) image_version=${2:-}; shift 2 ;;
            --update-keys) update_keys=${2:-}; shift 2 ;;
            -h|--help) build_usage; return 0 ;;
            *) build_usage; die "build: unknown argument '$1'" ;;
        esac
    done
    [ -n "$board" ] || { build_usage; die "build: --board is required"; }
    [ -f "$image_root/board/$board/board.toml" ] ||
        die "build: no board '$board' (have: $(cd "$image_root/board" && printf '%s ' */ | tr -d /))"
    [ -z "$ssh_key" ] || [ -f "$ssh_key" ] || die "build: --ssh-key $ssh_key: no such file"
    check_version "$image_version" || die "build: --version '$image_version': use letters, digits and . _ + - (at most 64)"
    need_tools rustup:rustup cargo:cargo aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu \
        aarch64-linux-gnu-g++:g++-aarch64-linux-gnu qemu-aarch64-static:qemu-user-static \
        mmdebstrap:mmdebstrap fakeroot:fakeroot mkfs.vfat:dosfstools mcopy:mtools mke2fs:e2fsprogs \
        sfdisk:fdisk fdtput:device-tree-compiler fdtoverlay:device-tree-compiler dtc:device-tree-compiler \
        depmod:kmod zstd:zstd python3:python3 mkimage:u-boot-tools openssl:openssl || return 2
    ensure_update_keys "$update_keys" || return 1
    mkdir -p "$out" "$image_cache"
    out=$(cd "$out" && pwd)
    local work; work=$(mktemp -d "${TMPDIR:-/tmp}/tether-image.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the trap runs after the function returns
    trap "rm -rf '$work'" EXIT
    say "building the $board image in $out (work dir $work)"
    step 1 7 "cross-compile tether for $target" build_binary "$work" || return 1
    step 2 7 "base root filesystem (Debian $suite arm64)" build_base "$board" "$work" || return 1
    step 3 7 "CSI bridge modules and overlay" build_csi "$board" "$work" || return 1
    step 4 7 "root filesystem for $board" build_rootfs "$board" "$work" "$ssh_key" "$update_keys" || return 1
    step 5 7 "owner pairing code and certificates" build_data "$work" "$host" || return 1
    step 6 7 "partitions and image" build_image "$board" "$work" "$out" || return 1
    step 7 7 "compressed copy (zstd)" compress_image "$out/tether-$board.img" || return 1
    report_image "$board" "$work" "$out"
}

# --- 1: the binary ------------------------------------------------------------------------
build_binary() {
    local work=$1
    # TETHER_IMAGE_TARGET_DIR: a target dir kept between clones (the test suite uses one in
    # the cache, so a fresh checkout rebuilds only the tether crate, not its dependencies).
    local target_dir=${TETHER_IMAGE_TARGET_DIR:-$image_root/target}
    # TETHER_IMAGE_PROFILE: the cargo profile (default release, what ships). The boot test
    # uses `lab` (the dev profile without debug info): it checks the image, not the
    # optimizer, and release's thin LTO over every dependency took ~8 of its minutes.
    local profile=${TETHER_IMAGE_PROFILE:-release}
    rustup target list --installed 2>/dev/null | grep -qx "$target" || rustup target add "$target" >&2 || return 1
    # openh264's C++ and the bundled SQLite build with the cross compilers.
    (cd "$image_root" &&
        CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
        CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++ \
        AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
        cargo build --profile "$profile" --locked -p tether --target "$target" --target-dir "$target_dir" >&2) || return 1
    aarch64-linux-gnu-strip -o "$work/tether" "$target_dir/$target/$profile/tether" || return 1
    say "tether for aarch64 ($profile profile): $(human "$(stat -c %s "$work/tether")") stripped"
}

# --- 2: the base rootfs (cached) ------------------------------------------------------------
base_inputs() {
    local board=$1
    printf '%s\n' "suite=$suite" "mirror=$mirror" "${base_packages[@]}"
    board_value "$board" image.packages
    board_value "$board" image.boot
    # This file's recipe (hooks) is an input too.
    sed -n '/^build_base()/,/^}/p' "${BASH_SOURCE[0]}"
}

ensure_binfmt() {
    if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then return 0; fi
    if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
            { say "cannot mount binfmt_misc (mmdebstrap needs it to run arm64 programs)"; return 1; }
    fi
    # The F flag keeps the interpreter open, so it works inside the chroot.
    local conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    [ -f "$conf" ] || { say "no $conf: apt-get install qemu-user-static"; return 1; }
    cat "$conf" > /proc/sys/fs/binfmt_misc/register
}

build_base() {
    local board=$1 work=$2
    mkdir -p "$image_cache"
    local key; key=$(base_inputs "$board" | sha256sum | cut -c1-16)
    local tar="$image_cache/base-$board-$key.tar" part="$image_cache/base-$board-$key.partial.tar"
    if [ -f "$tar" ]; then
        say "base rootfs from the cache: $tar"
        ln -sf "$tar" "$work/base.tar"
        return 0
    fi
    [ "$(id -u)" = 0 ] || { say "the first build of a base rootfs runs mmdebstrap as root (later builds use the cache)"; return 1; }
    ensure_binfmt || return 1
    local boot; boot=$(board_value "$board" image.boot)
    local pkgs; pkgs=$( (printf '%s\n' "${base_packages[@]}"; board_value "$board" image.packages) | paste -sd, -)
    local console; console=$(board_value "$board" image.console)
    local dtb; dtb=$(board_value "$board" image.dtb)
    rm -f "$image_cache"/base-"$board"-*.partial.tar
    say "mmdebstrap: $suite arm64 with $(echo "$pkgs" | tr ',' '\n' | wc -l) packages (about 20 minutes under emulation)"
    # Hooks: before packages, tell raspi-firmware our root and console and keep
    # update-initramfs from running once per package (it runs once at the end); after,
    # drop apt's lists and caches.
    # force-confold: our /etc/default files, written before the packages, stay (no prompt).
    mmdebstrap --arch=arm64 --variant=apt --include="$pkgs" --dpkgopt=force-confold --dpkgopt=force-confdef \
        --essential-hook="mkdir -p \"\$1/etc/default\" && printf 'ROOTPART=LABEL=tether-a\nCONSOLES=\"${console:-tty0}\"\n' > \"\$1/etc/default/raspi-firmware\"" \
        --essential-hook="printf 'ro\n' > \"\$1/etc/default/raspi-extra-cmdline\"" \
        --essential-hook="printf 'U_BOOT_ROOT=\"root=LABEL=tether-a\"\nU_BOOT_PARAMETERS=\"ro rootwait console=${console:-tty0}\"\nU_BOOT_FDT=\"$dtb\"\n' > \"\$1/etc/default/u-boot\"" \
        --essential-hook="chroot \"\$1\" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs && ln -sf /bin/true \"\$1/usr/sbin/update-initramfs\"" \
        --customize-hook="rm -f \"\$1/usr/sbin/update-initramfs\" && chroot \"\$1\" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs" \
        --customize-hook="chroot \"\$1\" update-initramfs -c -k all" \
        --customize-hook="rm -rf \"\$1\"/var/lib/apt/lists/* \"\$1\"/var/cache/apt/*" \
        "$suite" "$part" \
        "deb $mirror $suite main contrib non-free-firmware" \
        "deb $mirror $suite-updates main contrib non-free-firmware" \
        "deb $security_mirror $suite-security main contrib non-free-firmware" >&2 || return 1
    [ "$boot" = raspi-firmware ] && ! tar -tf "$part" ./boot/firmware/config.txt >/dev/null 2>&1 &&
        { say "raspi-firmware wrote no /boot/firmware/config.txt"; return 1; }
    mv "$part" "$tar"
    ln -sf "$tar" "$work/base.tar"
    say "base rootfs: $(human "$(stat -c %s "$tar")") (cached as $tar)"
}

# --- 2b: the CSI bridge (Pi boards) --------------------------------------------------------
# Debian's kernel has neither tc358743 nor (6.12) bcm2835-unicam: both are built out of tree
# from trixie's linux-source for the base's exact kernel (image/kbuild.sh, cached), and our
# overlay (board/lib/overlays/<csi.overlay>.dts) is compiled and applied to the board's DTB
# here, so a label the DTB lacks fails the build rather than the boot.
build_csi() {
    local board=$1 work=$2
    local overlay; overlay=$(board_value "$board" csi.overlay)
    if [ -z "$overlay" ]; then
        say "no CSI bridge on $board (board.toml has no [csi] overlay)"
        return 0
    fi
    local kver
    kver=$(tar -tf "$work/base.tar" | sed -n 's#^\./usr/lib/modules/\([^/]*\)/$#\1#p' | head -n1)
    [ -n "$kver" ] || { say "no kernel modules directory in the base rootfs"; return 1; }
    local built
    built=$("$image_root/image/kbuild.sh" arm64 csi "$kver") || return 1
    mkdir -p "$work/csi"
    cp "$built/tc358743.ko" "$built/bcm2835-unicam.ko" "$work/csi/"
    echo "$kver" > "$work/csi/kver"
    local src="$image_root/board/lib/overlays/$overlay.dts"
    [ -f "$src" ] || { say "board.toml names overlay '$overlay', but $src does not exist"; return 1; }
    dtc -@ -q -I dts -O dtb -o "$work/csi/tether-tc358743.dtbo" "$src" || { say "dtc failed on $src"; return 1; }
    local dtb; dtb=$(board_value "$board" image.dtb)
    tar -xf "$work/base.tar" -C "$work/csi" "./usr/lib/linux-image-$kver/$dtb" ||
        { say "the base has no $dtb for $kver"; return 1; }
    fdtoverlay -i "$work/csi/usr/lib/linux-image-$kver/$dtb" -o "$work/csi/check.dtb" "$work/csi/tether-tc358743.dtbo" ||
        { say "$overlay.dts does not apply to $dtb (a label it names is missing)"; return 1; }
    rm -rf "$work/csi/usr" "$work/csi/check.dtb"
    say "tc358743 + bcm2835-unicam for $kver; overlay $overlay applies to $dtb"
}

# --- 3: the root filesystem ---------------------------------------------------------------
# Runs under fakeroot (state in $work/fakeroot.state, reused by mke2fs), so files keep root
# and tether ownership without the builder being root.
build_rootfs() {
    local board=$1 work=$2 ssh_key=$3 keys=$4
    local version=${image_version:-}
    [ -n "$version" ] || version=$(cd "$image_root" && git describe --always --dirty 2>/dev/null || echo unknown)
    echo "$version" > "$work/version"
    # The boot script for U-Boot boards and the QEMU lab (board/lib/boot/tether-boot.cmd),
    # with the board's console and, on boards whose U-Boot boots them, its device tree.
    mkdir -p "$work/boot"
    {
        printf 'setenv tether_console console=%s\n' "$(board_value "$board" image.console)"
        case "$(board_value "$board" image.boot)" in
            u-boot*) printf 'setenv tether_fdtfile %s\n' "$(board_value "$board" image.dtb)" ;;
        esac
        cat "$image_root/board/lib/boot/tether-boot.cmd"
    } > "$work/tether-boot.cmd"
    mkimage -q -A arm64 -T script -C none -n "tether A/B boot" -d "$work/tether-boot.cmd" "$work/boot/boot.scr" >/dev/null || return 1
    # The first state: slot A good and first, B empty (bad).
    printf 'tether_order=a b\ntether_a_state=good\ntether_a_left=0\ntether_b_state=bad\ntether_b_left=0\n' > "$work/boot/tether.env"
    : > "$work/fakeroot.state"
    BOARD=$board WORK=$work ROOT="$image_root" VERSION=$version TETHER_UID=$tether_uid UPDATE_CA="$keys/ca.cert.pem" \
        AGENT_UID=$agent_uid SSH_KEY=$ssh_key BOOT_KIND=$(board_value "$board" image.boot) \
        DTB=$(board_value "$board" image.dtb) CONFIG_TXT=$(board_value "$board" image.config_txt) \
        fakeroot -s "$work/fakeroot.state" -- bash -euo pipefail -c '
        r=$WORK/root
        mkdir -p "$r"
        tar -C "$r" -xpf "$WORK/base.tar"
        # The overlay and the board.
        tar -C "$ROOT/rootfs" --exclude=./README.md -cf - . | tar -C "$r" -xpf - --no-same-owner
        mkdir -p "$r/etc/tether" "$r/var/lib/tether" "$r/boot/firmware"
        install -m 0644 "$ROOT/board/$BOARD/board.toml" "$r/etc/tether/board.toml"
        install -m 0755 "$WORK/tether" "$r/usr/bin/tether"
        # The CSI bridge modules (built by build_csi), found by modalias once the overlay
        # puts the bridge in the device tree.
        if [ -f "$WORK/csi/kver" ]; then
            kver=$(cat "$WORK/csi/kver")
            install -d "$r/usr/lib/modules/$kver/updates/tether"
            install -m 0644 "$WORK/csi/tc358743.ko" "$WORK/csi/bcm2835-unicam.ko" "$r/usr/lib/modules/$kver/updates/tether/"
            depmod -b "$r" "$kver"
        fi
        for f in "$r"/usr/share/tether/avahi/*.service; do
            [ -f "$f" ] && sed -i "s/@VERSION@/$VERSION/g; s/@BOARD@/$BOARD/g" "$f"
        done
        # Updates: RAUC takes bundles for this board signed under the owner CA only.
        sed -i "s/@BOARD@/$BOARD/g" "$r/etc/rauc/system.conf"
        install -m 0644 "$UPDATE_CA" "$r/etc/rauc/keyring.pem"
        # What this image is (the os-release fields systemd defines for images): the daemon reports
        # IMAGE_VERSION, and an update is a new IMAGE_VERSION in the other slot.
        printf "IMAGE_ID=tether-%s\nIMAGE_VERSION=%s\n" "$BOARD" "$VERSION" >> "$r/usr/lib/os-release"
        # U-Boot loads the device tree of the slot from here (tether-boot.cmd).
        kdir=$(cd "$r/usr/lib" && ls -d linux-image-* 2>/dev/null | head -n1)
        if [ -n "$kdir" ]; then ln -sfn "../usr/lib/$kdir" "$r/boot/dtbs"; fi
        # Users with fixed ids (the root is read-only: nothing can add them at boot).
        # Only our file: the build host systemd-sysusers may not read the newer syntax of
        # the base, whose own users were made when their packages were installed.
        if grep -q -E ":x:($TETHER_UID|$AGENT_UID):" "$r/etc/passwd" "$r/etc/group"; then
            echo "uid/gid $TETHER_UID or $AGENT_UID is taken in the base: pick others (docs/image.md)" >&2; exit 1
        fi
        systemd-sysusers --root="$r" "$r/usr/lib/sysusers.d/tether.conf" >/dev/null
        getent_in() { grep -q "^$1:" "$r/etc/passwd"; }
        getent_in tether && getent_in tether-agent || { echo "sysusers made no tether users" >&2; exit 1; }
        grep -q "^tether:x:$TETHER_UID:" "$r/etc/passwd" || { echo "tether is not uid $TETHER_UID" >&2; exit 1; }
        # No passwords: root is locked (SSH takes keys only, and only when provisioned).
        sed -i "s/^root:[^:]*:/root:!*:/" "$r/etc/shadow"
        # A read-only root: machine-id comes from systemd at boot, resolv.conf from resolved.
        : > "$r/etc/machine-id"
        rm -f "$r/var/lib/dbus/machine-id"
        ln -sf ../run/systemd/resolve/stub-resolv.conf "$r/etc/resolv.conf"
        echo tether > "$r/etc/hostname"
        # Host keys are made per appliance at first boot (tether-ssh-keys.service), never shipped.
        rm -f "$r"/etc/ssh/ssh_host_*
        # No RTC: until NTP answers, the clock starts no earlier than the build.
        touch "$r/usr/lib/clock-epoch"
        # Mount points (data partition, FAT, tmpfs, the avahi bind mount).
        mkdir -p "$r/var/lib/tether" "$r/boot/firmware" "$r/var/lib/dhcp" "$r/var/lib/avahi-autoipd" "$r/etc/avahi/services"
        # Units named by the overlay.
        if [ -f "$r/usr/lib/tether/enable-units" ]; then
            while read -r verb unit; do
                case "$verb" in
                    enable|disable|mask) systemctl --root="$r" "$verb" "$unit" >/dev/null 2>&1 ||
                        { echo "systemctl $verb $unit failed" >&2; exit 1; } ;;
                    ""|"#"*) ;;
                esac
            done < "$r/usr/lib/tether/enable-units"
        fi
        # Boot files: what the FAT partition holds.
        mkdir -p "$WORK/boot"
        if [ "$BOOT_KIND" = raspi-firmware ]; then
            cp -r "$r/boot/firmware/." "$WORK/boot/"
            rm -rf "${r:?}/boot/firmware/"*
            # The root is the slot, by partition UUID (both slots carry the same label).
            sed -i "s#root=LABEL=tether-a#root=PARTUUID=74657468-02 tether.slot=a tether.boot=raspi-firmware#" "$WORK/boot/cmdline.txt"
            grep -q "root=PARTUUID=74657468-02" "$WORK/boot/cmdline.txt" || { echo "cmdline.txt names no root=LABEL=tether-a to replace" >&2; exit 1; }
            if [ -n "$CONFIG_TXT" ]; then printf "%s\n" "$CONFIG_TXT" >> "$WORK/boot/config.txt"; fi
            if [ -f "$WORK/csi/tether-tc358743.dtbo" ]; then
                mkdir -p "$WORK/boot/overlays"
                cp "$WORK/csi/tether-tc358743.dtbo" "$WORK/boot/overlays/"
                printf "%s\n" "# tether: the TC358743 HDMI-to-CSI bridge (board/lib/overlays)" "dtoverlay=tether-tc358743" \
                    >> "$WORK/boot/config.txt"
            fi
            if [ -x "$ROOT/board/$BOARD/dtb.sh" ]; then "$ROOT/board/$BOARD/dtb.sh" "$WORK/boot"; fi
            # A/B through the firmware'"'"'s tryboot (docs/updates.md): slot A'"'"'s kernel, initrd,
            # device trees, overlays and cmdline.txt under slot-a/, named without versions so
            # config.txt names the same files for either slot; config.txt ends in the block
            # tether bootslot rewrites (firmware/src/device/boot/tryboot.rs).
            s=$WORK/boot/slot-a
            mkdir -p "$s"
            mv "$WORK"/boot/vmlinuz-* "$s/vmlinuz"
            mv "$WORK"/boot/initrd.img-* "$s/initrd.img"
            mv "$WORK"/boot/*.dtb "$s/"
            if [ -d "$WORK/boot/overlays" ]; then mv "$WORK/boot/overlays" "$s/"; fi
            sed -i "s#tether.boot=raspi-firmware#tether.boot=tryboot#" "$WORK/boot/cmdline.txt"
            mv "$WORK/boot/cmdline.txt" "$s/cmdline.txt"
            sed -i -e "s#^kernel=vmlinuz-.*#kernel=vmlinuz#" -e "s#^initramfs initrd.img-[^ ]*#initramfs initrd.img#" "$WORK/boot/config.txt"
            grep -qx "kernel=vmlinuz" "$WORK/boot/config.txt" && grep -q "^initramfs initrd.img\b" "$WORK/boot/config.txt" ||
                { echo "config.txt names no kernel=vmlinuz-… and initramfs initrd.img-… to rename" >&2; exit 1; }
            printf "%s\n" "# tether: A/B slots (tether bootslot rewrites this block; docs/updates.md)" "[all]" \
                "os_prefix=slot-a/" "[tryboot]" "os_prefix=slot-b/" "[all]" "# tether: end of A/B slots" >> "$WORK/boot/config.txt"
            # What the bundle'"'"'s RAUC hook copies into slot-b/ (or slot-a/) when this root is
            # installed: the device trees and overlays, and cmdline.txt for either slot (the
            # kernel and initrd are /boot/vmlinuz-* and /boot/initrd.img-*).
            t=$r/usr/lib/tether/boot
            mkdir -p "$t"
            cp "$s"/*.dtb "$t/"
            if [ -d "$s/overlays" ]; then cp -r "$s/overlays" "$t/"; fi
            sed -e "s#root=PARTUUID=74657468-02#root=PARTUUID=74657468-@PART@#" -e "s#tether.slot=a#tether.slot=@SLOT@#" \
                "$s/cmdline.txt" > "$t/cmdline.txt"
            grep -q "@PART@" "$t/cmdline.txt" && grep -q "tether.slot=@SLOT@ tether.boot=tryboot" "$t/cmdline.txt" ||
                { echo "cmdline.txt: $(cat "$t/cmdline.txt")" >&2; exit 1; }
        else
            for d in "$r"/usr/lib/linux-image-*; do
                if [ -x "$ROOT/board/$BOARD/dtb.sh" ]; then "$ROOT/board/$BOARD/dtb.sh" "$d/${DTB%/*}"; fi
            done
        fi
        # The kernel and initrd, for the boot test (QEMU boots them directly).
        cp "$r"/boot/vmlinuz-* "$WORK/vmlinuz" && cp "$r"/boot/initrd.img-* "$WORK/initrd.img"
        if [ -n "$SSH_KEY" ]; then
            install -d -m 0700 "$WORK/data/ssh" && install -m 0600 "$SSH_KEY" "$WORK/data/ssh/authorized_keys"
        fi
        du -sb "$r" | cut -f1 > "$WORK/root.bytes"
    ' || return 1
    say "root filesystem: $(human "$(cat "$work/root.bytes")") (version $version)"
}

# --- 4: the data partition's first contents -----------------------------------------------
# The image's own binary makes the CA, server certificate and owner code (under qemu-user,
# with the root filesystem as its library root), so the printed fingerprint is the served one.
build_data() {
    local work=$1 host=$2
    mkdir -p "$work/data"
    # The daemon's directory: only its user (sshd's keys inside are root's, see rootfs/).
    chmod 0700 "$work/data"
    qemu-aarch64-static -L "$work/root" "$work/root/usr/bin/tether" pair --offline "$work/data" \
        --role admin --name owner --host "$host" > "$work/pairing.txt" 2> "$work/pairing.err" ||
        { cat "$work/pairing.err" >&2; return 1; }
    grep -q '^https://' "$work/pairing.txt" || { say "tether pair printed no URL"; return 1; }
}

# --- 5: partitions ------------------------------------------------------------------------
mib=$((1024 * 1024))
boot_mib=256
data_mib=64
gap_mib=16

build_image() {
    local board=$1 work=$2 out=$3
    local img="$out/tether-$board.img"
    local root_bytes; root_bytes=$(cat "$work/root.bytes")
    # Room for ext4's own metadata and for later versions: an update must fit the slot the
    # card was written with (docs/updates.md), so a slot is half again the root plus 256 MiB.
    local root_mib=$(( (root_bytes * 3 / 2 + 256 * mib + mib - 1) / mib ))
    rm -f "$work/boot.vfat"
    mkfs.vfat -C -F 32 -n TETHERBOOT "$work/boot.vfat" $((boot_mib * 1024)) >/dev/null || return 1
    if [ -n "$(ls -A "$work/boot")" ]; then
        mcopy -s -i "$work/boot.vfat" "$work/boot"/* ::/ || return 1
    fi
    fakeroot -i "$work/fakeroot.state" -- bash -euo pipefail -c "
        chown -R $tether_uid:$tether_uid '$work/data'
        if [ -d '$work/data/ssh' ]; then chown -R 0:0 '$work/data/ssh'; fi
        mke2fs -q -t ext4 -L tether-root -E root_owner=0:0 -d '$work/root' '$work/root.ext4' ${root_mib}M
        mke2fs -q -t ext4 -L tether-data -E root_owner=$tether_uid:$tether_uid -d '$work/data' '$work/data.ext4' ${data_mib}M
    " || return 1
    local p1=$((gap_mib)) p2=$((gap_mib + boot_mib)) p3 p4 total
    p3=$((p2 + root_mib)); p4=$((p3 + root_mib)); total=$((p4 + data_mib))
    rm -f "$img"
    truncate -s $((total * mib)) "$img"
    sfdisk --quiet "$img" <<SFDISK || return 1
label: dos
label-id: 0x74657468
unit: sectors
start=$((p1 * 2048)), size=$((boot_mib * 2048)), type=c, bootable
start=$((p2 * 2048)), size=$((root_mib * 2048)), type=83
start=$((p3 * 2048)), size=$((root_mib * 2048)), type=83
start=$((p4 * 2048)), size=$((data_mib * 2048)), type=83
SFDISK
    dd if="$work/boot.vfat" of="$img" bs=1M seek="$p1" conv=notrunc,sparse status=none
    dd if="$work/root.ext4" of="$img" bs=1M seek="$p2" conv=notrunc,sparse status=none
    dd if="$work/data.ext4" of="$img" bs=1M seek="$p4" conv=notrunc,sparse status=none
    if [ "$(board_value "$board" image.boot)" = u-boot-rockchip ]; then
        local ub; ub="$work/root/usr/lib/u-boot/$(board_value "$board" image.uboot_target)"
        if [ ! -f "$ub/idbloader.img" ] || [ ! -f "$ub/u-boot.itb" ]; then say "no u-boot files in $ub"; return 1; fi
        dd if="$ub/idbloader.img" of="$img" seek=64 conv=notrunc status=none
        dd if="$ub/u-boot.itb" of="$img" seek=16384 conv=notrunc status=none
    fi
    # The boot test boots these directly.
    cp "$work/vmlinuz" "$out/tether-$board.vmlinuz"
    cp "$work/initrd.img" "$out/tether-$board.initrd.img"
    install -m 0600 "$work/pairing.txt" "$out/tether-$board.pairing.txt"
    # The binary alone, for updating a board in place during development (scp + restart).
    install -m 0755 "$work/tether" "$out/tether-$board.aarch64"
    echo "$root_mib" > "$work/root.mib"
}

compress_image() {
    zstd -q -f -T0 -9 "$1" -o "$1.zst"
}

report_image() {
    local board=$1 work=$2 out=$3
    local img="$out/tether-$board.img"
    local url; url=$(grep '^https://' "$work/pairing.txt")
    cat "$work/pairing.txt"
    cat >&2 <<EOF

flash.sh: built $img
  image:   $(human "$(stat -c %s "$img")") raw, $(human "$(stat -c %s "$img.zst")") zstd ($img.zst)
  rootfs:  $(human "$(cat "$work/root.bytes")") in a $(cat "$work/root.mib") MiB slot (A; slot B is empty)
  binary:  $(human "$(stat -c %s "$work/tether")") (aarch64, stripped)
  time:    $(( $(date +%s) - image_started )) s

Owner pairing: after the first boot, open this on a phone or laptop on the same network
(or scan the QR above). It makes the admin token "owner" and works once:
  $url
It is also in $out/tether-$board.pairing.txt (mode 0600: it is a secret until used).
Write the card with: ./flash.sh write $img /dev/sdX
EOF
}
