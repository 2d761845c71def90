#!/usr/bin/env python3
"""Trains the default model's byte-level BPE tokenizer with Hugging Face `tokenizers`.

Input: a corpus file written by build_corpus.py (documents separated by the line
"<|endoftext|>"). Output, in --out:
  tokenizer.json         Qwen2/Qwen3-shaped byte-level BPE: NFC normalizer, the same
                         regex Split + ByteLevel pre-tokenizer, ByteLevel post-processor
                         and decoder; special tokens <|endoftext|>, <|im_start|>,
                         <|im_end|> (ids 0, 1, 2, added tokens marked special)
  tokenizer_config.json  ChatML chat template, eos_token <|endoftext|>, no BOS

The layout copies Qwen3's tokenizer.json on purpose: the engine's tokenizer loader
was written against it, so the default model exercises the same code path.
Deterministic for a given corpus and `tokenizers` version.
"""

import argparse
import json
import os
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# Qwen2/Qwen3's pre-tokenizer split (tokenizer.json, pre_tokenizer.pretokenizers[0]).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SEPARATOR = "\n<|endoftext|>\n"
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def read_documents(path, limit_chars=None):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if limit_chars is not None:
        text = text[:limit_chars]
    docs = [d for d in text.split(SEPARATOR)]
    if docs and docs[-1].endswith("\n<|endoftext|>"):
        docs[-1] = docs[-1][: -len("\n<|endoftext|>")]
    return [d for d in docs if d]


def build(vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    try:  # Qwen's tokenizer.json spells all three flags out
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    except TypeError:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return tok, trainer


def tokenizer_config(model_max_length):
    added = {}
    for i, t in enumerate(SPECIAL_TOKENS):
        added[str(i)] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": model_max_length,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="train.txt from build_corpus.py")
    ap.add_argument("--heldout", help="heldout.txt, for a round-trip and compression check")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--model-max-length", type=int, default=2048)
    ap.add_argument("--limit-chars", type=int, default=None, help="train on a prefix (smoke runs)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    t0 = time.time()
    docs = read_documents(args.train, args.limit_chars)
    print(f"tokenizer: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.2f} M chars", flush=True)
    tok, trainer = build(args.vocab_size)
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            sys.exit(f"tokenizer: special token {t} has id {tok.token_to_id(t)}, expected {i}")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    print(f"tokenizer: trained vocab {vocab} in {time.time() - t0:.1f} s", flush=True)
    if vocab > args.vocab_size:
        sys.exit(f"tokenizer: vocab {vocab} exceeds --vocab-size {args.vocab_size}")

    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(args.model_max_length), f, indent=2, ensure_ascii=False)
        f.write("\n")

    # Reload from disk and check what the engine will rely on.
    tok = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    check = read_documents(args.heldout) if args.heldout else docs[:20]
    chars = toks = bad = 0
    for enc, d in zip(tok.encode_batch(check, add_special_tokens=False), check):
        chars += len(d)
        toks += len(enc.ids)
        if tok.decode(enc.ids, skip_special_tokens=False) != d:
            bad += 1
    print(f"tokenizer: {'held-out' if args.heldout else 'train sample'}: {chars / max(toks, 1):.3f} "
          f"chars/token over {len(check)} documents, {bad} failed round trips", flush=True)
    if bad:
        sys.exit("tokenizer: round trip failed")
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n", add_special_tokens=False).ids
    if ids[0] != 1 or 2 not in ids:
        sys.exit(f"tokenizer: special tokens not matched in text: {ids}")


if __name__ == "__main__":
    main()
