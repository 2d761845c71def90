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
#include "cli/command_registry.h"
#include "cli/device_option.h"
#include "cli/model_cli_util.h"
#include "cli/text_format.h"
#include "engine/chat_formatter.h"
#include "engine/sampler.h"
#include "kv/cold/cold_stats.h"
#include "pagedkv/engine.h"
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

// The engine's cold-tier counters as one "[cold] key=value ..." line (sizes
// readable); "[cold] enabled=false open_errors=N error=..." when the tier was
// asked for but could not be opened.
std::string cold_stats_line(const engine::ColdTierStats& e) {
  std::ostringstream out;
  if (!e.enabled) {
    out << "[cold] enabled=false open_errors=" << e.open_errors << " error=\"" << e.open_error
        << "\"";
    return out.str();
  }
  out << "[cold] root=" << e.root << " hits=" << e.hits << " misses=" << e.misses
      << " restored=" << human_bytes(e.bytes_restored) << " reads=" << e.reads
      << " enqueued=" << e.enqueued << " queue_drops=" << e.queue_drops
      << " written=" << human_bytes(e.bytes_written) << " evictions=" << e.evictions
      << " corruptions=" << e.corruptions << " write_errors=" << e.write_errors
      << " restore_declines=" << e.restore_declines << " quota=" << human_bytes(e.quota_bytes);
  return out.str();
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
  add_default_model_option(p);
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
  add_device_option(p);
  if (auto rc = p.parse_or_exit_code(argc, argv)) return *rc;
  Status s;
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
  auto loaded = load_model_on(dir, requested_device(p));
  if (!loaded.ok()) return report_error("generate", loaded.status());
  double load_ms = ms_since(t_load);
  std::shared_ptr<model::Model> model(std::move(*loaded));
  const auto& cfg = model->config();
  // A stop id outside the vocabulary could never end generation: name it.
  for (int32_t id : sp.stop_token_ids)
    if (id >= cfg.vocab_size)
      return report_error("generate",
                          invalid_argument("--stop-ids: token id " + std::to_string(id) +
                                           " is outside the model's vocabulary of " +
                                           std::to_string(cfg.vocab_size)));
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
  // generation ends when prompt + output reach it.
  const int64_t max_context = cfg.max_position_embeddings;
  int64_t longest = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[i].ids.size()));
    if (max_context > 0 && static_cast<int64_t>(prompts[i].ids.size()) > max_context)
      return report_error("generate", invalid_argument("prompt " + std::to_string(i + 1) + " has " +
                                                       std::to_string(prompts[i].ids.size()) +
                                                       " tokens, more than the model's "
                                                       "max_position_embeddings (" +
                                                       std::to_string(max_context) + ")"));
  }
  const bool paged = !p.has("flat") && model::resolve_use_block_paged_cache(cfg.cache);
  if (p.has("persist-cache") && !paged)
    return report_error("generate",
                        invalid_argument("--persist-cache needs the paged KV path, and --flat, "
                                         "use_block_paged_cache: false or "
                                         "PAGEDKV_USE_BLOCK_PAGED_CACHE=0 selected the flat one"));
  // Every prompt runs through the engine, one request at a time, on the caller's
  // thread (step() mode): the paged or flat KV path, the prefix cache and the
  // cold tier are the engine's.
  engine::EngineOptions eo;
  if (!paged) eo.use_block_paged_cache = false;
  if (p.has("persist-cache")) eo.persist_paged_cache = true;
  eo.model_dir = dir;
  eo.max_num_seqs = 1;
  eo.max_num_batched_tokens = *chunk > 0 ? *chunk : longest;  // 0: whole prompt at once
  auto eng_or = engine::Engine::create(model, eo);
  if (!eng_or.ok()) return report_error("generate", eng_or.status());
  engine::Engine& eng = **eng_or;
  const bool stats = p.has("stats");
  if (stats) {
    std::cout << "[model] " << cfg.model_type << " layers=" << cfg.num_hidden_layers
              << " hidden=" << cfg.hidden_size << " vocab=" << cfg.vocab_size
              << " kv_path=" << (paged ? "paged" : "flat")
              << " block_size=" << model->kv_geometry().block_size << " load_ms=" << load_ms
              << " dir=" << dir << "\n";
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& prompt = prompts[i].ids;
    engine::GenerateRequest rq;
    rq.prompt = prompt;
    rq.sampling = sp;
    rq.sampling.seed = sp.seed + i;
    const engine::EngineStats before = eng.stats();
    auto h = eng.submit(std::move(rq));
    if (!h.ok()) return report_error("generate", h.status());
    // Text mode streams the continuation on the next line(s), through a
    // StreamDecoder: only text that is final (never half a UTF-8 character) is
    // printed, and special tokens (an eos) are not shown.
    std::optional<tokenizer::StreamDecoder> stream;
    bool header = false;
    int64_t cached = 0, cached_cold = 0;
    std::vector<int32_t> out;
    auto print_header = [&] {
      const engine::EngineStats now = eng.stats();
      cached = static_cast<int64_t>(now.cached_prompt_tokens - before.cached_prompt_tokens);
      cached_cold =
          static_cast<int64_t>(now.cached_prompt_tokens_cold - before.cached_prompt_tokens_cold);
      std::cout << "prompt " << i + 1 << " ("
                << count_noun(static_cast<int64_t>(prompt.size()), "token") << ", " << cached
                << " cached):";
      if (text_tok != nullptr) {
        stream.emplace(*text_tok, /*skip_special_tokens=*/true);
        std::cout << "\n";
        if (p.has("show-prompt")) std::cout << prompts[i].text;
      }
      std::cout.flush();
      header = true;
    };
    auto drain = [&] {
      while (auto id = (*h)->try_next_token()) {
        out.push_back(*id);
        if (stream)
          std::cout << stream->step(*id);
        else
          std::cout << " " << *id;
      }
      std::cout.flush();
    };
    while (!(*h)->done()) {
      eng.step();
      if (!header && (eng.stats().prompt_tokens > before.prompt_tokens || (*h)->done()))
        print_header();
      if (header) drain();
    }
    if (!header) print_header();
    drain();
    const engine::RequestResult& res = (*h)->wait();
    if (res.finish_reason == engine::FinishReason::kError)
      return report_error("generate", res.error);
    std::string stop_reason = "max_tokens";
    if (res.finish_reason == engine::FinishReason::kStop) {
      stop_reason = "stop";
    } else if (static_cast<int64_t>(out.size()) < sp.max_tokens) {
      stop_reason = "max_position_embeddings";
    }
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
      const double decode_ms = res.timings.decode_ms;
      const double rate = decode_ms > 0 && out.size() > 1
                              ? 1000.0 * static_cast<double>(out.size() - 1) / decode_ms
                              : 0.0;
      std::cout << "[stats] prompt " << i + 1 << ": prompt_tokens=" << prompt.size()
                << " cached_tokens=" << cached;
      if (eng.stats().cold.enabled) std::cout << " cold_cached_tokens=" << cached_cold;
      std::cout << " computed_tokens=" << static_cast<int64_t>(prompt.size()) - cached
                << " generated=" << out.size() << " finish=" << stop_reason
                << " ttft_ms=" << res.timings.ttft_ms << " decode_tok_s=" << rate << "\n";
    }
  }
  eng.flush_cold_tier();  // "bytes written" below counts what is on disk
  const engine::EngineStats st = eng.stats();
  if (stats && (st.cold.enabled || st.cold.open_errors > 0)) {
    std::cout << cold_stats_line(st.cold) << "\n";
  }
  if (stats && paged) {
    std::cout << "[cache] lookups=" << st.pool.lookups << " lookup_blocks=" << st.pool.lookup_blocks
              << " hit_blocks=" << st.pool.hit_blocks << " hit_tokens=" << st.pool.hit_tokens
              << " cold_restored_tokens=" << st.cold.restored_tokens
              << " blocks=" << st.pool.num_blocks << " free=" << st.pool.free_blocks
              << " free_cached=" << st.pool.cached_blocks << " evictions=" << st.pool.evictions
              << " grows=" << st.pool.grow_events << "\n";
  }
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("generate",
                     "generate text or tokens for prompts (default model, paged or flat KV, "
                     "--chat, --stats)",
                     generate_main);

}  // namespace pagedkv::cli
