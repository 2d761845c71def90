#!/usr/bin/env bash
# The one command that trains pagedkv's default model on the GPU machine.
#
# Run from the repository root with the corpus already in .cache/corpus (written by
# scripts/gather-corpus.sh here, carried to the GPU machine) and $OUT set:
#   bash training/run_on_device.sh
# Steps: environment check; a smoke pass of the whole pipeline on 2 MB of text with
# a 6-step model (fails fast, ~30-45 s); the real tokenizer; the real model, whose
# training budget is cut so that the whole script ends within TOTAL_SECONDS
# (default 570). Result: $OUT/default-model/ (8 files, each < 16 MiB; see
# training/README.md). Nothing is downloaded.
set -euo pipefail

T0=$(date +%s)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CORPUS="${CORPUS:-.cache/corpus}"
: "${OUT:?run_on_device: OUT must name the output folder}"
DEST="$OUT/default-model"
WORK="$(mktemp -d /tmp/pkv-train.XXXXXX)"
TOTAL_SECONDS="${TOTAL_SECONDS:-570}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
PY="${PYTHON:-python3}"

stamp() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
fail() { echo "run_on_device: FAILED: $*" >&2; exit 1; }

stamp "checking inputs and environment"
for f in train.txt heldout.txt; do
  [[ -s "$CORPUS/$f" ]] || fail "$CORPUS/$f is missing: run scripts/gather-corpus.sh and carry .cache/corpus"
done
ls -l "$CORPUS"
"$PY" - <<'PYEOF' || fail "python3 lacks torch/transformers/tokenizers/safetensors or sees no GPU"
import torch, transformers, tokenizers, safetensors, numpy
print("python ok: torch", torch.__version__, "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__, "safetensors", safetensors.__version__)
assert torch.cuda.is_available(), "no CUDA device"
print("gpu:", torch.cuda.get_device_name(0))
PYEOF

stamp "smoke pass: tokenizer on 2 MB"
timeout 120 "$PY" training/train_tokenizer.py --train "$CORPUS/train.txt" --out "$WORK/smoke-tok" \
  --limit-chars 2000000 || fail "smoke tokenizer"
stamp "smoke pass: 6 model steps, save, reload, evaluate"
timeout 180 "$PY" training/train_model.py --corpus-dir "$CORPUS" --tokenizer-dir "$WORK/smoke-tok" \
  --out "$WORK/smoke-model" --limit-chars 2000000 --max-steps 6 --batch 8 --warmup-steps 2 \
  --eval-every 1e9 --sample-tokens 4 --train-seconds 60 || fail "smoke model pass"
stamp "smoke pass OK"

stamp "tokenizer"
"$PY" training/train_tokenizer.py --train "$CORPUS/train.txt" --heldout "$CORPUS/heldout.txt" \
  --out "$WORK/tokenizer" || fail "tokenizer training"

stamp "model"
"$PY" training/train_model.py --corpus-dir "$CORPUS" --tokenizer-dir "$WORK/tokenizer" --out "$DEST" \
  --deadline $(( T0 + TOTAL_SECONDS )) "$@" || fail "model training"

stamp "result in $DEST"
ls -l "$DEST"
"$PY" - "$DEST/train_report.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
t, h, s = r["training"], r["heldout"], r["heldout_slice"]
print(f"params {r['model']['parameters']:,}; {t['steps']} steps, {t['epochs']:.2f} epochs, "
      f"{t['train_loop_wall_seconds']} s on {t['hardware']} ({t['stopped']})")
print(f"held-out {h['loss_nats_per_token']:.4f} nats/token, {h['bits_per_char']:.4f} bits/char; "
      f"slice loss fp32 cpu {s['loss_fp32_cpu']:.6f}")
PYEOF
stamp "done"
