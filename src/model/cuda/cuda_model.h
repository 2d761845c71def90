// The device-resident forward: a qwen3 / qwen3_moe Model whose weights, activations,
// scratch and KV live on one CUDA device (docs/backend.md, "CUDA: the model forward").
//
// It implements the same Model / ForwardBatch contract as the CPU families, so the
// engine drives it unchanged: the engine builds its paged pool on this model's
// kv_storage() (CUDA virtual-memory buffers, so the block pointers the batch's
// KVBlockStore hands out are device addresses), and a flat row's K/V live in a
// device buffer attached to its FlatKVCache. Per step, the token ids, positions,
// row of each token, requested logits rows and every row's block table go to the
// device in ONE host-to-device copy; the layers then run entirely on the device
// (kernels of src/backend/cuda/kernels.h), and only the requested logits rows come
// back. Every kernel is batch-invariant and attention reads keys in partitions
// anchored at position 0, so a row's logits are the same bits alone or batched,
// paged or flat, whole or chunked, cold or after a prefix hit.
//
// Speed without changing a bit (docs/backend.md): decode-sized paged steps replay
// a CUDA graph per bucket (PAGEDKV_CUDA_GRAPHS), greedy rows that want no logits
// get their token from a device argmax (ForwardRow::greedy_only,
// PAGEDKV_CUDA_DEVICE_SAMPLING), and q/k/v, gate/up and the small per-layer
// kernels run fused (PAGEDKV_CUDA_FUSED, PAGEDKV_CUDA_FUSED_NORMS).
#pragma once

#include <memory>
#include <string>

#include "model/model.h"
#include "pagedkv/status.h"

namespace pagedkv::model::cuda {

// Loads the checkpoint in `dir` onto CUDA device `device`. Supported today:
// model_type qwen3 and qwen3_moe (full attention, no attention bias), KV dtype bf16
// (the device's default) or f32 (LoadOptions::kv_dtype, else env PAGEDKV_KV_DTYPE,
// else bf16; f16 is FailedPrecondition), head_dim 16 to
// 256 (a power of two), GQA groups up to 16. Anything else is FailedPrecondition
// naming what is unsupported; no device is FailedPrecondition from the backend.
// options.backend must be null (the model owns its CUDA backend).
StatusOr<std::unique_ptr<Model>> load_cuda_model(const std::string& dir,
                                                 const LoadOptions& options = {}, int device = 0);

// What a CUDA model did so far (tests and benchmarks): decode graphs captured and
// replayed (PAGEDKV_CUDA_GRAPHS), and greedy tokens picked on the device
// (ForwardRow::greedy_only; PAGEDKV_CUDA_DEVICE_SAMPLING). All zero for a model
// that is not a CUDA model.
struct CudaModelStats {
  int64_t graph_captures = 0;
  int64_t graph_replays = 0;
  int64_t device_greedy_rows = 0;
  // Seeded rows (ForwardRow::draw) finished from their best entries on the
  // device, and those whose draw needed the whole logits row instead.
  int64_t device_draw_rows = 0;
  int64_t device_draw_fallbacks = 0;
  // Of device_draw_rows, the draws without top-k finished by selection over the
  // whole row on the device (backend/cuda/selection_draw.h).
  int64_t device_selection_rows = 0;
  // Host wall time of the successful forward calls, in four spans (benchmarks: how
  // much of a step the GPU waits on the host): from the call to the metadata's
  // upload (issued), from there to the step's launch (the graph launch or the eager
  // enqueue returned; the GPU starts its first kernels during it), from the launch to
  // its results on the host (the stream synchronized), and from there to the return.
  // Steps run with PAGEDKV_CUDA_PROFILE are not counted.
  double before_upload_ms = 0, upload_to_launched_ms = 0, launch_to_results_ms = 0,
         after_results_ms = 0;
};
CudaModelStats cuda_model_stats(const Model& m);

}  // namespace pagedkv::model::cuda
