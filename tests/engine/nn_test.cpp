// nn: modules (names, state_dict, errors), initialisation against PyTorch, the fused ops (rope,
// cross-entropy against float64 references), gradcheck of every layer, attention causality,
// and the models (parameter counts, config JSON, a short training run of qwen-tiny).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/autograd/gradcheck.h"
#include "engine/core/error.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "engine/nn/models.h"
#include "engine/nn/module.h"
#include "engine/nn/transformer.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::Device;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace nn = tb::nn;
namespace ops = tb::ops;
using tb::test::error_of;

std::unique_ptr<tb::rng::Generator> seeded(std::uint64_t seed) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(seed);
  return g;
}

nlohmann::json torch_ref() {
  std::ifstream f(std::string(TB_TEST_DATA_DIR) + "/nn_torch_ref.json");
  EXPECT_TRUE(f.good()) << "cannot open nn_torch_ref.json under " << TB_TEST_DATA_DIR;
  return nlohmann::json::parse(f);
}

std::vector<float> floats(const nlohmann::json& j) {
  std::vector<float> v;
  for (const auto& x : j)
    v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << "[" << i << "]";
}

// gradcheck of a module in float64: perturbs the input and every parameter.
void expect_module_gradcheck(nn::Module& m, const Tensor& x, const std::string& what,
                             double atol = 1e-5) {
  m.to(ScalarType::Float64);
  std::vector<Tensor> inputs;
  if (x.defined() && tb::core::is_floating_point(x.dtype())) inputs.push_back(x);
  for (const auto& p : m.parameters())
    inputs.push_back(p);
  const auto r = ag::gradcheck([&](const std::vector<Tensor>&) { return m.forward(x); }, inputs,
                               1e-6, atol, 1e-3);
  EXPECT_TRUE(r.ok) << what << ": " << r.message << " (max error " << r.max_abs_error << ")";
}

Tensor leaf64(std::vector<std::int64_t> shape, std::uint64_t seed, double scale = 1.0) {
  auto g = seeded(seed);
  Tensor t = ops::mul(ops::randn(shape, g.get(), ScalarType::Float64), scale);
  return ag::requires_grad_(t);
}

// ---- initialisation matches PyTorch draw for draw ----------------------------------------------

TEST(NnInit, LinearAndEmbeddingMatchPyTorch) {
  const auto ref = torch_ref();
  tb::rng::manual_seed(0);  // like torch.manual_seed(0): the default generator
  nn::Linear lin(5, 3);
  nn::Embedding emb(4, 6);
  EXPECT_EQ(lin.weight().to_vector<float>(), floats(ref["linear_weight"]));
  EXPECT_EQ(lin.bias().to_vector<float>(), floats(ref["linear_bias"]));
  EXPECT_EQ(emb.weight().to_vector<float>(), floats(ref["embedding_weight"]));
}

TEST(NnInit, MlpForwardAndBackwardMatchPyTorch) {
  const auto ref = torch_ref();
  auto g = seeded(7);
  nn::MlpConfig cfg;
  cfg.input = 8;
  cfg.hidden = {16};
  cfg.classes = 4;
  nn::Mlp mlp(cfg, g.get());
  Tensor x = ops::sub(ops::div(ops::arange(16, ScalarType::Float32).reshape({2, 8}), 10.0), 0.5);
  const Tensor logits = mlp.forward(x);
  expect_close(logits.to_vector<float>(), floats(ref["mlp_logits"]), 1e-6f, "logits");
  const Tensor loss = mlp.loss(logits, tb::core::from_vector(std::vector<std::int64_t>{1, 3}));
  EXPECT_NEAR(loss.item(), ref["mlp_loss"].get<double>(), 1e-6);
  ag::backward(loss);
  expect_close(ag::grad(mlp.named_parameters()[0].second).to_vector<float>(),
               floats(ref["mlp_grad_w0"]), 1e-6f, "grad layers.0.weight");
}

TEST(NnInit, ReproducibleFromASeed) {
  nn::QwenTinyConfig cfg;
  cfg.d_model = 32;
  cfg.n_layers = 2;
  cfg.n_heads = 2;
  auto g1 = seeded(42);
  auto g2 = seeded(42);
  auto g3 = seeded(43);
  nn::QwenTiny a(cfg, g1.get()), b(cfg, g2.get()), c(cfg, g3.get());
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  const auto pc = c.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_differs = false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
    any_differs |= pa[i].second.to_vector<float>() != pc[i].second.to_vector<float>();
  }
  EXPECT_TRUE(any_differs);
  // Qwen's init: matrices N(0, 0.02), norms 1, q/k/v biases 0.
  const Tensor w = a.named_parameters()[0].second;  // embed_tokens.weight
  const double sd = std::sqrt(ops::mean(ops::square(w)).item());
  EXPECT_NEAR(sd, 0.02, 0.002);
}

// ---- Module: names, state_dict, errors ---------------------------------------------------------

