# Shared helpers for flash.sh's subcommands (sourced, never run).
# shellcheck shell=bash
# shellcheck disable=SC2034  # image_cache and image_started are used by the other parts

image_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image_cache=${TETHER_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether-image}
image_started=$(date +%s)

say() { echo "flash.sh: $*" >&2; }
die() { echo "flash.sh: $*" >&2; exit 2; }

# step N TOTAL "what" command...: runs one build step, printing its name before and its
# time after, so a long build shows where it is.
step() {
    local n=$1 total=$2 what=$3; shift 3
    local t0; t0=$(date +%s)
    echo "[$n/$total] $what ..." >&2
    "$@" || { echo "[$n/$total] $what: FAILED after $(( $(date +%s) - t0 )) s" >&2; return 1; }
    echo "[$n/$total] $what: done in $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - image_started )) s)" >&2
}

# need_tools "cmd:package" ...: names every missing tool with the apt-get line that fixes it.
need_tools() {
    local missing=() pkgs=() pair
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || { missing+=("${pair%%:*}"); pkgs+=("${pair#*:}"); }
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "flash.sh: missing ${missing[*]}; install with:" >&2
        echo "  sudo apt-get install -y $(printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' ')" >&2
        return 2
    fi
}

# board_value BOARD KEY.PATH: one value of board/BOARD/board.toml (lists print one item per
# line), read with Python's tomllib so the daemon's parser and this one agree on the file.
board_value() {
    python3 - "$image_root/board/$1/board.toml" "$2" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    v = tomllib.load(f)
for k in sys.argv[2].split("."):
    v = v.get(k, "") if isinstance(v, dict) else ""
print("\n".join(v) if isinstance(v, list) else v)
EOF
}

# human SIZE_IN_BYTES
human() { numfmt --to=iec-i --suffix=B "$1"; }

# The owner's update keys (flash.sh keygen; docs/updates.md): outside the tree, made once.
default_update_keys=${TETHER_UPDATE_KEYS:-${XDG_CONFIG_HOME:-$HOME/.config}/tether/update}

# check_version V: empty (the default) or a version safe in os-release, file names and
# RAUC manifests.
check_version() {
    [ -z "$1" ] || { [ ${#1} -le 64 ] && [[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*$ ]]; }
}
