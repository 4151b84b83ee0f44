// The end-to-end checks: models learn real data through the DataLoader under the plain
// update p -= lr * g (optimizers come with their own issue). Short runs: a few seconds in all.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "engine/autograd/autograd.h"
#include "engine/data/dataloader.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/synthetic.h"
#include "engine/data/text_dataset.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace {

namespace ag = tb::autograd;
namespace data = tb::data;
namespace nn = tb::nn;
using tb::core::Tensor;

void plain_update(nn::Module& m, double lr) {
  ag::NoGradGuard no_grad;
  for (const auto& p : m.parameters()) {
    Tensor w = p;
    tb::ops::add_(w, ag::grad(p), -lr);
  }
  m.zero_grad();
}

// Mean loss over `steps` batches, training as it goes.
double train_steps(nn::Model& m, data::DataLoader& loader, int steps, double lr) {
  double sum = 0;
  for (int i = 0; i < steps; ++i) {
    auto b = loader.next();
    if (!b) b = loader.next();  // epoch boundary
    const Tensor loss = m.loss(m.forward(b->input), b->target);
    sum += loss.item();
    ag::backward(loss);
    plain_update(m, lr);
  }
  return sum / steps;
}

TEST(TrainSmoke, MlpLearnsFashionMnist) {
  auto ds = std::make_shared<data::FashionMnist>();
  data::DataLoaderOptions lo;
  lo.batch_size = 128;
  lo.shuffle = true;
  lo.num_workers = 2;
  lo.seed = 1;
  data::DataLoader loader(ds, lo);
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  nn::Mlp model(nn::MlpConfig{}, gen.get());  // 784-256-256-10
  const double first = train_steps(model, loader, 10, 0.1);
  train_steps(model, loader, 60, 0.1);
  const double later = train_steps(model, loader, 10, 0.1);
  // Chance is ln 10 = 2.30; 80 steps of plain SGD reach well below 1.
  EXPECT_GT(first, 1.0);
  EXPECT_LT(later, 0.8) << "loss " << first << " -> " << later;
}

TEST(TrainSmoke, QwenTinyLearnsText) {
  data::TextDatasetOptions to;
  to.context_length = 32;
  auto ds = std::make_shared<data::TextDataset>(data::make_synthetic_text(20000, 3),
                                                data::TextSplit::kTrain, to);
  data::DataLoaderOptions lo;
  lo.batch_size = 8;
  lo.shuffle = true;
  lo.seed = 2;
  data::DataLoader loader(ds, lo);
  nn::QwenTinyConfig cfg;
  cfg.d_model = 64;
  cfg.n_layers = 2;
  cfg.context_length = 32;
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  nn::QwenTiny model(cfg, gen.get());
  const double first = train_steps(model, loader, 1, 0.5);  // the untrained model
  train_steps(model, loader, 44, 0.5);
  const double later = train_steps(model, loader, 5, 0.5);
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // near-uniform over 256 bytes at init
  // The synthetic text draws 10 symbols uniformly: the best possible loss is ln 10 = 2.30.
  EXPECT_LT(later, 2.6) << "loss " << first << " -> " << later;
}

}  // namespace