nn::QwenTinyConfig small_qwen() {
  nn::QwenTinyConfig cfg;
  cfg.vocab = 32;
  cfg.d_model = 16;
  cfg.n_layers = 2;
  cfg.n_heads = 2;
  cfg.context_length = 8;
  return cfg;
}

TEST(NnModule, HierarchicalNames) {
  auto g = seeded(1);
  nn::QwenTiny m(small_qwen(), g.get());
  std::vector<std::string> names;
  for (const auto& [n, t] : m.named_parameters())
    names.push_back(n);
  const std::vector<std::string> head = {
      "embed_tokens.weight",           "layers.0.attn_norm.weight",
      "layers.0.attn.q_proj.weight",   "layers.0.attn.q_proj.bias",
      "layers.0.attn.k_proj.weight",   "layers.0.attn.k_proj.bias",
      "layers.0.attn.v_proj.weight",   "layers.0.attn.v_proj.bias",
      "layers.0.attn.o_proj.weight",   "layers.0.mlp_norm.weight",
      "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight",
      "layers.0.mlp.down_proj.weight"};
  ASSERT_GE(names.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 13), head);
  EXPECT_EQ(names.back(), "norm.weight");  // tied: no lm_head
  // Rotary tables are non-persistent buffers: present, but not in the state dict.
  EXPECT_EQ(m.named_buffers().size(), 4u);
  EXPECT_EQ(m.state_dict().size(), names.size());
  // Paths name layers in errors.
  auto mods = m.named_modules();
  bool found = false;
  for (auto& [path, mod] : mods) {
    if (path == "layers.1.attn.k_proj") {
      EXPECT_EQ(mod->describe(), "Linear 'layers.1.attn.k_proj'");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(NnModule, ParameterCount) {
  nn::QwenTinyConfig cfg;  // defaults: vocab 256, d 128, 4 layers, 4 heads, ffn 352
  auto m = nn::build_model(cfg);
  const std::int64_t d = 128, f = 352, v = 256;
  const std::int64_t attn = 3 * (d * d + d) + d * d;
  const std::int64_t mlp = 3 * d * f;
  const std::int64_t per_layer = attn + mlp + 2 * d;
  EXPECT_EQ(m->num_parameters(), v * d + 4 * per_layer + d);
  cfg.tie_embeddings = false;
  EXPECT_EQ(nn::build_model(cfg)->num_parameters(), 2 * v * d + 4 * per_layer + d);
  const std::string table = nn::parameter_table(*m);
  EXPECT_NE(table.find("layers.3.mlp.down_proj.weight"), std::string::npos) << table;
  EXPECT_NE(table.find("total " + std::to_string(m->num_parameters()) + " parameters"),
            std::string::npos);
}

TEST(NnModule, StateDictRoundTrip) {
  auto g1 = seeded(1);
  auto g2 = seeded(2);
  nn::QwenTiny a(small_qwen(), g1.get());
  nn::QwenTiny b(small_qwen(), g2.get());
  const Tensor tokens =
      tb::core::from_vector(std::vector<std::int64_t>{1, 5, 7, 31, 0, 2, 9, 9}, {2, 4});
  const auto ya = a.forward(tokens).to_vector<float>();
  EXPECT_NE(b.forward(tokens).to_vector<float>(), ya);
  const Tensor before = b.parameters()[0];
  const auto result = b.load_state_dict(a.state_dict());
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  EXPECT_EQ(b.forward(tokens).to_vector<float>(), ya);
  EXPECT_TRUE(b.parameters()[0].is_same(before));  // loaded in place: identity kept
  EXPECT_TRUE(ag::is_leaf(b.parameters()[0]) && b.parameters()[0].requires_grad());
}

TEST(NnModule, LoadStateDictErrorsNameEveryKeyAndChangeNothing) {
  nn::MlpConfig cfg;
  cfg.input = 4;
  cfg.hidden = {3};
  cfg.classes = 2;
  auto g = seeded(1);
  nn::Mlp m(cfg, g.get());
  auto sd = m.state_dict();
  nn::NamedTensors bad;
  for (auto& [n, t] : sd) {
    if (n == "layers.2.bias") continue;  // missing
    if (n == "layers.0.weight") {
      bad.emplace_back(n, ops::zeros({4, 4}));  // wrong shape
    } else {
      bad.emplace_back(n, ops::zeros(t.sizes()));
    }
  }
  bad.emplace_back("layers.9.weight", ops::zeros({1}));  // unexpected
  const auto before = m.named_parameters()[1].second.to_vector<float>();
  const std::string err = error_of([&] { m.load_state_dict(bad); });
  EXPECT_NE(err.find("Error(s) in loading state_dict for Mlp"), std::string::npos) << err;
  EXPECT_NE(err.find("Missing key(s) in state_dict: \"layers.2.bias\""), std::string::npos) << err;
  EXPECT_NE(err.find("Unexpected key(s) in state_dict: \"layers.9.weight\""), std::string::npos)
      << err;
  EXPECT_NE(err.find("size mismatch for layers.0.weight: copying a param with shape [4, 4] from "
                     "checkpoint, the shape in current model is [3, 4]"),
            std::string::npos)
      << err;
  EXPECT_EQ(m.named_parameters()[1].second.to_vector<float>(), before);  // untouched
  // Non-strict: missing/unexpected are reported, shapes still checked.
  bad.erase(bad.begin());  // drop the mis-shaped entry
  const auto r = m.load_state_dict(bad, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"layers.0.weight", "layers.2.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"layers.9.weight"}));
  EXPECT_EQ(m.named_parameters()[1].second.to_vector<float>(), std::vector<float>(3, 0.0f));
}

TEST(NnModule, TrainEvalZeroGradAndDtypeMoves) {
  auto g = seeded(1);
  nn::MlpConfig cfg;
  cfg.input = 4;
  cfg.hidden = {3};
  cfg.classes = 2;
  cfg.dropout = 0.5;
  nn::Mlp m(cfg, g.get());
  m.eval();
  for (auto& [path, mod] : m.named_modules())
    EXPECT_FALSE(mod->is_training()) << path;
  m.train();
  EXPECT_TRUE(m.children()[0].second->children()[2].second->is_training());
  const Tensor w = m.parameters()[0];
  ag::backward(ops::sum(m.forward(ops::ones({2, 4}))));
  EXPECT_TRUE(ag::grad(w).defined());
  m.zero_grad(false);
  EXPECT_EQ(ops::sum(ops::abs(ag::grad(w))).item(), 0.0);
  m.zero_grad();
  EXPECT_FALSE(ag::grad(w).defined());
  m.to(ScalarType::Float64);
  EXPECT_EQ(w.dtype(), ScalarType::Float64);  // same tensor, converted in place
  EXPECT_TRUE(m.parameters()[0].is_same(w));
  EXPECT_NE(error_of([&] { m.to(ScalarType::Int64); }).find("floating-point"), std::string::npos);
}

TEST(NnModule, ShapeErrorsNameTheLayerAndTheNumbers) {
  auto g = seeded(1);
  nn::MlpConfig cfg;
  cfg.input = 6;
  cfg.hidden = {5};
  cfg.classes = 3;
  nn::Mlp m(cfg, g.get());
  EXPECT_EQ(error_of([&] {
              m.forward(ops::zeros({2, 7}));
            }),
            "[nn] Mlp: input of shape [2, 7] has 7 features per sample, the model expects input "
            "= 6");
  auto& lin = m.children()[0].second->children()[2].second;  // layers.2
  EXPECT_EQ(error_of([&] {
              lin->forward(ops::zeros({2, 4}));
            }),
            "[nn] Linear 'layers.2': input of shape [2, 4] has 4 features in its last dimension, "
            "expected 5 (in_features)");
  nn::Embedding emb(10, 4);
  EXPECT_EQ(error_of([&] {
              emb.forward(tb::core::from_vector(std::vector<std::int64_t>{3, 10}));
            }),
            "[nn] Embedding: index 10 is out of range for num_embeddings=10");
  auto q = small_qwen();
  nn::QwenTiny model(q);
  EXPECT_EQ(error_of([&] {
              model.forward(ops::zeros({1, 9}, ScalarType::Int64));
            }),
            "[nn] QwenTiny: sequence length 9 exceeds context_length 8");
}

// ---- fused ops ---------------------------------------------------------------------------------

TEST(NnOps, CrossEntropyMatchesPyTorchWithSmoothingAndIgnoreIndex) {
  // torch.manual_seed(3); lg = torch.randn(6, 5, dtype=torch.float64) * 3 (values below), targets
  // [0, 4, -100, 2, 2, 1], label_smoothing 0.1 -> 2.727706269744147.
  const std::vector<double> lg = {
      -0.6532463753362925,  0.44003138943314757, 2.007243364045643,   -1.542372341785031,
      -4.7579115393211,     -2.2431909475742415, 1.961717217681183,   2.731469691234121,
      0.44489477396043775,  -2.4266736356048364, 4.759698051891263,   -1.0402834272197639,
      1.6451199932275657,   3.4404197909148038,  -5.703389102782532,  0.7447209829411221,
      -0.2615519872410942,  -1.04660081279045,   -1.2570456457594665, -4.994555888939829,
      -1.047522508033636,   -2.3244934396557504, 0.5523327797843475,  -0.4620377834212288,
      -0.09008283579855153, 0.8700070199657859,  0.9818045102085837,  -3.240530609317535,
      1.6113334438088298,   2.3701702269338454};
  const Tensor logits = ag::requires_grad_(tb::core::from_vector(lg, {6, 5}));
  const Tensor target = tb::core::from_vector(std::vector<std::int64_t>{0, 4, -100, 2, 2, 1});
  const Tensor loss = ops::cross_entropy(logits, target, -100, 0.1);
  EXPECT_NEAR(loss.item(), 2.727706269744147, 1e-14);
  ag::backward(loss);
  const auto g = ag::grad(logits).to_vector<double>();
  const std::vector<double> row0 = {-0.17331329458382116, 0.027889546151837818, 0.14885507096233075,
                                    0.0003923944800069158, -0.0038237170103542807};
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(g[static_cast<std::size_t>(i)], row0[static_cast<std::size_t>(i)], 1e-15);
  for (int i = 10; i < 15; ++i)
    EXPECT_EQ(g[static_cast<std::size_t>(i)], 0.0);  // the ignored row
}

TEST(NnOps, CrossEntropyIsStableForExtremeLogits) {
  // float32 logits of magnitude 1e4..3e4: a naive softmax overflows; compare to a long double
  // log-sum-exp reference.
  const std::vector<float> lg = {1e4f, -2e4f, 3e4f, 2.99999e4f, 0.0f, -3e4f, -1e4f, 5.0f, 1e4f};
  const std::vector<std::int64_t> tg = {1, 2, 0};
  const Tensor loss =
      ops::cross_entropy(tb::core::from_vector(lg, {3, 3}), tb::core::from_vector(tg));
  long double want = 0;
  for (int r = 0; r < 3; ++r) {
    long double m = -INFINITY;
    for (int c = 0; c < 3; ++c)
      m = std::max<long double>(m, lg[static_cast<std::size_t>(r * 3 + c)]);
    long double s = 0;
    for (int c = 0; c < 3; ++c)
      s += std::exp(static_cast<long double>(lg[static_cast<std::size_t>(r * 3 + c)]) - m);
    want += m + std::log(s) - lg[static_cast<std::size_t>(r * 3 + tg[static_cast<std::size_t>(r)])];
  }
  want /= 3;
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_NEAR(loss.item(), static_cast<double>(want), 1e-3 * static_cast<double>(want));
  // Every row ignored: NaN, as PyTorch's mean gives.
  EXPECT_TRUE(std::isnan(
      ops::cross_entropy(tb::core::from_vector(lg, {3, 3}),
                         tb::core::from_vector(std::vector<std::int64_t>{-1, -1, -1}), -1)
          .item()));
  EXPECT_EQ(error_of([&] {
              ops::cross_entropy(tb::core::from_vector(lg, {3, 3}),
                                 tb::core::from_vector(std::vector<std::int64_t>{0, 3, 0}));
            }),
            "[cross_entropy] target 3 of row 1 is out of range for 3 classes (and is not "
            "ignore_index)");
}

TEST(NnOps, GradcheckRopeAndCrossEntropy) {
  const Tensor x = leaf64({2, 3, 4, 6}, 1);
  auto g = seeded(2);
  const Tensor ang = ops::rand({4, 3}, g.get(), ScalarType::Float64);
  const Tensor c = ops::cos(ang);
  const Tensor s = ops::sin(ang);
  const auto r1 = ag::gradcheck([&](const auto& in) { return ops::rope(in[0], c, s); }, {x});
  EXPECT_TRUE(r1.ok) << r1.message;
  // A rotation keeps norms; rope with angle 0 is the identity.
  const Tensor y = ops::rope(x, c, s);
  EXPECT_NEAR(ops::norm(y).item(), ops::norm(x).item(), 1e-12);
  const Tensor id =
      ops::rope(x, ops::ones({4, 3}, ScalarType::Float64), ops::zeros({4, 3}, ScalarType::Float64));
  EXPECT_EQ(id.to_vector<double>(), x.to_vector<double>());
  const Tensor logits = leaf64({5, 4}, 3, 4.0);
  const Tensor target = tb::core::from_vector(std::vector<std::int64_t>{0, 3, 7, 1, 2});
  const auto r2 = ag::gradcheck(
      [&](const auto& in) { return ops::cross_entropy(in[0], target, 7, 0.2); }, {logits});
  EXPECT_TRUE(r2.ok) << r2.message;
}

// ---- gradcheck of every layer ------------------------------------------------------------------

TEST(NnGradcheck, BasicLayers) {
  auto g = seeded(5);
  nn::Linear lin(4, 3, true, g.get());
  expect_module_gradcheck(lin, leaf64({2, 5, 4}, 1), "Linear 3-D input");
  nn::LayerNorm ln(6);
  nn::init::normal_(ln.parameters()[0], 1.0, 0.3, g.get());
  expect_module_gradcheck(ln, leaf64({3, 6}, 2), "LayerNorm");
  nn::RMSNorm rms(6);
  expect_module_gradcheck(rms, leaf64({3, 6}, 3), "RMSNorm");
  nn::Embedding emb(7, 3, g.get());
  expect_module_gradcheck(emb, tb::core::from_vector(std::vector<std::int64_t>{1, 6, 1, 0}),
                          "Embedding");
  for (const char* a : {"relu", "gelu", "silu", "tanh"}) {
    nn::Activation act(nn::parse_activation(a));
    expect_module_gradcheck(act, leaf64({7}, 4), a);
  }
}

TEST(NnGradcheck, AttentionSwiGluAndDecoderBlock) {
  auto g = seeded(6);
  nn::AttentionConfig cfg;
  cfg.d_model = 8;
  cfg.n_heads = 2;
  cfg.max_positions = 5;
  nn::CausalSelfAttention attn(cfg, g.get());
  expect_module_gradcheck(attn, leaf64({2, 4, 8}, 7), "CausalSelfAttention");
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  nn::CausalSelfAttention gqa(cfg, g.get());
  expect_module_gradcheck(gqa, leaf64({1, 3, 8}, 8), "grouped-query attention");
  nn::SwiGLU ffn(8, 12, g.get());
  expect_module_gradcheck(ffn, leaf64({2, 3, 8}, 9), "SwiGLU");
  cfg.n_kv_heads = 0;
  nn::DecoderBlock block(cfg, 12, 1e-6, g.get());
  expect_module_gradcheck(block, leaf64({1, 4, 8}, 10), "DecoderBlock");
}

TEST(NnGradcheck, Losses) {
  const Tensor a = leaf64({3, 4}, 11);
  const Tensor b = leaf64({3, 4}, 12);
  const auto r = ag::gradcheck([](const auto& in) { return nn::mse_loss(in[0], in[1]); }, {a, b});
  EXPECT_TRUE(r.ok) << r.message;
  const Tensor logits = leaf64({2, 3, 5}, 13);
  const Tensor target = tb::core::from_vector(std::vector<std::int64_t>{0, 1, 4, 2, 3, 3}, {2, 3});
  const auto r2 =
      ag::gradcheck([&](const auto& in) { return nn::cross_entropy(in[0], target); }, {logits});
  EXPECT_TRUE(r2.ok) << r2.message;
}

// ---- behaviour ---------------------------------------------------------------------------------

TEST(NnAttention, IsCausal) {
  auto g = seeded(3);
  nn::QwenTiny m(small_qwen(), g.get());
  const Tensor a = tb::core::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9}, {1, 6});
  const Tensor b = tb::core::from_vector(std::vector<std::int64_t>{3, 1, 4, 2, 6, 5}, {1, 6});
  const auto ya = m.forward(a).to_vector<float>();
  const auto yb = m.forward(b).to_vector<float>();
  const std::size_t v = 32;
  // Positions 0..2 see identical prefixes: identical logits. Position 3 differs.
  EXPECT_EQ(std::vector<float>(ya.begin(), ya.begin() + 3 * v),
            std::vector<float>(yb.begin(), yb.begin() + 3 * v));
  EXPECT_NE(std::vector<float>(ya.begin() + 3 * v, ya.begin() + 4 * v),
            std::vector<float>(yb.begin() + 3 * v, yb.begin() + 4 * v));
}

// ---- fused RMSNorm / LayerNorm -----------------------------------------------------------------

// The norms in float64 from ordinary ops: the reference for the fused kernels.
Tensor reference_norm(bool rms, const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor y;
  if (rms) {
    y = ops::mul(x, ops::rsqrt(ops::add(ops::mean(ops::square(x), {-1}, true), eps)));
  } else {
    const Tensor c = ops::sub(x, ops::mean(x, {-1}, true));
    y = ops::mul(c, ops::rsqrt(ops::add(ops::mean(ops::square(c), {-1}, true), eps)));
  }
  if (w.defined()) y = ops::mul(y, w);
  if (b.defined()) y = ops::add(y, b);
  return y;
}

void expect_near_all(const Tensor& got, const Tensor& want, double tol, const std::string& what);

TEST(NnNorms, FusedMatchesTheFormulaWithGradients) {
  struct Case {
    std::vector<std::int64_t> shape;
    bool weight, bias;
  };
  // Rows over the CPU's 32-row and CUDA's 64-row gradient chunks, a row of one element, no
  // affine parameters.
  const Case cases[] = {{{3, 5, 7}, true, true},
                        {{70, 9}, true, true},
                        {{130, 33}, true, false},
                        {{4, 1}, true, true},
                        {{6, 10}, false, false}};
  std::uint64_t seed = 80;
  for (const bool rms : {true, false}) {
    for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32, ScalarType::BFloat16}) {
      const double tol = dt == ScalarType::Float64   ? 1e-12
                         : dt == ScalarType::Float32 ? 2e-5
                                                     : 3e-2;
      for (const Case& c : cases) {
        if (rms && c.bias) continue;  // RMSNorm has no bias
        const std::int64_t n = c.shape.back();
        auto leaf = [&](std::vector<std::int64_t> shape) {
          return ag::requires_grad_(ag::detach(leaf64(std::move(shape), seed++)).to(dt, true));
        };
        const Tensor x = leaf(c.shape);
        const Tensor w = c.weight ? leaf({n}) : Tensor();
        const Tensor b = c.bias ? leaf({n}) : Tensor();
        auto copy64 = [](const Tensor& t) {
          return t.defined() ? ag::requires_grad_(ag::detach(t).to(ScalarType::Float64, true))
                             : Tensor();
        };
        const Tensor x64 = copy64(x), w64 = copy64(w), b64 = copy64(b);
        const double eps = 1e-5;
        const Tensor y = rms ? ops::rms_norm(x, w, eps) : ops::layer_norm(x, w, b, eps);
        const Tensor ref = reference_norm(rms, x64, w64, b64, eps);
        const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") +
                                 std::string(tb::core::scalar_type_name(dt)) + " rows of " +
                                 std::to_string(n);
        EXPECT_EQ(y.dtype(), dt);
        expect_near_all(y, ref, tol, what + " y");
        const Tensor gy = leaf64(c.shape, seed++);
        ag::backward(ops::sum(ops::mul(y.to(ScalarType::Float64), gy)));
        ag::backward(ops::sum(ops::mul(ref, gy)));
        // Gradients sum over a row (dx) or over every row (dweight, dbias).
        expect_near_all(ag::grad(x), ag::grad(x64), tol * 4, what + " dx");
        if (c.weight) expect_near_all(ag::grad(w), ag::grad(w64), tol * 8, what + " dweight");
        if (c.bias) expect_near_all(ag::grad(b), ag::grad(b64), tol * 8, what + " dbias");
      }
    }
  }
}

