#!/usr/bin/env bash
# Tests for `flash.sh write` (image/write.sh) against fake sysfs/procfs trees and a regular file
# standing in for the device (the TETHER_FLASH_TEST_DEVICE_FILE seam). Needs no root and touches
# no real disk. Prints one line per case ("ok   ..." or "FAIL ..."); exit 0 = all passed.
#
#   tests/image/test_write.sh
# shellcheck disable=SC2016  # bash -c and hook strings expand in the child, on purpose
set -euo pipefail
cd "$(dirname "$0")/../.."
WRITE_SH=$PWD/image/write.sh
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
passed=0
failed=0

# ---- fake trees ------------------------------------------------------------------------------

# disk NAME MAJ:MIN SECTORS REMOVABLE DEVPATH [key=value for device/ ...]: a whole disk the way
# sysfs shows it: /sys/devices/DEVPATH/block/NAME with /sys/block, /sys/class/block and
# /sys/dev/block links to it.
disk() {
    local name=$1 majmin=$2 sectors=$3 removable=$4 devpath=$5 kv d
    shift 5
    d=$SYS/devices/$devpath/block/$name
    mkdir -p "$d/device" "$d/holders" "$d/slaves" "$SYS/block" "$SYS/class/block" "$SYS/dev/block"
    echo "$majmin" >"$d/dev"
    echo "$sectors" >"$d/size"
    echo "$removable" >"$d/removable"
    echo 0 >"$d/ro"
    for kv in "$@"; do echo "${kv#*=}" >"$d/device/${kv%%=*}"; done
    ln -s "$d" "$SYS/block/$name"
    ln -s "$d" "$SYS/class/block/$name"
    ln -s "$d" "$SYS/dev/block/$majmin"
}

# part DISK NAME MAJ:MIN SECTORS
part() {
    local d
    d=$(readlink -f "$SYS/block/$1")/$2
    mkdir -p "$d/holders"
    echo "$3" >"$d/dev"
    echo "$4" >"$d/size"
    echo "${2##*[!0-9]}" >"$d/partition"
    ln -s "$d" "$SYS/class/block/$2"
    ln -s "$d" "$SYS/dev/block/$3"
}

# A fresh machine: an internal SATA disk with / and /boot, a USB SD reader (sdb), a USB disk
# that says removable=0 (sdc), a tiny USB stick (sdt), a built-in SD slot (mmcblk0) and eMMC
# (mmcblk1), and a USB stick the system was booted from (sdd: /boot, and / on dm-crypt on sdd2).
fresh() {
    local case_dir
    case_dir=$(mktemp -d "$work/case.XXXX")
    SYS=$case_dir/sys
    PROC=$case_dir/proc
    mkdir -p "$PROC/self"
    local pci=pci0000:00/0000:00:14.0
    disk sda 8:0 1953525168 0 "pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0" vendor=ATA "model=Samsung SSD 870"
    part sda sda1 8:1 1048576
    part sda sda2 8:2 1952474000
    disk sdb 8:16 62333952 1 "$pci/usb1/1-2/1-2:1.0/host6/target6:0:0/6:0:0:0" vendor=Generic "model=STORAGE DEVICE"
    part sdb sdb1 8:17 524288
    part sdb sdb2 8:18 61000000
    disk sdc 8:32 62333952 0 "$pci/usb2/2-1/2-1:1.0/host7/target7:0:0/7:0:0:0" vendor=JMicron "model=USB3 SATA"
    disk sdt 8:48 4096 1 "$pci/usb1/1-3/1-3:1.0/host8/target8:0:0/8:0:0:0" vendor=Tiny "model=Stick"
    disk sdd 8:64 62333952 1 "$pci/usb1/1-4/1-4:1.0/host9/target9:0:0/9:0:0:0" vendor=Live "model=Stick"
    part sdd sdd1 8:65 524288
    part sdd sdd2 8:66 61000000
    disk dm-0 253:0 61000000 0 virtual
    ln -s "$SYS/class/block/sdd2" "$SYS/block/dm-0/slaves/sdd2"
    ln -s "$SYS/class/block/dm-0" "$SYS/class/block/sdd2/holders/dm-0"
    disk mmcblk0 179:0 62333952 0 "platform/fe340000.mmc/mmc_host/mmc0/mmc0:aaaa" type=SD name=SD32G
    part mmcblk0 mmcblk0p1 179:1 524288
    disk mmcblk1 179:32 30535680 0 "platform/fe330000.mmc/mmc_host/mmc1/mmc1:0001" type=MMC name=AJTD4R
    cat >"$PROC/self/mountinfo" <<'EOF'
21 1 253:0 / / rw,relatime shared:1 - ext4 /dev/mapper/root rw
22 21 8:65 / /boot rw,relatime shared:2 - ext4 /dev/sdd1 rw
23 21 8:2 / /srv rw,relatime shared:3 - ext4 /dev/sda2 rw
24 21 8:1 / /boot/efi rw,relatime shared:4 - vfat /dev/sda1 rw
25 21 0:5 / /dev rw,nosuid shared:5 - devtmpfs udev rw
26 21 0:22 / /proc rw,nosuid shared:6 - proc proc rw
EOF
    printf 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n' >"$PROC/swaps"
    # The "device": 8 MiB of 0xA5 bytes.
    DEV=$case_dir/device
    head -c $((8 << 20)) /dev/zero | tr '\0' '\245' >"$DEV"
    DEV_SUM=$(sha256sum <"$DEV")
    OUT=$case_dir/out
    RC=0
}

