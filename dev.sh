#!/usr/bin/env bash
# Set-up and entry points for a fresh machine: `./dev.sh demo` runs `raysight demo`, `./dev.sh test` runs every test.
# Installs what it needs into .venv (Python packages from PyPI; no system packages are needed yet).
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
case "${1:-}" in
    demo) shift; exec .venv/bin/raysight demo "$@" ;;
    test)
        shift
        .venv/bin/ruff check src tests benchmarks
        .venv/bin/ruff format --check src tests benchmarks
        .venv/bin/mypy src
        exec .venv/bin/python -m pytest --durations=15 "$@" ;;
    *) echo "usage: ./dev.sh demo [--exit] | ./dev.sh test [pytest args]" >&2; exit 2 ;;
esac