TEST(NnNorms, GradcheckAndErrors) {
  const Tensor x = leaf64({4, 6}, 90);
  const Tensor w = leaf64({6}, 91);
  const Tensor b = leaf64({6}, 92);
  const auto r1 =
      ag::gradcheck([](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-6); }, {x, w});
  EXPECT_TRUE(r1.ok) << r1.message;
  const auto r2 = ag::gradcheck(
      [](const auto& in) { return ops::layer_norm(in[0], in[1], in[2], 1e-6); }, {x, w, b});
  EXPECT_TRUE(r2.ok) << r2.message;
  EXPECT_EQ(error_of([&] { ops::rms_norm(x, ops::ones({5}, ScalarType::Float64), 1e-6); }),
            "[rms_norm] weight must have shape [6] (the input's last dimension), got [5]");
  EXPECT_EQ(error_of([&] { ops::layer_norm(x, Tensor(), Tensor(), -1.0); }),
            "[layer_norm] eps must be finite and >= 0, got -1");
  EXPECT_EQ(error_of([&] {
              ops::layer_norm(ops::zeros({2, 3}, ScalarType::Int64), w, b, 1e-5);
            }),
            "[layer_norm] expects a floating-point input, got int64");
  // A strided input is normalised as its values (a transposed view).
  const Tensor xt = leaf64({6, 4}, 93).t();
  expect_near_all(ops::layer_norm(xt, w, b, 1e-5), reference_norm(false, xt, w, b, 1e-5), 1e-12,
                  "strided layer_norm");
}

