// The `gpt` model kind: GPT-2 small's parameter counts (unpadded and padded to llm.c's 50304),
// GPT-2's parameter names and shapes, the tied head, the padded rows, the config checks, and the
// forward pass against a plain-loop float64 implementation of GPT-2 (nanoGPT's model.py written
// out: embeddings, LayerNorm, causal attention, tanh GELU, tied head) on a tiny config; and
// weights in safetensors files: GPT-2's Hugging Face layout (Conv1D, with or without the
// "transformer." prefix, causal-mask buffers) in and out, and errors naming the tensor.
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "engine/api/model_api.h"
#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/cnn.h"
#include "engine/nn/gpt.h"
#include "engine/nn/init.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/optim/param_split.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/generator.h"
#include "engine/train/safetensors.h"
#include "engine/train/weights_io.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::ScalarType;
using tb::core::Tensor;
namespace nn = tb::nn;
using tb::test::error_of;

TEST(Gpt, Gpt2SmallParameterCounts) {
  nn::GptConfig c;  // the defaults are GPT-2 small
  EXPECT_EQ(nn::gpt_parameter_count(c), 124439808);
  c.padded_vocab = 50304;
  EXPECT_EQ(nn::gpt_parameter_count(c), 124475904);
  c.init_std = 0.0;  // PyTorch's layer defaults: cheaper to draw
  const nn::Gpt padded(c);
  EXPECT_EQ(padded.num_parameters(), 124475904);
  EXPECT_EQ(padded.wte().sizes().vec(), (std::vector<std::int64_t>{50304, 768}));
  // A tiny model: the formula is the model.
  nn::GptConfig tiny;
  tiny.vocab = 300;
  tiny.context_length = 32;
  tiny.n_layers = 3;
  tiny.n_heads = 4;
  tiny.d_model = 64;
  EXPECT_EQ(nn::Gpt(tiny).num_parameters(), nn::gpt_parameter_count(tiny));
}

// A model built for its table under SkipInitGuard: the same names and shapes, no random number
// drawn (the generator is where it was), the padded rows still zero; the guard nests and ends.
TEST(Gpt, ASkipInitBuildHasTheShapesAndDrawsNothing) {
  nn::GptConfig c;
  c.vocab = 300;
  c.padded_vocab = 384;
  c.context_length = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_model = 64;
  tb::rng::CpuGenerator drawn(7), skipped(7);
  const nn::Gpt full(c, &drawn);
  std::vector<std::uint8_t> before = skipped.get_state();
  {
    nn::init::SkipInitGuard outer;
    { nn::init::SkipInitGuard inner; }
    EXPECT_TRUE(nn::init::init_skipped());  // the inner guard restored the outer's state
    {
      // The table's memory is handed back NaN-filled by the allocator's cache: the padded rows
      // must be written, not scaled (0 x NaN is NaN).
      Tensor stale = tb::ops::full({384, 64}, std::nan(""));
    }
    const nn::Gpt shapes(c, &skipped);
    EXPECT_EQ(skipped.get_state(), before);
    const auto a = full.named_parameters();
    const auto b = shapes.named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second.sizes().vec(), b[i].second.sizes().vec()) << a[i].first;
    }
    const Tensor pad = shapes.wte().narrow(0, 300, 84).contiguous();
    for (std::int64_t k = 0; k < pad.numel(); ++k)
      ASSERT_EQ(pad.data_ptr<float>()[k], 0.0f);
  }
  EXPECT_FALSE(nn::init::init_skipped());
  EXPECT_NE(drawn.get_state(), before);  // a normal build draws its weights
  // The parameter table of `trainbench-cli model` builds under the guard: the default generator
  // (which a model built without one draws from) does not move.
  auto& cpu_default = tb::rng::default_generator(tb::core::Device());
  const std::vector<std::uint8_t> default_before = cpu_default.get_state();
  const auto summary = tb::api::describe_model(
      "gpt", {"vocab=300", "context_length=32", "n_layers=2", "n_heads=4", "d_model=64"});
  EXPECT_EQ(summary.parameters, nn::gpt_parameter_count(c) - (384 - 300) * 64);
  EXPECT_EQ(cpu_default.get_state(), default_before);
}

