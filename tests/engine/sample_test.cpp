// Sampling from language models (engine/train/sample.h, api::sample_run): greedy equals the
// argmax of the model's own logits, top_k = 1 is greedy, a seed gives the same draws, the context
// window slides, and errors say what is wrong; a stored run is continued from its checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>

#include "engine/api/run_api.h"
#include "engine/api/workbench_api.h"
#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/kv_cache.h"
#include "engine/nn/models.h"
#include "engine/rng/cpu_generator.h"
#include "engine/train/sample.h"
#include "tests/engine/test_util.h"
#include "tests/engine/tiny_models.h"

namespace {

using namespace tb;

using test::tiny_gpt;
using test::tiny_qwen;

core::Tensor tokens_of(const std::vector<std::int64_t>& ids) {
  core::Tensor t =
      core::Tensor::empty({1, static_cast<std::int64_t>(ids.size())}, core::ScalarType::Int64);
  std::copy(ids.begin(), ids.end(), t.data_ptr<std::int64_t>());
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Sample, GreedyIsTheArgmaxOfTheModelsLogits) {
  auto model = tiny_qwen(8);
  train::SampleOptions o;
  o.tokens = 12;  // more than the context: the window slides
  o.temperature = 0.0;
  const std::vector<std::int64_t> prompt = {10, 72, 101};
  const auto out = train::sample_tokens(*model, prompt, o);
  ASSERT_EQ(out.size(), prompt.size() + 12);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), out.begin()));
  // Each new token: the argmax of the last position over the newest 8 tokens.
  autograd::NoGradGuard no_grad;
  model->eval();
  for (std::size_t i = prompt.size(); i < out.size(); ++i) {
    const auto w = static_cast<std::int64_t>(std::min<std::size_t>(i, 8));
    core::Tensor in = core::Tensor::empty({1, w}, core::ScalarType::Int64);
    std::copy(out.begin() + static_cast<long>(i) - w, out.begin() + static_cast<long>(i),
              in.data_ptr<std::int64_t>());
    const core::Tensor logits = model->forward(in).select(1, w - 1).contiguous();
    const float* z = logits.data_ptr<float>();
    EXPECT_EQ(out[i], std::max_element(z, z + 256) - z) << i;
  }
  // top_k = 1 at any temperature is greedy too.
  o.temperature = 1.5;
  o.top_k = 1;
  EXPECT_EQ(train::sample_tokens(*model, prompt, o), out);
}

TEST(Sample, ASeedGivesTheSameDrawsAndTheModelKeepsItsMode) {
  auto model = tiny_qwen();
  model->train();
  train::SampleOptions o;
  o.tokens = 20;
  o.seed = 9;
  const auto a = train::sample_tokens(*model, {65}, o);
  EXPECT_TRUE(model->is_training());
  EXPECT_EQ(train::sample_tokens(*model, {65}, o), a);
  o.seed = 10;
  EXPECT_NE(train::sample_tokens(*model, {65}, o), a);  // 20 draws over 256 bytes
  o.top_k = 3;                                          // every draw among the three most likely
  EXPECT_EQ(train::sample_tokens(*model, {65}, o).size(), 21u);
}

// With a key/value cache, the prompt's forward and then one token at a time give the logits of
// running the model over the whole sequence, for rotary (qwen-tiny, grouped-query) and learned
// (gpt) positions; sampling with and without the cache draws the same tokens, also once the
// window slides.
TEST(Sample, AKeyValueCacheGivesTheWholeSequencesLogits) {
  for (const auto& model : {tiny_qwen(12, /*grouped=*/true), tiny_gpt(12)}) {
    SCOPED_TRACE(model->config().kind);
    autograd::NoGradGuard no_grad;
    model->eval();
    const std::int64_t vocab = train::language_model_shape(*model).first;
    std::vector<std::int64_t> seq = {3, 14, 15, 92, 65};
    nn::KvCache cache(12);
    for (std::size_t step = 0; seq.size() <= 12; ++step) {
      const std::int64_t past = cache.length();
      const std::vector<std::int64_t> fresh(seq.begin() + past, seq.end());
      core::Tensor cached;
      {
        nn::ScopedKvCache scope(cache);
        cached = model->forward(tokens_of(fresh));
      }
      cache.commit(static_cast<std::int64_t>(fresh.size()));
      ASSERT_EQ(cached.size(1), static_cast<std::int64_t>(fresh.size()));
      const core::Tensor whole = model->forward(tokens_of(seq));
      const core::Tensor a = cached.select(1, cached.size(1) - 1).contiguous();
      const core::Tensor b = whole.select(1, whole.size(1) - 1).contiguous();
      double worst = 0;
      for (std::int64_t v = 0; v < vocab; ++v)
        worst = std::max(
            worst, std::abs(static_cast<double>(a.data_ptr<float>()[v]) - b.data_ptr<float>()[v]));
      EXPECT_LT(worst, 1e-5) << "step " << step;
      seq.push_back((seq.back() * 31 + 7) % vocab);
    }
    EXPECT_EQ(cache.layers(), 2u);
    EXPECT_EQ(cache.length(), 12);

    // The cache refuses what it cannot continue, naming the layer or the capacity.
    EXPECT_NE(error_of([&] {
                nn::ScopedKvCache scope(cache);
                (void)model->forward(tokens_of({1}));
              }).find("exceed"),
              std::string::npos);
    cache.clear();
    {
      nn::ScopedKvCache scope(cache);
      (void)model->forward(tokens_of({1, 2}));
    }
    cache.commit(2);
    EXPECT_NE(error_of([&] {
                nn::ScopedKvCache scope(cache);
                (void)model->forward(tokens_of({3, 4}));
              }).find("a key/value cache takes one position at a time, got 2"),
              std::string::npos);

    train::SampleOptions o;
    o.tokens = 20;  // 3 + 20 > 12: the window slides after the ninth new token
    for (const double temperature : {0.0, 1.0}) {
      o.temperature = temperature;
      o.seed = 11;
      o.kv_cache = true;
      const auto with = train::sample_tokens(*model, {5, 6, 7}, o);
      o.kv_cache = false;
      EXPECT_EQ(train::sample_tokens(*model, {5, 6, 7}, o), with) << "temperature " << temperature;
    }
  }
}

