#!/usr/bin/env bash
# Build an appliance image for a board and write it to an SD card.
#
#   ./flash.sh BOARD DEVICE     e.g. ./flash.sh rpi4 /dev/sdX
#
# The image build is not implemented yet: this script refuses rather than write anything.
set -euo pipefail
echo "flash.sh: building and flashing images is not implemented yet (see README.md, 'Layout')." >&2
exit 2
