#!/usr/bin/env bash
# `make demo`: the shipped default model (models/default — a
# 12.6M-parameter Qwen3 trained on Debian's English documentation, see
# docs/default-model.md) writes continuations for two prompts that share a long
# preamble (113 tokens of Python-docs-like text), run one after another on one
# paged KV cache. `pagedkv generate` streams the text and, with --stats, prints
# the prefix-cache statistics: the second prompt is served its shared full
# blocks from the cache. Runs in a few seconds on one CPU core.
set -euo pipefail
BUILD=${1:-build}
PKV="$BUILD/src/cli/pagedkv"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$ROOT/models/default"

PREAMBLE='The Python Tutorial
*******************

Python is an easy to learn, powerful programming language. It has efficient
high-level data structures and a simple but effective approach to
object-oriented programming. Python'"'"'s elegant syntax and dynamic typing,
together with its interpreted nature, make it an ideal language for scripting
and rapid application development in many areas on most platforms.

The Python interpreter and the extensive standard library are freely available
in source or binary form for all major platforms from the Python web site.

'
TAIL1='To read the contents of a file, call'
TAIL2='A dictionary maps'

echo "== pagedkv generate: the default model ($MODEL), greedy, on one paged KV cache"
echo "== both prompts start with this shared preamble:"
printf '%s' "$PREAMBLE" | sed 's/^/   | /'
echo "== prompt 1 continues: \"$TAIL1\""
echo "== prompt 2 continues: \"$TAIL2\""
echo
"$PKV" generate --model "$MODEL" --max-tokens 40 --stats \
  --prompt "$PREAMBLE$TAIL1" --prompt "$PREAMBLE$TAIL2"
echo
echo "== prompt 2's cached_tokens: the shared preamble's full 16-token KV blocks were found in"
echo "   the prefix cache and not recomputed (compare the two ttft_ms). Try your own prompt:"
echo "   $PKV generate --prompt 'The json module' --max-tokens 60"