TEST(Gpt, NamesAndShapesAreGpt2sWithLinearLayout) {
  nn::GptConfig c;
  c.vocab = 50;
  c.context_length = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 8;
  const nn::Gpt m(c);
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& [name, t] : m.named_parameters())
    shapes[name] = t.sizes().vec();
  EXPECT_EQ(shapes.size(), 4u + 2u * 12u);
  EXPECT_EQ(shapes.at("transformer.wte.weight"), (std::vector<std::int64_t>{50, 8}));
  EXPECT_EQ(shapes.at("transformer.wpe.weight"), (std::vector<std::int64_t>{16, 8}));
  EXPECT_EQ(shapes.at("transformer.h.1.ln_1.weight"), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(shapes.at("transformer.h.1.attn.c_attn.weight"), (std::vector<std::int64_t>{24, 8}));
  EXPECT_EQ(shapes.at("transformer.h.1.attn.c_attn.bias"), (std::vector<std::int64_t>{24}));
  EXPECT_EQ(shapes.at("transformer.h.1.attn.c_proj.weight"), (std::vector<std::int64_t>{8, 8}));
  EXPECT_EQ(shapes.at("transformer.h.0.mlp.c_fc.weight"), (std::vector<std::int64_t>{32, 8}));
  EXPECT_EQ(shapes.at("transformer.h.0.mlp.c_proj.weight"), (std::vector<std::int64_t>{8, 32}));
  EXPECT_EQ(shapes.at("transformer.ln_f.bias"), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);  // tied to wte
  // Muon takes the block matrices; the embeddings (wte is also the head) stay with AdamW.
  const auto split = tb::optim::split_params(m);
  for (const auto& r : split.table) {
    if (r.name == "transformer.wte.weight" || r.name == "transformer.wpe.weight") {
      EXPECT_EQ(r.optimizer, "adamw") << r.name;
      EXPECT_EQ(r.reason, "embedding") << r.name;
    }
  }
  EXPECT_EQ(split.muon.size(), 8u) << split.str();  // 4 matrices per block
  // Initialisation: biases 0, LayerNorm weights 1, residual projections narrower.
  EXPECT_EQ(m.named_parameters()[2].second.to_vector<double>(), std::vector<double>(8, 1.0));
}

TEST(Gpt, ConfigChecksNameTheField) {
  auto field_of = [](const nn::GptConfig& c) {
    try {
      nn::validate_gpt(c);
    } catch (const tb::FieldError& e) {
      return e.field() + ": " + e.what();
    }
    return std::string("no error");
  };
  nn::GptConfig c;
  c.n_heads = 5;
  EXPECT_EQ(field_of(c), "d_model: gpt: d_model 768 is not divisible by n_heads 5");
  c = {};
  c.padded_vocab = 50000;
  EXPECT_EQ(field_of(c),
            "padded_vocab: gpt: padded_vocab 50000 is smaller than vocab 50257 (0 = no padding)");
  c = {};
  c.context_length = 0;
  EXPECT_EQ(field_of(c), "context_length: gpt: context_length must be positive, got 0");
  nn::GptConfig tiny;
  tiny.vocab = 20;
  tiny.context_length = 4;
  tiny.n_layers = 1;
  tiny.n_heads = 1;
  tiny.d_model = 4;
  nn::Gpt m(tiny);
  EXPECT_NE(error_of([&] {
              m.forward(tb::ops::zeros({1, 5}, ScalarType::Int64));
            }).find("[nn] gpt: sequence length 5 exceeds context_length 4"),
            std::string::npos);
}

// ---- a plain-loop GPT-2 in float64
// ---------------------------------------------------------------

using Mat = std::vector<std::vector<double>>;  // [rows][cols]

Mat to_mat(const Tensor& t) {
  const auto v = t.to_vector<double>();
  const std::int64_t cols = t.dim() == 1 ? t.size(0) : t.size(1);
  const std::int64_t rows = t.dim() == 1 ? 1 : t.size(0);
  Mat m(static_cast<std::size_t>(rows), std::vector<double>(static_cast<std::size_t>(cols)));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      m[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] =
          v[static_cast<std::size_t>(r * cols + c)];
  return m;
}

// x [T][in] · Wᵀ + b, W [out][in] (torch.nn.Linear).
Mat linear(const Mat& x, const Mat& w, const std::vector<double>& b) {
  Mat y(x.size(), std::vector<double>(w.size()));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (std::size_t o = 0; o < w.size(); ++o) {
      double s = b[o];
      for (std::size_t i = 0; i < x[t].size(); ++i)
        s += x[t][i] * w[o][i];
      y[t][o] = s;
    }
  return y;
}

