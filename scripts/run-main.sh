#!/usr/bin/env bash
# The main job behind `make run`: makes a small random-weight qwen3 checkpoint
# once (cached in $BUILD/models), then runs `pagedkv generate` on two prompts that
# share a 48-token prefix (a "system prompt") on one paged KV cache, printing the
# generated tokens and the prefix-cache statistics: the second prompt is served
# 48 tokens from the cache. (Token ids, not text: make-model writes random
# weights and no tokenizer.json; `generate --prompt TEXT` works with a model
# directory that has one.)
set -euo pipefail
BUILD=${1:-build}
PKV="$BUILD/src/cli/pagedkv"
MODEL="$BUILD/models/qwen3-small-seed1"
if [[ ! -f "$MODEL/model.safetensors" ]]; then
  "$PKV" make-model --family qwen3 --preset small --seed 1 --out "$MODEL"
fi
SYSTEM=$(seq 100 147 | tr '\n' ' ')
Q1="$SYSTEM 2001 2002 2003 2004 2005"
Q2="$SYSTEM 3001 3002 3003"
echo "== pagedkv generate: two prompts sharing a 48-token prefix (model: $MODEL)"
"$PKV" generate --model "$MODEL" --max-tokens 24 --stats --prompt-ids "$Q1;$Q2"
