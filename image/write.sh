# shellcheck shell=bash
# `flash.sh write [--yes] IMG DEVICE`: write an appliance image to an SD card (or USB stick)
# and verify it by reading it back. Sourced by flash.sh; defines `flash_write` and `_fw_*`
# helpers. flash_write runs in a subshell, so its strict mode, traps and exits stay its own.
#
# IMG is a raw image (`*.img`) or a zstd-compressed one (`*.img.zst`, decompressed on the fly).
# DEVICE is a whole block device: /dev/sdX, /dev/mmcblkN, or a /dev/disk/by-id/... link to one.
#
# Exit status:
#   0  written and verified
#   2  refused or aborted: nothing was written (usage, unsafe device, bad image, "no" at the prompt)
#   1  the write or the verification failed: the device holds a broken image, write it again
#
# Before anything is written, and again just before the write (after the prompt), the device
# must be:
#   - a block device, and a whole disk (not a partition);
#   - removable: sysfs `removable` is 1, or it sits on USB, or it is an mmcblk SD card
#     (`device/type` = SD; built-in readers say removable=0, eMMC says MMC and is refused);
#   - not a disk the running system runs from (the disks under /, /boot, /boot/firmware,
#     /boot/efi and /usr, through partitions and device-mapper/md slaves);
#   - not in use: no partition mounted (/proc/self/mountinfo, by major:minor and by source),
#     none in /proc/swaps, no holders (dm-crypt, LVM, md RAID);
#   - writable, with a medium in it, and at least as large as the (decompressed) image.
#
# All of it is read from sysfs and procfs (no lsblk), under these roots:
#   TETHER_SYSFS   (default /sys)    TETHER_PROCFS  (default /proc)
#
# Test seams (tests/image/test_write.sh; sudo drops them from the environment):
#   TETHER_FLASH_TEST_DEVICE_FILE=1  DEVICE may be a regular file standing for a block device;
#                                    its sysfs name is TETHER_FLASH_TEST_NAME (e.g. sdb). Every
#                                    other check still runs, against the sysfs/procfs roots.
#   TETHER_FLASH_TEST_AFTER_WRITE    with the above only: a bash command run after the write and
#                                    `sync`, before the read-back, with the device file as $1
#                                    (the test corrupts a byte there to see verification fail).

_fw_say() { printf '%s\n' "$*" >&2; }
_fw_die() {
    local code=$1
    shift
    printf 'flash.sh write: %s\n' "$*" >&2
    exit "$code"
}
_fw_refuse() { _fw_die 2 "refusing: $*"; }

