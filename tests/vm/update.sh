# The update cases of the image suite (sourced by tests/vm/image.sh: update_bundles right
# after the image is built, update_cases once it has booted slot A through U-Boot and
# passed its checks). Uses image.sh's helpers and state:
# fail, check, say, ssh_do, start_vm, qemu_pid, work, root, tether_bin, https_port, HOME
# (holding the owner's login), $work/ca.crt, $work/keys (the owner's update keys).
#
#   0. slot A runs lab-1; slot B is empty (bad); a view token made now is used after each case
#   1. a bundle signed by another CA is refused before anything is written to slot B
#   2. power cut mid-install (QEMU killed once RAUC is writing slot B; a bundle of a sparse
#      768 MiB root, quick to upload, slow to write): A boots, data intact
#   3. a bundle whose daemon cannot start: B is tried, judged failed, the board returns to A,
#      and status says the update was rolled back and why
#   4. a good bundle (lab-2): B boots, is judged healthy and marked good
#
# Each case asserts the slot booted, the version the daemon reports and that the token made
# before the updates still works. Timings (bundle size, install, reboot to HTTPS) are printed
# for BENCHMARKS.md.
# shellcheck shell=bash
# shellcheck disable=SC2154  # set by image.sh

api() {
    curl -sS --max-time "${2:-30}" --cacert "$work/ca.crt" --resolve "tether.local:$https_port:127.0.0.1" \
        -H "Authorization: Bearer $lab_token" "https://tether.local:$https_port$1"
}
# status_field PY-EXPR: evaluates an expression over update_status (as `s`) with the lab token.
status_field() {
    api /api/update | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)"
}
# expect_running SLOT VERSION WHAT: the daemon (through the token made before the updates)
# says it runs SLOT with VERSION; `tether status --url` carries the same.
expect_running() {
    local got
    got=$(status_field 's["booted"]["slot"] + " " + s["image"]["version"]') ||
        fail "$3: update_status with the token made before the updates failed"
    [ "$got" = "$1 $2" ] || fail "$3: the daemon runs '$got', expected '$1 $2': $(api /api/update)"
    "$tether_bin" status --url "$url" --json > "$work/status.json" || fail "$3: tether status --url failed"
    python3 -c '
import json, sys
u = json.load(open(sys.argv[1]))["update"]
assert u["slot"] == sys.argv[2] and u["version"] == sys.argv[3], u
' "$work/status.json" "$1" "$2" || fail "$3: status.update is not slot $1 version $2: $(cat "$work/status.json")"
}
# wait_https DEADLINE_S: until HTTPS answers after a (re)boot; sets reboot_s.
wait_https() {
    local t0 deadline
    t0=$(date +%s); deadline=$(( t0 + $1 ))
    until curl -sk --max-time 5 -o /dev/null "https://127.0.0.1:$https_port/ca.crt"; do
        kill -0 "$qemu_pid" 2>/dev/null || fail "QEMU exited"
        [ "$(date +%s)" -lt "$deadline" ] || fail "HTTPS did not answer within $1 s"
        sleep 2
    done
    reboot_s=$(( $(date +%s) - t0 ))
}
# pi_normal: the slot config.txt's A/B block boots normally (the Pi firmware's view; the lab
# boots through U-Boot, but the block follows tether.env on every rpi image).
pi_normal() {
    ssh_do "sed -n '/^# tether: A\/B slots/,/^# tether: end of A\/B slots/p' /boot/firmware/config.txt | sed -n '2,3s#^os_prefix=slot-\(.\)/\$#\1#p'"
}
slot_b_head() { ssh_do "head -c 16777216 /dev/disk/by-partuuid/74657468-03 | sha256sum | cut -c1-16"; }