Mat layer_norm(const Mat& x, const std::vector<double>& g, const std::vector<double>& b) {
  Mat y = x;
  for (auto& row : y) {
    double mean = 0, var = 0;
    for (double v : row)
      mean += v;
    mean /= static_cast<double>(row.size());
    for (double v : row)
      var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    for (std::size_t i = 0; i < row.size(); ++i)
      row[i] = (row[i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
  }
  return y;
}

TEST(Gpt, ForwardEqualsAPlainLoopGpt2) {
  nn::GptConfig c;
  c.vocab = 11;
  c.padded_vocab = 16;
  c.context_length = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 8;
  tb::rng::CpuGenerator gen;
  gen.manual_seed(5);
  nn::Gpt m(c, &gen);
  m.to(ScalarType::Float64);
  // Non-trivial LayerNorm parameters and biases, so that each one is checked.
  {
    tb::autograd::NoGradGuard no_grad;
    for (auto& [name, p] : m.named_parameters())
      if (p.dim() == 1)
        tb::ops::add_(p, tb::ops::mul(tb::ops::rand(p.sizes(), &gen, ScalarType::Float64), 0.5));
  }
  std::map<std::string, Tensor> w;
  for (const auto& [name, p] : m.named_parameters())
    w[name] = p;
  auto vec = [&](const std::string& n) { return w.at(n).to_vector<double>(); };
  const std::vector<std::vector<std::int64_t>> seqs = {{3, 10, 0, 7, 7}, {1, 2, 3, 4, 5}};
  const Tensor tokens =
      tb::core::from_vector(std::vector<std::int64_t>{3, 10, 0, 7, 7, 1, 2, 3, 4, 5}, {2, 5});
  const Tensor logits = m.forward(tokens);
  ASSERT_EQ(logits.sizes().vec(), (std::vector<std::int64_t>{2, 5, 11}));  // padding dropped
  const auto got = logits.contiguous().to_vector<double>();
  const Mat wte = to_mat(w.at("transformer.wte.weight"));
  const Mat wpe = to_mat(w.at("transformer.wpe.weight"));
  const std::size_t d = 8, nh = 2, hd = 4, T = 5;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    Mat x(T, std::vector<double>(d));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < d; ++i)
        x[t][i] = wte[static_cast<std::size_t>(seqs[s][t])][i] + wpe[t][i];
    for (int l = 0; l < 2; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      const Mat a = layer_norm(x, vec(p + "ln_1.weight"), vec(p + "ln_1.bias"));
      const Mat qkv =
          linear(a, to_mat(w.at(p + "attn.c_attn.weight")), vec(p + "attn.c_attn.bias"));
      Mat y(T, std::vector<double>(d, 0.0));
      for (std::size_t h = 0; h < nh; ++h)
        for (std::size_t t = 0; t < T; ++t) {
          std::vector<double> score(t + 1);
          double mx = -1e300;
          for (std::size_t u = 0; u <= t; ++u) {
            double dot = 0;
            for (std::size_t k = 0; k < hd; ++k)
              dot += qkv[t][h * hd + k] * qkv[u][d + h * hd + k];
            score[u] = dot / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, score[u]);
          }
          double z = 0;
          for (double& e : score)
            z += (e = std::exp(e - mx));
          for (std::size_t u = 0; u <= t; ++u)
            for (std::size_t k = 0; k < hd; ++k)
              y[t][h * hd + k] += score[u] / z * qkv[u][2 * d + h * hd + k];
        }
      const Mat proj =
          linear(y, to_mat(w.at(p + "attn.c_proj.weight")), vec(p + "attn.c_proj.bias"));
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < d; ++i)
          x[t][i] += proj[t][i];
      Mat f = linear(layer_norm(x, vec(p + "ln_2.weight"), vec(p + "ln_2.bias")),
                     to_mat(w.at(p + "mlp.c_fc.weight")), vec(p + "mlp.c_fc.bias"));
      for (auto& row : f)
        for (double& v : row)
          v = 0.5 * v *
              (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
      const Mat out = linear(f, to_mat(w.at(p + "mlp.c_proj.weight")), vec(p + "mlp.c_proj.bias"));
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < d; ++i)
          x[t][i] += out[t][i];
    }
    const Mat hfin = layer_norm(x, vec("transformer.ln_f.weight"), vec("transformer.ln_f.bias"));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t v = 0; v < 11; ++v) {
        double dot = 0;
        for (std::size_t i = 0; i < d; ++i)
          dot += hfin[t][i] * wte[v][i];
        EXPECT_NEAR(got[(s * T + t) * 11 + v], dot, 1e-10)
            << "seq " << s << " t " << t << " v " << v;
      }
  }
  // The padded rows of the table are zero.
  const auto table = w.at("transformer.wte.weight").to_vector<double>();
  for (std::size_t k = 11 * 8; k < table.size(); ++k)
    ASSERT_EQ(table[k], 0.0);
}

// ---- weights in and out -------------------------------------------------------------------------

nn::GptConfig tiny_gpt(std::int64_t padded) {
  nn::GptConfig c;
  c.vocab = 11;
  c.padded_vocab = padded;
  c.context_length = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 8;
  return c;
}

Tensor logits_of(nn::Model& m) {
  return m.forward(tb::core::from_vector(std::vector<std::int64_t>{3, 10, 0, 7, 7, 1}, {2, 3}));
}

