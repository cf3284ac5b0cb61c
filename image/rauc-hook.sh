#!/bin/sh
# RAUC's slot hook in every tether bundle (flash.sh bundle; docs/updates.md). After RAUC wrote
# the new root into a slot and mounted it (RAUC_SLOT_MOUNT_POINT), this puts that slot's boot
# files where the Raspberry Pi firmware reads them: slot-a/ or slot-b/ on the FAT partition
# (the kernel, initrd, device trees, overlays and a cmdline.txt naming the slot), which
# config.txt's tether block points a normal boot or a tryboot at. On a board without that
# block (U-Boot loads the kernel from the slot itself) there is nothing to do.
#
# The directory replaced is the one of the slot RAUC just wrote: marked bad before the write,
# booted by nothing. It is removed first (the FAT holds the firmware and two slots' files,
# not three) and the new one is written under a temporary name and renamed, so a power cut
# leaves either no directory (the slot stays bad) or a whole one.
set -eu

[ "${1:-}" = slot-post-install ] || exit 0
[ "${RAUC_SLOT_CLASS:-}" = rootfs ] || exit 0

boot=${TETHER_BOOT_DIR:-/boot/firmware}
if ! grep -qx '# tether: A/B slots (tether bootslot rewrites this block; docs/updates.md)' "$boot/config.txt" 2>/dev/null; then
    echo "tether: no A/B block in $boot/config.txt: this board boots the kernel from the slot"
    exit 0
fi

new=${RAUC_SLOT_MOUNT_POINT:?RAUC mounted no slot}
slot=${RAUC_SLOT_BOOTNAME:?the slot has no bootname}
case "$slot" in
    a) part=02 ;;
    b) part=03 ;;
    *) echo "tether: unknown slot '$slot' (a or b)" >&2; exit 1 ;;
esac
files=$new/usr/lib/tether/boot
# Exactly one kernel and initrd: the image keeps Debian's one kernel package.
set -- "$new"/boot/vmlinuz-*
kernel=$1
[ $# -eq 1 ] && [ -f "$kernel" ] || { echo "tether: the new root needs exactly one /boot/vmlinuz-*, not: $*" >&2; exit 1; }
set -- "$new"/boot/initrd.img-*
initrd=$1
[ $# -eq 1 ] && [ -f "$initrd" ] || { echo "tether: the new root needs exactly one /boot/initrd.img-*, not: $*" >&2; exit 1; }
[ -f "$files/cmdline.txt" ] || { echo "tether: the new root has no $files/cmdline.txt: it cannot boot through the Pi firmware" >&2; exit 1; }

remounted=false
if findmnt -n -o OPTIONS --target "$boot" | tr ',' '\n' | grep -qx ro; then
    mount -o remount,rw "$boot"
    remounted=true
fi
back() { if $remounted; then mount -o remount,ro "$boot" || true; fi; }
trap back EXIT

dst=$boot/slot-$slot
rm -rf "$dst" "$dst.new"
sync
mkdir "$dst.new"
cp "$kernel" "$dst.new/vmlinuz"
cp "$initrd" "$dst.new/initrd.img"
cp "$files"/*.dtb "$dst.new/"
if [ -d "$files/overlays" ]; then cp -r "$files/overlays" "$dst.new/"; fi
sed -e "s/@PART@/$part/" -e "s/@SLOT@/$slot/" "$files/cmdline.txt" > "$dst.new/cmdline.txt"
sync
mv "$dst.new" "$dst"
sync
echo "tether: slot $slot's boot files are in $dst ($(du -sh "$dst" | cut -f1)): a tryboot boots them"
