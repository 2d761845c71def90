// `pagedkv generate`: runs one or more prompts through a model (the shipped
// default model when --model is absent), one after another on one KV cache,
// streaming the continuation as text when the checkpoint has a tokenizer.json
// (else as token ids); --chat / --messages render prompts through the
// checkpoint's chat template; --stats prints the prefix-cache statistics (a
// later prompt sharing a prefix with an earlier one hits its blocks).
// The KV path is paged unless --flat, config.json `use_block_paged_cache: false`
// or PAGEDKV_USE_BLOCK_PAGED_CACHE=0 select the flat path.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/args.h"
#include "cli/checkpoint_text.h"
#include "cli/cold_session.h"
#include "cli/command_registry.h"
#include "cli/model_cli_util.h"
#include "cli/text_format.h"
#include "engine/chat_formatter.h"
#include "engine/sampler.h"
#include "model/request_runner.h"
#include "tokenizer/stream_decoder.h"

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

// One prompt to run: its ids and, for display, its text (empty for --prompt-ids).
struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
};

int generate_main(int argc, char** argv) {
  ArgParser p("generate",
              "Generate text (or tokens) for one or more prompts, run one after another on one "
              "shared KV cache. With a checkpoint that ships tokenizer.json the continuation is "
              "streamed as text; without one, as token ids.");
  p.add_option("model", "DIR",
               "Hugging Face checkpoint directory (default: the shipped default model, "
               "models/default of the source tree; env PAGEDKV_DEFAULT_MODEL overrides)");
  p.add_repeated_option("prompt", "TEXT",
                        "text prompt, encoded with the checkpoint's tokenizer.json (taken "
                        "literally, ';' included); give --prompt again for each further prompt");
  p.add_option("prompt-ids", "IDS",
               "prompt token ids, e.g. \"1 2 3\"; several prompts separated by ';'");
  p.add_flag("chat",
             "render each --prompt as a user message through the checkpoint's chat template "
             "(tokenizer_config.json) with the generation prompt");
  p.add_option("system", "TEXT", "with --chat: a system message before each user message");
  p.add_repeated_option(
      "messages", "JSON",
      "a conversation rendered through the chat template: a JSON array of {\"role\", "
      "\"content\"} messages (with the generation prompt), or {\"messages\": [...], \"tools\": "
      "[...], \"add_generation_prompt\": B, \"chat_template_kwargs\": {...}}; give --messages "
      "again for each further prompt");
  p.add_flag("show-prompt",
             "print each prompt's text (as the chat template rendered it) before its continuation");
  p.add_flag("ids", "also print the generated token ids when streaming text");
  p.add_option("max-tokens", "N",
               "tokens to generate per prompt (fewer when prompt + output reach the model's "
               "max_position_embeddings)",
               "32");
  p.add_option("temperature", "T", "sampling temperature; 0 = greedy", "0");
  p.add_option("top-k", "K", "keep the K most likely tokens (0 = off)", "0");
  p.add_option("top-p", "P", "nucleus sampling mass (1 = off)", "1");
  p.add_option("min-p", "P", "drop tokens below P x the top probability (0 = off)", "0");
  p.add_option("seed", "S", "sampling seed (per request; prompt i uses S + i)", "0");
  p.add_option("stop-ids", "IDS",
               "token ids that end generation, besides the eos_token_id of config.json and "
               "generation_config.json");
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
  auto dir_or = resolve_model_dir(p.get("model"));
  if (!dir_or.ok()) return report_error("generate", dir_or.status());
  const std::string dir = *dir_or;
  const std::vector<std::string> texts = p.get_all("prompt");
  const std::vector<std::string> conversations = p.get_all("messages");
  const bool has_ids = p.get_optional("prompt-ids").has_value();
  if (static_cast<int>(!texts.empty()) + static_cast<int>(!conversations.empty()) +
          static_cast<int>(has_ids) !=
      1)
    return report_error("generate", invalid_argument("give exactly one kind of prompt: --prompt "
                                                     "TEXT, --messages JSON or --prompt-ids IDS"));
  const bool chat = p.has("chat");
  if (chat && texts.empty())
    return report_error("generate", invalid_argument("--chat applies to --prompt TEXT"));
  if (p.get_optional("system") && !chat)
    return report_error("generate", invalid_argument("--system needs --chat"));

  // The tokenizer (and the chat template) come from the checkpoint.
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const engine::ChatFormatter> formatter;
  const bool needs_text = !texts.empty() || !conversations.empty();
  if (chat || !conversations.empty()) {
    auto f = engine::ChatFormatter::load(dir);
    if (!f.ok()) return report_error("generate", f.status());
    formatter = std::move(*f);
  } else {
    auto t = load_checkpoint_tokenizer(dir);
    if (!t.ok()) return report_error("generate", t.status());
    tok = std::move(*t);
    if (needs_text && tok == nullptr)
      return report_error("generate",
                          invalid_argument("--prompt TEXT needs a tokenizer, and " + dir +
                                           " has no tokenizer.json; use --prompt-ids"));
  }
  const tokenizer::Tokenizer* text_tok = formatter ? &formatter->tokenizer() : tok.get();

  std::vector<Prompt> prompts;
  auto add_chat = [&](const engine::ChatRequest& request, const std::string& what) -> Status {
    auto rendered = formatter->render(request);
    if (!rendered.ok()) return rendered.status().with_context(what);
    Prompt pr;
    pr.text = *rendered;
    pr.ids = text_tok->encode(pr.text, /*add_special_tokens=*/false);
    prompts.push_back(std::move(pr));
    return ok_status();
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    if (chat) {
      // Built as JSON values (never dumped and re-parsed), so any bytes pass through.
      engine::ChatRequest request;
      if (auto sys = p.get_optional("system"))
        request.messages.push_back({{"role", "system"}, {"content", *sys}});
      request.messages.push_back({{"role", "user"}, {"content", texts[i]}});
      s = add_chat(request, "--prompt " + std::to_string(i + 1));
      if (!s.ok()) return report_error("generate", s);
    } else {
      prompts.push_back({text_tok->encode(texts[i], /*add_special_tokens=*/true), texts[i]});
    }
  }
  for (size_t i = 0; i < conversations.size(); ++i) {
    const std::string what = "--messages " + std::to_string(i + 1);
    auto request = engine::parse_chat_request(conversations[i]);
    if (!request.ok()) return report_error("generate", request.status().with_context(what));
    s = add_chat(*request, what);
    if (!s.ok()) return report_error("generate", s);
  }
  if (has_ids) {
    for (const auto& part : split_prompts(p.get("prompt-ids"))) {
      auto ids = parse_id_list(part, "--prompt-ids");
      if (!ids.ok()) return report_error("generate", ids.status());
      if (ids->empty())
        return report_error("generate", invalid_argument("--prompt-ids: empty prompt"));
      prompts.push_back({*ids, ""});
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    if (prompts[i].ids.empty())
      return report_error("generate", invalid_argument("prompt " + std::to_string(i + 1) +
                                                       " encodes to no tokens"));

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
  // A stop id outside the vocabulary could never end generation: name it.
  for (int32_t id : sp.stop_token_ids)
    if (id >= cfg.vocab_size)
      return report_error("generate",
                          invalid_argument("--stop-ids: token id " + std::to_string(id) +
                                           " is outside the model's vocabulary of " +
                                           std::to_string(cfg.vocab_size)));
  for (int32_t e : cfg.eos_token_ids) sp.stop_token_ids.push_back(e);
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int32_t id : prompts[i].ids)
      if (id >= cfg.vocab_size)
        return report_error(
            "generate",
            invalid_argument((has_ids ? "--prompt-ids" : "prompt " + std::to_string(i + 1)) +
                             ": token id " + std::to_string(id) +
                             " is outside the model's vocabulary of " +
                             std::to_string(cfg.vocab_size)));
  // As the engine does: a prompt longer than the model's context is refused, and
  // generation ends when prompt + output reach it (never decoding past it, which
  // the paged pool has no room for and the flat path would do until --max-tokens).
  const int64_t max_context = cfg.max_position_embeddings;
  for (size_t i = 0; i < prompts.size(); ++i)
    if (max_context > 0 && static_cast<int64_t>(prompts[i].ids.size()) > max_context)
      return report_error("generate", invalid_argument("prompt " + std::to_string(i + 1) + " has " +
                                                       std::to_string(prompts[i].ids.size()) +
                                                       " tokens, more than the model's "
                                                       "max_position_embeddings (" +
                                                       std::to_string(max_context) + ")"));
  bool paged = !p.has("flat") && model::resolve_use_block_paged_cache(cfg.cache);
  if (p.has("persist-cache") && !paged)
    return report_error("generate",
                        invalid_argument("--persist-cache needs the paged KV path, and --flat, "
                                         "use_block_paged_cache: false or "
                                         "PAGEDKV_USE_BLOCK_PAGED_CACHE=0 selected the flat one"));
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
              << " dir=" << dir << "\n";
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    model::RequestRunner runner(**model, paged ? model::KVPath::kPaged : model::KVPath::kFlat,
                                cache.get());
    engine::SamplingParams rsp = sp;
    rsp.seed = sp.seed + i;
    auto t0 = Clock::now();
    const std::vector<int32_t>& prompt = prompts[i].ids;
    auto cached = runner.begin(prompt);
    if (!cached.ok()) return report_error("generate", cached.status());
    if (cold) *cached += cold->restore(*runner.adapter(), prompt);
    std::vector<float> logits;
    s = runner.prefill(static_cast<int32_t>(*chunk), model::LogitsRequest::kLast, &logits);
    if (!s.ok()) return report_error("generate", s);
    double ttft = ms_since(t0);
    std::cout << "prompt " << i + 1 << " ("
              << count_noun(static_cast<int64_t>(prompt.size()), "token") << ", " << *cached
              << " cached):";
    // Text mode streams the continuation on the next line(s), through a
    // StreamDecoder: only text that is final (never half a UTF-8 character) is
    // printed, and special tokens (an eos) are not shown.
    std::optional<tokenizer::StreamDecoder> stream;
    if (text_tok != nullptr) {
      stream.emplace(*text_tok, /*skip_special_tokens=*/true);
      std::cout << "\n";
      if (p.has("show-prompt")) std::cout << prompts[i].text;
    }
    std::cout.flush();
    std::vector<int32_t> out;
    auto t1 = Clock::now();
    std::string stop_reason = "max_tokens";
    for (int32_t n = 0; n < rsp.max_tokens; ++n) {
      int32_t id = engine::sample_token(logits, rsp, runner.num_tokens());
      out.push_back(id);
      if (stream)
        std::cout << stream->step(id);
      else
        std::cout << " " << id;
      std::cout.flush();
      if (rsp.is_stop(id)) {
        stop_reason = "stop";
        break;
      }
      if (n + 1 == rsp.max_tokens) break;
      if (max_context > 0 && static_cast<int64_t>(prompt.size() + out.size()) >= max_context) {
        stop_reason = "max_position_embeddings";
        break;
      }
      s = runner.decode(id, &logits);
      if (!s.ok()) return report_error("generate", s);
    }
    double decode_ms = ms_since(t1);
    if (stream) std::cout << stream->finish();
    std::cout << "\n";
    if (stop_reason == "max_position_embeddings")
      std::cerr << "pagedkv generate: prompt " << i + 1 << " stopped after " << out.size()
                << " tokens at the model's max_position_embeddings (" << max_context << ")\n";
    if (stream && p.has("ids")) {
      std::cout << "ids:";
      for (int32_t id : out) std::cout << " " << id;
      std::cout << "\n";
    }
    if (stats) {
      std::cout << "[stats] prompt " << i + 1 << ": prompt_tokens=" << prompt.size()
                << " cached_tokens=" << *cached << " computed_tokens=" << prompt.size() - *cached
                << " generated=" << out.size() << " finish=" << stop_reason << " ttft_ms=" << ttft
                << " decode_tok_s="
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

PKV_REGISTER_COMMAND("generate",
                     "generate text or tokens for prompts (default model, paged or flat KV, "
                     "--chat, --stats)",
                     generate_main);

}  // namespace pagedkv::cli
