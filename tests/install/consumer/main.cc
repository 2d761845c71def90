// A tiny program outside the pagedkv source tree, built by tests/install against
// an INSTALLED pagedkv (only <prefix>/include and <prefix>/lib on its paths), once
// through find_package(pagedkv) and once through pkg-config. It opens a model,
// reads its vocabulary size through the public API, generates a few tokens
// greedily, and checks that the same request run twice gives the same tokens
// (the second run hits the cache). Exit status 0 on success.
//
//   consumer MODEL_DIR
#include <cstdio>
#include <vector>

#include <pagedkv/pagedkv.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer MODEL_DIR\n");
    return 2;
  }
  auto engine = pagedkv::engine::Engine::open(argv[1]);
  if (!engine.ok()) {
    std::fprintf(stderr, "open: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  const pagedkv::engine::ModelInfo info = (*engine)->model_info();
  std::printf("pagedkv %s: %s, vocab_size=%d, block_size=%d\n", PAGEDKV_VERSION,
              info.model_type.c_str(), info.vocab_size, info.block_size);
  if (info.vocab_size <= 0 || info.block_size <= 0) return 1;

  // Two full blocks of prompt, every id inside the vocabulary.
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 2 * info.block_size + 3; ++i)
    prompt.push_back((i * 37 + 11) % info.vocab_size);

  std::vector<int32_t> first;
  for (int run = 0; run < 2; ++run) {
    pagedkv::engine::GenerateRequest req;
    req.prompt = prompt;
    req.sampling.max_tokens = 4;
    req.ignore_eos = true;
    auto handle = (*engine)->submit(std::move(req));
    if (!handle.ok()) {
      std::fprintf(stderr, "submit: %s\n", handle.status().to_string().c_str());
      return 1;
    }
    (*engine)->run_until_idle();
    const pagedkv::engine::RequestResult& r = (*handle)->wait();
    if (r.finish_reason != pagedkv::engine::FinishReason::kLength || r.tokens.size() != 4) {
      std::fprintf(stderr, "run %d: finish=%s tokens=%zu\n", run,
                   std::string(pagedkv::engine::finish_reason_name(r.finish_reason)).c_str(),
                   r.tokens.size());
      return 1;
    }
    std::printf("run %d: cached_prompt_tokens=%lld tokens:", run,
                static_cast<long long>(r.usage.cached_prompt_tokens));
    for (int32_t t : r.tokens) std::printf(" %d", t);
    std::printf("\n");
    if (run == 0) {
      first = r.tokens;
    } else if (r.tokens != first || r.usage.cached_prompt_tokens == 0) {
      std::fprintf(stderr, "second run differs or missed the cache\n");
      return 1;
    }
  }
  std::printf("ok\n");
  return 0;
}
