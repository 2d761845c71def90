// A seeded draw a model may finish from a logits row's best entries (DrawEntry,
// RowDraw): the seam between the engine's sampler, which implements RowDraw, and a
// device model, which selects the entries where the logits are
// (ForwardRow::draw, Model::draw_entries_cap; docs/backend.md, "Device-side seeded
// sampling"). Kept apart from the forward batch so the sampler needs only this.
#pragma once

#include <cstdint>
#include <span>

namespace pagedkv::model {

// One entry of a logits row: its value and its token id.
struct DrawEntry {
  float logit = 0;
  int32_t id = 0;
};

// The settings of a draw by selection (RowDraw::selection), as the host sampler
// computes them.
struct SelectionSettings {
  double inv_t = 1.0;  // 1 / temperature
  double u = 0.0;      // the draw's uniform point in [0, 1) (engine::uniform_for)
  double top_p = 1.0;  // the nucleus mass (1: off)
  double min_p = 0.0;  // the fraction of the top probability a token keeps (0: off)
};

// A seeded draw (engine::sample_token, temperature > 0) a device model may finish
// from a row's best entries instead of copying the whole row to the host
// (ForwardRow::draw). Implemented by the engine over its sampler.
class RowDraw {
 public:
  virtual ~RowDraw() = default;
  // How many of the row's best entries the draw may need (1 <= entries() <= the
  // model's Model::draw_entries_cap()).
  virtual int32_t entries() const = 0;
  // The token drawn from `best`: the row's min(entries(), non-NaN count) best
  // non-NaN entries in the sampler's order (logit descending, -0 as +0, ties by
  // ascending id); `complete`: they are all of the row's non-NaN entries. -1 when
  // the draw needs entries beyond them (then the caller needs the logits row).
  virtual int32_t draw(std::span<const DrawEntry> best, bool complete) const = 0;
  // A draw without top-k (temperature, top-p, min-p), which a model may finish by
  // selection over the whole row (the sampler's draw_by_selection, certified to
  // give the sorted draw's token or none): true with its settings. False for any
  // other draw.
  virtual bool selection(SelectionSettings* out) const {
    (void)out;
    return false;
  }
};

}  // namespace pagedkv::model