// A gpt built from a generator of its own, seeded `seed`, which its dropout layers go on drawing
// from: two built from one seed start with the same weights.
struct SeededGpt {
  SeededGpt(const nn::GptConfig& c, std::uint64_t seed) : gen(seed), model(c, &gen) {}
  tb::rng::CpuGenerator gen;
  nn::Gpt model;
};

// The largest difference between two models' logits_of (same shapes asserted).
double logits_gap(nn::Model& a, nn::Model& b) {
  const Tensor ta = logits_of(a), tb_ = logits_of(b);
  EXPECT_EQ(ta.sizes().vec(), tb_.sizes().vec());
  const auto va = ta.to_vector<float>(), vb = tb_.to_vector<float>();
  double most = 0;
  for (std::size_t i = 0; i < va.size() && i < vb.size(); ++i)
    most = std::max(most, static_cast<double>(std::abs(va[i] - vb[i])));
  return most;
}

TEST(GptWeights, HuggingFaceLayoutRoundTripsAndFillsAPaddedTable) {
  tb::test::TempDir tmp("tb_gpt_weights");
  tb::rng::CpuGenerator gen;
  gen.manual_seed(1);
  nn::Gpt a(tiny_gpt(0), &gen);
  const auto hf = tmp.path() / "hf.safetensors";
  const tb::train::WeightsSaved saved = tb::train::save_weights(a, hf, "hf-gpt2");
  const auto file = tb::train::load_safetensors(hf);
  std::map<std::string, std::vector<std::int64_t>> shapes;
  std::int64_t elements = 0;
  for (const auto& [name, t] : file.tensors) {
    shapes[name] = t.sizes().vec();
    elements += t.numel();
  }
  // What it says it wrote is what the file holds (lm_head.weight too), not the model's counts.
  EXPECT_EQ(saved.tensors, static_cast<std::int64_t>(file.tensors.size()));
  EXPECT_EQ(saved.elements, elements);
  EXPECT_EQ(saved.tensors, static_cast<std::int64_t>(a.state_dict().size()) + 1);
  // GPT2LMHeadModel's state_dict: Conv1D weights [in, out], lm_head.weight.
  EXPECT_EQ(shapes.at("transformer.h.0.attn.c_attn.weight"), (std::vector<std::int64_t>{8, 24}));
  EXPECT_EQ(shapes.at("transformer.h.1.mlp.c_fc.weight"), (std::vector<std::int64_t>{8, 32}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<std::int64_t>{11, 8}));
  // Into a model with a padded table (llm.c's layout), from another seed: same logits.
  gen.manual_seed(2);
  nn::Gpt b(tiny_gpt(16), &gen);
  const auto r = tb::train::load_weights(b, hf);
  EXPECT_EQ(r.layout, "gpt2 (Conv1D [in, out] weights, transposed)");
  EXPECT_EQ(r.ignored, std::vector<std::string>{"lm_head.weight (tied to transformer.wte.weight)"});
  EXPECT_EQ(logits_of(b).to_vector<double>(), logits_of(a).to_vector<double>());

  // GPT2Model's names (no "transformer."), with the causal-mask buffers older files carry.
  tb::train::TensorList bare;
  for (const auto& [name, t] : file.tensors) {
    if (name == "lm_head.weight") continue;
    bare.emplace_back(name.substr(std::string("transformer.").size()), t);
  }
  bare.emplace_back("h.0.attn.bias", tb::ops::ones({1, 1, 8, 8}));
  bare.emplace_back("h.0.attn.masked_bias", tb::ops::ones({}));
  const auto bare_path = tmp.path() / "bare.safetensors";
  tb::train::save_safetensors(bare_path, bare);
  gen.manual_seed(3);
  nn::Gpt c(tiny_gpt(0), &gen);
  const auto rc = tb::train::load_weights(c, bare_path);
  EXPECT_EQ(rc.ignored.size(), 2u);
  EXPECT_EQ(logits_of(c).to_vector<double>(), logits_of(a).to_vector<double>());

  // Our own layout (nanoGPT's names, Linear weights) comes back as it went.
  const auto own = tmp.path() / "own.safetensors";
  tb::train::save_weights(b, own);
  gen.manual_seed(4);
  nn::Gpt d(tiny_gpt(16), &gen);
  EXPECT_EQ(tb::train::load_weights(d, own).layout, "trainbench");
  EXPECT_EQ(logits_of(d).to_vector<double>(), logits_of(a).to_vector<double>());
}

