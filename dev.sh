#!/usr/bin/env bash
# Set-up and entry points for a fresh machine: `./dev.sh demo` runs `raysight demo`, `./dev.sh test` runs every test.
# Installs what it needs: Python packages from PyPI into .venv, the dashboard's libraries from npm (by its lock file)
# into src/raysight/ui/node_modules, and for the tests Debian's Chromium (the browser tests drive it), Prometheus
# (the metrics tests compare raysight's answers with its) and gdb (memray attach, for on-demand memory profiles).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test]'
    touch "$stamp"
fi
apt_install() {  # Debian packages, when a command they bring is missing (APT_LEAN=1: without what they recommend)
    local missing=()
    for pair in "$@"; do command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}"); done
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${APT_LEAN:+--no-install-recommends} \
            "${missing[@]}" >/dev/null
    fi
}
ui=src/raysight/ui
ui_stamp=$ui/node_modules/.installed-$(sha1sum $ui/package-lock.json | cut -c1-12)
if [ ! -f "$ui_stamp" ]; then
    apt_install npm:npm
    npm ci --prefix $ui --no-audit --no-fund --loglevel=error
    touch "$ui_stamp"
fi
case "${1:-}" in
    demo) shift; exec .venv/bin/raysight demo "$@" ;;
    test)
        shift
        apt_install chromium:chromium
        APT_LEAN=1 apt_install prometheus:prometheus  # the real Prometheus the metrics tests compare with
        APT_LEAN=1 apt_install gdb:gdb  # memray attach injects itself through it (on-demand memory profiles)
        .venv/bin/ruff check src tests benchmarks
        .venv/bin/ruff format --check src tests benchmarks
        .venv/bin/mypy src
        exec .venv/bin/python -m pytest --durations=15 "$@" ;;
    *) echo "usage: ./dev.sh demo [--exit] | ./dev.sh test [pytest args]" >&2; exit 2 ;;
esac
