#!/usr/bin/env bash
# The main job behind `make run`. Until the inference runtime lands this drives
# the synthetic multi-tenant trace through the KV cache (`pagedkv kv-demo`).
set -euo pipefail
BUILD=${1:-build}
exec "$BUILD/src/cli/pagedkv" kv-demo
