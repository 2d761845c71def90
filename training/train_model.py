#!/usr/bin/env python3
"""Trains pagedkv's default model: a ~12.6M-parameter Qwen3 on the Debian-docs corpus.

Runs on one CUDA GPU (it refuses to run without one unless --allow-cpu). Inputs: the
corpus written by build_corpus.py and the tokenizer written by train_tokenizer.py.
Output (--out), the Hugging Face layout, at most 8 files, each below 16 MiB:
  config.json, generation_config.json,
  model-00001-of-00002.safetensors, model-00002-of-00002.safetensors,
  model.safetensors.index.json  (bf16 weights, split in two balanced shards),
  tokenizer.json, tokenizer_config.json  (copied from --tokenizer-dir),
  train_report.json  (numbers, curves, samples, the fixed held-out slice)

Training: bf16 autocast, fused AdamW, linear warmup then cosine decay over a budget
that is the smaller of a wall-clock limit and --max-epochs of the training tokens;
residual/embedding dropout (forward hooks; the saved model has none) and attention
dropout against over-fitting; the held-out loss is measured every --eval-every
seconds and the weights with the lowest held-out loss are the ones saved. Training
stops early once the held-out loss has risen for --patience evaluations in a row.

Held-out numbers in the report are computed after saving, from the saved bf16
weights reloaded in float32 (what the engine computes with):
  heldout.loss_nats_per_token: every held-out token except the first is predicted
    once, in windows of 513 tokens overlapping by one (fresh context each window);
  heldout.bits_per_char: the same total NLL in bits / characters of the held-out
    documents (separators not counted; their <|endoftext|> tokens are predicted);
  heldout_slice: the FIXED engine-comparison slice: 4,097 tokens of one held-out
    document (the first whose first 4,097 tokens decode and re-encode to the same
    ids), evaluated as 8 independent windows w = 0..7 of 512 input tokens
    ids[512w : 512w+512] predicting ids[512w+1 : 512w+513]; loss = mean NLL over
    the 4,096 predictions, float32 on the CPU with eager attention.
"""

import argparse
import json
import math
import os
import platform
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

T_START = time.time()
SEPARATOR = "\n<|endoftext|>\n"
EOT_ID, IM_START_ID, IM_END_ID = 0, 1, 2
SLICE_WINDOW, SLICE_WINDOWS = 512, 8
MiB = 1024 * 1024
PROMPTS = [
    "The Python interpreter",
    "To create a new branch in Git,",
    "A hacker is a person who",
]


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", flush=True)


def read_documents(path, limit_chars=None):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if limit_chars is not None:
        text = text[:limit_chars]
    return [d for d in text.split(SEPARATOR) if d]


def encode_stream(tok, docs):
    """Token ids of all documents, each followed by <|endoftext|>, as one int64 array."""
    encs = tok.encode_batch(docs, add_special_tokens=False)
    parts = []
    for e in encs:
        parts.append(np.asarray(e.ids, dtype=np.int64))
        parts.append(np.array([EOT_ID], dtype=np.int64))
    return np.concatenate(parts), encs


def choose_slice(tok, docs, encs, need):
    """The fixed engine-comparison slice (see module docstring)."""
    for i, (d, e) in enumerate(zip(docs, encs)):
        if len(e.ids) < need:
            continue
        ids = list(e.ids[:need])
        text = tok.decode(ids, skip_special_tokens=False)
        if tok.encode(text, add_special_tokens=False).ids == ids:
            return {"source": f"held-out document {i} (0-based, in heldout.txt order), first {need} tokens",
                    "heldout_doc_index": i, "doc_head": d[:120], "token_ids": ids, "text": text,
                    "reencodes_identically": True}
    return None


