// Text from a language model (qwen-tiny, gpt): autoregressive sampling — the model's logits for
// the last position of the newest context_length tokens, divided by a temperature, cut to the
// top k, softmax, one draw — as nanoGPT's sample.py and llm.c's sampler do. With a key/value
// cache (engine/nn/kv_cache.h): the prompt runs once, then each new token alone, until the
// sequence fills the context; from there on the window slides and every token runs the model
// over the newest context_length tokens again (positions move, so cached keys no longer fit).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/nn/models.h"

namespace tb::train {

/// How to sample.
struct SampleOptions {
  std::int64_t tokens = 200;  ///< new tokens to generate
  double temperature = 1.0;   ///< > 0 divides the logits; 0 = always the most likely token
  std::int64_t top_k = 0;     ///< keep the k most likely tokens (0 = all)
  std::uint64_t seed = 0;     ///< the draws' generator seed
  /// > 0: draw only among ids below it (the tokenizer's pieces, when the model's vocabulary is
  /// larger); 0: among all of the model's. Prompt tokens may still be any of the model's.
  std::int64_t vocab_limit = 0;
  /// Keep each layer's keys and values instead of running the model over the whole window for
  /// every token (the same tokens up to rounding: the products have other shapes).
  bool kv_cache = true;
};

/// The vocabulary (real, not padded) and context length of a language model; a model without
/// them (mlp, cnn) is a tb::ValueError naming its kind.
std::pair<std::int64_t, std::int64_t> language_model_shape(const nn::Model& model);

/// `prompt` followed by `options.tokens` tokens drawn from `model` (in eval mode, without
/// gradients; restored to training mode after when it was). An empty prompt, a token outside
/// the vocabulary, or a negative temperature or top_k is a tb::ValueError saying so.
std::vector<std::int64_t> sample_tokens(nn::Model& model, std::vector<std::int64_t> prompt,
                                        const SampleOptions& options);

}  // namespace tb::train