// A GPT-2 state_dict as PyTorch / transformers save it (tests/data/gen_gpt2_torch_ref.py:
// GPT2Model names, Conv1D [in, out] weights, attn.bias masks, float32) loads into a gpt with a
// padded table and gives the logits PyTorch computed, to 1e-5.
TEST(GptWeights, APyTorchWrittenGpt2FileGivesPyTorchsLogits) {
  std::ifstream in(std::string(TB_TEST_DATA_DIR) + "/gpt2_tiny_hf.json");
  ASSERT_TRUE(in.good());
  const auto ref = nlohmann::json::parse(in);
  nn::GptConfig c;
  c.vocab = ref["config"]["vocab"].get<std::int64_t>();
  c.padded_vocab = 32;
  c.context_length = ref["config"]["context_length"].get<std::int64_t>();
  c.d_model = ref["config"]["d_model"].get<std::int64_t>();
  c.n_layers = ref["config"]["n_layers"].get<std::int64_t>();
  c.n_heads = ref["config"]["n_heads"].get<std::int64_t>();
  nn::Gpt m(c);
  const auto r =
      tb::train::load_weights(m, std::string(TB_TEST_DATA_DIR) + "/gpt2_tiny_hf.safetensors");
  EXPECT_EQ(r.layout, "gpt2 (Conv1D [in, out] weights, transposed)");
  EXPECT_EQ(r.ignored.size(), 2u);  // the two layers' attn.bias masks
  const auto shape = ref["shape"].get<std::vector<std::int64_t>>();
  const Tensor tokens =
      tb::core::from_vector(ref["tokens"].get<std::vector<std::int64_t>>(), {shape[0], shape[1]});
  const auto got = m.forward(tokens).contiguous().to_vector<double>();
  const auto want = ref["logits"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5) << "logit " << i;
}

// The weights fuzz target's seeds (tests/fuzz/corpus/weights, from gpt2_tiny_hf.safetensors):
// GPT-2's names bare and under "transformer." with the tied head give the same model; every
// broken or hostile file is refused naming itself, and leaves the model as it was.
TEST(GptWeights, TheFuzzSeedsLoadOrAreRefusedNamingTheFile) {
  const std::string dir = std::string(TB_TEST_DATA_DIR) + "/../fuzz/corpus/weights/";
  nn::GptConfig c = tiny_gpt(32);
  c.vocab = 23;
  c.context_length = 16;
  c.d_model = 16;
  nn::Gpt bare(c);
  nn::Gpt prefixed(c);
  EXPECT_EQ(tb::train::load_weights(bare, dir + "hf-conv1d.safetensors").tensors, 28);
  const auto r = tb::train::load_weights(prefixed, dir + "prefixed-with-head.safetensors");
  EXPECT_EQ(r.layout, "gpt2 (Conv1D [in, out] weights, transposed)");
  EXPECT_EQ(logits_of(prefixed).to_vector<double>(), logits_of(bare).to_vector<double>());
  for (const char* file :
       {"truncated.safetensors", "wrong-shape.safetensors", "missing-tensor.safetensors",
        "unexpected-tensor.safetensors", "offsets-past-the-end.safetensors",
        "reversed-offsets.safetensors", "header-length-past-the-end.safetensors",
        "overflowing-shape.safetensors", "unknown-dtype.safetensors"}) {
    nn::Gpt m(c);
    const auto before = logits_of(m).to_vector<double>();
    const std::string msg = error_of([&] { (void)tb::train::load_weights(m, dir + file); });
    EXPECT_NE(msg.find(dir + file), std::string::npos) << file << ": " << msg;
    EXPECT_EQ(logits_of(m).to_vector<double>(), before) << file;
  }
}

TEST(GptWeights, MissingOrMisshapedTensorsAreNamedAndNothingChanges) {
  tb::test::TempDir tmp("tb_gpt_weights_bad");
  nn::Gpt a(tiny_gpt(0));
  const auto hf = tmp.path() / "hf.safetensors";
  tb::train::save_weights(a, hf, "hf-gpt2");
  tb::train::TensorList cut;
  for (const auto& [name, t] : tb::train::load_safetensors(hf).tensors) {
    if (name == "transformer.h.1.ln_2.weight") continue;
    cut.emplace_back(name, name == "transformer.wpe.weight" ? tb::ops::zeros({4, 8}) : t);
  }
  const auto bad = tmp.path() / "bad.safetensors";
  tb::train::save_safetensors(bad, cut);
  nn::Gpt b(tiny_gpt(0));
  const auto before = logits_of(b).to_vector<double>();
  const std::string msg = error_of([&] { tb::train::load_weights(b, bad); });
  EXPECT_NE(msg.find("[init_from] " + bad.string() +
                     " (gpt2 (Conv1D [in, out] weights, "
                     "transposed)): "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Missing key(s) in state_dict: \"transformer.h.1.ln_2.weight\""),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("size mismatch for transformer.wpe.weight: copying a param with shape [4, 8] "
                     "from checkpoint, the shape in current model is [8, 8]"),
            std::string::npos)
      << msg;
  EXPECT_EQ(logits_of(b).to_vector<double>(), before);
  nn::CnnConfig cc;
  cc.channels = {2};
  cc.convs_per_block = 1;
  nn::Cnn cnn(cc);
  EXPECT_NE(error_of([&] {
              tb::train::save_weights(cnn, hf, "hf-gpt2");
            }).find("[weights] layout hf-gpt2 is for gpt models, not model.kind = 'cnn'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              tb::train::save_weights(cnn, hf, "onnx");
            }).find("[weights] layout 'onnx' is not one of trainbench, hf-gpt2"),
            std::string::npos);
}

