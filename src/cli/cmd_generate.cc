// `pagedkv generate`: runs one or more prompts through a model, one after another
// on one KV cache, streaming the generated tokens; --stats prints the prefix-cache
// statistics (a later prompt sharing a prefix with an earlier one hits its blocks).
// The KV path is paged unless --flat, config.json `use_block_paged_cache: false`
// or PAGEDKV_USE_BLOCK_PAGED_CACHE=0 select the flat path.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/args.h"
#include "cli/cold_session.h"
#include "cli/command_registry.h"
#include "cli/model_cli_util.h"
#include "engine/sampler.h"
#include "model/request_runner.h"

namespace pagedkv::cli {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::vector<std::string> split_prompts(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ';') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

int generate_main(int argc, char** argv) {
  ArgParser p("generate", "Generate tokens for one or more prompts on one shared KV cache.");
  p.add_option("model", "DIR", "Hugging Face checkpoint directory");
  p.add_option("prompt-ids", "IDS",
               "prompt token ids, e.g. \"1 2 3\"; several prompts separated by ';' run one after "
               "another on the same cache");
  p.add_option("prompt", "TEXT",
               "text prompt(s), ';'-separated, encoded with the model directory's tokenizer.json");
  p.add_option("max-tokens", "N", "tokens to generate per prompt", "32");
  p.add_option("temperature", "T", "sampling temperature; 0 = greedy", "0");
  p.add_option("top-k", "K", "keep the K most likely tokens (0 = off)", "0");
  p.add_option("top-p", "P", "nucleus sampling mass (1 = off)", "1");
  p.add_option("min-p", "P", "drop tokens below P x the top probability (0 = off)", "0");
  p.add_option("seed", "S", "sampling seed (per request; prompt i uses S + i)", "0");
  p.add_option("stop-ids", "IDS", "token ids that end generation (besides config eos_token_id)");
  p.add_option("chunk", "N", "prefill chunk size in tokens (0 = whole prompt at once)", "0");
  p.add_flag("flat", "use the flat per-request KV path instead of the paged cache");
  p.add_flag("stats", "print prefix-cache and timing statistics");
  p.add_flag("persist-cache",
             "persist full KV blocks to the cold tier and restore them in later processes "
             "(qwen3/qwen3_moe only; dir: PAGEDKV_COLD_CACHE_DIR, docs/cold-tier.md)");
  Status s = p.parse(argc, argv);
  if (!s.ok()) return report_error("generate", s);
  if (p.help_requested()) {
    std::cout << p.help();
    return 0;
  }
  std::string dir = p.get("model");
  if (dir.empty()) return report_error("generate", invalid_argument("--model DIR is required"));
  auto codec_or = find_text_codec(dir);
  if (!codec_or.ok()) return report_error("generate", codec_or.status());
  std::unique_ptr<TextCodec> codec = std::move(*codec_or);
  std::vector<std::vector<int32_t>> prompts;
  if (p.get_optional("prompt")) {
    if (codec == nullptr)
      return report_error("generate", invalid_argument("--prompt TEXT needs a tokenizer.json in " +
                                                       dir + "; use --prompt-ids"));
    for (const auto& text : split_prompts(p.get("prompt"))) {
      auto ids = codec->encode(text);
      if (!ids.ok()) return report_error("generate", ids.status());
      prompts.push_back(*ids);
    }
  } else if (p.get_optional("prompt-ids")) {
    for (const auto& part : split_prompts(p.get("prompt-ids"))) {
      auto ids = parse_id_list(part, "--prompt-ids");
      if (!ids.ok()) return report_error("generate", ids.status());
      if (ids->empty())
        return report_error("generate", invalid_argument("--prompt-ids: empty prompt"));
      prompts.push_back(*ids);
    }
  } else {
    return report_error("generate", invalid_argument("give --prompt-ids IDS (or --prompt TEXT)"));
  }

  engine::SamplingParams sp;
  auto mt = p.get_int("max-tokens");
  auto tk = p.get_int("top-k");
  auto seed = p.get_int("seed");
  auto chunk = p.get_int("chunk");
  auto temp = p.get_double("temperature");
  auto topp = p.get_double("top-p");
  auto minp = p.get_double("min-p");
  for (const Status* st : {&mt.status(), &tk.status(), &seed.status(), &chunk.status(),
                           &temp.status(), &topp.status(), &minp.status()})
    if (!st->ok()) return report_error("generate", *st);
  if (*mt < 0 || *mt > (1 << 24))
    return report_error("generate", invalid_argument("--max-tokens out of range"));
  if (*tk < 0 || *tk > INT32_MAX)
    return report_error("generate", invalid_argument("--top-k out of range"));
  if (*chunk < 0 || *chunk > INT32_MAX)
    return report_error("generate", invalid_argument("--chunk out of range"));
  sp.max_tokens = static_cast<int32_t>(*mt);
  sp.top_k = static_cast<int32_t>(*tk);
  sp.temperature = *temp;
  sp.top_p = *topp;
  sp.min_p = *minp;
  sp.seed = static_cast<uint64_t>(*seed);
  if (p.get_optional("stop-ids")) {
    auto ids = parse_id_list(p.get("stop-ids"), "--stop-ids");
    if (!ids.ok()) return report_error("generate", ids.status());
    sp.stop_token_ids = *ids;
  }
  s = sp.validate();
  if (!s.ok()) return report_error("generate", s);

  auto t_load = Clock::now();
  auto model = model::load_model(dir);
  if (!model.ok()) return report_error("generate", model.status());
  double load_ms = ms_since(t_load);
  const auto& cfg = (*model)->config();
  for (int32_t e : cfg.eos_token_ids) sp.stop_token_ids.push_back(e);
  for (const auto& pr : prompts)
    for (int32_t id : pr)
      if (id >= cfg.vocab_size)
        return report_error(
            "generate",
            invalid_argument("--prompt-ids: token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(cfg.vocab_size)));
  bool paged = !p.has("flat") && model::resolve_use_block_paged_cache(cfg.cache);
  std::unique_ptr<kv::PagedKVCache> cache;
  if (paged) {
    auto c = model::make_paged_cache(**model);
    if (!c.ok()) return report_error("generate", c.status());
    cache = std::move(*c);
  }
  std::unique_ptr<ColdSession> cold;
  if (paged) {
    auto c = ColdSession::open_if_enabled(
        **model, dir, p.has("persist-cache") ? std::optional<bool>(true) : std::nullopt);
    if (!c.ok()) return report_error("generate", c.status());
    cold = std::move(*c);
  }
  const bool stats = p.has("stats");
  if (stats) {
    std::cout << "[model] " << cfg.model_type << " layers=" << cfg.num_hidden_layers
              << " hidden=" << cfg.hidden_size << " vocab=" << cfg.vocab_size
              << " kv_path=" << (paged ? "paged" : "flat")
              << " block_size=" << (*model)->kv_geometry().block_size << " load_ms=" << load_ms
              << "\n";
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    model::RequestRunner runner(**model, paged ? model::KVPath::kPaged : model::KVPath::kFlat,
                                cache.get());
    engine::SamplingParams rsp = sp;
    rsp.seed = sp.seed + i;
    auto t0 = Clock::now();
    auto cached = runner.begin(prompts[i]);
    if (!cached.ok()) return report_error("generate", cached.status());
    if (cold) *cached += cold->restore(*runner.adapter(), prompts[i]);
    std::vector<float> logits;
    s = runner.prefill(static_cast<int32_t>(*chunk), model::LogitsRequest::kLast, &logits);
    if (!s.ok()) return report_error("generate", s);
    double ttft = ms_since(t0);
    std::cout << "prompt " << i + 1 << " (" << prompts[i].size() << " tokens, " << *cached
              << " cached):";
    std::cout.flush();
    std::vector<int32_t> out;
    auto t1 = Clock::now();
    std::string stop_reason = "max_tokens";
    for (int32_t n = 0; n < rsp.max_tokens; ++n) {
      int32_t tok = engine::sample_token(logits, rsp, runner.num_tokens());
      out.push_back(tok);
      std::cout << " " << tok;
      std::cout.flush();
      if (rsp.is_stop(tok)) {
        stop_reason = "stop";
        break;
      }
      if (n + 1 == rsp.max_tokens) break;
      s = runner.decode(tok, &logits);
      if (!s.ok()) return report_error("generate", s);
    }
    double decode_ms = ms_since(t1);
    std::cout << "\n";
    if (codec != nullptr) std::cout << "text: " << codec->decode(out) << "\n";
    if (stats) {
      std::cout << "[stats] prompt " << i + 1 << ": prompt_tokens=" << prompts[i].size()
                << " cached_tokens=" << *cached
                << " computed_tokens=" << prompts[i].size() - *cached << " generated=" << out.size()
                << " finish=" << stop_reason << " ttft_ms=" << ttft << " decode_tok_s="
                << (decode_ms > 0 ? 1000.0 * static_cast<double>(out.size()) / decode_ms : 0.0)
                << "\n";
    }
    if (cold) cold->end_turn(cold->capture(*runner.adapter()));
    runner.end(false);
  }
  if (stats && cold) std::cout << cold->stats_line() << "\n";
  if (stats && cache) {
    const auto& cs = cache->stats();
    const auto& al = cache->allocator();
    std::cout << "[cache] lookups=" << cs.lookups << " lookup_blocks=" << cs.lookup_blocks
              << " hit_blocks=" << cs.hit_blocks << " hit_tokens=" << cs.hit_tokens
              << " blocks=" << al.num_blocks() << " free=" << al.num_free_blocks()
              << " free_cached=" << al.num_free_cached_blocks()
              << " evictions=" << al.stats().evictions << " grows=" << cs.grow_events << "\n";
  }
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("generate", "generate tokens for prompts (paged or flat KV), --stats",
                     generate_main);

}  // namespace pagedkv::cli