// softmax(q·kᵀ·scale + causal mask)·v in float64 from ordinary ops, grouped-query heads
// expanded: the reference the fused kernels are checked against.
Tensor reference_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                           double scale) {
  const Tensor q = q_in.to(ScalarType::Float64);
  Tensor k = k_in.to(ScalarType::Float64);
  Tensor v = v_in.to(ScalarType::Float64);
  const std::int64_t b = q.size(0), h = q.size(1), hkv = k.size(1), s = k.size(2);
  if (hkv != h) {
    k = k.unsqueeze(2).expand({b, hkv, h / hkv, s, k.size(3)}).reshape({b, h, s, k.size(3)});
    v = v.unsqueeze(2).expand({b, hkv, h / hkv, s, v.size(3)}).reshape({b, h, s, v.size(3)});
  }
  Tensor scores = ops::mul(ops::matmul(q, k.transpose(-2, -1)), scale);
  if (causal) {
    const Tensor qi = ops::arange(q.size(2));
    const Tensor kj = ops::arange(s);
    scores = ops::masked_fill(scores, ops::gt(kj.unsqueeze(0), qi.unsqueeze(1)),
                              -std::numeric_limits<double>::infinity());
  }
  return ops::matmul(ops::softmax(scores, -1), v);
}

void expect_near_all(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(tb::core::DimVector(got.sizes()), tb::core::DimVector(want.sizes())) << what;
  const auto g = got.to(ScalarType::Float64).contiguous().to_vector<double>();
  const auto w = want.to(ScalarType::Float64).contiguous().to_vector<double>();
  for (std::size_t i = 0; i < w.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1.0 + std::abs(w[i]))) << what << " element " << i;
}