// Files as users have them: saved from torch.compile's or DDP's wrapper ("_orig_mod.",
// "module."), with a head fine-tuned apart from the table, at a longer context than the model's,
// or with a tensor the model lacks (named as the file names it).
TEST(GptWeights, WrappedNamesUntiedHeadsLongerContextsAndStrangersAreSaid) {
  tb::test::TempDir tmp("tb_gpt_weights_users");
  tb::rng::CpuGenerator gen;
  gen.manual_seed(5);
  nn::GptConfig longer = tiny_gpt(0);
  longer.context_length = 16;
  nn::Gpt a(longer, &gen);
  const auto own = tmp.path() / "own.safetensors";
  tb::train::save_weights(a, own);
  const auto file = tb::train::load_safetensors(own);
  auto rewrite = [&](const std::string& out, const std::function<void(tb::train::TensorList&)>& f) {
    tb::train::TensorList list(file.tensors.begin(), file.tensors.end());
    f(list);
    tb::train::save_safetensors(tmp.path() / out, list);
    return tmp.path() / out;
  };
  // torch.compile's prefix, and the model at 8 positions of the file's 16: its first 8, said.
  const auto compiled = rewrite("compiled.safetensors", [](tb::train::TensorList& l) {
    for (auto& [name, t] : l)
      name = "_orig_mod." + name;
  });
  nn::Gpt b(tiny_gpt(0));
  const auto loaded = tb::train::load_weights(b, compiled);
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_NE(loaded.warnings[0].find("transformer.wpe.weight: the first 8 of the file's 16 "
                                    "positions (model.context_length = 8)"),
            std::string::npos)
      << loaded.warnings[0];
  const auto wpe = b.state_dict();
  for (const auto& [name, t] : wpe) {
    if (name != "transformer.wpe.weight") continue;
    for (const auto& [fname, ft] : file.tensors) {
      if (fname != name) continue;
      EXPECT_EQ(t.to_vector<float>(), ft.narrow(0, 0, 8).contiguous().to_vector<float>());
    }
  }
  // An untied head: loaded, and said not to be the model's.
  const auto untied = rewrite("untied.safetensors", [](tb::train::TensorList& l) {
    for (auto& [name, t] : l)
      if (name == "lm_head.weight") t = tb::ops::add(t, 1.0);
  });
  nn::Gpt c(longer);
  const auto head = tb::train::load_weights(c, untied);
  ASSERT_EQ(head.warnings.size(), 1u);
  EXPECT_NE(head.warnings[0].find("lm_head.weight differs from transformer.wte.weight"),
            std::string::npos);
  EXPECT_TRUE(tb::train::load_weights(c, own).warnings.empty());  // tied: nothing to say
  // A tensor the model lacks is named as the file names it.
  const auto stranger = rewrite("stranger.safetensors", [](tb::train::TensorList& l) {
    l.emplace_back("foo.weight", tb::ops::zeros({2}));
  });
  EXPECT_NE(error_of([&] {
              tb::train::load_weights(c, stranger);
            }).find("Unexpected key(s) in state_dict: \"foo.weight\""),
            std::string::npos);
  // Weights with a NaN (saved from a diverged run) are refused, naming the tensor.
  const auto nan = rewrite("nan.safetensors", [](tb::train::TensorList& l) {
    for (auto& [name, t] : l)
      if (name == "transformer.h.1.mlp.c_fc.weight") t = tb::ops::div(t, 0.0);
  });
  EXPECT_NE(error_of([&] {
              tb::train::load_weights(c, nan);
            }).find(": transformer.h.1.mlp.c_fc.weight holds NaN or infinite values"),
            std::string::npos);
}