# The first line of a sysfs/procfs attribute, blanks trimmed; "" when it doesn't exist.
_fw_attr() {
    local line=""
    if [[ -r $1 ]]; then IFS= read -r line <"$1" || true; fi
    line=${line#"${line%%[![:space:]]*}"}
    printf '%s' "${line%"${line##*[![:space:]]}"}"
}

_fw_human() {
    awk -v b="$1" 'BEGIN { split("B KiB MiB GiB TiB PiB", u, " "); i = 1
        while (b >= 1024 && i < 6) { b /= 1024; i++ }
        if (i == 1) printf "%d B", b; else printf "%.1f %s", b, u[i] }'
}

_fw_now_ms() { date +%s%3N; }
_fw_secs() { awk -v ms="$1" 'BEGIN { printf "%.1f s", ms / 1000 }'; }

# The kernel name (sdb, mmcblk0, ...) of a block device node, found by its major:minor.
_fw_device_name() {
    local dev=$1 hex maj min link
    if [[ ${TETHER_FLASH_TEST_DEVICE_FILE:-} == 1 && -f $dev && ! -b $dev ]]; then
        [[ -n ${TETHER_FLASH_TEST_NAME:-} ]] || _fw_die 2 "test seam: TETHER_FLASH_TEST_NAME is not set"
        printf '%s' "$TETHER_FLASH_TEST_NAME"
        return 0
    fi
    [[ -e $dev ]] || _fw_refuse "$dev does not exist; give the SD card's whole device, e.g. /dev/sdX or /dev/mmcblk0 (see lsblk)"
    [[ -b $dev ]] || _fw_refuse "$dev is not a block device; give the SD card's whole device, e.g. /dev/sdX or /dev/mmcblk0 (see lsblk)"
    hex=$(stat -L -c '%t %T' -- "$dev")
    read -r maj min <<<"$hex"
    [[ $maj =~ ^[0-9a-f]+$ && $min =~ ^[0-9a-f]+$ ]] || _fw_refuse "can't read the device number of $dev"
    link="$_fw_sys/dev/block/$((16#$maj)):$((16#$min))"
    [[ -e $link ]] || _fw_refuse "$dev ($((16#$maj)):$((16#$min))) is not in $_fw_sys/dev/block, so it can't be checked"
    link=$(readlink -f -- "$link")
    printf '%s' "${link##*/}"
}

_fw_is_partition() { [[ -e $_fw_sys/class/block/$1/partition ]]; }

_fw_parent_of() {
    local path
    path=$(readlink -f -- "$_fw_sys/class/block/$1")
    path=${path%/*}
    printf '%s' "${path##*/}"
}

# The kernel name of a major:minor ("" when sysfs doesn't know it, e.g. btrfs's anonymous 0:N).
_fw_name_of_majmin() {
    local link=$_fw_sys/dev/block/$1
    [[ -e $link ]] || return 0
    link=$(readlink -f -- "$link")
    printf '%s' "${link##*/}"
}

# The kernel name a mount or swap source like /dev/sdb1 or /dev/mapper/root stands for ("" if
# it isn't a /dev path or sysfs doesn't know it).
_fw_name_of_source() {
    local src=$1 n
    [[ $src == /dev/?* ]] || return 0
    n=$(readlink -f -- "$src" 2>/dev/null) || n=$src
    printf '%s' "${n##*/}"
}

# ours[KEY] for the associative array `ours` of _fw_check_device, "" for a missing or empty KEY.
_fw_ours() {
    if [[ -n $1 ]]; then printf '%s' "${ours[$1]:-}"; fi
}

# The whole disks a block device lives on: a partition's disk, a dm/md device's slaves' disks.
_fw_whole_disks() {
    local n=$1 depth=${2:-0} s
    if ((depth > 8)) || [[ -z $n ]]; then return 0; fi
    if _fw_is_partition "$n"; then
        _fw_whole_disks "$(_fw_parent_of "$n")" $((depth + 1))
    elif compgen -G "$_fw_sys/class/block/$n/slaves/*" >/dev/null; then
        for s in "$_fw_sys/class/block/$n/slaves/"*; do
            _fw_whole_disks "${s##*/}" $((depth + 1))
        done
    else
        printf '%s\n' "$n"
    fi
}

# "usb", "mmc", "nvme" or "" (SATA/SCSI/virtual/other), the way lsblk's TRAN column sees it.
_fw_transport() {
    local path
    case $1 in
        mmcblk*) printf mmc; return 0 ;;
        nvme*) printf nvme; return 0 ;;
    esac
    path=$(readlink -f -- "$_fw_sys/block/$1")
    if [[ $path == */usb[0-9]*/* ]]; then printf usb; fi
}

_fw_partitions() {
    local p
    for p in "$_fw_sys/block/$1/$1"*; do
        if [[ -e $p/partition ]]; then printf '%s\n' "${p##*/}"; fi
    done
}