TEST(NnAttention, FusedMatchesTheFormulaWithGradients) {
  struct Case {
    std::int64_t b, h, hkv, t, s, d, e;
    bool causal;
  };
  // Grouped-query heads, T != S both ways, causal and not, head sizes not multiples of 8.
  const Case cases[] = {{2, 4, 2, 5, 5, 8, 6, true},
                        {1, 2, 2, 3, 7, 5, 5, false},
                        {1, 3, 1, 7, 3, 4, 9, true},
                        {2, 2, 1, 6, 6, 16, 16, false},
                        {1, 1, 1, 1, 1, 3, 2, true},
                        // Several query tiles of the CPU kernel (64 rows), causal and not.
                        {1, 2, 1, 150, 150, 8, 8, true},
                        {1, 2, 2, 130, 70, 4, 4, false},
                        {1, 1, 1, 70, 140, 4, 4, true}};
  std::uint64_t seed = 40;
  for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32, ScalarType::BFloat16}) {
    const double tol = dt == ScalarType::Float64 ? 1e-12 : dt == ScalarType::Float32 ? 2e-5 : 3e-2;
    for (const Case& c : cases) {
      const std::string what = std::string(tb::core::scalar_type_name(dt)) +
                               " T=" + std::to_string(c.t) + " S=" + std::to_string(c.s) +
                               (c.causal ? " causal" : "");
      // Leaves in dtype dt and float64 copies of them; q arrives as the transformer makes it:
      // [B, T, H, D] memory seen as [B, H, T, D].
      auto leaf = [&](std::vector<std::int64_t> shape, ScalarType type) {
        return ag::requires_grad_(ag::detach(leaf64(std::move(shape), seed++)).to(type, true));
      };
      const Tensor ql = leaf({c.b, c.t, c.h, c.d}, dt);
      const Tensor k = leaf({c.b, c.hkv, c.s, c.d}, dt);
      const Tensor v = leaf({c.b, c.hkv, c.s, c.e}, dt);
      auto copy64 = [](const Tensor& t) {
        return ag::requires_grad_(ag::detach(t).to(ScalarType::Float64, true));
      };
      const Tensor ql64 = copy64(ql);
      const Tensor k64 = copy64(k);
      const Tensor v64 = copy64(v);
      const Tensor q = ql.transpose(1, 2);
      const Tensor w = leaf64({c.b, c.h, c.t, c.e}, seed++);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      const Tensor out = ops::scaled_dot_product_attention(q, k, v, c.causal);
      EXPECT_EQ(out.dtype(), dt);
      const Tensor ref = reference_attention(ql64.transpose(1, 2), k64, v64, c.causal, scale);
      expect_near_all(out, ref, tol, "out " + what);
      ag::backward(ops::sum(ops::mul(out.to(ScalarType::Float64), w)));
      ag::backward(ops::sum(ops::mul(ref, w)));
      expect_near_all(ag::grad(ql), ag::grad(ql64), tol * 4, "dq " + what);
      expect_near_all(ag::grad(k), ag::grad(k64), tol * 4, "dk " + what);
      expect_near_all(ag::grad(v), ag::grad(v64), tol * 4, "dv " + what);
    }
  }
}

