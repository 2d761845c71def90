#!/usr/bin/env bash
# `make run`: serves the shipped default model (models/default, docs/default-model.md)
# over HTTP with `pagedkv serve` on 127.0.0.1:PORT (default 8000; `make run PORT=8080`),
# printing the address, a ready-to-paste curl request and the dashboard URL first.
# Serves until Ctrl-C (SIGINT drains in-flight requests, then exits 0).
# The API contract is docs/server.md.
set -euo pipefail
BUILD=${1:-build}
PORT=${2:-8000}
PKV="$BUILD/src/cli/pagedkv"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$ROOT/models/default"
URL="http://127.0.0.1:$PORT"

cat <<MSG
== pagedkv serve: the default model ($MODEL) on $URL
== dashboard:  $URL/
== try (OpenAI chat completions; run it twice and compare usage.prompt_tokens_details.cached_tokens):
curl -s $URL/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "default", "max_tokens": 40, "messages": [{"role": "system", "content": "You are a helpful assistant who answers questions about the Python standard library."}, {"role": "user", "content": "What does the json module do?"}]}'
== streaming: add "stream": true; Anthropic: POST $URL/v1/messages; Responses: POST $URL/v1/responses
== metrics: $URL/metrics    (Ctrl-C to stop)
MSG
exec "$PKV" serve --model "$MODEL" --host 127.0.0.1 --port "$PORT"
