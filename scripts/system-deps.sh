#!/usr/bin/env bash
# System packages the test suite needs beyond PyPI (installed only when missing).
#
# Another process may hold apt's locks (unattended-upgrades or cloud-init on a fresh machine, a neighbour's job):
# apt-get install waits for the dpkg lock (-o DPkg::Lock::Timeout=), and apt-get update, which does not honour
# that option (apt 2.6), is retried while the lists lock is held; both for up to TOKEMBED_APT_WAIT seconds (600).
# Sourced (`source scripts/system-deps.sh`), it only defines its functions (tests/test_system_deps.py).
set -euo pipefail

APT_WAIT=${TOKEMBED_APT_WAIT:-600}

# apt-get update [OPTIONS...], retried while another process holds the lists lock.
apt_update() {
    local deadline=$((SECONDS + APT_WAIT)) out
    while :; do
        if out=$(${SUDO:-} apt-get -qq "$@" update 2>&1); then
            [ -z "$out" ] || echo "$out" >&2
            return 0
        fi
        if [[ $out != *"Could not get lock"* ]] || ((SECONDS >= deadline)); then
            echo "$out" >&2
            return 1
        fi
        echo "system-deps: another process holds apt's lock; waiting (up to ${APT_WAIT} s)" >&2
        sleep 2
    done
}

# apt-get install PACKAGE... [OPTIONS...], waiting for the dpkg lock.
apt_install() {
    ${SUDO:-} apt-get install -y -qq --no-install-recommends -o "DPkg::Lock::Timeout=${APT_WAIT}" "$@"
}

main() {
    # Debian's Chromium renders `tokembed report` pages headlessly in tests/test_report.py
    # (skipped without it, except under CI=true, where its absence fails the run).
    if ! command -v chromium >/dev/null; then
        if [ "$(id -u)" = 0 ]; then
            apt_update && apt_install chromium
        elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            SUDO=sudo
            apt_update && apt_install chromium
        else
            echo "system-deps: chromium is not installed and this user cannot install it; the HTML report test will be skipped" >&2
        fi
    fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main "$@"
fi
