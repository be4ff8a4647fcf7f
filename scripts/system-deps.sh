#!/usr/bin/env bash
# System packages the test suite needs beyond PyPI (installed only when missing).
set -euo pipefail

# Debian's Chromium renders `tokembed report` pages headlessly in tests/test_report.py
# (skipped without it, except under CI=true, where its absence fails the run).
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends chromium
    else
        echo "system-deps: chromium is not installed and this user cannot install it; the HTML report test will be skipped" >&2
    fi
fi