# --- bundles ---------------------------------------------------------------------------------
update_bundles() {
say "building the update bundles (flash.sh bundle)"
t0=$(date +%s)
TETHER_IMAGE_PROFILE=${TETHER_IMAGE_PROFILE:-lab} \
TETHER_IMAGE_TARGET_DIR=${TETHER_IMAGE_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-image/target} \
    "$root/flash.sh" bundle --board rpi4 --version lab-2 --update-keys "$work/keys" --out "$work/bundles" \
    > "$work/bundle2.out" 2> "$work/bundle2.err" || { tail -n 30 "$work/bundle2.err"; fail "flash.sh bundle (lab-2) failed"; }
bundle_s=$(( $(date +%s) - t0 ))
good="$work/bundles/tether-rpi4-lab-2.raucb"
[ -f "$good" ] || fail "flash.sh bundle made no $good"
rauc info --keyring "$work/keys/ca.cert.pem" --output-format=json "$good" > "$work/info.json" 2>/dev/null ||
    fail "rauc info does not verify the bundle with the owner's CA"
python3 -c '
import json, sys
i = json.load(open(sys.argv[1]))
assert i["compatible"] == "tether-rpi4" and i["version"] == "lab-2", i
' "$work/info.json" || fail "the bundle's manifest: $(cat "$work/info.json")"
check "flash.sh bundle --version lab-2: $(du -h "$good" | cut -f1), signed under the owner's CA, compatible tether-rpi4 (${bundle_s} s)"
# A bundle whose daemon cannot start: a site configuration that does not parse.
mkdir -p "$work/bad-extra/etc/tether"
printf '# shipped broken on purpose by the lab\n[https\nlisten = \n' > "$work/bad-extra/etc/tether/tether.toml"
TETHER_IMAGE_PROFILE=${TETHER_IMAGE_PROFILE:-lab} \
TETHER_IMAGE_TARGET_DIR=${TETHER_IMAGE_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-image/target} \
    "$root/flash.sh" bundle --board rpi4 --version lab-bad --update-keys "$work/keys" --out "$work/bundles" \
    --rootfs-extra "$work/bad-extra" > "$work/bundlebad.out" 2> "$work/bundlebad.err" ||
    { tail -n 30 "$work/bundlebad.err"; fail "flash.sh bundle (lab-bad) failed"; }
bad="$work/bundles/tether-rpi4-lab-bad.raucb"
# A stranger's bundle: right board, another CA.
"$root/flash.sh" keygen --dir "$work/stranger" 2>/dev/null || fail "keygen (stranger) failed"
mkdir -p "$work/stranger-content" "$work/stranger-root"
# Some bytes that do not compress: RAUC wants a squashfs larger than one block.
head -c 1048576 /dev/urandom > "$work/stranger-root/noise"
mke2fs -q -t ext4 -d "$work/stranger-root" "$work/stranger-content/rootfs.ext4" 8M
printf '[update]\ncompatible=tether-rpi4\nversion=stranger\n\n[bundle]\nformat=verity\n\n[image.rootfs]\nfilename=rootfs.ext4\n' \
    > "$work/stranger-content/manifest.raucm"
rauc bundle --cert="$work/stranger/signing.cert.pem" --key="$work/stranger/signing.key.pem" \
    "$work/stranger-content" "$work/bundles/stranger.raucb" > /dev/null 2>&1 || fail "rauc bundle (stranger) failed"
# The bundle the power is cut under: the owner's signature, a 768 MiB root that is almost
# all holes. It uploads in seconds, and RAUC still writes all of it to slot b, which is
# what the cut needs (a whole image would cost an upload of 258 MiB for nothing: it never
# boots).
mkdir -p "$work/cut-content"
mke2fs -q -t ext4 -L tether-root "$work/cut-content/rootfs.ext4" 768M
printf '[update]\ncompatible=tether-rpi4\nversion=lab-cut\n\n[bundle]\nformat=verity\n\n[image.rootfs]\nfilename=rootfs.ext4\n' \
    > "$work/cut-content/manifest.raucm"
rauc bundle --cert="$work/keys/signing.cert.pem" --key="$work/keys/signing.key.pem" \
    "$work/cut-content" "$work/bundles/cut.raucb" > /dev/null 2>&1 || fail "rauc bundle (cut) failed"
}

update_cases() {
url="https://127.0.0.1:$https_port"

# --- 0: before ----------------------------------------------------------------------------------
"$tether_bin" token add lab-ci --role view --url "$url" --json > "$work/token.json" || fail "tether token add failed"
lab_token=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$work/token.json")
expect_running a lab-1 "before any update"
states=$(status_field '" ".join(x["slot"] + "=" + x["state"] for x in s["slots"]) + " next=" + s["next_boot"]')
[ "$states" = "a=good b=bad next=a" ] || fail "before any update: $states"
"$tether_bin" update --url "$url" > "$work/update0.out" || fail "tether update (status) failed"
grep -q "lab-1" "$work/update0.out" || fail "tether update shows no version: $(cat "$work/update0.out")"
check "slot a runs lab-1 through U-Boot's boot script; slot b empty; a view token made for the cases"

# --- 1: a stranger's signature ------------------------------------------------------------------
head_before=$(slot_b_head)
if "$tether_bin" update "$work/bundles/stranger.raucb" --url "$url" > "$work/update1.out" 2>&1; then
    fail "a bundle signed under another CA was installed: $(cat "$work/update1.out")"
fi
grep -qiE "signature|certificate|verif" "$work/update1.out" || fail "the refusal does not say why: $(cat "$work/update1.out")"
[ "$(slot_b_head)" = "$head_before" ] || fail "slot b changed although the bundle was refused"
phase=$(status_field 's["install"]["phase"] + " next=" + s["next_boot"]')
[ "$phase" = "failed next=a" ] || fail "after the refusal: $phase"
expect_running a lab-1 "after the refused bundle"
check "a bundle signed under another CA is refused ($(grep -E '^not installed:' "$work/update1.out" | head -c 200)); slot b unwritten; a still boots next"

# --- 2: power cut mid-install -------------------------------------------------------------------
"$tether_bin" update "$work/bundles/cut.raucb" --url "$url" --no-reboot > "$work/update2.out" 2>&1 &
updater=$!
deadline=$(( $(date +%s) + 600 ))
started_upload=false
while :; do
    msg=$(status_field 's["install"]["phase"] + " " + s["install"]["message"]' 2>/dev/null || true)
    # The last case's phase (failed) stays until this upload's first piece arrives.
    case "$msg" in
        receiving*|installing*) started_upload=true ;;
        installed*|failed*) if $started_upload; then fail "the install ended before the power cut: $msg"; fi ;;
    esac
    # RAUC is writing once the start of slot b is no longer what it was.
    if [[ "$msg" == installing* ]] && [ "$(slot_b_head)" != "$head_before" ]; then break; fi
    [ "$(date +%s)" -lt "$deadline" ] || fail "RAUC did not start writing slot b: $msg"
    sleep 1
