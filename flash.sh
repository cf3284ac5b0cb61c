#!/usr/bin/env bash
# Build a tether appliance image for a board, mint its owner's pairing code, and write it
# to an SD card.
#
#   ./flash.sh build --board rpi4            # out/tether-rpi4.img (+ .zst), prints the pairing QR
#   ./flash.sh pair out/tether-rpi4.img      # a new owner code in an image not yet booted
#   ./flash.sh write out/tether-rpi4.img /dev/sdX
#   ./flash.sh bundle --board rpi4 --version 1.2  # out/tether-rpi4-1.2.raucb, a signed update
#
# docs/image.md describes the image: partitions, users, first boot, updates.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=image/common.sh
source "$here/image/common.sh"
# shellcheck source=image/build.sh
source "$here/image/build.sh"
# shellcheck source=image/pair.sh
source "$here/image/pair.sh"
# shellcheck source=image/write.sh
source "$here/image/write.sh"
# shellcheck source=image/update.sh
source "$here/image/update.sh"

usage() {
    cat <<'EOF'
usage: flash.sh COMMAND [ARGS]

  build --board BOARD [--out DIR] [--ssh-key FILE] [--host NAME]
        Build out/tether-BOARD.img for one of board/*/ (rpi4, cm4, zero2w, rockpi4) and
        print the owner's pairing QR code and URL. First build ~30 min (the Debian base
        is then cached), later builds a few minutes.
  pair IMG [--host NAME]
        Replace the owner's pairing code in an image that has not booted yet (the old
        code stops working) and print the new QR code and URL.
  bundle --board BOARD [--version V] [--out DIR] [--update-keys DIR] [--rootfs-extra DIR]
        Build a signed update bundle from the same recipe: out/tether-BOARD-V.raucb. Install
        it with `tether update FILE` or the console's Update page (docs/updates.md).
  keygen [--dir DIR]
        Make the owner's update keys (the first build makes them if missing): the image
        trusts bundles signed with them and no others.
  write [--yes] IMG DEVICE
        Write IMG (or IMG.zst) to a removable DEVICE (e.g. /dev/sdX, /dev/mmcblk0) and
        verify it by reading it back. Refuses system, mounted and non-removable disks.

After the first boot, the appliance answers at https://tether.local (mDNS); the pairing
URL logs the owner in once. See docs/image.md and board/BOARD/README.md.
EOF
}

case "${1:-}" in
    build) shift; flash_build "$@" ;;
    pair) shift; flash_pair "$@" ;;
    write) shift; flash_write "$@" ;;
    bundle) shift; flash_bundle "$@" ;;
    keygen) shift; flash_keygen "$@" ;;
    -h|--help|help) usage ;;
    "") usage >&2; exit 2 ;;
    *) usage >&2; die "unknown command '$1'" ;;
esac
