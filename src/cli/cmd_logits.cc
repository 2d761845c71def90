// `pagedkv logits`: writes the logits of every position of an input as a
// safetensors file ("logits" [T, vocab] F32, "input_ids" [T] I64) — how anyone
// checks this engine against another implementation. --warm-prefix N first runs
// the first N tokens as an earlier request (its logits give rows 0..N-1), so the
// real run hits the prefix cache at the last block boundary at or below N; rows
// from the hit onward come from the cached run. By the project's principle the
// file is byte-identical to the cold run's. Every run goes through the engine,
// so the cold tier (PAGEDKV_PERSIST_PAGED_CACHE, config persist_paged_cache)
// applies too: rows of a prefix restored from disk are recomputed on the flat
// path for their logits.
#include <cstring>
#include <iostream>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/device_option.h"
#include "cli/model_cli_util.h"
#include "cli/text_format.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "pagedkv/engine.h"

namespace pagedkv::cli {
namespace {

int logits_main(int argc, char** argv) {
  ArgParser p("logits", "Write the logits of every input position to a safetensors file.");
  p.add_option("model", "DIR", "Hugging Face checkpoint directory (required)");
  p.add_option("input-ids", "FILE",
               "token ids: text (whitespace/comma separated) or a .safetensors file with an "
               "input_ids tensor (I64/I32) (required)");
  p.add_option("out", "FILE",
               "output .safetensors (tensors: logits [T, vocab] F32, input_ids [T] I64) "
               "(required)");
  p.add_option("warm-prefix", "N", "first run the first N tokens as an earlier request (0 = off)",
               "0");
  p.add_option("chunk", "N", "prefill chunk size (0 = whole input at once)", "0");
  p.add_flag("flat", "use the flat per-request KV path (no prefix cache)");
  add_device_option(p);
  if (auto rc = p.parse_or_exit_code(argc, argv)) return *rc;
  std::string dir = p.get("model"), in = p.get("input-ids"), outp = p.get("out");
  if (dir.empty() || in.empty() || outp.empty())
    return report_error("logits", invalid_argument("--model, --input-ids and --out are required"));
  auto warm = p.get_int("warm-prefix");
  if (!warm.ok()) return report_error("logits", warm.status());
  auto chunk = p.get_int("chunk");
  if (!chunk.ok()) return report_error("logits", chunk.status());
  if (*chunk < 0 || *chunk > INT32_MAX)
    return report_error("logits", invalid_argument("--chunk out of range"));
  auto ids = read_ids_file(in);
  if (!ids.ok()) return report_error("logits", ids.status());
  if (ids->empty()) return report_error("logits", invalid_argument(in + ": no token ids"));
  const int64_t T = static_cast<int64_t>(ids->size());
  if (*warm < 0 || *warm > T)
    return report_error(
        "logits", invalid_argument("--warm-prefix must be in [0, " + std::to_string(T) + "]"));
  bool flat = p.has("flat");
  if (flat && *warm > 0)
    return report_error("logits",
                        invalid_argument("--warm-prefix needs the paged cache (drop --flat)"));

  auto loaded = load_model_on(dir, requested_device(p));
  if (!loaded.ok()) return report_error("logits", loaded.status());
  std::shared_ptr<model::Model> model(std::move(*loaded));
  const int32_t V = model->config().vocab_size;
  for (int32_t id : *ids)
    if (id >= V)
      return report_error("logits",
                          invalid_argument(in + ": token id " + std::to_string(id) +
                                           " is outside the vocabulary of " + std::to_string(V)));
  // Through the engine (step() mode): each run is a prefill-only request that
  // keeps every computed position's logits; the --warm-prefix run is an earlier
  // request, so the real one hits its blocks in the prefix cache.
  engine::EngineOptions eo;
  if (flat) eo.use_block_paged_cache = false;
  eo.model_dir = dir;
  eo.max_num_seqs = 1;
  eo.max_num_batched_tokens = *chunk > 0 ? *chunk : T;  // 0: the whole input at once
  auto eng = engine::Engine::create(model, eo);
  if (!eng.ok()) return report_error("logits", eng.status());
  auto run_on = [&](engine::Engine& e,
                    std::vector<int32_t> prompt) -> StatusOr<engine::RequestResult> {
    engine::GenerateRequest rq;
    rq.prompt = std::move(prompt);
    rq.sampling.max_tokens = 0;
    rq.return_prompt_logits = true;
    PKV_ASSIGN_OR_RETURN(engine::RequestHandlePtr h, e.submit(std::move(rq)));
    e.run_until_idle();
    engine::RequestResult r = h->wait();
    if (r.finish_reason == engine::FinishReason::kError) return r.error;
    return r;
  };
  auto run = [&](std::vector<int32_t> prompt) { return run_on(**eng, std::move(prompt)); };
  std::vector<float> logits;
  if (*warm > 0) {
    auto w = run(std::vector<int32_t>(ids->begin(), ids->begin() + *warm));
    if (!w.ok()) return report_error("logits", w.status());
    logits = std::move(w->prompt_logits);
  }
  auto r = run(*ids);
  if (!r.ok()) return report_error("logits", r.status());
  const int64_t cached = r->prompt_logits_first;
  const int64_t have = static_cast<int64_t>(logits.size()) / V;  // rows of the warm run
  if (cached > have) {
    // Rows the cache served that no run of this process computed (a prefix
    // restored from the cold tier): their logits come from a flat recompute of
    // that prefix, bit-identical by the project's principle.
    engine::EngineOptions fo = eo;
    fo.use_block_paged_cache = false;
    fo.persist_paged_cache.reset();
    auto flat_eng = engine::Engine::create(model, fo);
    if (!flat_eng.ok()) return report_error("logits", flat_eng.status());
    auto head = run_on(**flat_eng, std::vector<int32_t>(ids->begin(), ids->begin() + cached));
    if (!head.ok()) return report_error("logits", head.status());
    logits = std::move(head->prompt_logits);
  }
  logits.resize(static_cast<size_t>(cached * V));  // rows 0..cached-1 computed earlier
  logits.insert(logits.end(), r->prompt_logits.begin(), r->prompt_logits.end());
  if (static_cast<int64_t>(logits.size()) != T * V)
    return report_error("logits", internal_error("logits rows do not add up"));
  std::vector<int64_t> ids64(ids->begin(), ids->end());
  std::vector<model::TensorToWrite> tw = {
      {"logits", model::DType::kF32, {T, V}, std::as_bytes(std::span(logits))},
      {"input_ids", model::DType::kI64, {T}, std::as_bytes(std::span(ids64))},
  };
  Status s = model::write_safetensors(outp, tw,
                                      {{"format", "pt"},
                                       {"cached_tokens", std::to_string(cached)},
                                       {"kv_path", (*eng)->paged() ? "paged" : "flat"}});
  if (!s.ok()) return report_error("logits", s);
  std::cerr << "wrote logits [" << T << ", " << V << "] to " << outp << " ("
            << count_noun(cached, "token") << " from the prefix cache)\n";
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("logits", "write every position's logits to safetensors (--warm-prefix)",
                     logits_main);

}  // namespace pagedkv::cli