done
kill -9 "$qemu_pid"; wait "$qemu_pid" 2>/dev/null || true
kill "$updater" 2>/dev/null || true; wait "$updater" 2>/dev/null || true
say "power cut while RAUC wrote slot b ($msg); booting again"
start_vm
wait_https 900
expect_running a lab-1 "after the power cut"
next=$(status_field 's["next_boot"] + " " + [x["state"] for x in s["slots"] if x["slot"] == "b"][0]')
[ "$next" = "a bad" ] || fail "after the power cut: next boot / slot b: $next"
check "power cut mid-install: slot a boots again (HTTPS ${reboot_s} s after power-on), lab-1, slot b bad, the token made before still works"

# --- 3: a bundle whose daemon fails -------------------------------------------------------------
if "$tether_bin" update "$bad" --url "$url" --wait 1500 > "$work/update3.out" 2>&1; then
    fail "the broken bundle was kept: $(cat "$work/update3.out")"
fi
grep -q "rolled back" "$work/update3.out" || { cat "$work/update3.out"; fail "tether update did not say the update was rolled back"; }
expect_running a lab-1 "after the rollback"
rolled=$(status_field 's["rolled_back"]["slot"] + " " + str(s["rolled_back"]["version"]) + " | " + s["rolled_back"]["reason"]')
[[ "$rolled" == "b lab-bad | "*tether.service* ]] || fail "status does not say why the update was rolled back: $rolled"
states=$(status_field '" ".join(x["slot"] + "=" + x["state"] for x in s["slots"]) + " next=" + s["next_boot"]')
[ "$states" = "a=good b=bad next=a" ] || fail "after the rollback: $states"
pi=$(pi_normal)
[ "$pi" = a ] || fail "after the rollback config.txt boots slot '$pi' normally, expected a"
ssh_do "grep -q 'root=PARTUUID=74657468-03 .*tether.slot=b tether.boot=tryboot' /boot/firmware/slot-b/cmdline.txt" ||
    fail "the bundle's hook wrote no slot-b/cmdline.txt for slot b: $(ssh_do 'ls -la /boot/firmware/slot-b; cat /boot/firmware/slot-b/cmdline.txt' 2>&1)"
check "a bundle whose daemon fails: b tried, judged failed, back on a with lab-1; status: rolled back ($rolled); the Pi's config.txt still boots slot-a/"

# --- 4: a good bundle -----------------------------------------------------------------------------
t0=$(date +%s)
"$tether_bin" update "$good" --url "$url" --wait 1500 > "$work/update4.out" 2>&1 ||
    { cat "$work/update4.out"; fail "the good bundle was not kept"; }
update_s=$(( $(date +%s) - t0 ))
grep -q "updated: slot b runs lab-2" "$work/update4.out" || { cat "$work/update4.out"; fail "tether update did not report the new slot"; }
expect_running b lab-2 "after the update"
states=$(status_field '" ".join(x["slot"] + "=" + x["state"] for x in s["slots"]) + " next=" + s["next_boot"] + " " + s["trial"]["outcome"]')
[ "$states" = "a=good b=good next=b good" ] || fail "after the update: $states"
# The Pi's side of the same update: the bundle's hook put b's own kernel, initrd, device
# trees and overlay in slot-b/, and the verdict made slot-b/ the normal boot.
pi=$(pi_normal)
[ "$pi" = b ] || fail "after the update config.txt boots slot '$pi' normally, expected b"
ssh_do 'cd /boot/firmware/slot-b && cmp vmlinuz /boot/vmlinuz-* && cmp initrd.img /boot/initrd.img-* &&
    test -s bcm2711-rpi-4-b.dtb && test -s overlays/tether-tc358743.dtbo && test -s ../slot-a/vmlinuz' ||
    fail "slot-b/ does not hold slot b's boot files: $(ssh_do 'ls -laR /boot/firmware/slot-b | head -20' 2>&1)"
check "the Pi's tryboot layout followed: slot-b/ holds b's kernel, initrd, device trees and overlay; config.txt now boots slot-b/ normally, slot-a/ on a tryboot"
check "a good bundle: b runs lab-2, judged healthy and marked good, a kept as the way back (${update_s} s from upload to verdict)"
grep -E "uploaded 100%|RAUC is installing|rebooting|went away|updated" "$work/update4.out" | sed 's/^/    /'
echo "image: update bench: bundle $(stat -c %s "$good") bytes, built in ${bundle_s} s; good update end to end ${update_s} s; reboot after the power cut to HTTPS ${reboot_s} s"
}
