// Tiny language models the sampling tests share (CPU and CUDA): a qwen-tiny over bytes and a
// GPT-2-class decoder with a padded vocabulary, each from a fixed seed.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/nn/gpt.h"
#include "engine/nn/models.h"
#include "engine/rng/cpu_generator.h"

namespace tb::test {

/// qwen-tiny over bytes: one layer of 2 heads by default; `grouped` makes it two layers of 4
/// query heads over 2 key/value heads.
inline std::shared_ptr<nn::Model> tiny_qwen(std::int64_t context = 8, bool grouped = false) {
  nn::QwenTinyConfig c;
  c.vocab = 256;
  c.d_model = grouped ? 32 : 16;
  c.n_layers = grouped ? 2 : 1;
  c.n_heads = grouped ? 4 : 2;
  c.n_kv_heads = grouped ? 2 : 0;
  c.context_length = context;
  rng::CpuGenerator gen(grouped ? 5 : 4);
  return nn::build_model(c, &gen);
}

/// A two-layer gpt of width 32 over 97 ids (table padded to 128).
inline std::shared_ptr<nn::Model> tiny_gpt(std::int64_t context) {
  nn::GptConfig c;
  c.vocab = 97;
  c.padded_vocab = 128;
  c.context_length = context;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 32;
  rng::CpuGenerator gen(6);
  return std::make_shared<nn::Gpt>(c, &gen);
}

}  // namespace tb::test
