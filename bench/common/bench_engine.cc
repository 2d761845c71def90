// A benchmark's Engine and its requests (see bench_engine.h).
#include "bench_engine.h"

#include "exit_on_error.h"

namespace pagedkv::bench {

std::unique_ptr<engine::Engine> create_engine(const std::shared_ptr<model::Model>& m,
                                              const engine::EngineOptions& o) {
  auto e = engine::Engine::create(m, o);
  exit_on_error(e.status());
  return std::move(*e);
}

std::vector<int32_t> random_tokens(std::mt19937& g, size_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

engine::RequestHandlePtr submit_fixed(engine::Engine& e, const std::vector<int32_t>& prompt,
                                      int32_t max_tokens, bool return_logits) {
  engine::GenerateRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.return_logits = return_logits;
  auto h = e.submit(std::move(r));
  exit_on_error(h.status());
  return *h;
}

const engine::RequestResult& wait_ok(const engine::RequestHandlePtr& h) {
  const engine::RequestResult& r = h->wait();
  if (r.finish_reason == engine::FinishReason::kError) exit_on_error(r.error);
  return r;
}

}  // namespace pagedkv::bench
