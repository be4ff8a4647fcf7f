#!/usr/bin/env bash
# System packages the test suite needs beyond PyPI (installed only when missing).
set -euo pipefail

# Debian's Chromium renders `tokembed report` pages headlessly in tests/test_report.py.
command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)
