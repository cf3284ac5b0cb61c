# flash.sh keygen and flash.sh bundle: the owner's update keys and signed update bundles
# (sourced by flash.sh). docs/updates.md is the guide.
# shellcheck shell=bash
# shellcheck disable=SC2154  # image_root, image_cache: from common.sh

keygen_usage() {
    cat >&2 <<'EOF2'
usage: flash.sh keygen [--dir DIR]

Makes the owner's update keys in DIR (default: ~/.config/tether/update, or
$TETHER_UPDATE_KEYS): a CA (ca.cert.pem goes into every image, ca.key.pem signs signing
certificates and should then go offline) and a signing key and certificate
(signing.key.pem, signing.cert.pem) that `flash.sh bundle` signs bundles with. Refuses to
overwrite keys that exist: images built with them would stop taking updates.
EOF2
}

flash_keygen() {
    local dir=$default_update_keys
    while [ $# -gt 0 ]; do
        case "$1" in
            --dir) dir=${2:-}; shift 2 ;;
            -h|--help) keygen_usage; return 0 ;;
            *) keygen_usage; die "keygen: unknown argument '$1'" ;;
        esac
    done
    [ -n "$dir" ] || die "keygen: --dir needs a directory"
    if [ -e "$dir/ca.cert.pem" ] || [ -e "$dir/signing.key.pem" ]; then
        die "keygen: $dir already holds update keys; images built with them trust only them (move them away first if you mean to start over)"
    fi
    need_tools openssl:openssl || return 2
    make_update_keys "$dir" || return 1
    say "update keys in $dir: ca.cert.pem (built into images), ca.key.pem (keep offline), signing.key.pem + signing.cert.pem (sign bundles)"
}

# make_update_keys DIR: a P-256 CA valid 30 years and a code-signing certificate under it.
make_update_keys() {
    local dir=$1 subject
    subject="tether update $(hostname 2>/dev/null || echo owner) $(date -u +%Y-%m-%d)"
    ( umask 077 && mkdir -p "$dir" ) || return 1
    (
        set -e
        cd "$dir"
        umask 077
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 10957 \
            -keyout ca.key.pem -out ca.cert.pem -subj "/O=tether/CN=$subject CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout signing.key.pem -out signing.csr -subj "/O=tether/CN=$subject signing" 2>/dev/null
        # codeSigning: what the image checks (check-purpose=codesign); emailProtection: what
        # `rauc bundle` checks when it verifies its own signature (RAUC's default, S/MIME).
        printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning,emailProtection\n' > signing.ext
        openssl x509 -req -in signing.csr -CA ca.cert.pem -CAkey ca.key.pem -CAcreateserial -days 10957 \
            -extfile signing.ext -out signing.cert.pem 2>/dev/null
        rm -f signing.csr signing.ext ca.cert.srl
        chmod 0644 ca.cert.pem signing.cert.pem
    ) || { say "openssl could not make the update keys in $dir"; return 1; }
}

# ensure_update_keys DIR: the keys a build needs; made (and said) on the first build.
ensure_update_keys() {
    local dir=$1
    if [ -f "$dir/ca.cert.pem" ]; then return 0; fi
    if [ -e "$dir/signing.key.pem" ]; then
        say "$dir has a signing key but no ca.cert.pem: restore it, or start over with flash.sh keygen --dir NEW"
        return 1
    fi
    make_update_keys "$dir" || return 1
    say "made the owner's update keys in $dir (first build): keep them; bundles for this image must be signed with them (docs/updates.md)"
}