TEST(NnAttention, GradcheckOfTheFusedKernels) {
  for (const bool causal : {true, false}) {
    const Tensor q = leaf64({1, 4, 3, 4}, 60);
    const Tensor k = leaf64({1, 2, 5, 4}, 61);
    const Tensor v = leaf64({1, 2, 5, 3}, 62);
    const auto r = ag::gradcheck(
        [&](const auto& in) {
          return ops::scaled_dot_product_attention(in[0], in[1], in[2], causal, 0.7);
        },
        {q, k, v});
    EXPECT_TRUE(r.ok) << (causal ? "causal: " : "full: ") << r.message;
  }
}

TEST(NnAttention, NoKeysGiveZerosAndErrorsNameTheArgument) {
  // No keys at all: softmax over nothing, an empty sum (PyTorch's math path gives zeros).
  const Tensor out = ops::scaled_dot_product_attention(
      ops::ones({1, 2, 3, 4}), ops::ones({1, 2, 0, 4}), ops::ones({1, 2, 0, 5}), false);
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(30, 0.0f));
  const Tensor q = ops::zeros({1, 4, 3, 8});
  const Tensor k = ops::zeros({1, 3, 3, 8});
  EXPECT_EQ(error_of([&] { ops::scaled_dot_product_attention(q, k, k); }),
            "[scaled_dot_product_attention] the query heads (4) must be a multiple of the "
            "key/value heads (3)");
  EXPECT_EQ(
      error_of([&] {
        ops::scaled_dot_product_attention(q, ops::zeros({1, 4, 3, 6}), ops::zeros({1, 4, 3, 8}));
      }),
      "[scaled_dot_product_attention] query and key must have one head size, got 8 and 6");
  EXPECT_EQ(error_of([&] {
              ops::scaled_dot_product_attention(q, q, ops::zeros({1, 4, 2, 8}));
            }),
            "[scaled_dot_product_attention] key and value must have the same heads and length, "
            "got shapes [1, 4, 3, 8] and [1, 4, 2, 8]");
  EXPECT_EQ(error_of([&] {
              ops::scaled_dot_product_attention(ops::zeros({4, 3, 8}), q, q);
            }),
            "[scaled_dot_product_attention] query, key and value must be 4-D [batch, heads, "
            "length, head size], got shapes [4, 3, 8], [1, 4, 3, 8] and [1, 4, 3, 8]");
  // Mixed floating dtypes promote (as matmul does).
  EXPECT_EQ(ops::scaled_dot_product_attention(q, q, q.to(ScalarType::Float64)).dtype(),
            ScalarType::Float64);
  const Tensor qi = ops::zeros({1, 4, 3, 8}, ScalarType::Int64);
  EXPECT_EQ(error_of([&] { ops::scaled_dot_product_attention(q, qi, q); }),
            "[scaled_dot_product_attention] expects floating-point tensors, got key of dtype "
            "int64");
}

