#!/usr/bin/env python3
"""Writes the fixed held-out slice out of a train_report.json for the engine's tests.

The GPU machine returns at most 8 files, so train_model.py keeps the slice's token
ids inside train_report.json. This script (standard library only) writes
  DEST/heldout_slice_ids.txt  the 4,097 token ids, one per line
  DEST/heldout_slice.txt      their decoded text (UTF-8, exactly as decoded)
and prints the framework's slice loss. Usage:
  python3 training/extract_slice.py models/default/train_report.json tests/data/default-model
"""

import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    report, dest = sys.argv[1], sys.argv[2]
    with open(report, encoding="utf-8") as f:
        s = json.load(f)["heldout_slice"]
    ids = s["token_ids"]
    if len(ids) != 4097:
        sys.exit(f"extract_slice: expected 4097 ids, found {len(ids)}")
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "heldout_slice_ids.txt"), "w") as f:
        f.write("".join(f"{i}\n" for i in ids))
    with open(os.path.join(dest, "heldout_slice.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(s["text"])
    print(f"slice: {s['source']}; loss fp32 cpu {s['loss_fp32_cpu']:.6f} nats/token; {s['definition']}")


if __name__ == "__main__":
    main()
