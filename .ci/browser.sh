#!/usr/bin/env bash
# A headless Chromium for the report page's browser tests (tests/test_report_page.py), from the Debian packages.
# Best effort: where apt-get is missing or fails (no root, no network), it says so and exits 0, and those tests
# skip; everything else in CI is unaffected. About 1-2 minutes on 2 cores (download and unpack, ~100 MB).
set -uo pipefail

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    echo "browser: $(chromium --version 2>/dev/null || chromium-browser --version 2>/dev/null)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "browser: no apt-get here; the browser tests will skip"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "browser: not root and no passwordless sudo; the browser tests will skip"
        exit 0
    fi
fi
if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/tmp/browser-apt.log 2>&1 \
    || { $SUDO apt-get update -q >>/tmp/browser-apt.log 2>&1 \
         && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium \
            >>/tmp/browser-apt.log 2>&1; }; then
    echo "browser: $(chromium --version 2>/dev/null)"
else
    echo "browser: apt-get could not install chromium (tail of its log below); the browser tests will skip"
    tail -5 /tmp/browser-apt.log
fi
exit 0
