// `pagedkv logits`: writes the logits of every position of an input as a
// safetensors file ("logits" [T, vocab] F32, "input_ids" [T] I64) — how anyone
// checks this engine against another implementation. --warm-prefix N first runs
// the first N tokens as an earlier request (its logits give rows 0..N-1), so the
// real run hits the prefix cache at the last block boundary at or below N; rows
// from the hit onward come from the cached run. By the project's principle the
// file is byte-identical to the cold run's.
#include <cstring>
#include <iostream>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/model_cli_util.h"
#include "cli/text_format.h"
#include "model/request_runner.h"
#include "model/safetensors.h"

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
  Status s = p.parse(argc, argv);
  if (!s.ok()) return report_error("logits", s);
  if (p.help_requested()) {
    std::cout << p.help();
    return 0;
  }
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

  auto model = model::load_model(dir);
  if (!model.ok()) return report_error("logits", model.status());
  const int32_t V = (*model)->config().vocab_size;
  for (int32_t id : *ids)
    if (id >= V)
      return report_error("logits",
                          invalid_argument(in + ": token id " + std::to_string(id) +
                                           " is outside the vocabulary of " + std::to_string(V)));
  std::unique_ptr<kv::PagedKVCache> cache;
  if (!flat) {
    auto c = model::make_paged_cache(**model);
    if (!c.ok()) return report_error("logits", c.status());
    cache = std::move(*c);
  }
  const auto path = flat ? model::KVPath::kFlat : model::KVPath::kPaged;
  std::vector<float> logits;
  int64_t cached = 0;
  if (*warm > 0) {
    model::RequestRunner w(**model, path, cache.get());
    std::vector<int32_t> head(ids->begin(), ids->begin() + *warm);
    auto c = w.begin(head);
    if (!c.ok()) return report_error("logits", c.status());
    s = w.prefill(static_cast<int32_t>(*chunk), model::LogitsRequest::kAll, &logits);
    if (!s.ok()) return report_error("logits", s);
    w.end(false);
  }
  model::RequestRunner r(**model, path, cache.get());
  auto c = r.begin(*ids);
  if (!c.ok()) return report_error("logits", c.status());
  cached = *c;
  std::vector<float> rest;
  s = r.prefill(static_cast<int32_t>(*chunk), model::LogitsRequest::kAll, &rest);
  if (!s.ok()) return report_error("logits", s);
  r.end(false);
  logits.resize(static_cast<size_t>(cached * V));  // rows 0..cached-1 from the warm run
  logits.insert(logits.end(), rest.begin(), rest.end());
  if (static_cast<int64_t>(logits.size()) != T * V)
    return report_error("logits", internal_error("logits rows do not add up"));
  std::vector<int64_t> ids64(ids->begin(), ids->end());
  std::vector<model::TensorToWrite> tw = {
      {"logits", model::DType::kF32, {T, V}, std::as_bytes(std::span(logits))},
      {"input_ids", model::DType::kI64, {T}, std::as_bytes(std::span(ids64))},
  };
  s = model::write_safetensors(outp, tw,
                               {{"format", "pt"},
                                {"cached_tokens", std::to_string(cached)},
                                {"kv_path", flat ? "flat" : "paged"}});
  if (!s.ok()) return report_error("logits", s);
  std::cerr << "wrote logits [" << T << ", " << V << "] to " << outp << " ("
            << count_noun(cached, "token") << " from the prefix cache)\n";
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("logits", "write every position's logits to safetensors (--warm-prefix)",
                     logits_main);

}  // namespace pagedkv::cli
