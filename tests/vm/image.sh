#!/usr/bin/env bash
# The image boot test: builds the rpi4 image with flash.sh, boots its disk under
# qemu-system-aarch64 (-M virt, TCG, the image's own kernel and initrd given directly, the
# image's root partition as root), and checks from outside, over forwarded loopback ports:
#
#   - tether.service is active with the sim (TETHER_SIM=1 from the kernel command line;
#     there is no UDC in the VM, so tether-gadget.service is skipped by its condition)
#   - HTTPS answers with a certificate chaining to the CA whose fingerprint flash.sh printed
#   - the owner's pairing URL redeems once and only once
#   - systemd-analyze security puts tether.service at or under 2.0
#   - the root is read-only and the data partition was grown to fill the disk
#   - the aarch64 binary runs `tether doctor --json` under qemu-user (and, with no Tesseract
#     there, says OCR is unavailable and which package to add: the engine is dlopened)
#   - the image carries Tesseract and its eng, deu, fra data: the daemon's `hello` (over
#     HTTPS, with the owner's token) says capabilities.text.available with eng; `find_text`
#     finds "Settings" on the sim's home screen through the OCR worker running inside
#     tether.service's sandbox (as tether, nice 10, its address-space limit); `tether
#     doctor` on the appliance agrees. Should the read go past the shipped deadline (TCG is
#     far slower than the board), it is retried with a longer one (a runtime drop-in)
#
# Run by tests/vm/run.sh image (and all). Uses the flash.sh base-rootfs cache.
# Prints "tests/vm: suite image: PASS" or FAIL with the console's last lines.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tether_bin=${TETHER_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/tether}
work=$(mktemp -d)
qemu_pid=""
cleanup() {
    [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
say() { echo "tests/vm: image: $* ($(( $(date +%s) - started )) s)"; }
fail() {
    say "FAIL: $*"
    if [ -f "$work/console.log" ]; then
        echo "--- last lines of the console ---"
        tail -n 60 "$work/console.log"
    fi
    echo "tests/vm: suite image: FAIL"
    exit 1
}
check() { echo "image: ok   $*"; }

need=()
command -v qemu-system-aarch64 >/dev/null || need+=(qemu-system-arm)
[ -f /usr/lib/u-boot/qemu_arm64/u-boot.bin ] || need+=(u-boot-qemu)
command -v mkimage >/dev/null || need+=(u-boot-tools)
command -v rauc >/dev/null || need+=(rauc)
command -v mksquashfs >/dev/null || need+=(squashfs-tools)
command -v resize2fs >/dev/null || need+=(e2fsprogs)
command -v ssh >/dev/null || need+=(openssh-client)
command -v curl >/dev/null || need+=(curl)
command -v openssl >/dev/null || need+=(openssl)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v fakeroot >/dev/null || need+=(fakeroot)
command -v mcopy >/dev/null || need+=(mtools)
command -v mkfs.vfat >/dev/null || need+=(dosfstools)
command -v fdtput >/dev/null || need+=(device-tree-compiler)
# flash.sh's own tools (it names what is missing, but the suite installs them itself).
command -v sfdisk >/dev/null || need+=(fdisk)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
command -v depmod >/dev/null || need+=(kmod)
command -v zstd >/dev/null || need+=(zstd)
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -x "$tether_bin" ] || (cd "$root" && cargo build -p tether --locked -q)

# --- build --------------------------------------------------------------------------------
ssh-keygen -q -t ed25519 -N '' -f "$work/key" -C tether-image-test
say "building the rpi4 image"
t0=$(date +%s)
# The owner's update keys for this run only (never the builder's own ~/.config ones).
"$root/flash.sh" keygen --dir "$work/keys" 2> "$work/keygen.err" || { cat "$work/keygen.err"; fail "flash.sh keygen failed"; }
# The `lab` profile (dev without debug info): this checks the image, and a release build's
# thin LTO over every dependency costs minutes each run (flash.sh's default is release).
TETHER_IMAGE_PROFILE=${TETHER_IMAGE_PROFILE:-lab} \
TETHER_IMAGE_TARGET_DIR=${TETHER_IMAGE_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-image/target} \
    "$root/flash.sh" build --board rpi4 --out "$work/out" --ssh-key "$work/key.pub" --version lab-1 \
        --update-keys "$work/keys" > "$work/build.out" 2> "$work/build.err" ||
    { tail -n 40 "$work/build.err"; fail "flash.sh build failed"; }
build_s=$(( $(date +%s) - t0 ))
grep -E '^\[[0-9]/[0-9]\]' "$work/build.err" | sed 's/^/    /'
img="$work/out/tether-rpi4.img"
[ -f "$img" ] && [ -f "$img.zst" ] || fail "no image or no .zst"
url=$(grep '^https://' "$work/build.out" | tail -1)
[[ "$url" == https://tether.local/pair#code=*'&fp='* ]] || fail "flash.sh printed no pairing URL (got '$url')"
fp=${url##*&fp=}
code=${url#*#code=}; code=${code%%&*}
check "flash.sh build --board rpi4 (${build_s} s): $(du -h --apparent-size "$img" | cut -f1) raw, $(du -h "$img.zst" | cut -f1) zstd"
# The CSI bridge: our overlay on the FAT partition, named in config.txt.
boot_start=$(sfdisk -J "$img" | python3 -c 'import json,sys; print(json.load(sys.stdin)["partitiontable"]["partitions"][0]["start"])')
fat="$img@@$(( boot_start * 512 ))"
mdir -i "$fat" ::slot-a/overlays/tether-tc358743.dtbo >/dev/null 2>&1 || fail "no slot-a/overlays/tether-tc358743.dtbo on the boot partition"
mtype -i "$fat" ::config.txt > "$work/config.txt" || fail "no config.txt on the boot partition"
grep -qx 'dtoverlay=tether-tc358743' "$work/config.txt" || fail "config.txt does not load the tc358743 overlay"
check "boot partition: slot-a/overlays/tether-tc358743.dtbo, loaded by config.txt"
# The Pi's A/B layout (tryboot): slot A's files under slot-a/, config.txt's block pointing a
# normal boot at them and a tryboot at slot-b/ (empty until an update).
for f in vmlinuz initrd.img bcm2711-rpi-4-b.dtb cmdline.txt; do
    mdir -i "$fat" "::slot-a/$f" >/dev/null 2>&1 || fail "no slot-a/$f on the boot partition"
done
mdir -i "$fat" ::slot-b >/dev/null 2>&1 && fail "slot-b/ exists before any update"
mtype -i "$fat" ::slot-a/cmdline.txt | grep -q "root=PARTUUID=74657468-02 tether.slot=a tether.boot=tryboot" ||
    fail "slot-a/cmdline.txt: $(mtype -i "$fat" ::slot-a/cmdline.txt)"
python3 - "$work/config.txt" <<'PY' || fail "config.txt's A/B block: $(tail -n 9 "$work/config.txt")"
import sys
lines = open(sys.argv[1]).read().splitlines()
assert "kernel=vmlinuz" in lines and "initramfs initrd.img" in lines, lines
i = lines.index("# tether: A/B slots (tether bootslot rewrites this block; docs/updates.md)")
assert lines[i + 1:i + 7] == ["[all]", "os_prefix=slot-a/", "[tryboot]", "os_prefix=slot-b/", "[all]",
                              "# tether: end of A/B slots"], lines[i:]
PY
check "boot partition: slot A's kernel, initrd, device trees and cmdline.txt (tether.boot=tryboot) in slot-a/; config.txt boots slot-a/ normally, slot-b/ on a tryboot"

# The update bundles (tests/vm/update.sh), from the same build, before HOME is the test's.
# shellcheck source=tests/vm/update.sh
source "$root/tests/vm/update.sh"
update_bundles

# --- the aarch64 binary under qemu-user ------------------------------------------------------
bin="$work/out/tether-rpi4.aarch64"
doctor=$(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$bin" doctor --json --board "$root/board/rpi4/board.toml") ||
    fail "tether doctor --json under qemu-user failed"
echo "$doctor" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["version"], d
assert d["board"]["name"] == "rpi4", d["board"]
assert d["board"]["udc"] == "fe980000.usb", d["board"]
assert d["board"]["csi"]["overlay"] == "tc358743-i2c0mux", d["board"]
assert d["decoders"]["h264"], d["decoders"]
# No OCR here, and doctor says which packages would bring it. (Its worker, started with a
# clean environment, cannot find the aarch64 loader under qemu-user: it exits at start.)
ocr = d["ocr"]
assert ocr["enabled"] and not ocr["available"], ocr
assert "libtesseract5" in ocr["missing_packages"], ocr
' || fail "doctor --json: unexpected report: $doctor"
# The worker itself, with no libtesseract.so.5 in the cross toolchain library root: the
# engine is dlopened, so it starts and says so in its hello instead of failing to load.
worker_hello=$(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$bin" ocr-worker < /dev/null 2>/dev/null | head -n1)
echo "$worker_hello" | python3 -c '
import json, sys
h = json.load(sys.stdin)["hello"]
assert not h["available"] and h["version"] is None, h
assert "libtesseract.so.5" in h["problem"] and "libtesseract5" in h["problem"], h
' || fail "ocr-worker without libtesseract under qemu-user: $worker_hello"
check "aarch64 tether doctor --json under qemu-user names the board; its ocr-worker, with no libtesseract.so.5 there, starts and says to install libtesseract5"

# --- boot -----------------------------------------------------------------------------------
# A copy with 1 GiB more at the end: the first boot grows the data partition into it.
cp --sparse=always "$img" "$work/disk.img"
# flash.sh pair on the copy: a new owner code against the same CA; the build's code is void.
"$root/flash.sh" pair "$work/disk.img" > "$work/pair.out" 2> "$work/pair.err" ||
    { cat "$work/pair.err"; fail "flash.sh pair failed"; }
new_url=$(grep '^https://' "$work/pair.out" | tail -1)
[[ "$new_url" == *"&fp=$fp" ]] || fail "flash.sh pair changed the fingerprint: $new_url"
old_code=$code
code=${new_url#*#code=}; code=${code%%&*}
[ "$code" != "$old_code" ] || fail "flash.sh pair printed the same code"
check "flash.sh pair replaces the owner code in the image, same CA"
truncate -s +1G "$work/disk.img"
# The lab's kernel arguments ride in the boot state U-Boot reads (tether.env on the FAT
# partition; the boot script adds tether_extra_args to every boot, and `tether bootslot`
# keeps the variable when it rewrites the file): QEMU's console, and the sim.
mtype -i "$fat" ::tether.env > "$work/tether.env" || fail "no tether.env on the boot partition"
grep -qx 'tether_order=a b' "$work/tether.env" || fail "tether.env does not start with slot a first: $(cat "$work/tether.env")"
echo "tether_extra_args=console=ttyAMA0 systemd.setenv=TETHER_SIM=1 tether.sim" >> "$work/tether.env"
boot_start=$(sfdisk -J "$work/disk.img" | python3 -c 'import json,sys; print(json.load(sys.stdin)["partitiontable"]["partitions"][0]["start"])')
mcopy -o -i "$work/disk.img@@$(( boot_start * 512 ))" "$work/tether.env" ::tether.env || fail "could not write tether.env"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
https_port=$(free_port)
ssh_port=$(free_port)
# start_vm: boots the disk through Debian's qemu_arm64 U-Boot (-bios), which runs the
# image's boot.scr (tether's A/B selection) from the FAT partition: the board's own boot
# path, not a kernel handed over by QEMU. A guest reboot resets the machine and goes
# through U-Boot again (no -no-reboot); the console log is appended across restarts.
start_vm() {
    # restrict=on: the guest reaches nothing but the forwarded ports (no network beyond loopback).
    qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 1024 -accel tcg,thread=multi \
        -nodefaults -no-user-config -display none \
        -chardev "file,id=con,path=$work/console.log,append=on" -serial chardev:con \
        -bios /usr/lib/u-boot/qemu_arm64/u-boot.bin \
        -drive "file=$work/disk.img,if=none,format=raw,id=disk,cache=writeback" -device virtio-blk-pci,drive=disk \
        -netdev "user,id=net,restrict=on,hostfwd=tcp:127.0.0.1:$https_port-:443,hostfwd=tcp:127.0.0.1:$ssh_port-:22" \
        -device virtio-net-pci,netdev=net &
    qemu_pid=$!
}
say "booting under qemu-system-aarch64 -M virt (TCG) through U-Boot; HTTPS on 127.0.0.1:$https_port"
boot_t0=$(date +%s)
start_vm
deadline=$(( $(date +%s) + 600 ))
until curl -sk --max-time 5 -o /dev/null "https://127.0.0.1:$https_port/ca.crt"; do
    kill -0 "$qemu_pid" 2>/dev/null || fail "QEMU exited before HTTPS answered"
    [ "$(date +%s)" -lt "$deadline" ] || fail "HTTPS did not answer within 600 s of boot"
    sleep 2
done
boot_s=$(( $(date +%s) - boot_t0 ))
check "boot to HTTPS: ${boot_s} s (TCG)"

# --- certificate ------------------------------------------------------------------------------
curl -sk "https://127.0.0.1:$https_port/ca.crt" -o "$work/ca.crt"
served_fp=$(openssl x509 -in "$work/ca.crt" -noout -fingerprint -sha256 | cut -d= -f2 | tr -d : | tr 'A-F' 'a-f')
[ "$served_fp" = "$(echo "$fp" | tr 'A-F' 'a-f')" ] || fail "served CA fingerprint $served_fp != printed $fp"
# The server certificate verifies for tether.local against that CA (not just -k).
curl -sS --max-time 10 --cacert "$work/ca.crt" --resolve "tether.local:$https_port:127.0.0.1" \
    -o /dev/null "https://tether.local:$https_port/" || fail "the server certificate does not verify for tether.local"
check "HTTPS serves a certificate for tether.local from the CA flash.sh printed ($fp)"

# --- pairing: once and only once ----------------------------------------------------------------
export HOME="$work/home"
mkdir -p "$HOME"
if "$tether_bin" login "https://127.0.0.1:$https_port/pair#code=$old_code&fp=$fp" > "$work/login0.out" 2>&1; then
    fail "the code flash.sh pair replaced still redeems"
fi
local_url="https://127.0.0.1:$https_port/pair#code=$code&fp=$fp"
"$tether_bin" login "$local_url" > "$work/login1.out" 2>&1 || { cat "$work/login1.out"; fail "the pairing URL did not redeem"; }
grep -q "owner" "$work/login1.out" "$HOME/.config/tether/hosts.toml" 2>/dev/null || { cat "$work/login1.out"; fail "login did not make the owner token"; }
if "$tether_bin" login "$local_url" > "$work/login2.out" 2>&1; then
    fail "the pairing URL redeemed twice"
fi
grep -qi "used\|unknown\|expired" "$work/login2.out" || { cat "$work/login2.out"; fail "the second redemption failed without saying why"; }
check "the owner's pairing URL redeems once (admin token 'owner'), the second time and the replaced code are refused"

# --- inside: units, hardening, read-only root, grown data ------------------------------------------
ssh_do() {
    ssh -q -i "$work/key" -p "$ssh_port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o ConnectTimeout=10 -o BatchMode=yes root@127.0.0.1 "$@"
}
deadline=$(( $(date +%s) + 180 ))
until ssh_do true 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "SSH (provisioned key) did not answer"
    sleep 3
done
state=$(ssh_do systemctl is-active tether.service || true)
[ "$state" = active ] || fail "tether.service is $state"
sim=$(ssh_do "systemctl show -p Environment tether.service; tr '\\0' '\\n' < /proc/\$(systemctl show -p MainPID --value tether.service)/environ | grep TETHER_SIM" || true)
echo "$sim" | grep -q 'TETHER_SIM=1' || fail "the daemon does not run with the sim: $sim"
check "tether.service is active with the sim"
exposure=$(ssh_do "systemd-analyze security tether.service --no-pager" | awk '/Overall exposure level/{print $(NF-2)}')
[ -n "$exposure" ] && awk -v e="$exposure" 'BEGIN{exit !(e <= 2.0)}' || fail "systemd-analyze security: exposure '$exposure' > 2.0"
check "systemd-analyze security tether.service: $exposure (bound 2.0)"

# --- reading the screen: Tesseract in the image, its worker in the unit's sandbox ---------------
# The owner's token (tether login stored it above) for POST /api/rpc.
token=$(python3 - "${XDG_CONFIG_HOME:-$HOME/.config}/tether/hosts.toml" "$https_port" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    hosts = tomllib.load(f).get("host", [])
print(next(h["token"] for h in hosts if h.get("url", "").rstrip("/").endswith(":" + sys.argv[2])))
PY
) || fail "no token for 127.0.0.1:$https_port in the hosts file"
rpc() {
    curl -sS --max-time "${2:-60}" --cacert "$work/ca.crt" --resolve "tether.local:$https_port:127.0.0.1" \
        -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -d "$1" \
        "https://tether.local:$https_port/api/rpc"
}
# wait_ocr: polls hello until capabilities.text is available (prints it, with the seconds
# waited, in $text and $ocr_ready_s). The worker starts in the background with the daemon;
# until its hello, `available` is false and the problem says it is starting. Returns 1 on
# any other unavailability (the problem in $text), fails the suite after 180 s.
wait_ocr() {
    local t0 deadline hello
    t0=$(date +%s); deadline=$(( t0 + 180 ))
    while :; do
        # The daemon may be restarting: HTTPS errors are retried until the deadline.
        if hello=$(rpc '{"method":"hello","protocol":"tether/1","client":"image suite"}' 2>&1) &&
            text=$(echo "$hello" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["result"]["capabilities"]["text"]))' 2>/dev/null); then
            if echo "$text" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["available"] else 1)'; then
                ocr_ready_s=$(( $(date +%s) - t0 ))
                return 0
            fi
            echo "$text" | grep -q 'is starting' || return 1
        else
            text=$hello
        fi
        [ "$(date +%s)" -lt "$deadline" ] || fail "hello: OCR not available within 180 s: $text"
        sleep 3
    done
}
text_summary() {
    echo "$text" | python3 -c '
import json, sys
t = json.load(sys.stdin)
assert t["engine"] == "tesseract" and (t["version"] or "").startswith("5."), t
assert "eng" in t["languages"], t
assert {"eng", "deu", "fra"} <= set(t["installed_languages"]), t
assert not t["problem"], t
print("Tesseract", t["version"], "reading", ",".join(t["languages"]), "of", ",".join(t["installed_languages"]))
'
}
# As shipped: the worker, started by the daemon at boot inside the unit's sandbox, says
# hello. Its start may take longer than the daemon's 20 s start timeout under TCG (several
# times slower than a Pi 4's cores, and the first boot is busy); that alone is not a
# failure here: the lab deadline below restarts the daemon, which starts it again.
shipped=true
if wait_ocr; then
    summary=$(text_summary) || fail "hello: capabilities.text is not what the image carries: $text"
    check "hello: capabilities.text available: $summary (${ocr_ready_s} s after HTTPS answered)"
else
    echo "$text" | grep -q 'did not start within' || fail "hello: OCR is not available in the image: $text"
    echo "image: note: as shipped, the OCR worker did not start within the daemon's start timeout under TCG: $text"
    shipped=false
fi
# find_settings: one read end to end on the sim's home screen, through the sandboxed worker
# ($found, $find_ms).
find_settings() {
    local t0; t0=$(date +%s%N)
    found=$(rpc '{"method":"find_text","text":"Settings"}' 400) || fail "find_text over HTTPS failed: $found"
    find_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}
# lab_deadline: a read past the shipped 10 s deadline is TCG's slowness, not the image's (a
# full read of the 498x1080 sim screen took ~4 s here under TCG; of a 723x1568 screenshot
# ~9 s of aarch64 under qemu-user, ~0.2 s on x86). For this VM only, a runtime drop-in (in
# /run: gone at the next boot) restarts the daemon with a copy of /etc/tether/tether.toml
# that allows 300 s per read; the unit's sandbox is untouched.
lab_deadline() {
    ssh_do sh -s <<'SH' || fail "could not give the daemon the lab's read deadline"
set -e
{ cat /etc/tether/tether.toml; printf '\n[ocr]\nread_deadline_ms = 300000\n'; } > /run/tether-lab.toml
chmod 0644 /run/tether-lab.toml
mkdir -p /run/systemd/system/tether.service.d
printf '[Service]\nExecStart=\nExecStart=/usr/bin/tether serve --config /run/tether-lab.toml\n' \
    > /run/systemd/system/tether.service.d/lab-deadline.conf
systemctl daemon-reload
systemctl restart tether.service
SH
    wait_ocr || fail "hello: OCR is not available in the image: $text"
    summary=$(text_summary) || fail "hello: capabilities.text is not what the image carries: $text"
    check "hello (lab read deadline, daemon restarted): capabilities.text available: $summary (${ocr_ready_s} s after the restart)"
}
how="shipped 10 s read deadline"
if $shipped; then find_settings; fi
if ! $shipped || { echo "$found" | grep -q '"OCR_FAILED"' && echo "$found" | grep -q 'longer than'; }; then
    $shipped && echo "image: note: find_text as shipped went past the read deadline under TCG (${find_ms} ms): $found"
    lab_deadline
    find_settings
    how="lab read deadline"
fi
where=$(echo "$found" | python3 -c '
import json, sys
r = json.load(sys.stdin)["result"]
assert r.get("count", 0) >= 1, r
m = r["matches"][0]
assert m["text"] == "Settings", m
w, h = r["image_size"]["width"], r["image_size"]["height"]
cx, cy = m["center"]["x"], m["center"]["y"]
# The home screen: Settings is the second icon of the first row.
assert w / 4 < cx < w / 2 and cy < h / 4, (m, r["image_size"])
print(f"centre {cx},{cy} of {w}x{h}")
') || fail "find_text Settings: $found"
check "find_text \"Settings\" on the sim's home screen: $where, ${find_ms} ms (TCG, $how)"
# The worker: the daemon's child, as tether, at nice 10 (setpriority, which the unit's
# SystemCallFilter lets back in), with its address-space limit; its memory for the notes.
worker=$(ssh_do sh -s <<'SH'
main=$(systemctl show -p MainPID --value tether.service)
for d in /proc/[0-9]*; do
    [ "$(awk '{print $4}' "$d/stat" 2>/dev/null)" = "$main" ] || continue
    tr '\0' ' ' < "$d/cmdline" | grep -q ocr-worker || continue
    echo "pid=${d#/proc/} user=$(stat -c %U "$d") nice=$(awk '{print $19}' "$d/stat")" \
        "as=$(awk '/^Max address space/{print $4}' "$d/limits")" \
        "rss_kb=$(awk '/^VmRSS/{print $2}' "$d/status") daemon_rss_kb=$(awk '/^VmRSS/{print $2}' "/proc/$main/status")"
done
SH
) || true
[ -n "$worker" ] || fail "no ocr-worker child of the daemon"
echo "$worker" | grep -q ' user=tether ' || fail "the OCR worker does not run as tether: $worker"
echo "$worker" | grep -q ' nice=10 ' || fail "the OCR worker does not run at nice 10 (setpriority refused?): $worker"
echo "$worker" | grep -Eq ' as=[0-9]+ ' || fail "the OCR worker has no address-space limit: $worker"
check "the OCR worker in tether.service: $worker"
doctor_ocr=$(ssh_do "tether doctor --json" | python3 -c 'import json,sys; o=json.load(sys.stdin)["ocr"]; assert o["available"], o; print(o["statement"])') ||
    fail "tether doctor on the appliance: OCR is not available"
check "tether doctor on the appliance: ocr: $doctor_ocr"
ro=$(ssh_do "findmnt -no OPTIONS /")
[[ ",$ro," == *",ro,"* ]] || fail "the root is mounted $ro"
grown_s=""
deadline=$(( $(date +%s) + 120 ))
while :; do
    size=$(ssh_do "df -B1 --output=size /var/lib/tether | tail -1" | tr -d ' ')
    [ "${size:-0}" -gt $((900 * 1024 * 1024)) ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "the data partition was not grown (size $size)"
    sleep 3
done
check "root read-only ($ro); data partition grown to $(numfmt --to=iec-i "$size")B"
users=$(ssh_do "getent passwd tether tether-agent | cut -d: -f1,3,7")
echo "$users" | grep -q '^tether:500:/usr/sbin/nologin$' || fail "tether user: $users"
echo "$users" | grep -q '^tether-agent:501:/usr/sbin/nologin$' || fail "tether-agent user: $users"
ssh_do "grep -q '^root:[!*]' /etc/shadow" || fail "root has a password"
check "users tether/tether-agent without shells; root locked"

# The CSI bridge's modules: built for this kernel, they load (QEMU has no bridge, so they
# bind nothing) and doctor says so instead of failing.
ssh_do "modprobe tc358743 && modprobe bcm2835-unicam" || fail "the CSI modules do not load: $(ssh_do 'dmesg | tail -5')"
mods=$(ssh_do "lsmod" | awk '$1 == "tc358743" || $1 == "bcm2835_unicam" {print $1}' | sort | tr '\n' ' ')
[ "$mods" = "bcm2835_unicam tc358743 " ] || fail "lsmod shows '$mods'"
csi=$(ssh_do "tether doctor" | grep '^  csi:' || true)
echo "$csi" | grep -q "CSI bridge not detected: tc358743 is loaded" || fail "doctor's CSI line: '$csi'"
check "tc358743 and bcm2835-unicam load on the image's kernel; doctor:$(echo "$csi" | cut -d: -f2-3)"

deadline=$(( $(date +%s) + 60 ))
until ssh_do "grep -q 'phone=connected' /etc/avahi/services/tether.service" 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the daemon did not write its mDNS records: $(ssh_do cat /etc/avahi/services/tether.service)"
    sleep 2
done
txt=$(ssh_do "cat /etc/avahi/services/tether.service")
for r in board=rpi4 task=none version=; do
    echo "$txt" | grep -q "<txt-record>$r" || fail "mDNS record $r missing: $txt"
done
[ "$(ssh_do systemctl is-active avahi-daemon.service)" = active ] || fail "avahi-daemon is not active"
check "avahi announces _tether._tcp with the daemon's records (board, phone, task, version)"

# --- updates: A/B slots, signed bundles, trial and rollback (tests/vm/update.sh) ------------------
update_cases

echo "image: build ${build_s} s, boot to HTTPS ${boot_s} s"
echo "tests/vm: suite image: PASS"
