#!/usr/bin/env bash
# Runs the end-to-end client tests (ctest label e2e; tests/e2e/CMakeLists.txt).
#   run.sh setup          npm ci from package-lock.json (skipped when node_modules
#                         already matches the lockfile)
#   run.sh test FILE...   node --test FILE... (each file starts its own pagedkv serve)
# Exits 77 (ctest: skipped) with a message when node is not installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! command -v node >/dev/null 2>&1; then
  echo "SKIPPED: node is not installed, so the real-client tests cannot run (scripts/install-deps.sh installs it)"
  exit 77
fi
case "${1:-}" in
  setup)
    want=$(sha256sum package-lock.json | cut -d' ' -f1)
    stamp=node_modules/.pkv-lock.sha256
    if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
      echo "node_modules matches package-lock.json"
      exit 0
    fi
    npm ci --no-audit --no-fund --prefer-offline --loglevel=error
    echo "$want" > "$stamp"
    ;;
  test)
    shift
    [[ -d node_modules ]] || { echo "node_modules is missing: run '$0 setup' (ctest does, as e2e_npm_ci)"; exit 1; }
    exec node --test --test-reporter=spec "$@"
    ;;
  *)
    echo "usage: $0 setup | test FILE..." >&2
    exit 2
    ;;
esac