# "vendor model" for SCSI/USB disks, "SD name" for mmc cards.
_fw_model() {
    local d=$_fw_sys/block/$1/device m
    m="$(_fw_attr "$d/vendor") $(_fw_attr "$d/model")"
    if [[ $m == " " ]]; then m="$(_fw_attr "$d/type") $(_fw_attr "$d/name")"; fi
    m=${m# }
    m=${m% }
    printf '%s' "${m:-unknown}"
}

# Every check but the image size; refuses (exit 2) at the first that fails.
_fw_check_device() {
    local name=$1 dev=$2 sys=$_fw_sys/block/$1 removable tran type mi line majmin mp src n d
    local -A ours=()
    if _fw_is_partition "$name"; then
        _fw_refuse "$dev is a partition ($name of $(_fw_parent_of "$name")); give the whole device: /dev/$(_fw_parent_of "$name")"
    fi
    [[ -d $sys ]] || _fw_refuse "$dev ($name) is not a whole disk in $_fw_sys/block; give the SD card's whole device (see lsblk)"

    removable=$(_fw_attr "$sys/removable")
    tran=$(_fw_transport "$name")
    type=""
    if [[ $name == mmcblk* ]]; then type=$(_fw_attr "$sys/device/type"); fi
    if ! [[ $removable == 1 || $tran == usb || ($name == mmcblk* && $type == SD) ]]; then
        _fw_refuse "$dev ($name, $(_fw_model "$name")) is not removable (removable=${removable:-?}, transport ${tran:-internal}${type:+, type $type}); write to an SD card or a USB device"
    fi

    # The disks the running system runs from.
    mi=$_fw_proc/self/mountinfo
    [[ -r $mi ]] || _fw_refuse "can't read $mi to see what is mounted"
    while IFS= read -r line; do
        read -r _ _ majmin _ mp _ <<<"$line"
        case $mp in /|/boot|/boot/firmware|/boot/efi|/usr) ;; *) continue ;; esac
        src=${line#* - }
        read -r _ src _ <<<"$src"
        n=$(_fw_name_of_majmin "$majmin")
        [[ -n $n ]] || n=$(_fw_name_of_source "$src")
        while IFS= read -r d; do
            if [[ $d == "$name" ]]; then
                _fw_refuse "$dev is the disk this system runs from (it holds $mp, via $n); pick the SD card's device (see lsblk)"
            fi
        done < <(_fw_whole_disks "$n")
    done <"$mi"

    # In use: the disk and its partitions by major:minor and by name.
    ours[$name]=$name
    majmin=$(_fw_attr "$sys/dev")
    if [[ -n $majmin ]]; then ours[$majmin]=$name; fi
    while IFS= read -r n; do
        ours[$n]=$n
        majmin=$(_fw_attr "$sys/$n/dev")
        if [[ -n $majmin ]]; then ours[$majmin]=$n; fi
    done < <(_fw_partitions "$name")
    for n in "${ours[@]}"; do
        d=$sys
        [[ $n == "$name" ]] || d=$sys/$n
        if compgen -G "$d/holders/*" >/dev/null; then
            set -- "$d/holders/"*
            _fw_refuse "$n is in use by ${1##*/} (device-mapper, LVM, dm-crypt or md RAID); close that first (e.g. cryptsetup close, vgchange -an, mdadm --stop)"
        fi
    done
    while IFS= read -r line; do
        read -r _ _ majmin _ mp _ <<<"$line"
        src=${line#* - }
        read -r _ src _ <<<"$src"
        n=$(_fw_ours "$majmin")
        [[ -n $n ]] || n=$(_fw_ours "$(_fw_name_of_source "$src")")
        if [[ -n $n ]]; then
            _fw_refuse "$n is mounted at ${mp//\\040/ }; unmount every partition of $dev first (umount ${mp//\\040/ })"
        fi
    done <"$mi"
    if [[ -r $_fw_proc/swaps ]]; then
        while read -r src _; do
            [[ $src == Filename ]] && continue
            n=$(_fw_ours "$(_fw_name_of_source "$src")")
            if [[ -n $n ]]; then _fw_refuse "$n is in use as swap; swapoff $src first"; fi
        done <"$_fw_proc/swaps"
    fi

    if [[ $(_fw_attr "$sys/ro") == 1 ]]; then
        _fw_refuse "$dev is read-only (an SD card's lock switch?); unlock it and try again"
    fi
    [[ -w $dev ]] || _fw_refuse "can't open $dev for writing (permission denied); run it with sudo"
}

# Refuses a device smaller than LEN bytes, or one with no medium in it.
_fw_check_size() {
    local name=$1 dev=$2 len=$3 sectors
    sectors=$(_fw_attr "$_fw_sys/block/$name/size")
    [[ $sectors =~ ^[0-9]+$ ]] || _fw_refuse "can't read the size of $dev from $_fw_sys/block/$name/size"
    ((sectors > 0)) || _fw_refuse "$dev has no medium (size 0); insert the SD card and try again"
    if ((sectors * 512 < len)); then
        _fw_refuse "$dev is too small: $(_fw_human $((sectors * 512))) ($((sectors * 512)) bytes), the image is $(_fw_human "$len") ($len bytes); use a larger card"
    fi
}

# The image as a stream of raw bytes.
_fw_source() {
    if [[ $2 == 1 ]]; then zstd -dcq -- "$1"; else cat -- "$1"; fi
}

_fw_show_device() {
    local name=$1 dev=$2 sys=$_fw_sys/block/$1 p tran line=""
    tran=$(_fw_transport "$name")
    _fw_say "  device:     $dev ($name${tran:+, $tran})"
    _fw_say "  model:      $(_fw_model "$name")"
    p=$(_fw_attr "$sys/size")
    _fw_say "  size:       $(_fw_human $((${p:-0} * 512))) ($((${p:-0} * 512)) bytes)"
    while IFS= read -r p; do
        line=$(_fw_attr "$sys/$p/size")
        line="$p  $(_fw_human $((${line:-0} * 512)))"
        if [[ -b $dev && -r /run/udev/data/b$(_fw_attr "$sys/$p/dev") ]]; then
            line+="  $(sed -n 's/^E:ID_FS_TYPE=//p; s/^E:ID_FS_LABEL=//p' "/run/udev/data/b$(_fw_attr "$sys/$p/dev")" | tr '\n' ' ')"
        fi
        _fw_say "  partition:  $line"
    done < <(_fw_partitions "$name")
    [[ -n $line ]] || _fw_say "  partitions: none"
}

flash_write() (
    set -euo pipefail
    _fw_sys=${TETHER_SYSFS:-/sys}
    _fw_proc=${TETHER_PROCFS:-/proc}
    local usage="usage: flash.sh write [--yes] IMG DEVICE   (IMG: .img or .img.zst; DEVICE: /dev/sdX, /dev/mmcblkN)"
    local yes=0 zst=0 img dev name tmp len sum readback answer t0 t1 t2 t3 pid
    local -a args=() ddflags rdflags

    while (($#)); do
        case $1 in
            -y | --yes) yes=1 ;;
            -h | --help) printf '%s\n' "$usage"; exit 0 ;;
            --) shift; args+=("$@"); break ;;
            -*) _fw_die 2 "unknown option $1; $usage" ;;
            *) args+=("$1") ;;
        esac
        shift
    done
    ((${#args[@]} == 2)) || _fw_die 2 "$usage"
    img=${args[0]}
    dev=${args[1]}

    [[ -f $img && -r $img ]] || _fw_refuse "$img is not a readable image file"
    case $img in
        *.zst)
            zst=1
            command -v zstd >/dev/null || _fw_refuse "$img is zstd-compressed and zstd is not installed (apt-get install zstd)"
            ;;
        *.gz | *.xz | *.bz2 | *.zip | *.7z) _fw_refuse "$img: only raw .img and .img.zst images are supported; decompress it first" ;;
    esac

    # No step below relies on `set -e` to stop it: flash.sh may call this where errexit is
    # ignored (`flash_write ... || ...`), and then a failed check must still stop everything.
    name=$(_fw_device_name "$dev") || exit $?
    [[ -n $name ]] || _fw_refuse "can't tell which device $dev is"
    _fw_check_device "$name" "$dev"

    tmp=$(mktemp -d) || _fw_die 2 "mktemp failed"
    trap 'rm -rf -- "$tmp"' EXIT

    # One pass over the image before touching the device: its length (for .zst, of the
    # decompressed stream) and SHA-256. A broken .zst is refused here, with nothing written.
    _fw_say "reading $img ..."
    t0=$(_fw_now_ms)
    if ((zst)); then
        mkfifo "$tmp/len" || _fw_die 2 "mkfifo failed"
        wc -c <"$tmp/len" >"$tmp/len.txt" &
        pid=$!
        if ! zstd -dcq -- "$img" | tee "$tmp/len" | sha256sum >"$tmp/sum.txt"; then
            wait "$pid" || true
            _fw_refuse "$img does not decompress (a truncated or corrupt .zst?); build or download it again"
        fi
        wait "$pid" || _fw_die 2 "counting the bytes of $img failed"
        len=$(<"$tmp/len.txt")
    else
        len=$(stat -L -c %s -- "$img")
        sha256sum <"$img" >"$tmp/sum.txt" || _fw_die 2 "reading $img failed"
    fi
    sum=""
    read -r sum _ <"$tmp/sum.txt" || true
    t1=$(_fw_now_ms)
    [[ $len =~ ^[0-9]+$ && $sum =~ ^[0-9a-f]{64}$ ]] || _fw_die 2 "reading $img failed"
    ((len > 0)) || _fw_refuse "$img is empty"
    printf 'image:     %s, %s (%s bytes), sha256 %s (read in %s)\n' "$img" "$(_fw_human "$len")" "$len" "$sum" "$(_fw_secs $((t1 - t0)))"
    _fw_check_size "$name" "$dev" "$len"

    if ((!yes)); then
        _fw_say ""
        _fw_say "This ERASES $dev and writes $img ($(_fw_human "$len")) to it:"
        _fw_show_device "$name" "$dev"
        _fw_say ""
        printf 'Everything on %s will be lost. Type "%s" to go on, anything else stops: ' "$dev" "$name" >&2
        answer=""
        IFS= read -r answer || true
        if [[ ! -t 0 ]]; then _fw_say ""; fi
        if [[ $answer != "$name" && $answer != "$dev" && $answer != "/dev/$name" ]]; then
            _fw_die 2 "aborted: nothing was written to $dev"
        fi
    fi
    # Again, right before writing: reading the image or the prompt took time, and a desktop
    # may have mounted the card meanwhile.
    _fw_check_device "$name" "$dev"
    _fw_check_size "$name" "$dev" "$len"

    # bs=4M, whole 4 MiB blocks from the pipe (iflag=fullblock), no page cache for a real
    # device (oflag=direct; dd drops it for a final partial block), fsync before dd exits.
    ddflags=(bs=4M iflag=fullblock "conv=fsync,notrunc")
    if [[ -b $dev ]]; then ddflags+=(oflag=direct); fi
    trap '_fw_die 1 "interrupted: $dev holds an incomplete image; write it again"' INT TERM
    _fw_say "writing $(_fw_human "$len") to $dev ..."
    t1=$(_fw_now_ms)
    if command -v pv >/dev/null; then
        _fw_source "$img" "$zst" | pv -s "$len" | dd of="$dev" "${ddflags[@]}" status=none ||
            _fw_die 1 "writing $dev failed (see above); its content is now undefined: write it again or try another card"
    else
        _fw_source "$img" "$zst" | dd of="$dev" "${ddflags[@]}" status=progress ||
            _fw_die 1 "writing $dev failed (see above); its content is now undefined: write it again or try another card"
    fi
    sync
    t2=$(_fw_now_ms)
    printf 'written:   %s in %s (%s/s, including sync)\n' "$dev" "$(_fw_secs $((t2 - t1)))" \
        "$(_fw_human $((len * 1000 / ((t2 - t1) > 0 ? (t2 - t1) : 1))))"

    if [[ ${TETHER_FLASH_TEST_DEVICE_FILE:-} == 1 && ! -b $dev && -n ${TETHER_FLASH_TEST_AFTER_WRITE:-} ]]; then
        bash -c "$TETHER_FLASH_TEST_AFTER_WRITE" flash-test-after-write "$dev"
    fi

    # Read back exactly the image's length, from the device rather than the page cache:
    # drop the device's buffers, and read with O_DIRECT when the length allows it.
    _fw_say "verifying: reading $(_fw_human "$len") back from $dev ..."
    rdflags=(bs=4M iflag=count_bytes count="$len")
    if [[ -b $dev ]]; then
        if command -v blockdev >/dev/null; then blockdev --flushbufs "$dev" 2>/dev/null || true; fi
        if ((len % 512 == 0)); then rdflags=(bs=4M "iflag=count_bytes,direct" count="$len"); fi
    fi
    if command -v pv >/dev/null; then
        dd if="$dev" "${rdflags[@]}" status=none | pv -s "$len" | sha256sum >"$tmp/readback.txt" ||
            _fw_die 1 "reading $dev back failed (see above); the card may be faulty: write it again or try another card"
    else
        dd if="$dev" "${rdflags[@]}" status=progress | sha256sum >"$tmp/readback.txt" ||
            _fw_die 1 "reading $dev back failed (see above); the card may be faulty: write it again or try another card"
    fi
    readback=""
    read -r readback _ <"$tmp/readback.txt" || true
    t3=$(_fw_now_ms)
    trap - INT TERM

    printf 'read back: %s bytes, sha256 %s (in %s)\n' "$len" "$readback" "$(_fw_secs $((t3 - t2)))"
    if [[ $readback != "$sum" ]]; then
        _fw_die 1 "verification FAILED: $dev does not hold the image (sha256 differs); write it again, and if it fails again the card is faulty or fake"
    fi
    printf 'verified:  %s holds the image (write + verify took %s). Remove the card and boot the board from it.\n' "$dev" "$(_fw_secs $((t3 - t1)))"
)
