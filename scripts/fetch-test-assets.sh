#!/usr/bin/env bash
# Fetches assets the tests need that may not be committed (see each block).
# Idempotent: does nothing when the assets are already in the cache.
set -euo pipefail
