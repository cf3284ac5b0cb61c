# flash.sh pair: a new owner pairing code in an image that has not booted (sourced).
# shellcheck shell=bash
#
# Works on the image file itself, without loop mounts or root: the data partition is
# copied out, changed with debugfs and copied back. The image's own tether binary (under
# qemu-user) mints the code against the image's CA, so the fingerprint stays the same.

data_uid=500

flash_pair() {
    local img="" host="tether.local"
    while [ $# -gt 0 ]; do
        case "$1" in
            --host) host=${2:-}; shift 2 ;;
            -h|--help) echo "usage: flash.sh pair IMG [--host NAME]" >&2; return 0 ;;
            -*) die "pair: unknown option '$1'" ;;
            *) [ -z "$img" ] || die "pair: one image at a time"; img=$1; shift ;;
        esac
    done
    [ -n "$img" ] || die "usage: flash.sh pair IMG [--host NAME]"
    [ -f "$img" ] || die "pair: $img: no such file (a .zst image must be decompressed first: zstd -d)"
    need_tools sfdisk:fdisk debugfs:e2fsprogs qemu-aarch64-static:qemu-user-static \
        aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu python3:python3 || return 2
    local parts; parts=$(sfdisk -J "$img" 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)["partitiontable"]["partitions"]
print(p[1]["start"], p[1]["size"], p[3]["start"], p[3]["size"]) if len(p) == 4 else None
' 2>/dev/null) || true
    [ -n "$parts" ] || die "pair: $img is not a tether image (no 4-partition table)"
    local root_start root_size data_start data_size
    read -r root_start root_size data_start data_size <<<"$parts"
    local work; work=$(mktemp -d "${TMPDIR:-/tmp}/tether-pair.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    dd if="$img" of="$work/root.ext4" bs=512 skip="$root_start" count="$root_size" status=none
    dd if="$img" of="$work/data.ext4" bs=512 skip="$data_start" count="$data_size" status=none
    [ "$(debugfs -R 'stats' "$work/data.ext4" 2>/dev/null | awk -F': *' '/Filesystem volume name/{print $2}')" = tether-data ] ||
        die "pair: partition 4 of $img is not tether's data partition"
    if debugfs -R 'stat /tasks.db' "$work/data.ext4" 2>/dev/null | grep -q '^Inode:'; then
        die "pair: this image has booted (its data partition has a task store); make a code on the appliance instead: tether pair --role admin"
    fi
    debugfs -R "dump /usr/bin/tether $work/tether" "$work/root.ext4" >/dev/null 2>&1 && [ -s "$work/tether" ] ||
        die "pair: no /usr/bin/tether in the image's root partition"
    chmod +x "$work/tether"
    mkdir -p "$work/data"
    debugfs -R "rdump /tls $work/data" "$work/data.ext4" >/dev/null 2>&1 ||
        die "pair: the image holds no certificates (/tls); rebuild it with flash.sh build"
    cp -r "$work/data/tls" "$work/tls.before"
    qemu-aarch64-static -L /usr/aarch64-linux-gnu "$work/tether" pair --offline "$work/data" \
        --role admin --name owner --host "$host" > "$work/pairing.txt" || die "pair: tether pair --offline failed"
    # The code, and the server certificate if the host name made it reissue.
    local f changes=()
    changes+=("rm /owner-pairing.json" "write $work/data/owner-pairing.json /owner-pairing.json")
    changes+=("sif /owner-pairing.json uid $data_uid" "sif /owner-pairing.json gid $data_uid" "sif /owner-pairing.json mode 0100600")
    for f in "$work"/data/tls/*; do
        f=$(basename "$f")
        cmp -s "$work/data/tls/$f" "$work/tls.before/$f" && continue
        changes+=("rm /tls/$f" "write $work/data/tls/$f /tls/$f" "sif /tls/$f uid $data_uid" "sif /tls/$f gid $data_uid")
        case "$f" in *.key) changes+=("sif /tls/$f mode 0100600") ;; *) changes+=("sif /tls/$f mode 0100644") ;; esac
    done
    printf '%s\n' "${changes[@]}" | debugfs -w -f - "$work/data.ext4" >/dev/null 2>&1
    debugfs -R 'stat /owner-pairing.json' "$work/data.ext4" 2>/dev/null | grep -q "User: *$data_uid" ||
        die "pair: writing the code into the data partition failed"
    dd if="$work/data.ext4" of="$img" bs=512 seek="$data_start" conv=notrunc status=none
    sync "$img"
    cat "$work/pairing.txt"
    local out; out="${img%.img}.pairing.txt"
    install -m 0600 "$work/pairing.txt" "$out"
    say "the image's owner code is replaced (the old one no longer works); also in $out"
}
