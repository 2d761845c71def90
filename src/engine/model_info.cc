// Engine::model_info(): the loaded model described in public types
// (include/pagedkv/engine.h, ModelInfo), so library users need no model headers.
#include "model/model.h"
#include "pagedkv/engine.h"

namespace pagedkv::engine {

ModelInfo Engine::model_info() const {
  const model::Model& m = model();
  const model::ModelConfig& c = m.config();
  ModelInfo info;
  info.model_type = c.model_type;
  info.path = c.source_path;
  info.vocab_size = c.vocab_size;
  info.hidden_size = c.hidden_size;
  info.num_layers = c.num_hidden_layers;
  info.max_position_embeddings = c.max_position_embeddings;
  info.eos_token_ids = c.eos_token_ids;
  info.bos_token_id = c.bos_token_id;
  info.block_size = m.kv_geometry().block_size;
  return info;
}

}  // namespace pagedkv::engine