# An image of 5 MiB + 1234 bytes (not a multiple of the 4 MiB block nor of 512), and its .zst.
IMG=$work/tether.img
head -c $(((5 << 20) + 1234)) /dev/urandom >"$IMG"
zstd -q -o "$IMG.zst" "$IMG"
head -c 100000 "$IMG.zst" >"$work/broken.img.zst"

# run NAME STDIN -- ARGS...: flash_write ARGS with the fake trees, device file DEV named NAME.
# It is called where errexit is ignored (`flash_write || exit`): its checks must stop it on their
# own, whatever way flash.sh calls it. (PLAIN=1: a plain call, errexit in force.)
run() {
    local name=$1 input=$2 driver='set -euo pipefail; source "$1"; shift; flash_write "$@" || exit $?'
    shift 3
    if [[ ${PLAIN:-} == 1 ]]; then driver='set -euo pipefail; source "$1"; shift; flash_write "$@"'; fi
    RC=0
    printf '%s' "$input" | env TETHER_SYSFS="$SYS" TETHER_PROCFS="$PROC" \
        TETHER_FLASH_TEST_DEVICE_FILE=1 TETHER_FLASH_TEST_NAME="$name" \
        bash -c "$driver" flash "$WRITE_SH" "$@" >"$OUT" 2>&1 || RC=$?
}

# ---- checks ----------------------------------------------------------------------------------

