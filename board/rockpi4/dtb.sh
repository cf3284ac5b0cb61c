#!/bin/sh
# board/rockpi4/dtb.sh BOOTDIR: make the ROCK Pi 4's upper USB 3.0 port a gadget.
#
# BOOTDIR is the kernel's rockchip DTB directory (/usr/lib/linux-image-<version>/rockchip/ in the
# root filesystem; extlinux.conf loads the DTB from there). Debian's DTBs set dr_mode = "host" on
# both RK3399 dwc3 controllers; this sets "peripheral" on usbdrd3_0, the OTG-capable one (UDC
# fe800000.usb). Rockchip DTBs have no __symbols__, so a label-based overlay cannot apply: the
# node is edited by path with fdtput.
#
# Every ROCK Pi 4 variant's DTB (4A, 4A+, 4B, 4B+, 4C) is patched, not only the 4B's: they share
# the node and the port, and U-Boot's built-in default fdtfile is the 4A's, so a missing `fdt`
# line in extlinux.conf still gets a gadget.
#
# A kernel package upgrade would replace these files; the image's root is read-only and never
# upgraded in place.
set -eu

die() { echo "board/rockpi4/dtb.sh: $*" >&2; exit 1; }
# shellcheck source=SCRIPTDIR/../lib/peripheral.sh
. "$(dirname "$0")/../lib/peripheral.sh"

[ $# -eq 1 ] || die "usage: dtb.sh BOOTDIR"
command -v fdtput >/dev/null 2>&1 || die "fdtput not found (apt-get install device-tree-compiler)"

dir=$1
node=/usb@fe800000/usb@fe800000
[ -f "$dir/rk3399-rock-pi-4b.dtb" ] || die "$dir/rk3399-rock-pi-4b.dtb: no such file"

for dtb in "$dir"/rk3399-rock-pi-4*.dtb; do
  set_peripheral "$dtb" "$node" "snps,dwc3*" "a dwc3 (snps,dwc3)"
  echo "board/rockpi4/dtb.sh: $dtb: $node dr_mode $before -> peripheral"
done
