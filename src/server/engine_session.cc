// EngineSession: every call the server makes into the engine (engine_session.h).
#include "server/engine_session.h"

#include "engine/chat_formatter.h"
#include "model/model.h"
#include "pagedkv/engine.h"

namespace pagedkv::server {

Generation::Generation(std::shared_ptr<engine::RequestHandle> handle, std::shared_ptr<Wake> wake)
    : handle_(std::move(handle)), wake_(std::move(wake)) {}

Generation::~Generation() = default;

Generation::Event Generation::next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto t = handle_->try_next_token()) return {Event::kToken, *t};
    if (handle_->done()) {
      // finish() comes after the last push: take anything pushed meanwhile.
      if (auto t = handle_->try_next_token()) return {Event::kToken, *t};
      return {Event::kDone, -1};
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {Event::kIdle, -1};
    // on_token wakes us; the end of a request does not, so poll it every 5 ms.
    std::unique_lock<std::mutex> lk(wake_->mu);
    wake_->cv.wait_for(
        lk,
        std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(5)),
        [&] { return wake_->flag; });
    wake_->flag = false;
  }
}

void Generation::cancel() { handle_->cancel(); }
bool Generation::done() const { return handle_->done(); }
std::optional<int64_t> Generation::admitted_cached_tokens() const {
  return handle_->admitted_cached_tokens();
}
uint64_t Generation::id() const { return handle_->id(); }

GenerationResult Generation::result() const {
  GenerationResult out;
  if (!handle_->done()) return out;
  const engine::RequestResult& r = handle_->wait();
  out.finish = r.finish_reason;
  out.error = r.error;
  out.prompt_tokens = r.usage.prompt_tokens;
  out.cached_tokens = r.usage.cached_prompt_tokens;
  out.cached_tokens_cold = r.usage.cached_prompt_tokens_cold;
  out.completion_tokens = r.usage.completion_tokens;
  out.ttft_ms = r.timings.ttft_ms;
  out.total_ms = r.timings.total_ms;
  out.token_ms = r.token_ms;
  out.preemptions = r.preemptions;
  return out;
}

StatusOr<std::unique_ptr<EngineSession>> EngineSession::open(const std::string& model_dir,
                                                             const EngineSessionOptions& o) {
  std::unique_ptr<EngineSession> s(new EngineSession());
  PKV_ASSIGN_OR_RETURN(s->formatter_, engine::ChatFormatter::load(model_dir));
  engine::EngineOptions eo;
  eo.max_num_seqs = o.max_num_seqs;
  eo.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.paged_cache_memory_mb = o.paged_cache_mb;
  eo.pool_max_blocks = o.pool_max_blocks;
  if (o.pool_max_blocks) eo.pool_initial_blocks = o.pool_max_blocks;
  eo.persist_paged_cache = o.persist_paged_cache;
  eo.cold_cache_dir = o.cold_cache_dir;
  auto f = s->formatter_;
  eo.formatter = [f](std::string_view messages_json) { return f->format(messages_json); };
  if (o.model != nullptr) {
    eo.model_dir = model_dir;  // what Engine::open sets: the cold tier's fingerprint
    PKV_ASSIGN_OR_RETURN(s->engine_, engine::Engine::create(o.model, eo));
  } else {
    PKV_ASSIGN_OR_RETURN(s->engine_, engine::Engine::open(model_dir, eo));
  }
  s->engine_->start();
  return s;
}

EngineSession::~EngineSession() {
  if (engine_) engine_->stop();
}

const tokenizer::Tokenizer& EngineSession::tokenizer() const { return formatter_->tokenizer(); }

StatusOr<std::vector<int32_t>> EngineSession::format_chat(const std::string& messages_json) const {
  return formatter_->format(messages_json);
}

std::string EngineSession::model_type() const { return engine_->model().config().model_type; }
int32_t EngineSession::vocab_size() const { return engine_->model().config().vocab_size; }
int64_t EngineSession::max_context() const {
  return engine_->model().config().max_position_embeddings;
}
int32_t EngineSession::admission_width() const { return engine_->max_concurrent_sequences(); }

StatusOr<std::shared_ptr<Generation>> EngineSession::submit(const GenerationSpec& spec) {
  engine::GenerateRequest req;
  req.prompt = spec.prompt;
  req.sampling.temperature = spec.temperature;
  req.sampling.top_k = spec.top_k;
  req.sampling.top_p = spec.top_p;
  req.sampling.min_p = spec.min_p;
  req.sampling.seed = spec.seed;
  req.sampling.max_tokens = spec.max_tokens;
  req.cache_salt = spec.cache_salt;
  req.owner = spec.owner;
  auto wake = std::make_shared<Generation::Wake>();
  req.on_token = [wake](int32_t) {
    {
      std::lock_guard<std::mutex> lk(wake->mu);
      wake->flag = true;
    }
    wake->cv.notify_all();
  };
  PKV_ASSIGN_OR_RETURN(engine::RequestHandlePtr handle, engine_->submit(std::move(req)));
  return std::shared_ptr<Generation>(new Generation(std::move(handle), std::move(wake)));
}

EngineSnapshot EngineSession::stats() const { return engine_->stats(); }

void EngineSession::flush_cold_tier() { engine_->flush_cold_tier(); }

void EngineSession::stop() { engine_->stop(); }

Status EngineSession::settle_and_check(int32_t* held_blocks) {
  engine_->stop();
  engine_->run_until_idle();
  PKV_RETURN_IF_ERROR(engine_->check_invariants());
  if (held_blocks) *held_blocks = engine_->held_blocks();
  return ok_status();
}

}  // namespace pagedkv::server
