#!/usr/bin/env bash
# Install headless Chromium and its driver from Debian's packages, for the browser test.
#
# Why a script of its own: the machines this project runs on are re-made between sessions,
# so whatever a test needs must be installed by the project's files. Playwright's and
# Selenium's own browser downloads cannot reach their hosts here; Debian's `chromium` can.
# The browser test (tests/browser/) runs this when /usr/bin/chromium is missing and skips,
# naming this script, only if it fails.
#
# Usage: include/install_chromium.sh        (needs root or passwordless sudo; idempotent)
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [[ -x "$CHROMIUM" ]]; then
    echo "install_chromium: $("$CHROMIUM" --version 2>/dev/null || echo chromium) already installed"
    exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    echo "install_chromium: need root (or passwordless sudo) to apt-get install chromium" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install_chromium: apt-get update && apt-get install -y chromium chromium-driver" >&2
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver fonts-dejavu-core >/dev/null

if [[ ! -x "$CHROMIUM" ]]; then
    echo "install_chromium: apt-get finished but $CHROMIUM is missing" >&2
    exit 1
fi
echo "install_chromium: $("$CHROMIUM" --version 2>/dev/null) installed"