TEST(GptWeights, CnnWeightsAndRunningStatisticsRoundTrip) {
  tb::test::TempDir tmp("tb_cnn_weights");
  nn::CnnConfig cc;
  cc.channels = {4};
  cc.convs_per_block = 1;
  tb::rng::CpuGenerator gen;
  gen.manual_seed(1);
  nn::Cnn a(cc, &gen);
  const Tensor x = tb::ops::rand({3, 784}, &gen);
  (void)a.forward(x);  // training mode: the running statistics move
  a.eval();
  const auto path = tmp.path() / "cnn.safetensors";
  tb::train::save_weights(a, path);
  gen.manual_seed(2);
  nn::Cnn b(cc, &gen);
  b.eval();
  EXPECT_EQ(tb::train::load_weights(b, path).layout, "trainbench");
  EXPECT_EQ(b.forward(x).to_vector<double>(), a.forward(x).to_vector<double>());

  // An AveragedModel's state_dict (a checkpoint's average.safetensors, torch.optim.swa_utils):
  // the "module." weights load, its n_averaged count is left and said ("Unexpected key(s) in
  // state_dict: n_averaged" before).
  tb::train::TensorList averaged = {
      {"n_averaged", tb::ops::full({}, 7.0, tb::core::ScalarType::Int64)}};
  for (const auto& [name, t] : a.state_dict())
    averaged.emplace_back("module." + name, t);
  const auto avg_path = tmp.path() / "average.safetensors";
  tb::train::save_safetensors(avg_path, averaged);
  gen.manual_seed(3);
  nn::Cnn c(cc, &gen);
  c.eval();
  const auto loaded = tb::train::load_weights(c, avg_path);
  ASSERT_EQ(loaded.ignored.size(), 1u);
  EXPECT_NE(loaded.ignored[0].find("n_averaged"), std::string::npos);
  EXPECT_EQ(c.forward(x).to_vector<double>(), a.forward(x).to_vector<double>());
  // An average of nothing yet (a checkpoint before swa.start_step: the initial weights) is
  // refused, not taken for trained weights.
  averaged.front().second = tb::ops::full({}, 0.0, tb::core::ScalarType::Int64);
  tb::train::save_safetensors(tmp.path() / "empty-average.safetensors", averaged);
  EXPECT_NE(error_of([&] {
              tb::train::load_weights(c, tmp.path() / "empty-average.safetensors");
            }).find("n_averaged = 0 holds no average yet"),
            std::string::npos);
  // A file whose other names are not an AveragedModel's keeps n_averaged as a stranger.
  tb::train::TensorList stray = {
      {"n_averaged", tb::ops::full({}, 7.0, tb::core::ScalarType::Int64)}};
  for (const auto& [name, t] : a.state_dict())
    stray.emplace_back(name, t);
  tb::train::save_safetensors(tmp.path() / "stray.safetensors", stray);
  EXPECT_NE(error_of([&] {
              tb::train::load_weights(c, tmp.path() / "stray.safetensors");
            }).find("n_averaged"),
            std::string::npos);
}

// nanoGPT's bias = False: no bias tensor anywhere, the parameter count says so, and the model is
// the bias = True one with its biases at zero; its weights go out and back in nanoGPT's names,
// and not as GPT2LMHeadModel (which has biases).
TEST(Gpt, WithoutBiasesIsTheModelWithZeroBiases) {
  nn::GptConfig c = tiny_gpt(16);
  SeededGpt with_biases(c, 3);
  nn::Gpt& with = with_biases.model;
  c.bias = false;
  SeededGpt bias_free(c, 3);
  nn::Gpt& without = bias_free.model;
  EXPECT_EQ(without.num_parameters(), nn::gpt_parameter_count(c));
  EXPECT_EQ(with.num_parameters() - without.num_parameters(),
            2 * (2 * 8 + 3 * 8 + 8 + 4 * 8 + 8) + 8);  // per block: 2 norms, 4 Linears; ln_f
  for (const auto& [name, p] : without.named_parameters())
    EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
  {
    tb::autograd::NoGradGuard no_grad;
    std::map<std::string, Tensor> own;
    for (const auto& [name, p] : without.named_parameters())
      own[name] = p;
    for (auto& [name, p] : with.named_parameters()) {
      if (own.count(name) != 0)
        p.copy_(own[name]);
      else
        p.zero_();
    }
  }
  EXPECT_LT(logits_gap(with, without), 1e-6);
  const auto vb = logits_of(without).to_vector<float>();
  tb::test::TempDir tmp("tb_gpt_nobias");
  const auto file = tmp.path() / "nobias.safetensors";
  tb::train::save_weights(without, file);
  nn::Gpt back(c);
  EXPECT_EQ(tb::train::load_weights(back, file).layout, "trainbench");
  EXPECT_EQ(logits_of(back).to_vector<float>(), vb);
  // GPT-2's file has biases this model lacks: refused, naming them.
  const auto biased = tmp.path() / "biased.safetensors";
  tb::train::save_weights(with, biased);
  const std::string refused = error_of([&] { (void)tb::train::load_weights(back, biased); });
  EXPECT_NE(refused.find("ln_1.bias"), std::string::npos) << refused;
  EXPECT_NE(refused.find("(the file has biases: set model.bias = true)"), std::string::npos)
      << refused;
  // ... and the other way: nanoGPT's bias-free file into the default gpt.
  nn::GptConfig biased_config = c;
  biased_config.bias = true;
  nn::Gpt default_gpt(biased_config);
  const std::string missing = error_of([&] { (void)tb::train::load_weights(default_gpt, file); });
  EXPECT_NE(missing.find("(the file has no biases, as nanoGPT's bias = False: set model.bias = "
                         "false)"),
            std::string::npos)
      << missing;
  EXPECT_NE(error_of([&] {
              (void)tb::train::save_weights(without, file, "hf-gpt2");
            }).find("layout hf-gpt2 writes GPT2LMHeadModel, which has biases"),
            std::string::npos);
}

