#!/bin/sh
# board/cm4/dtb.sh BOOTDIR: make the CM4's USB 2.0 port a gadget.
#
# BOOTDIR is the FAT boot directory where raspi-firmware copied bcm*.dtb. Debian's
# bcm2711-rpi-cm4-io.dtb sets dr_mode = "host" on the dwc2 (the IO board's USB hub) and, unlike
# the Pi 4B's DTB, carries no device-mode FIFO sizes; this sets dr_mode = "peripheral" and the
# same FIFO sizes the Pi 4B's DTB has (same SoC, same controller). fdtput edits the node by path,
# so it works whether or not the DTB has __symbols__.
#
# raspi-firmware's hooks copy the DTBs again on every kernel or initramfs update: run this after
# the last one. The image's root is read-only and never upgraded in place, so nothing undoes it.
set -eu

die() { echo "board/cm4/dtb.sh: $*" >&2; exit 1; }
# shellcheck source=SCRIPTDIR/../lib/peripheral.sh
. "$(dirname "$0")/../lib/peripheral.sh"

[ $# -eq 1 ] || die "usage: dtb.sh BOOTDIR"
command -v fdtput >/dev/null 2>&1 || die "fdtput not found (apt-get install device-tree-compiler)"

dtb=$1/bcm2711-rpi-cm4-io.dtb
node=/soc/usb@7e980000
[ -f "$dtb" ] || die "$dtb: no such file"

set_peripheral "$dtb" "$node" "brcm,bcm2835-usb*" "the dwc2 (brcm,bcm2835-usb)"
fdtput -t u "$dtb" "$node" g-rx-fifo-size 256
fdtput -t u "$dtb" "$node" g-np-tx-fifo-size 32
fdtput -t u "$dtb" "$node" g-tx-fifo-size 256 256 512 512 512 768 768

echo "board/cm4/dtb.sh: $dtb: $node dr_mode $before -> peripheral"