TEST(NnAttention, OneRowPerHeadWithAnyStride) {
  // q of length 1 whose position stride (1) is below its head size: a legal layout.
  const Tensor q = leaf64({2, 3, 5, 1}, 75).transpose(2, 3);  // [2, 3, 1, 5], stride(2) = 1
  const Tensor k = leaf64({2, 3, 4, 5}, 76);
  const Tensor v = leaf64({2, 3, 4, 2}, 77);
  for (const bool causal : {true, false}) {
    expect_near_all(ops::scaled_dot_product_attention(q, k, v, causal),
                    reference_attention(q, k, v, causal, 1.0 / std::sqrt(5.0)), 1e-12,
                    causal ? "one row, causal" : "one row");
  }
}

TEST(NnAttention, LargeHeadsUseTheComposedPathWithTheSameResult) {
  // Head size 300 > 128: composed from matmul/softmax, same formula.
  const Tensor q = leaf64({1, 2, 4, 300}, 70, 0.1);
  const Tensor k = leaf64({1, 1, 4, 300}, 71, 0.1);
  const Tensor v = leaf64({1, 1, 4, 3}, 72);
  expect_near_all(ops::scaled_dot_product_attention(q, k, v),
                  reference_attention(q, k, v, true, 1.0 / std::sqrt(300.0)), 1e-12, "composed");
}

