// CPU attention over paged (or flat) K/V tiles (docs/backend.md, "attention").
// Each query row's scores, online-softmax rescales and value sums run in a fixed
// order of IEEE operations, so a row's result does not depend on the batch, the
// chunking of its prompt, how many of its keys were cached, the task that holds
// it, the thread count or the ISA clone.
#pragma once

#include <cstddef>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace pagedkv::backend::cpu {

void attention(const AttentionArgs& a, ThreadPool* pool);
// Several attentions (one per batch row) as one parallel region over all their
// (row, token, head) tasks; each task's result is the one attention() computes.
void attention_batch(const AttentionArgs* args, size_t count, ThreadPool* pool);

// On: attention computes every query row alone with the reference loop
// (attention_body: one dot_kv per key), not the head-dim-specialized kernels of
// several rows × several keys at a time; the two give the same bits (tests).
void set_attention_reference_for_testing(bool on);

}  // namespace pagedkv::backend::cpu
