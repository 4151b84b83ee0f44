// Sampling from a language model (see sample.h).
#include "engine/train/sample.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/kv_cache.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"

namespace tb::train {

std::pair<std::int64_t, std::int64_t> language_model_shape(const nn::Model& model) {
  const nn::ModelConfig cfg = model.config();
  TB_CHECK(cfg.fields.contains("vocab") && cfg.fields.contains("context_length"), "[sample] a ",
           cfg.kind, " model does not generate tokens (a language model does: qwen-tiny, gpt)");
  return {cfg.fields.at("vocab").get<std::int64_t>(),
          cfg.fields.at("context_length").get<std::int64_t>()};
}

std::vector<std::int64_t> sample_tokens(nn::Model& model, std::vector<std::int64_t> prompt,
                                        const SampleOptions& o) {
  const auto [model_vocab, context] = language_model_shape(model);
  // Draws only among the ids the caller can decode (a tokenizer with fewer pieces than the
  // model's table: the rest were never targets, yet a free draw could pick one).
  const std::int64_t vocab = o.vocab_limit > 0 ? std::min(model_vocab, o.vocab_limit) : model_vocab;
  TB_CHECK(!prompt.empty(), "[sample] the prompt is empty: give at least one token");
  for (std::int64_t t : prompt)
    TB_CHECK(t >= 0 && t < model_vocab, "[sample] prompt token ", t,
             " is outside the vocabulary 0..", model_vocab - 1);
  TB_CHECK(o.vocab_limit >= 0, "[sample] vocab_limit must be >= 0, got ", o.vocab_limit);
  TB_CHECK(o.tokens >= 0, "[sample] tokens must be >= 0, got ", o.tokens);
  TB_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.0,
           "[sample] temperature must be >= 0, got ", o.temperature);
  TB_CHECK(o.top_k >= 0, "[sample] top_k must be >= 0, got ", o.top_k);
  const bool was_training = model.is_training();
  autograd::NoGradGuard no_grad;
  model.eval();
  rng::CpuGenerator gen(o.seed);
  const auto params = model.parameters();
  const core::Device device = params.empty() ? core::Device() : params.front().device();
  std::vector<double> p(static_cast<std::size_t>(vocab));
  nn::KvCache cache(context);
  bool use_cache = o.kv_cache;
  for (std::int64_t n = 0; n < o.tokens; ++n) {
    const auto len = static_cast<std::int64_t>(prompt.size());
    core::Tensor out;
    if (use_cache && len <= context) {
      // The positions the cache lacks: the whole prompt first, then the newest token.
      const std::int64_t past = cache.length();
      const std::int64_t t = len - past;
      core::Tensor input = core::Tensor::empty({1, t}, core::ScalarType::Int64);
      std::copy(prompt.begin() + past, prompt.end(), input.data_ptr<std::int64_t>());
      {
        nn::ScopedKvCache scope(cache);
        out = model.forward(input.to(device));
      }
      if (cache.layers() == 0) {
        use_cache = false;  // a model without attention layers: its forward saw the whole prompt
      } else {
        cache.commit(t);
      }
    } else {
      const std::int64_t w = std::min(len, context);
      core::Tensor input = core::Tensor::empty({1, w}, core::ScalarType::Int64);
      std::copy(prompt.end() - w, prompt.end(), input.data_ptr<std::int64_t>());
      out = model.forward(input.to(device));
    }
    // Logits of the last position, read as float32 (the first `vocab` of a padded table).
    const core::Tensor logits = out.select(1, out.size(1) - 1)
                                    .to(core::ScalarType::Float32)
                                    .to(core::Device())
                                    .contiguous();
    const float* z = logits.data_ptr<float>();
    // NaN or +inf logits (weights that diverged) have no most likely token: without this check
    // every draw silently became the last id.
    for (std::int64_t v = 0; v < vocab; ++v)
      TB_CHECK(!std::isnan(z[v]) && z[v] != std::numeric_limits<float>::infinity(),
               "[sample] the model's logit for token ", v, " is ",
               std::isnan(z[v]) ? "NaN" : "+inf", " at generated token ", n + 1,
               ": its weights are not finite (a diverged run?)");
    const std::int64_t best = std::max_element(z, z + vocab) - z;
    std::int64_t next = 0;
    // A temperature so small that the scaled logits overflow is the limit T -> 0: the most likely
    // token (inf - inf would otherwise be NaN).
    if (o.temperature == 0.0 || !std::isfinite(static_cast<double>(z[best]) / o.temperature)) {
      next = best;
    } else {
      for (std::int64_t v = 0; v < vocab; ++v)
        p[static_cast<std::size_t>(v)] = static_cast<double>(z[v]) / o.temperature;
      if (o.top_k > 0 && o.top_k < vocab) {
        std::vector<double> sorted(p);
        std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                         std::greater<>());
        const double kth = sorted[static_cast<std::size_t>(o.top_k - 1)];
        for (double& x : p)
          if (x < kth) x = -std::numeric_limits<double>::infinity();
      }
      const double top = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (double& x : p) {
        x = std::exp(x - top);
        sum += x;
      }
      double u = rng::unlocked::uniform_double(gen, 0.0, 1.0) * sum;
      next = vocab - 1;
      for (std::int64_t v = 0; v < vocab; ++v) {
        u -= p[static_cast<std::size_t>(v)];
        if (u < 0) {
          next = v;
          break;
        }
      }
    }
    prompt.push_back(next);
  }
  if (was_training) model.train();
  return prompt;
}

}  // namespace tb::train