problems=()
expect_rc() { [[ $RC == "$1" ]] || problems+=("exit $RC, wanted $1"); }
expect_out() { grep -Eq -- "$1" "$OUT" || problems+=("output lacks /$1/"); }
expect_untouched() { [[ $(sha256sum <"$DEV") == "$DEV_SUM" ]] || problems+=("the device was written"); }
# The device starts with the image's bytes, and what lies past them is left as it was.
expect_holds() {
    local len
    len=$(stat -c %s "$IMG")
    cmp -s -n "$len" "$IMG" "$DEV" || problems+=("the device doesn't hold the image")
    [[ $(stat -c %s "$DEV") == $((8 << 20)) ]] || problems+=("the device file changed size")
    [[ $(tail -c +$((len + 1)) "$DEV" | tr -d '\245' | wc -c) == 0 ]] || problems+=("bytes past the image changed")
}
done_case() {
    if ((${#problems[@]} == 0)); then
        echo "ok   $1"
        passed=$((passed + 1))
    else
        echo "FAIL $1: ${problems[*]}"
        sed 's/^/     | /' "$OUT"
        failed=$((failed + 1))
    fi
    problems=()
}

# ---- cases -----------------------------------------------------------------------------------

fresh
run sdb1 "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out '^flash.sh write: refusing: .* is a partition \(sdb1 of sdb\).*/dev/sdb$'; expect_untouched
done_case "refuses a partition"

fresh
run sda "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: .*\(sda, ATA Samsung SSD 870\) is not removable'; expect_untouched
done_case "refuses a non-removable internal disk"

fresh
run mmcblk1 "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: .* is not removable .*type MMC'; expect_untouched
done_case "refuses eMMC (mmcblk, device/type MMC)"

fresh
run mmcblk0 "" -- --yes "$IMG" "$DEV"
expect_rc 0; expect_out '^verified: '; expect_holds
done_case "accepts an mmcblk SD card (removable=0, device/type SD) and writes it"

fresh
run sdc "" -- --yes "$IMG" "$DEV"
expect_rc 0; expect_out '^verified: '; expect_holds
done_case "accepts a USB disk that says removable=0"

fresh
# (the source names no partition of sdb, so only the major:minor can tell)
printf "%s\n" "40 21 8:17 / /media/me/TETHER\\040BOOT rw,nosuid shared:9 - vfat /dev/disk/by-uuid/0FA3-9C1D rw" >>"$PROC/self/mountinfo"
run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: sdb1 is mounted at /media/me/TETHER BOOT; unmount'; expect_untouched
done_case "refuses a device with a mounted partition (by major:minor)"

fresh
echo "41 21 0:61 / /mnt/card rw shared:9 - btrfs /dev/sdb2 rw" >>"$PROC/self/mountinfo"
run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: sdb2 is mounted at /mnt/card'; expect_untouched
done_case "refuses a device with a mounted partition (btrfs: by source)"

fresh
printf '/dev/sdb2\tpartition\t1048572\t0\t-2\n' >>"$PROC/swaps"
run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: sdb2 is in use as swap'; expect_untouched
done_case "refuses a device with a partition in swap"

fresh
mkdir -p "$SYS/block/sdb/sdb2/holders/dm-3"
run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: sdb2 is in use by dm-3'; expect_untouched
done_case "refuses a device held by device-mapper"

fresh
sed -i '/ \/boot /d' "$PROC/self/mountinfo"   # only / (dm-crypt on sdd2) says it's sdd
run sdd "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: .* is the disk this system runs from \(it holds /, via dm-0\)'; expect_untouched
done_case "refuses the disk the system runs from (/ through dm slaves)"

fresh
run sdt "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: .* is too small: 2\.0 MiB .* the image is 5\.0 MiB \(5244114 bytes\)'; expect_untouched
done_case "refuses a device smaller than the image"

fresh
run sdt "" -- --yes "$IMG.zst" "$DEV"
expect_rc 2; expect_out 'is too small: .*\(5244114 bytes\)'; expect_untouched
done_case "refuses a device smaller than the decompressed .zst image"

fresh
run sdb "no" -- "$IMG" "$DEV"
expect_rc 2; expect_out 'model: +Generic STORAGE DEVICE'; expect_out 'size: +29\.7 GiB'
expect_out 'partition: +sdb1  256\.0 MiB'; expect_out 'aborted: nothing was written'; expect_untouched
done_case "shows the device and aborts when the answer isn't the device name"

fresh
run sdb "" -- "$IMG" "$DEV"
expect_rc 2; expect_out 'aborted: nothing was written'; expect_untouched
done_case "aborts when stdin is empty"

fresh
run sdb "sdb" -- "$IMG" "$DEV"
expect_rc 0; expect_out 'Type "sdb"'; expect_out '^verified: '; expect_holds
done_case "writes after the device name is typed"

fresh
run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 0; expect_out "^image: .*sha256 $(sha256sum <"$IMG" | cut -d' ' -f1)"
expect_out "^read back: +5244114 bytes, sha256 $(sha256sum <"$IMG" | cut -d' ' -f1)"
expect_out '^verified: '; expect_holds
done_case "writes and verifies a raw image with --yes"

fresh
PLAIN=1 run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 0; expect_out '^verified: '; expect_holds
done_case "writes and verifies when called plainly (errexit in force)"

fresh
PLAIN=1 run sdb1 "" -- --yes "$IMG" "$DEV"
expect_rc 2; expect_out 'refusing: .* is a partition'; expect_untouched
done_case "refuses a partition when called plainly (errexit in force)"

fresh
run sdb "" -- --yes "$IMG.zst" "$DEV"
expect_rc 0; expect_out "^image: .*5244114 bytes.*sha256 $(sha256sum <"$IMG" | cut -d' ' -f1)"
expect_out '^verified: '; expect_holds
done_case "writes and verifies a .zst image with --yes"

fresh
mkdir -p "$work/pvbin"
printf '#!/bin/sh\necho "pv $*" >>"%s"\nexec cat\n' "$work/pv.log" >"$work/pvbin/pv"
chmod +x "$work/pvbin/pv"
PATH=$work/pvbin:$PATH run sdb "" -- --yes "$IMG.zst" "$DEV"
expect_rc 0; expect_out '^verified: '; expect_holds
[[ $(grep -c '^pv -s 5244114$' "$work/pv.log" 2>/dev/null) == 2 ]] || problems+=("pv wasn't used for both the write and the read-back")
done_case "shows progress with pv when it is installed"

fresh
run sdb "" -- --yes "$work/broken.img.zst" "$DEV"
expect_rc 2; expect_out 'refusing: .*broken.img.zst does not decompress'; expect_untouched
done_case "refuses a truncated .zst before writing"

fresh
TETHER_FLASH_TEST_AFTER_WRITE='printf X | dd of="$1" bs=1 seek=3000000 conv=notrunc status=none' \
    run sdb "" -- --yes "$IMG" "$DEV"
expect_rc 1; expect_out 'verification FAILED'; expect_out '^written: '
done_case "detects a corrupt write"

fresh
RC=0
env TETHER_SYSFS="$SYS" TETHER_PROCFS="$PROC" TETHER_FLASH_TEST_NAME=sdb \
    bash -c 'source "$1"; shift; flash_write "$@"' flash "$WRITE_SH" --yes "$IMG" "$DEV" >"$OUT" 2>&1 || RC=$?
expect_rc 2; expect_out 'refusing: .* is not a block device'; expect_untouched
done_case "refuses a regular file without the test seam"

echo "test_write: $passed passed, $failed failed"
((failed == 0))