TEST(NnDropout, DrawsFromItsGeneratorAndScales) {
  auto g1 = seeded(9);
  nn::Dropout d(0.25, g1.get());
  const Tensor x = ops::ones({10000});
  const auto y = d.forward(x).to_vector<float>();
  std::size_t zeros = 0;
  for (float v : y) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 10000.0, 0.25, 0.02);
  g1->manual_seed(9);
  EXPECT_EQ(d.forward(x).to_vector<float>(), y);  // same seed, same mask
  d.eval();
  EXPECT_TRUE(d.forward(x).is_same(x));
  EXPECT_NE(error_of([] { nn::Dropout bad(1.5); }).find("p must be in [0, 1], got 1.5"),
            std::string::npos);
}

TEST(NnModels, ConfigJsonRoundTripAndErrors) {
  nn::QwenTinyConfig q;
  q.d_model = 64;
  q.n_kv_heads = 2;
  const nn::ModelConfig cfg = q;
  const auto back = nn::model_config_from_json(nn::to_json(cfg));
  EXPECT_EQ(nn::to_json(back), nn::to_json(cfg));
  EXPECT_EQ(
      error_of([] {
        nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"qwen-tiny","d_model":130})"));
      }),
      "qwen-tiny: d_model 130 is not divisible by n_heads 4");
  EXPECT_NE(error_of([] {
              nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"mlp","hiden":[3]})"));
            }).find("mlp: unknown field 'hiden'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"mlp","hiden":[3]})"));
            }).find("); did you mean 'hidden'?"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"mpl"})"));
            }).find("(choose mlp, qwen-tiny, cnn or gpt); did you mean 'mlp'?"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"mlp","input":"x"})"));
            }),
            "mlp: field 'input' has the wrong type (string): \"x\"");
  EXPECT_EQ(
      error_of([] { nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"vit"})")); }),
      "model config: unknown kind 'vit' (choose mlp, qwen-tiny, cnn or gpt)");
  EXPECT_EQ(
      error_of([] {
        nn::model_config_from_json(nlohmann::json::parse(R"({"kind":"mlp","activation":"swish"})"));
      }),
      "mlp: activation 'swish' is not one of relu, gelu, silu, tanh");
}

// qwen-tiny learns a small repetitive text under the plain update p -= lr * g.
TEST(NnModels, QwenTinyReducesItsLossOnASmallText) {
  nn::QwenTinyConfig cfg;
  cfg.d_model = 32;
  cfg.n_layers = 2;
  cfg.n_heads = 2;
  cfg.context_length = 16;
  auto g = seeded(0);
  nn::QwenTiny m(cfg, g.get());
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  std::vector<std::int64_t> in, tg;
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t < 16; ++t) {
      in.push_back(
          static_cast<unsigned char>(text[static_cast<std::size_t>(b * 5 + t) % text.size()]));
      tg.push_back(
          static_cast<unsigned char>(text[static_cast<std::size_t>(b * 5 + t + 1) % text.size()]));
    }
  }
  const Tensor tokens = tb::core::from_vector(in, {4, 16});
  const Tensor target = tb::core::from_vector(tg, {4, 16});
  double first = 0;
  double last = 0;
  for (int step = 0; step < 30; ++step) {
    const Tensor loss = m.loss(m.forward(tokens), target);
    if (step == 0) first = loss.item();
    last = loss.item();
    ag::backward(loss);
    ag::NoGradGuard no_grad;
    for (auto& p : m.parameters()) {
      Tensor w = p;
      ops::add_(w, ag::grad(p), -0.5);
    }
    m.zero_grad();
  }
  EXPECT_NEAR(first, std::log(256.0), 0.1);  // near-uniform at init
  EXPECT_LT(last, 0.6 * first) << "loss " << first << " -> " << last;
}

}  // namespace
