#!/usr/bin/env bash
# The web console in a real browser: Playwright (playwright-core from npm) driving
# Debian's Chromium, headless, against `tether serve --sim` over HTTPS. Exit 0 = pass.
# Installs what it needs. Screenshots of every page state go to $TETHER_BROWSER_OUT
# (default: a fresh directory, printed at the end), one per page named page-*.png
# (page-pair, page-phone, page-tasks, page-approval, page-access, page-device, page-login),
# report.png (a task's report, tests/browser/report.mjs)
# and the other states numbered; the PNGs of an earlier run there are removed first, so a
# step that failed cannot leave an old picture standing in for its page.
#
#   tests/browser/run.sh                    # uses target/debug/tether (built if missing)
#   TETHER_BIN=target/release/tether tests/browser/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# Find text on screen: the daemon's text reader (Tesseract 5 and its English data, Debian's).
ldconfig -p 2>/dev/null | grep 'libtesseract\.so\.5' >/dev/null || missing+=(libtesseract5)
[ -e /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ] || missing+=(tesseract-ocr-eng)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
npm_dir="${XDG_CACHE_HOME:-$HOME/.cache}/tether-browser"
if [ ! -d "$npm_dir/node_modules/playwright-core" ]; then
    mkdir -p "$npm_dir"
    npm install --prefix "$npm_dir" --silent --no-audit --no-fund playwright-core@1.65.1
fi
bin="${TETHER_BIN:-$PWD/target/debug/tether}"
[ -x "$bin" ] || cargo build -p tether --locked
out="${TETHER_BROWSER_OUT:-$(mktemp -d /tmp/tether-browser-XXXXXX)}"
mkdir -p "$out"
rm -f "$out"/*.png
TETHER_NODE_MODULES="$npm_dir/node_modules" TETHER_BIN="$bin" TETHER_BROWSER_OUT="$out" \
    timeout 600 node tests/browser/console.mjs
# A task's report (a file from a CI artifact) opened offline.
TETHER_NODE_MODULES="$npm_dir/node_modules" TETHER_BIN="$bin" TETHER_BROWSER_OUT="$out" \
    timeout 300 node tests/browser/report.mjs