def build_model(args, vocab_size):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    common = dict(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        hidden_act="silu",
        max_position_embeddings=args.max_positions,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=True,
        attention_bias=False,
        use_sliding_window=False,
        attention_dropout=args.attn_dropout,
        bos_token_id=None,
        eos_token_id=EOT_ID,
        # No pad id in config.json: Qwen3Model passes pad_token_id to nn.Embedding as
        # padding_idx, which would zero (and freeze) <|endoftext|>'s tied embedding row.
        pad_token_id=None,
    )
    try:
        config = Qwen3Config(**common, rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta})
    except TypeError:  # transformers 4.x spelling
        config = Qwen3Config(**common, rope_theta=args.rope_theta)
    rp = getattr(config, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None or abs(float(theta) - args.rope_theta) > 1e-6:
        sys.exit(f"train: rope_theta did not take: {theta}")
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(config)
    if getattr(model.get_input_embeddings(), "padding_idx", None) is not None:
        sys.exit("train: the embedding has a padding_idx; <|endoftext|> could not be learned")
    emb = model.get_input_embeddings().weight
    if model.lm_head.weight.data_ptr() != emb.data_ptr():
        log("warning: lm_head was not tied by the library; tying it")
        model.lm_head.weight = emb
    return model, config


def add_dropout_hooks(model, p):
    """GPT-2-style residual and embedding dropout, active only in train mode."""
    if p <= 0:
        return []

    def drop_out(module, inputs, output):
        if not module.training:
            return output
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, True),) + tuple(output[1:])
        return F.dropout(output, p, True)

    hooks = [model.get_input_embeddings().register_forward_hook(drop_out)]
    for layer in model.model.layers:
        hooks.append(layer.self_attn.register_forward_hook(drop_out))
        hooks.append(layer.mlp.register_forward_hook(drop_out))
    return hooks


def window_batches(stream, T):
    """(inputs, targets) windows of T predictions, overlapping by one token, covering
    every token of `stream` except the first exactly once as a target."""
    n = len(stream)
    full = (n - 1) // T
    out = []
    if full:
        idx = torch.arange(full, device=stream.device)[:, None] * T + torch.arange(T + 1, device=stream.device)
        w = stream[idx]
        out.append((w[:, :-1], w[:, 1:]))
    rest = (n - 1) - full * T
    if rest > 0:
        w = stream[full * T:].unsqueeze(0)
        out.append((w[:, :-1], w[:, 1:]))
    return out


@torch.no_grad()
def eval_nll(model, stream, T, batch, autocast):
    """(sum of NLL in nats, number of predictions) over the stream; see window_batches."""
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=stream.device)
    count = 0
    for x_all, y_all in window_batches(stream, T):
        for s in range(0, x_all.shape[0], batch):
            x, y = x_all[s:s + batch], y_all[s:s + batch]
            with torch.autocast(stream.device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=x, use_cache=False).logits
            nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")
            total += nll.double()
            count += y.numel()
    return total.item(), count


@torch.no_grad()
def slice_losses(model, ids, device):
    x = torch.tensor(ids, dtype=torch.long, device=device)
    per = []
    for w in range(SLICE_WINDOWS):
        seg = x[w * SLICE_WINDOW: w * SLICE_WINDOW + SLICE_WINDOW + 1]
        logits = model(input_ids=seg[:-1].unsqueeze(0), use_cache=False).logits[0].float()
        per.append(F.cross_entropy(logits, seg[1:], reduction="sum").item())
    return sum(per) / (SLICE_WINDOW * SLICE_WINDOWS), [v / SLICE_WINDOW for v in per]


@torch.no_grad()
def continue_text(model, tok, prompt, n, greedy, seed=0, temperature=0.8, top_k=40):
    ids = tok.encode(prompt, add_special_tokens=False).ids
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids + out]), use_cache=False).logits[0, -1].float()
        logits[tok.get_vocab_size(with_added_tokens=True):] = float("-inf")  # ids the tokenizer lacks
        if greedy:
            nxt = int(torch.argmax(logits))
        else:
            v, i = torch.topk(logits / temperature, top_k)
            nxt = int(i[torch.multinomial(torch.softmax(v, -1), 1, generator=gen)])
        out.append(nxt)
        if nxt in (EOT_ID, IM_END_ID):
            break
    return {"prompt": prompt, "prompt_ids": ids, "mode": "greedy" if greedy else
            f"sample seed={seed} temperature={temperature} top_k={top_k}",
            "new_ids": out, "continuation": tok.decode(out, skip_special_tokens=False)}