// dropout: the same initial weights (dropout draws nothing at init) and, in evaluation, the same
// logits as without it; in training, nearly no dropout (p = 1e-9) computes what the fused
// attention does through the unfused path that drops attention weights, and p = 0.3 changes the
// logits, reproducibly from the generator.
TEST(Gpt, DropoutWhereNanoGptHasIt) {
  nn::GptConfig c = tiny_gpt(16);
  SeededGpt without_dropout(c, 4);
  nn::Gpt& plain = without_dropout.model;
  c.dropout = 1e-9;
  SeededGpt with_dropout(c, 4);
  nn::Gpt& dropped = with_dropout.model;
  for (const char* name : {"transformer.drop", "transformer.h.0.attn.attn_dropout",
                           "transformer.h.0.attn.resid_dropout", "transformer.h.1.mlp.dropout"}) {
    bool found = false;
    for (const auto& [path, m] : dropped.named_modules())
      found |= path == name && dynamic_cast<nn::Dropout*>(m) != nullptr;
    EXPECT_TRUE(found) << name;
  }
  plain.eval();
  dropped.eval();
  EXPECT_EQ(logits_gap(plain, dropped), 0.0);
  plain.train();
  dropped.train();
  EXPECT_LT(logits_gap(plain, dropped), 1e-5);  // fused against unfused attention
  c.dropout = 0.3;
  SeededGpt a(c, 4), b(c, 4);
  EXPECT_EQ(logits_gap(a.model, b.model), 0.0);  // same generator, same masks
  SeededGpt a_again(c, 4);
  EXPECT_GT(logits_gap(a_again.model, plain), 1e-3);
  EXPECT_NE(error_of([] {
              nn::GptConfig bad = tiny_gpt(0);
              bad.dropout = 1.0;
              nn::validate_gpt(bad);
            }).find("dropout must be in [0, 1), got 1"),
            std::string::npos);
}

// A data-parallel rank whose share of a short last batch is empty replays the forward pass with
// only its Dropout layers in training mode (Trainer's replay_random_draws): the attention
// weights' masks must be drawn then too, or its generator falls behind the other ranks'.
TEST(Gpt, AnEmptyShardDrawsEveryDropoutMask) {
  nn::GptConfig c = tiny_gpt(16);
  c.dropout = 0.2;
  SeededGpt one_process(c, 8), rank(c, 8);
  nn::Gpt& whole = one_process.model;
  nn::Gpt& empty = rank.model;
  const Tensor tokens = tb::core::from_vector(std::vector<std::int64_t>{3, 10, 0, 7, 7, 1}, {2, 3});
  (void)whole.forward(tokens);  // one process: the 2 rows, in training
  empty.eval();
  for (auto& [path, m] : empty.named_modules())
    if (dynamic_cast<nn::Dropout*>(m) != nullptr) m->train(true);
  {
    nn::ScopedBatchShard shard({2, 0, 2});  // rows [2, 2) of 2: none
    (void)empty.forward(tokens.narrow(0, 0, 0));
  }
  EXPECT_EQ(one_process.gen.get_state(), rank.gen.get_state());
}

// gelu = "exact" (nanoGPT's nn.GELU()) against "tanh" (GPT-2's): the same weights, logits that
// differ a little; each is its op (checked against PyTorch in the ops tests).
TEST(Gpt, ExactGeluIsNanoGptsActivation) {
  nn::GptConfig c = tiny_gpt(16);
  c.init_std = 0.5;  // activations of order 1, where the two forms differ by up to ~1e-3
  SeededGpt tanh_gelu(c, 6);
  c.gelu = "exact";
  SeededGpt exact_gelu(c, 6);
  EXPECT_EQ(exact_gelu.model.config().fields.at("gelu"), "exact");
  const double most = logits_gap(tanh_gelu.model, exact_gelu.model);
  EXPECT_GT(most, 1e-5);
  EXPECT_LT(most, 0.5);
  c.gelu = "erf";
  EXPECT_NE(error_of([&] { nn::validate_gpt(c); }).find("gelu must be \"tanh\" or \"exact\""),
            std::string::npos);
}

}  // namespace