bundle_usage() {
    cat >&2 <<'EOF2'
usage: flash.sh bundle --board BOARD [--out DIR] [--version V] [--update-keys DIR]
                      [--rootfs-extra DIR]

Builds a signed update bundle (RAUC, dm-verity) with the same recipe as `flash.sh build`:
the root filesystem for BOARD, shrunk to its files, into out/tether-BOARD-V.raucb. Install
it with `tether update FILE` (on the appliance or with --url) or the console's Update page.

  --board BOARD       one of board/*/
  --out DIR           where the bundle goes (default: out/)
  --version V         the version it installs (default: git describe)
  --update-keys DIR   signing.key.pem and signing.cert.pem (default: ~/.config/tether/update)
  --rootfs-extra DIR  files copied over the root filesystem last (site configuration, e.g.
                      etc/tether/tether.toml)

Needs what `flash.sh build` needs, and rauc and squashfs-tools.
EOF2
}

flash_bundle() {
    local board="" out="$image_root/out" keys=$default_update_keys extra=""
    image_version=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --board) board=${2:-}; shift 2 ;;
            --out) out=${2:-}; shift 2 ;;
            --version) image_version=${2:-}; shift 2 ;;
            --update-keys) keys=${2:-}; shift 2 ;;
            --rootfs-extra) extra=${2:-}; shift 2 ;;
            -h|--help) bundle_usage; return 0 ;;
            *) bundle_usage; die "bundle: unknown argument '$1'" ;;
        esac
    done
    [ -n "$board" ] || { bundle_usage; die "bundle: --board is required"; }
    [ -f "$image_root/board/$board/board.toml" ] || die "bundle: no board '$board'"
    check_version "$image_version" || die "bundle: --version '$image_version': use letters, digits and . _ + - (at most 64)"
    [ -z "$extra" ] || [ -d "$extra" ] || die "bundle: --rootfs-extra $extra: no such directory"
    for f in ca.cert.pem signing.key.pem signing.cert.pem; do
        [ -f "$keys/$f" ] || die "bundle: no $keys/$f: bundles are signed with the keys the image was built with (flash.sh keygen, docs/updates.md)"
    done
    need_tools rustup:rustup cargo:cargo aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu \
        aarch64-linux-gnu-g++:g++-aarch64-linux-gnu qemu-aarch64-static:qemu-user-static \
        mmdebstrap:mmdebstrap fakeroot:fakeroot mke2fs:e2fsprogs resize2fs:e2fsprogs \
        fdtput:device-tree-compiler fdtoverlay:device-tree-compiler dtc:device-tree-compiler \
        depmod:kmod python3:python3 mkimage:u-boot-tools openssl:openssl rauc:rauc mksquashfs:squashfs-tools || return 2
    mkdir -p "$out" "$image_cache"
    out=$(cd "$out" && pwd)
    local work; work=$(mktemp -d "${TMPDIR:-/tmp}/tether-bundle.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the trap runs after the function returns
    trap "rm -rf '$work'" EXIT
    say "building a $board update bundle in $out (work dir $work)"
    step 1 5 "cross-compile tether for $target" build_binary "$work" || return 1
    step 2 5 "base root filesystem (Debian $suite arm64)" build_base "$board" "$work" || return 1
    step 3 5 "CSI bridge modules and overlay" build_csi "$board" "$work" || return 1
    step 4 5 "root filesystem for $board" build_rootfs "$board" "$work" "" "$keys" || return 1
    if [ -n "$extra" ]; then
        EXTRA=$extra R=$work/root fakeroot -i "$work/fakeroot.state" -s "$work/fakeroot.state" -- \
            bash -c 'tar -C "$EXTRA" -cf - . | tar -C "$R" -xpf - --no-same-owner' ||
            { say "could not copy $extra over the root filesystem"; return 1; }
        say "copied $(find "$extra" -type f | wc -l) file(s) from $extra over the root filesystem"
    fi
    step 5 5 "signed bundle" make_bundle "$board" "$work" "$out" "$keys" || return 1
}

# make_bundle BOARD WORK OUT KEYS: the root as a minimal ext4 (it grows to its slot when
# installed: resize=true in system.conf), a manifest, `rauc bundle` with zstd squashfs.
make_bundle() {
    local board=$1 work=$2 out=$3 keys=$4
    local version; version=$(cat "$work/version")
    local root_mib=$(( ($(cat "$work/root.bytes") * 5 / 4 + 64 * mib + mib - 1) / mib ))
    fakeroot -i "$work/fakeroot.state" -- \
        mke2fs -q -t ext4 -L tether-root -E root_owner=0:0 -d "$work/root" "$work/rootfs.ext4" "${root_mib}M" || return 1
    e2fsck -fy "$work/rootfs.ext4" >/dev/null 2>&1
    resize2fs -M "$work/rootfs.ext4" >/dev/null 2>&1 || { say "resize2fs -M failed"; return 1; }
    mkdir -p "$work/content"
    mv "$work/rootfs.ext4" "$work/content/rootfs.ext4"
    # The slot hook: on a Raspberry Pi it puts the new slot's boot files where the firmware
    # reads them (image/rauc-hook.sh); elsewhere it does nothing.
    install -m 0755 "$image_root/image/rauc-hook.sh" "$work/content/hook.sh"
    cat > "$work/content/manifest.raucm" <<EOF2
[update]
compatible=tether-$board
version=$version
description=tether $board $version
build=$(date -u +%Y%m%dT%H%M%SZ)

[bundle]
format=verity

[hooks]
filename=hook.sh

[image.rootfs]
filename=rootfs.ext4
hooks=post-install
EOF2
    local bundle="$out/tether-$board-$version.raucb"
    rm -f "$bundle"
    rauc bundle --cert="$keys/signing.cert.pem" --key="$keys/signing.key.pem" \
        --keyring="$keys/ca.cert.pem" --mksquashfs-args="-comp zstd -Xcompression-level 6" \
        "$work/content" "$bundle" >&2 || { say "rauc bundle failed"; return 1; }
    say "bundle $bundle: $(human "$(stat -c %s "$bundle")") (root filesystem $(human "$(stat -c %s "$work/content/rootfs.ext4")"), version $version)"
    echo "$bundle"
}
