// A seeded draw without top-k (temperature, top-p, min-p) finished on the device by
// selection, certified against the host sampler's sorted draw (engine/sampler.cc's
// draw_by_selection: the same algorithm and bounds, with the device's own
// roundings). The token comes back only where every cut and the draw's point lie
// farther from the ends of their entries' intervals (and every weight from the min-p
// threshold) than either computation's roundings can move them; there the host's
// sorted draw makes the same cuts and stops on the same token. Elsewhere (about one
// draw in 10^4 on a flat 152K row) the row's token is -1 and the caller draws on the
// host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

struct SelectionJob {
  int32_t row = 0;     // the logits row
  double inv_t = 1.0;  // 1 / temperature, as the host sampler computes it
  double u = 0.0;      // the draw's uniform point in [0, 1) (engine::uniform_for)
  double top_p = 1.0;  // the nucleus mass (1: off)
  double min_p = 0.0;  // the fraction of the top probability a token keeps (0: off)
};

// The device workspace selection_draw needs for n jobs (bytes; 8-byte aligned): a
// row's weights are summed in up to 16 slices of 32 KiB of buckets each.
size_t selection_draw_workspace_bytes(int32_t n);

// tokens[i] = the token of jobs[i]'s draw over row jobs[i].row of logits [.][vocab],
// or -1 where it cannot be certified (or the row has no finite entry). jobs, tokens
// and workspace (selection_draw_workspace_bytes(n)) are device memory. Two launches:
// the rows' weights in slices, then one 1024-thread block a job.
Status selection_draw(const float* logits, int64_t vocab, const SelectionJob* jobs, int32_t n,
                      int32_t* tokens, void* workspace, cudaStream_t stream = 0);

}  // namespace pagedkv::backend::cuda