def shard_in_two(out_dir, above_bytes):
    """Re-writes a single model.safetensors larger than above_bytes as two balanced
    shards + index (the transfer from the GPU machine takes files below 16 MiB)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    single = os.path.join(out_dir, "model.safetensors")
    if not os.path.exists(single) or os.path.getsize(single) <= above_bytes:
        return
    tensors = {}
    with safe_open(single, framework="pt") as f:
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    sizes = {k: t.numel() * t.element_size() for k, t in tensors.items()}
    bins = [[], []]
    load = [0, 0]
    for k in sorted(tensors, key=lambda k: (-sizes[k], k)):
        b = 0 if load[0] <= load[1] else 1
        bins[b].append(k)
        load[b] += sizes[k]
    weight_map = {}
    for b, names in enumerate(bins):
        fname = f"model-{b + 1:05d}-of-00002.safetensors"
        save_file({k: tensors[k].contiguous() for k in sorted(names)}, os.path.join(out_dir, fname),
                  metadata={"format": "pt"})
        for k in names:
            weight_map[k] = fname
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(sizes.values())},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")
    os.remove(single)
    log(f"sharded weights: {load[0] / 1e6:.2f} MB + {load[1] / 1e6:.2f} MB")


def save_checkpoint(model, config, args, tokenizer_dir, out_dir):
    from transformers import GenerationConfig

    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=[EOT_ID, IM_END_ID], pad_token_id=EOT_ID, do_sample=False)
    model.save_pretrained(out_dir, max_shard_size="1GB")
    if not os.path.exists(os.path.join(out_dir, "generation_config.json")):
        model.generation_config.save_pretrained(out_dir)
    shard_in_two(out_dir, int(args.shard_above_mib * MiB))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))


def transformers_tokenizer_check(out_dir, tok):
    """Loads the saved tokenizer through transformers (as users would); never fatal."""
    try:
        from transformers import AutoTokenizer

        ht = AutoTokenizer.from_pretrained(out_dir)
        chat = ht.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                      add_generation_prompt=True)
        text = "The Python interpreter reads <|im_start|>x"
        return {"loads": True, "class": type(ht).__name__,
                "chat_template_ok": chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                "ids_match_tokenizers": ht(text, add_special_tokens=False)["input_ids"]
                == tok.encode(text, add_special_tokens=False).ids,
                "eos_token": ht.eos_token, "bos_token": ht.bos_token}
    except Exception as e:  # report, do not fail the run
        return {"loads": False, "error": f"{type(e).__name__}: {e}"[:500]}


def check_output(out_dir):
    files = sorted(os.listdir(out_dir))
    sizes = {f: os.path.getsize(os.path.join(out_dir, f)) for f in files}
    problems = []
    if len(files) > 8:
        problems.append(f"{len(files)} files (max 8): {files}")
    for f, s in sizes.items():
        if s >= 16 * MiB:
            problems.append(f"{f} is {s} bytes (max 16 MiB)")
        if os.path.isdir(os.path.join(out_dir, f)):
            problems.append(f"{f} is a folder")
    if sum(sizes.values()) >= 30 * 1000 * 1000:
        problems.append(f"total {sum(sizes.values())} bytes (max 30 MB)")
    return sizes, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus-dir", default=".cache/corpus")
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit-chars", type=int, default=None, help="use a prefix of train.txt (smoke runs)")
    ap.add_argument("--allow-cpu", action="store_true")
    # architecture
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    # regularization
    ap.add_argument("--dropout", type=float, default=0.1, help="residual + embedding dropout")
    ap.add_argument("--attn-dropout", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    # optimization
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128, help="sequences per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--train-seconds", type=float, default=420.0, help="wall-clock training budget")
    ap.add_argument("--deadline", type=float, default=None,
                    help="unix time by which everything must be done; shortens the budget")
    ap.add_argument("--finish-reserve", type=float, default=50.0,
                    help="seconds kept before --deadline for saving and final evaluation")
    ap.add_argument("--max-epochs", type=float, default=40.0)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--eval-every", type=float, default=10.0, help="seconds between held-out evaluations")
    ap.add_argument("--patience", type=int, default=6)
    ap.add_argument("--shard-above-mib", type=float, default=15.0,
                    help="split model.safetensors in two when it is larger than this")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (off: compile time counts)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sample-tokens", type=int, default=48)
    args = ap.parse_args()

    import tokenizers
    import transformers
    from tokenizers import Tokenizer

    if torch.cuda.is_available():
        device = torch.device("cuda")
        hardware = torch.cuda.get_device_name(0)
    elif args.allow_cpu:
        device = torch.device("cpu")
        hardware = platform.processor() or "cpu"
    else:
        sys.exit("train: no CUDA device (pass --allow-cpu for a CPU run)")
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers "
        f"{tokenizers.__version__}, device {hardware}")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    # ---- data ------------------------------------------------------------------------
    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    if tok.get_vocab_size(with_added_tokens=True) > args.vocab:
        sys.exit(f"train: tokenizer has {tok.get_vocab_size()} tokens, model vocab is {args.vocab}")
    for t, i in (("<|endoftext|>", EOT_ID), ("<|im_start|>", IM_START_ID), ("<|im_end|>", IM_END_ID)):
        if tok.token_to_id(t) != i:
            sys.exit(f"train: tokenizer maps {t} to {tok.token_to_id(t)}, expected {i}")
    train_docs = read_documents(os.path.join(args.corpus_dir, "train.txt"), args.limit_chars)
    held_docs = read_documents(os.path.join(args.corpus_dir, "heldout.txt"))
    train_np, _ = encode_stream(tok, train_docs)
    held_np, held_encs = encode_stream(tok, held_docs)
    held_chars = sum(len(d) for d in held_docs)
    log(f"tokens: train {len(train_np):,} ({sum(map(len, train_docs)) / len(train_np):.3f} chars/token), "
        f"held-out {len(held_np):,} from {held_chars:,} chars")
    sl = choose_slice(tok, held_docs, held_encs, SLICE_WINDOW * SLICE_WINDOWS + 1)
    if sl is None:
        if len(held_np) < SLICE_WINDOW * SLICE_WINDOWS + 1:
            sys.exit("train: held-out text is shorter than the 4,097-token slice")
        ids = [int(v) for v in held_np[:SLICE_WINDOW * SLICE_WINDOWS + 1]]
        sl = {"source": "first 4,097 tokens of the held-out stream (no single document re-encoded "
                        "identically; FALLBACK)", "heldout_doc_index": None, "doc_head": held_docs[0][:120],
              "token_ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
              "reencodes_identically": tok.encode(tok.decode(ids, skip_special_tokens=False),
                                                  add_special_tokens=False).ids == ids}
        log("warning: slice fallback used")
    log(f"slice: {sl['source']}: {sl['doc_head'][:60]!r}")
    train_t = torch.from_numpy(train_np).to(device)
    held_t = torch.from_numpy(held_np).to(device)

    # ---- model -----------------------------------------------------------------------
    model, config = build_model(args, args.vocab)
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.get_input_embeddings().weight.numel()
    log(f"model: {n_params:,} parameters ({n_embed:,} in the tied embedding)")
    model.to(device)
    hooks = add_dropout_hooks(model, args.dropout)
    fwd = torch.compile(model) if args.compile else model

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if device.type == "cuda" else {}))

    budget = args.train_seconds
    if args.deadline is not None:
        budget = min(budget, args.deadline - time.time() - args.finish_reserve)
    if budget < 5:
        sys.exit(f"train: only {budget:.0f} s left for training")
    max_tokens = args.max_epochs * len(train_t)
    tokens_per_step = args.batch * args.seq_len
    log(f"training: budget {budget:.0f} s or {args.max_epochs} epochs ({max_tokens / 1e6:.0f} M tokens), "
        f"{tokens_per_step:,} tokens/step")

    gen = torch.Generator(device=device).manual_seed(args.seed)
    ar = torch.arange(args.seq_len + 1, device=device)
    curve = []
    best = {"loss": float("inf"), "step": 0, "state": None}
    step, tokens_seen, train_time, since_best, stopped = 0, 0, 0.0, 0, "budget"
    run_loss, run_n = 0.0, 0
    t_loop = time.time()
    last_eval = t_loop
    lr = 0.0

    def progress():
        return max((time.time() - t_loop) / budget, tokens_seen / max_tokens,
                   step / args.max_steps if args.max_steps else 0.0)

    def evaluate():
        nonlocal since_best
        s, c = eval_nll(fwd, held_t, args.seq_len, 64, autocast=device.type == "cuda")
        hl = s / c
        tl = run_loss / max(run_n, 1)
        curve.append({"step": step, "seconds": round(time.time() - t_loop, 1),
                      "epoch": round(tokens_seen / len(train_t), 3), "lr": lr,
                      "train_loss": round(tl, 4), "heldout_loss": round(hl, 4)})
        if hl < best["loss"]:
            best.update(loss=hl, step=step, state={k: v.detach().clone() for k, v in model.state_dict().items()})
            since_best = 0
        else:
            since_best += 1
        log(f"eval step {step:5d} epoch {tokens_seen / len(train_t):6.2f} train {tl:.4f} held-out {hl:.4f} "
            f"(best {best['loss']:.4f} @ {best['step']})")
        model.train()

    model.train()
    while True:
        p = progress()
        if p >= 1.0:
            stopped = "budget" if time.time() - t_loop >= budget else "max_steps" if args.max_steps and step >= args.max_steps \
                else "max_epochs"
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * (
            args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        t0 = time.time()
        off = torch.randint(0, len(train_t) - args.seq_len - 1, (args.batch,), device=device, generator=gen)
        w = train_t[off[:, None] + ar]
        x, y = w[:, :-1], w[:, 1:]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = fwd(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens_seen += tokens_per_step
        if step % 25 == 0 or step <= 3:
            lv = loss.item()  # synchronizes
            run_loss += lv
            run_n += 1
            if step % 100 == 0 or step <= 3:
                el = time.time() - t_loop
                log(f"step {step:5d} loss {lv:.4f} lr {lr:.2e} {tokens_seen / max(el, 1e-9) / 1e6:.2f} M tok/s")
        if not math.isfinite(run_loss):
            sys.exit(f"train: loss is not finite at step {step}")
        if device.type == "cuda" and step % 25 == 0:
            torch.cuda.synchronize()
        train_time += time.time() - t0
        if time.time() - last_eval >= args.eval_every:
            evaluate()
            run_loss, run_n = 0.0, 0
            last_eval = time.time()
            if since_best >= args.patience:
                stopped = f"early stop: no held-out improvement in {args.patience} evaluations"
                break
    if run_n or not curve:
        evaluate()
    wall_train = time.time() - t_loop
    log(f"training done: {step} steps, {tokens_seen / 1e6:.1f} M tokens, {wall_train:.0f} s ({stopped}); "
        f"best held-out {best['loss']:.4f} at step {best['step']}")

    # ---- save the best weights in bf16, then evaluate what was saved -----------------
    for h in hooks:
        h.remove()
    model.load_state_dict(best["state"])
    model.eval()
    save_checkpoint(model.cpu(), config, args, args.tokenizer_dir, args.out)
    del model, fwd, opt
    best["state"] = None
    if device.type == "cuda":
        torch.cuda.empty_cache()

    from transformers import Qwen3ForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    m32 = Qwen3ForCausalLM.from_pretrained(args.out, dtype=torch.float32, attn_implementation="eager").float()
    m32.eval()
    slice_cpu, slice_windows = slice_losses(m32, sl["token_ids"], torch.device("cpu"))
    log(f"slice loss fp32 cpu {slice_cpu:.6f}")
    m32.to(device)
    slice_dev, _ = slice_losses(m32, sl["token_ids"], device)
    s, c = eval_nll(m32, held_t, args.seq_len, 32, autocast=False)
    held_loss = s / c
    bpc = s / math.log(2) / held_chars
    log(f"held-out fp32 (bf16 weights): {held_loss:.4f} nats/token over {c:,} tokens, {bpc:.4f} bits/char; "
        f"slice {slice_cpu:.6f} (cpu) / {slice_dev:.6f} ({device.type})")
    m32.cpu()
    samples = []
    for i, prompt in enumerate(PROMPTS):
        samples.append(continue_text(m32, tok, prompt, args.sample_tokens, greedy=True))
        samples.append(continue_text(m32, tok, prompt, args.sample_tokens, greedy=False, seed=i))
    for smp in samples:
        log(f"sample [{smp['mode']}] {smp['prompt']!r} -> {smp['continuation']!r}")

    manifest_path = os.path.join(args.corpus_dir, "manifest.json")
    corpus = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            man = json.load(f)
        corpus = {"train_sha256": man["train"]["sha256"], "heldout_sha256": man["heldout"]["sha256"],
                  "packages": [f"{p['package']} {p['version']}" for p in man["packages"]]}
    corpus.update({"train_tokens": int(len(train_np)), "heldout_tokens": int(len(held_np)),
                   "train_chars": sum(map(len, train_docs)), "heldout_chars": held_chars,
                   "limit_chars": args.limit_chars})
    report = {
        "model": {"architecture": "Qwen3ForCausalLM", "parameters": n_params,
                  "parameters_without_embedding": n_params - n_embed, "dtype": "bfloat16",
                  "config": json.loads(json.dumps(config.to_dict(), default=str))},
        "tokenizer": {"vocab_size": tok.get_vocab_size(with_added_tokens=True),
                      "heldout_chars_per_token": held_chars / len(held_np)},
        "corpus": corpus,
        "training": {
            "hardware": hardware, "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "python": platform.python_version(),
            "steps": step, "tokens_seen": tokens_seen, "epochs": tokens_seen / len(train_t),
            "train_loop_wall_seconds": round(wall_train, 1), "train_step_seconds": round(train_time, 1),
            "script_wall_seconds": round(time.time() - T_START, 1), "stopped": stopped,
            "hyperparameters": {k: v for k, v in vars(args).items() if k not in ("out", "tokenizer_dir", "corpus_dir")},
        },
        "curve": curve,
        "best": {"step": best["step"], "heldout_loss_bf16_autocast": best["loss"]},
        "heldout": {"loss_nats_per_token": held_loss, "bits_per_char": bpc, "predicted_tokens": c,
                    "chars": held_chars, "precision": "float32 compute, saved bf16 weights, eager attention",
                    "definition": "every held-out token but the first predicted once, windows of 513 tokens "
                                  "overlapping by one; bits/char = total NLL / ln 2 / characters of the held-out "
                                  "documents (separator lines not counted)"},
        "heldout_slice": {
            "definition": "8 independent windows w=0..7: input token_ids[512w:512w+512], targets "
                          "token_ids[512w+1:512w+513]; loss = mean NLL (nats) over the 4,096 targets",
            "loss_fp32_cpu": slice_cpu, "loss_fp32_" + device.type: slice_dev, "window_losses_fp32_cpu": slice_windows,
            **sl},
        "samples": samples,
    }
    report["tokenizer"]["transformers_check"] = transformers_tokenizer_check(args.out, tok)
    log(f"transformers tokenizer check: {report['tokenizer']['transformers_check']}")
    with open(os.path.join(args.out, "train_report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
        f.write("\n")
    sizes, problems = check_output(args.out)
    for name, size in sizes.items():
        log(f"output {name}: {size:,} bytes")
    if problems:
        sys.exit("train: output breaks the transfer limits: " + "; ".join(problems))
    log(f"done: held-out {held_loss:.4f} nats/token, {bpc:.4f} bits/char, slice {slice_cpu:.6f}")


if __name__ == "__main__":
    main()