// vocab_limit: the draws stay below it (an untrained byte model draws from all 256 otherwise).
TEST(Sample, DrawsStayBelowTheVocabLimit) {
  auto model = tiny_qwen();
  train::SampleOptions o;
  o.tokens = 100;
  o.seed = 2;
  const auto free = train::sample_tokens(*model, {65}, o);
  EXPECT_TRUE(std::any_of(free.begin(), free.end(), [](std::int64_t t) { return t >= 40; }));
  o.vocab_limit = 40;
  for (const double temperature : {0.0, 1.0}) {
    o.temperature = temperature;
    const auto limited = train::sample_tokens(*model, {65}, o);  // a prompt beyond it is fine
    EXPECT_TRUE(std::all_of(limited.begin() + 1, limited.end(),
                            [](std::int64_t t) { return t >= 0 && t < 40; }));
  }
  o.vocab_limit = -1;
  EXPECT_NE(error_of([&] { train::sample_tokens(*model, {1}, o); }).find("vocab_limit"),
            std::string::npos);
}

// A temperature so small that the scaled logits overflow is greedy (it drew the last id: inf - inf
// made every probability NaN), and a model whose logits are NaN is an error, not a stream of the
// last id.
TEST(Sample, ATinyTemperatureIsGreedyAndNanLogitsAreRefused) {
  auto model = tiny_qwen();
  train::SampleOptions o;
  o.tokens = 10;
  o.temperature = 0.0;
  const auto greedy = train::sample_tokens(*model, {65}, o);
  for (const double t : {1e-320, 1e-300, 1e-30}) {
    o.temperature = t;
    o.seed = 3;
    EXPECT_EQ(train::sample_tokens(*model, {65}, o), greedy) << t;
  }
  for (auto& param : model->parameters()) {
    float* w = param.data_ptr<float>();
    std::fill(w, w + param.numel(), std::nanf(""));
  }
  for (const double t : {0.0, 1.0}) {
    o.temperature = t;
    const std::string e = error_of([&] { train::sample_tokens(*model, {65}, o); });
    EXPECT_NE(e.find("[sample] the model's logit for token 0 is NaN at generated token 1: its "
                     "weights are not finite"),
              std::string::npos)
        << e;
  }
}

TEST(Sample, ErrorsSayWhatIsWrong) {
  auto model = tiny_qwen();
  train::SampleOptions o;
  EXPECT_NE(error_of([&] { train::sample_tokens(*model, {}, o); }).find("the prompt is empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              train::sample_tokens(*model, {256}, o);
            }).find("prompt token 256 is outside the vocabulary 0..255"),
            std::string::npos);
  o.temperature = -1;
  EXPECT_NE(error_of([&] { train::sample_tokens(*model, {1}, o); }).find("temperature"),
            std::string::npos);
  rng::CpuGenerator gen(1);
  auto mlp = nn::build_model(nn::MlpConfig{}, &gen);
  EXPECT_NE(error_of([&] {
              train::sample_tokens(*mlp, {1}, train::SampleOptions{});
            }).find("a mlp model does not generate tokens"),
            std::string::npos);
}

