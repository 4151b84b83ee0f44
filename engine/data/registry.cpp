// The data-set registry and the built-in kinds.
#include "engine/data/registry.h"

#include "engine/data/fashion_mnist.h"
#include "engine/data/synthetic.h"
#include "engine/data/text_dataset.h"

namespace tb::data {

namespace {

std::string path_of(const nlohmann::json& d) {
  return d.value("path", std::string());
}

DatasetKind fashion_mnist_kind() {
  DatasetKind k;
  k.name = "fashion-mnist";
  k.help = "Zalando's 28x28 clothing images, 10 classes (Debian's dataset-fashion-mnist)";
  k.task = core::kTaskClassification;
  k.shape = [](const nlohmann::json&) {
    core::DataShape s;
    s.kind = "fashion-mnist";
    s.task = core::kTaskClassification;
    s.features = FashionMnist::kPixels;
    s.features_note = "28x28 pixels";
    s.classes = FashionMnist::kNumClasses;
    return s;
  };
  k.make = [](const nlohmann::json& d, std::uint64_t) {
    FashionMnistOptions o;
    if (!path_of(d).empty()) o.dir = path_of(d);
    o.normalize = d.value("normalize", true);
    DataSplits s;
    s.train = std::make_shared<FashionMnist>(o);
    o.split = FashionMnistSplit::kTest;
    s.eval = std::make_shared<FashionMnist>(o);
    return s;
  };
  return k;
}

core::DataShape text_shape(const std::string& kind, const nlohmann::json& d) {
  core::DataShape s;
  s.kind = kind;
  s.task = core::kTaskLanguageModel;
  s.context_length = d.value("context_length", std::int64_t{64});
  s.vocab = 256;  // bytes
  return s;
}

DataSplits text_splits(const TextCorpus& corpus, const nlohmann::json& d) {
  TextDatasetOptions o;
  o.context_length = d.value("context_length", std::int64_t{64});
  o.val_fraction = d.value("val_fraction", 0.1);
  DataSplits s;
  s.train = std::make_shared<TextDataset>(corpus, TextSplit::kTrain, o);
  o.sampling = TextSampling::kSequential;
  s.eval = std::make_shared<TextDataset>(corpus, TextSplit::kValidation, o);
  return s;
}

DatasetKind text_kind() {
  DatasetKind k;
  k.name = "text";
  k.help = "the bytes of a text file or folder (default: Debian's fortunes), next-byte prediction";
  k.task = core::kTaskLanguageModel;
  k.shape = [](const nlohmann::json& d) { return text_shape("text", d); };
  k.make = [](const nlohmann::json& d, std::uint64_t) {
    const TextCorpus corpus =
        path_of(d).empty() ? load_text_corpus() : load_text_corpus(path_of(d));
    return text_splits(corpus, d);
  };
  return k;
}

DatasetKind synthetic_blobs_kind() {
  DatasetKind k;
  k.name = "synthetic-blobs";
  k.help = "2,560 samples of 4 Gaussian blobs in 16-D drawn from run.seed (the last 512 held out)";
  k.task = core::kTaskClassification;
  k.shape = [](const nlohmann::json&) {
    core::DataShape s;
    s.kind = "synthetic-blobs";
    s.task = core::kTaskClassification;
    s.features = 16;
    s.classes = 4;
    return s;
  };
  k.make = [](const nlohmann::json&, std::uint64_t seed) {
    GaussianBlobsOptions o;
    o.num_samples = 2560;
    o.num_classes = 4;
    o.num_features = 16;
    o.seed = seed;
    const TensorDataset all = make_gaussian_blobs(o);
    DataSplits s;
    s.train = std::make_shared<TensorDataset>(all.input().narrow(0, 0, 2048),
                                              all.target().narrow(0, 0, 2048));
    s.eval = std::make_shared<TensorDataset>(all.input().narrow(0, 2048, 512),
                                             all.target().narrow(0, 2048, 512));
    return s;
  };
  return k;
}

DatasetKind synthetic_text_kind() {
  DatasetKind k;
  k.name = "synthetic-text";
  k.help = "200,000 random bytes over a 10-letter alphabet drawn from run.seed";
  k.task = core::kTaskLanguageModel;
  k.shape = [](const nlohmann::json& d) { return text_shape("synthetic-text", d); };
  k.make = [](const nlohmann::json& d, std::uint64_t seed) {
    return text_splits(make_synthetic_text(200000, seed), d);
  };
  return k;
}

}  // namespace

core::Registry<DatasetKind>& dataset_registry() {
  static core::Registry<DatasetKind>* registry = [] {
    auto* r = new core::Registry<DatasetKind>("data");
    r->add(fashion_mnist_kind());
    r->add(text_kind());
    r->add(synthetic_blobs_kind());
    r->add(synthetic_text_kind());
    return r;
  }();
  return *registry;
}

}  // namespace tb::data