// A stored byte-level run is continued from its checkpoint: the prompt kept, as many new bytes
// as asked, the same text for the same seed; a token prompt for a byte model is refused.
TEST(Sample, AStoredRunContinuesFromItsCheckpoint) {
  const test::TempDir dir("tb_sample_run");
  const auto config = dir.path() / "lm.toml";
  std::ofstream(config) << test::kTinyLm;
  const auto db = (dir.path() / "runs.sqlite").string();
  const auto run = api::run_training(api::RunRequest{config.string(), {}, db, std::nullopt, ""},
                                     nullptr, nullptr);
  ASSERT_EQ(run.status, "finished") << run.message;
  // eval.samples: two texts at each evaluation (steps 10 and 20), stored as the run's events,
  // each its prompt (8 bytes of the eval split) and 12 new bytes.
  int samples = 0;
  for (const auto& e : api::StoreReader(db).events(run.run_id)) {
    const auto at = e.find("sample at step ");
    if (at == std::string::npos) continue;
    ++samples;
    EXPECT_TRUE(e.find("step 10: ") != std::string::npos ||
                e.find("step 20: ") != std::string::npos)
        << e;
    // Newlines and tabs are written as \n and \t, one byte each.
    std::string text = e.substr(e.find(": ", at) + 2);
    std::size_t escapes = 0;
    for (std::size_t k = 0; k + 1 < text.size(); ++k)
      if (text[k] == '\\' && (text[k + 1] == 'n' || text[k + 1] == 't')) ++escapes, ++k;
    EXPECT_EQ(text.size() - escapes, 20u) << e;
  }
  EXPECT_EQ(samples, 4);
  api::SampleRequest req;
  req.db_path = db;
  req.run_id = run.run_id;
  req.prompt = "abc";
  req.tokens = 10;
  req.seed = 5;
  const auto a = api::sample_run(req);
  EXPECT_TRUE(a.has_text);
  EXPECT_EQ(a.tokenizer, "bytes");
  EXPECT_EQ(a.text.size(), 13u);
  EXPECT_EQ(a.text.substr(0, 3), "abc");
  EXPECT_NE(a.from.find("checkpoint of step 20"), std::string::npos) << a.from;
  EXPECT_EQ(api::sample_run(req).text, a.text);
  // Several samples: the model loaded once, sample i drawn from seed + i.
  req.num_samples = 3;
  const auto three = api::sample_run(req);
  ASSERT_EQ(three.texts.size(), 3u);
  EXPECT_EQ(three.texts[0], a.text);
  EXPECT_EQ(three.text, a.text);
  req.num_samples = 1;
  req.seed = 7;
  EXPECT_EQ(api::sample_run(req).text, three.texts[2]);
  req.seed = 5;
  req.prompt.clear();
  req.prompt_tokens = {1, 2};
  EXPECT_NE(error_of([&] { api::sample_run(req); }).find("give the prompt as text"),
            std::string::npos);
  req.run_id = 99;
  EXPECT_NE(
      error_of([&] { api::sample_run(req); }).find(": no run 99 (trainbench-cli runs lists them)"),
      std::string::npos);
}

// A run on a token file of 256 ids is ids, not bytes (they were taken for bytes: a token prompt
// was refused, a text one encoded as bytes, and its eval samples printed as text).
TEST(Sample, ARunOnATokenFileOf256IdsSamplesIds) {
  const test::TempDir dir("tb_sample_tokens");
  const auto file = dir.path() / "train.bin";
  {
    std::vector<std::int32_t> header(256, 0);
    header[0] = 20240520;  // llm.c's GPT-2 token file: magic, version, count
    header[1] = 1;
    header[2] = 4000;
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (int i = 0; i < 4000; ++i) {
      const auto t = static_cast<std::uint16_t>((i * 7) % 31);
      out.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  const auto config = dir.path() / "tokens.toml";
  std::ofstream(config) << "[run]\nsteps = 4\n[model]\nkind = \"gpt\"\nvocab = 256\n"
                           "context_length = 8\nn_layers = 1\nn_heads = 2\nd_model = 16\n"
                           "[data]\nkind = \"tokens\"\npath = \""
                        << file.string()
                        << "\"\ncontext_length = 8\nvocab = 256\nbatch_size = 4\nworkers = 0\n"
                           "[eval]\ninterval = 4\nbatches = 1\nsamples = 1\nsample_tokens = 3\n";
  const auto db = (dir.path() / "runs.sqlite").string();
  const auto run = api::run_training(api::RunRequest{config.string(), {}, db, std::nullopt, ""},
                                     nullptr, nullptr);
  ASSERT_EQ(run.status, "finished") << run.message;
  bool sampled = false;
  for (const auto& e : api::StoreReader(db).events(run.run_id)) {
    const auto at = e.find("sample at step 4: ");
    if (at == std::string::npos) continue;
    sampled = true;
    EXPECT_TRUE(std::regex_match(e.substr(at + 18), std::regex("[0-9]+(,[0-9]+)*"))) << e;
  }
  EXPECT_TRUE(sampled);
  api::SampleRequest req;
  req.db_path = db;
  req.run_id = run.run_id;
  req.prompt_tokens = {5, 6};
  req.tokens = 3;
  const auto out = api::sample_run(req);
  EXPECT_FALSE(out.has_text);
  ASSERT_EQ(out.tokens.size(), 5u);
  EXPECT_EQ(out.tokens[0], 5);
  req.prompt_tokens.clear();
  req.prompt = "hello";
  EXPECT_NE(error_of([&] { api::sample_run(req); }).find("give the prompt as ids"),
            std::string::npos);
}
