// Tests of engine/data: the IDX reader and Fashion-MNIST (the real Debian files and damaged
// copies written here with zlib), the byte-level text dataset (the fortunes folder and small
// temporary folders), the synthetic datasets, and the DataLoader (order independent of the
// number of workers, save/restore, drop_last, worker errors, shutdown).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/augment.h"
#include "engine/data/cifar.h"
#include "engine/data/dataloader.h"
#include "engine/data/dataset.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/idx.h"
#include "engine/data/registry.h"
#include "engine/data/synthetic.h"
#include "engine/data/text_dataset.h"
#include "engine/data/token_file.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"
#include "tests/engine/test_util.h"

namespace tb::data {
namespace {

namespace fs = std::filesystem;
using core::ScalarType;
using core::Tensor;

// Returns the message of the tb::Error `fn` throws (fails the test when it does not throw).
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tb::Error";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle)                                                   \
  do {                                                                                      \
    const std::string& h_ = (haystack);                                                     \
    const std::string& n_ = (needle);                                                       \
    EXPECT_NE(h_.find(n_), std::string::npos) << "message: " << h_ << "\nexpected: " << n_; \
  } while (false)

// A fresh folder under the system temp folder, removed with everything in it at scope end.
struct TempDir : tb::test::TempDir {
  TempDir() : tb::test::TempDir("tb_data_test") {}
};

// ---------------------------------------------------------------- IDX / Fashion-MNIST fixtures

// An IDX file's bytes: big-endian magic, big-endian sizes, then the payload.
std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out;
  auto put32 = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<std::uint8_t>(v >> shift));
    }
  };
  put32(magic);
  for (std::uint32_t d : dims) {
    put32(d);
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_gz(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_plain(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// `n` images of rows x cols whose pixel p of image i is (i * 7 + p) % 256, labels i % 10.
struct SmallSet {
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;
};
SmallSet small_set(std::uint32_t n, std::uint32_t rows = 28, std::uint32_t cols = 28) {
  SmallSet s;
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t p = 0; p < rows * cols; ++p) {
      s.images.push_back(static_cast<std::uint8_t>((i * 7 + p) % 256));
    }
    s.labels.push_back(static_cast<std::uint8_t>(i % 10));
  }
  return s;
}

// Writes the train files of a small set into `dir`.
void write_small_train(const fs::path& dir, std::uint32_t n_images, std::uint32_t n_labels) {
  const SmallSet s = small_set(std::max(n_images, n_labels));
  write_gz(dir / "train-images-idx3-ubyte.gz",
           idx_bytes(0x803, {n_images, 28, 28},
                     std::vector<std::uint8_t>(
                         s.images.begin(),
                         s.images.begin() + static_cast<std::ptrdiff_t>(n_images) * 784)));
  write_gz(
      dir / "train-labels-idx1-ubyte.gz",
      idx_bytes(0x801, {n_labels},
                std::vector<std::uint8_t>(
                    s.labels.begin(), s.labels.begin() + static_cast<std::ptrdiff_t>(n_labels))));
}

FashionMnistOptions train_in(const fs::path& dir) {
  FashionMnistOptions o;
  o.dir = dir;
  o.split = FashionMnistSplit::kTrain;
  return o;
}

// ---------------------------------------------------------------- the real Fashion-MNIST files

class DataFashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    train_ = std::make_shared<const FashionMnist>(FashionMnistOptions{});
    FashionMnistOptions test_options;
    test_options.split = FashionMnistSplit::kTest;
    test_ = std::make_shared<const FashionMnist>(test_options);
  }
  static void TearDownTestSuite() {
    train_.reset();
    test_.reset();
  }
  static std::shared_ptr<const FashionMnist> train_;
  static std::shared_ptr<const FashionMnist> test_;
};
std::shared_ptr<const FashionMnist> DataFashionMnist::train_;
std::shared_ptr<const FashionMnist> DataFashionMnist::test_;

TEST_F(DataFashionMnist, CountsShapesAndFirstLabels) {
  // Counts and first labels as read with python3's gzip module from the Debian files.
  ASSERT_EQ(train_->size(), 60000);
  ASSERT_EQ(test_->size(), 10000);
  EXPECT_EQ(train_->raw_images().dtype(), ScalarType::UInt8);
  EXPECT_EQ(train_->raw_images().sizes().vec(), (std::vector<std::int64_t>{60000, 784}));
  EXPECT_EQ(train_->labels().dtype(), ScalarType::Int64);
  const auto* train_labels = train_->labels().data_ptr<std::int64_t>();
  EXPECT_EQ(train_labels[0], 9);
  EXPECT_EQ(train_labels[1], 0);
  EXPECT_EQ(train_labels[3], 3);
  EXPECT_EQ(test_->labels().data_ptr<std::int64_t>()[0], 9);
  EXPECT_EQ(test_->labels().data_ptr<std::int64_t>()[1], 2);
  EXPECT_EQ(FashionMnist::class_name(9), "Ankle boot");
  // Every class has 6000 training images.
  std::vector<int> counts(10, 0);
  for (std::int64_t i = 0; i < 60000; ++i) {
    ++counts[static_cast<std::size_t>(train_labels[i])];
  }
  EXPECT_EQ(counts, std::vector<int>(10, 6000));
}

TEST_F(DataFashionMnist, PixelsAndNormalisation) {
  // Row 14 of training image 0, columns 10..13, from python3: 0, 0, 237, 226.
  const auto* raw = train_->raw_images().data_ptr<std::uint8_t>();
  EXPECT_EQ(raw[14 * 28 + 10], 0);
  EXPECT_EQ(raw[14 * 28 + 12], 237);
  EXPECT_EQ(raw[14 * 28 + 13], 226);
  EXPECT_EQ(train_->raw_images().view({-1, 28, 28}).size(1), 28);

  const std::vector<std::int64_t> idx = {0, 1};
  const Batch b = train_->get_batch(idx, BatchContext{});
  EXPECT_EQ(b.input.dtype(), ScalarType::Float32);
  EXPECT_EQ(b.input.sizes().vec(), (std::vector<std::int64_t>{2, 784}));
  EXPECT_EQ(b.target.to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 0}));
  const float* x = b.input.data_ptr<float>();
  EXPECT_FLOAT_EQ(x[14 * 28 + 12], (237.0f / 255.0f - 0.2860f) / 0.3530f);
  EXPECT_FLOAT_EQ(x[0], (0.0f - 0.2860f) / 0.3530f);

  // The whole-split conversion matches the batch conversion; its mean/std are about 0 and 1.
  const Tensor all = test_->images();
  EXPECT_EQ(all.sizes().vec(), (std::vector<std::int64_t>{10000, 784}));
  double sum = 0.0;
  double sq = 0.0;
  const float* a = all.data_ptr<float>();
  for (std::int64_t k = 0; k < all.numel(); ++k) {
    sum += a[k];
    sq += static_cast<double>(a[k]) * a[k];
  }
  const double mean = sum / static_cast<double>(all.numel());
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(all.numel()) - mean * mean), 1.0, 0.02);
}

TEST_F(DataFashionMnist, LoaderCoversTheTestSplitOnce) {
  DataLoaderOptions o;
  o.batch_size = 1000;
  o.shuffle = true;
  o.num_workers = 2;
  o.seed = 3;
  DataLoader loader(test_, o);
  std::vector<int> counts(10, 0);
  std::int64_t seen = 0;
  while (std::optional<Batch> b = loader.next()) {
    for (std::int64_t y : b->target.to_vector<std::int64_t>()) {
      ++counts[static_cast<std::size_t>(y)];
    }
    seen += b->input.size(0);
  }
  EXPECT_EQ(seen, 10000);
  EXPECT_EQ(counts, std::vector<int>(10, 1000));
}

// Random crop and flip on a small image: every output is a shifted (and maybe mirrored) copy
// with zeros where the padding shows, the draws cover every offset and both flips, and the same
// seed gives the same image.
TEST(DataAugment, CropAndFlipAreShiftedMirroredCopies) {
  constexpr std::int64_t kH = 5, kW = 6, kC = 2;
  std::vector<std::uint8_t> src(kC * kH * kW);
  for (std::size_t k = 0; k < src.size(); ++k)
    src[k] = static_cast<std::uint8_t>(k + 1);  // no zero pixels: zeros are padding
  ImageAugment a;
  a.crop_padding = 2;
  a.horizontal_flip = true;
  std::set<std::tuple<std::int64_t, std::int64_t, bool>> seen;
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    std::vector<std::uint8_t> out(src.size());
    augment_image_u8(src.data(), out.data(), kC, kH, kW, a, seed);
    std::vector<std::uint8_t> again(src.size());
    augment_image_u8(src.data(), again.data(), kC, kH, kW, a, seed);
    ASSERT_EQ(out, again);
    // Find the (dy, dx, flip) that explains the output.
    bool found = false;
    for (std::int64_t dy = -2; dy <= 2 && !found; ++dy)
      for (std::int64_t dx = -2; dx <= 2 && !found; ++dx)
        for (bool flip : {false, true}) {
          bool match = true;
          for (std::int64_t c = 0; c < kC && match; ++c)
            for (std::int64_t y = 0; y < kH && match; ++y)
              for (std::int64_t x = 0; x < kW && match; ++x) {
                const std::int64_t sy = y + dy, sx = (flip ? kW - 1 - x : x) + dx;
                const std::uint8_t want =
                    sy >= 0 && sy < kH && sx >= 0 && sx < kW ? src[(c * kH + sy) * kW + sx] : 0;
                match = out[(c * kH + y) * kW + x] == want;
              }
          if (match) {
            seen.emplace(dy, dx, flip);
            found = true;
            break;
          }
        }
    EXPECT_TRUE(found) << "seed " << seed;
  }
  EXPECT_EQ(seen.size(), 50u);  // 5 x 5 offsets x 2 flips
  a.crop_padding = 5;
  EXPECT_CONTAINS(error_message([&] { a.check("fashion-mnist", kH, kW); }),
                  "[fashion-mnist] random_crop: padding 5 must be >= 0 and smaller than the 5x6 "
                  "image");
}

// Augmented Fashion-MNIST batches depend on the batch seed only (so on no worker), differ from
// the plain images, and keep the labels.
TEST_F(DataFashionMnist, AugmentedBatchesFollowTheBatchSeed) {
  FashionMnistOptions o;
  o.augment.crop_padding = 2;
  o.augment.horizontal_flip = true;
  FashionMnist aug(o);
  const std::vector<std::int64_t> idx = {0, 1, 2, 3};
  BatchContext ctx;
  ctx.seed = batch_seed(7, 0, 0);
  const Batch a = aug.get_batch(idx, ctx);
  ctx.worker_id = 3;
  const Batch b = aug.get_batch(idx, ctx);
  EXPECT_EQ(a.input.to_vector<float>(), b.input.to_vector<float>());
  EXPECT_EQ(a.target.to_vector<std::int64_t>(),
            train_->get_batch(idx, {}).target.to_vector<std::int64_t>());
  EXPECT_NE(a.input.to_vector<float>(), train_->get_batch(idx, {}).input.to_vector<float>());
  ctx.seed = batch_seed(7, 0, 1);
  EXPECT_NE(aug.get_batch(idx, ctx).input.to_vector<float>(), a.input.to_vector<float>());
}

// ---------------------------------------------------------------- damaged copies

TEST(DataIdx, SmallValidFilesGzipOrPlain) {
  TempDir dir;
  write_small_train(dir.path(), 3, 3);
  FashionMnistOptions o = train_in(dir.path());
  o.normalize = false;
  const FashionMnist ds(o);
  ASSERT_EQ(ds.size(), 3);
  const std::vector<std::int64_t> idx = {2, 0};
  const Batch b = ds.get_batch(idx, BatchContext{});
  EXPECT_EQ(b.target.to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 0}));
  EXPECT_FLOAT_EQ(b.input.data_ptr<float>()[5], static_cast<float>((2 * 7 + 5) % 256) / 255.0f);

  // The same bytes uncompressed under the .gz names are read too.
  const SmallSet s = small_set(3);
  write_plain(dir.path() / "train-images-idx3-ubyte.gz", idx_bytes(0x803, {3, 28, 28}, s.images));
  write_plain(dir.path() / "train-labels-idx1-ubyte.gz", idx_bytes(0x801, {3}, s.labels));
  const FashionMnist plain(o);
  EXPECT_EQ(plain.raw_images().to_vector<std::uint8_t>(), s.images);

  const Tensor t =
      read_idx_u8(dir.path() / "train-images-idx3-ubyte.gz", idx_u8_magic(3), "images");
  EXPECT_EQ(t.sizes().vec(), (std::vector<std::int64_t>{3, 28, 28}));
}

TEST(DataIdx, MissingFile) {
  TempDir dir;
  const fs::path file = dir.path() / "train-images-idx3-ubyte.gz";
  const std::string msg = error_message([&] { FashionMnist ds(train_in(dir.path())); });
  EXPECT_CONTAINS(msg, "[fashion-mnist] cannot open " + file.string());
  EXPECT_CONTAINS(msg, "No such file or directory");
}

TEST(DataIdx, BadMagic) {
  TempDir dir;
  write_small_train(dir.path(), 3, 3);
  const fs::path labels = dir.path() / "train-labels-idx1-ubyte.gz";
  write_gz(labels, idx_bytes(0x803, {3, 1, 1}, {0, 1, 2}));
  EXPECT_EQ(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
            "[fashion-mnist] " + labels.string() +
                ": bad magic 0x00000803, expected 0x00000801 (labels)");
}

TEST(DataIdx, TruncatedPayload) {
  TempDir dir;
  write_small_train(dir.path(), 3, 3);
  const fs::path images = dir.path() / "train-images-idx3-ubyte.gz";
  write_gz(images, idx_bytes(0x803, {60000, 28, 28}, std::vector<std::uint8_t>(1234, 7)));
  EXPECT_EQ(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
            "[fashion-mnist] " + images.string() +
                ": truncated: header says 60000 images of 28x28 (47040000 bytes) but only 1234 "
                "bytes follow");

  const fs::path labels = dir.path() / "train-labels-idx1-ubyte.gz";
  write_small_train(dir.path(), 3, 3);
  write_gz(labels, idx_bytes(0x801, {60000}, {1, 2}));
  EXPECT_CONTAINS(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
                  labels.string() +
                      ": truncated: header says 60000 labels (60000 bytes) but "
                      "only 2 bytes follow");

  // A header cut short.
  write_gz(labels, {0, 0, 8, 1, 0, 0});
  EXPECT_CONTAINS(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
                  labels.string() + ": truncated header");
}

TEST(DataIdx, GzipStreamCutShortAndTrailingBytes) {
  TempDir dir;
  write_small_train(dir.path(), 3, 3);
  const fs::path images = dir.path() / "train-images-idx3-ubyte.gz";
  // Cut the compressed file in half: zlib reports the stream ending early.
  std::vector<std::uint8_t> gz(fs::file_size(images) / 2);
  {
    std::ifstream in(images, std::ios::binary);
    in.read(reinterpret_cast<char*>(gz.data()), static_cast<std::streamsize>(gz.size()));
    ASSERT_TRUE(in.good());
  }
  write_plain(images, gz);
  const std::string cut = error_message([&] { FashionMnist ds(train_in(dir.path())); });
  EXPECT_CONTAINS(cut, images.string() + ": ");
  EXPECT_TRUE(cut.find("truncated") != std::string::npos ||
              cut.find("cut short") != std::string::npos)
      << cut;

  const SmallSet s = small_set(3);
  std::vector<std::uint8_t> payload = s.images;
  payload.insert(payload.end(), 10, 0);
  write_gz(images, idx_bytes(0x803, {3, 28, 28}, payload));
  EXPECT_CONTAINS(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
                  images.string() +
                      ": trailing data: header says 3 images of 28x28 (2352 bytes) "
                      "but 2362 bytes follow");
}

TEST(DataIdx, CountMismatchWrongSizeAndBadLabel) {
  TempDir dir;
  write_small_train(dir.path(), 3, 2);
  const fs::path images = dir.path() / "train-images-idx3-ubyte.gz";
  const fs::path labels = dir.path() / "train-labels-idx1-ubyte.gz";
  EXPECT_EQ(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
            "[fashion-mnist] " + images.string() + " has 3 images but " + labels.string() +
                " has 2 labels");

  write_small_train(dir.path(), 2, 2);
  write_gz(images, idx_bytes(0x803, {2, 32, 32}, std::vector<std::uint8_t>(std::size_t{2048}, 1)));
  EXPECT_EQ(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
            "[fashion-mnist] " + images.string() + ": images are 32x32, expected 28x28");

  write_small_train(dir.path(), 2, 2);
  write_gz(labels, idx_bytes(0x801, {2}, {3, 12}));
  EXPECT_EQ(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
            "[fashion-mnist] " + labels.string() + ": label 12 of sample 1 is outside 0..9");

  write_small_train(dir.path(), 0, 0);  // valid, empty files: named, not a vague empty data set
  EXPECT_EQ(error_message([&] { FashionMnist ds(train_in(dir.path())); }),
            "[fashion-mnist] " + images.string() +
                ": holds no images (its header counts 0); a data set needs at least one");

  write_small_train(dir.path(), 2, 2);
  FashionMnistOptions o = train_in(dir.path());
  o.std = 0.0f;
  EXPECT_CONTAINS(error_message([&] { FashionMnist ds(o); }), "std must be a finite value > 0");
}

TEST(DataIdx, IndexOutOfRange) {
  TempDir dir;
  write_small_train(dir.path(), 3, 3);
  const FashionMnist ds(train_in(dir.path()));
  const std::vector<std::int64_t> idx = {0, 3};
  EXPECT_THROW(ds.get_batch(idx, BatchContext{}), IndexError);
}

// ---------------------------------------------------------------- CIFAR binary batches

// `n` CIFAR records: label bytes then R, G, B planes whose pixel p of image i in channel c is
// (i * 11 + c * 5 + p) % 256; CIFAR-10 label i % 10, CIFAR-100 coarse i % 20, fine i % 100.
std::vector<std::uint8_t> cifar_records(CifarVariant v, int n, int first = 0) {
  std::vector<std::uint8_t> out;
  for (int i = first; i < first + n; ++i) {
    if (v == CifarVariant::kCifar100) {
      out.push_back(static_cast<std::uint8_t>(i % 20));
      out.push_back(static_cast<std::uint8_t>(i % 100));
    } else {
      out.push_back(static_cast<std::uint8_t>(i % 10));
    }
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p)
        out.push_back(static_cast<std::uint8_t>((i * 11 + c * 5 + p) % 256));
  }
  return out;
}

// A CIFAR-10 folder (3 records per training file, 4 in the test file) inside `root`.
fs::path write_cifar10(const fs::path& root) {
  const fs::path dir = root / "cifar-10-batches-bin";
  fs::create_directories(dir);
  for (int b = 1; b <= 5; ++b)
    write_plain(dir / ("data_batch_" + std::to_string(b) + ".bin"),
                cifar_records(CifarVariant::kCifar10, 3, (b - 1) * 3));
  write_plain(dir / "test_batch.bin", cifar_records(CifarVariant::kCifar10, 4, 100));
  return dir;
}

TEST(DataCifar, Cifar10FilesInOrderPlanesAndPerChannelNormalisation) {
  TempDir tmp;
  write_cifar10(tmp.path());
  CifarOptions o;
  o.dir = tmp.path();  // the parent folder: cifar-10-batches-bin is found inside
  const auto train = load_cifar(o);
  EXPECT_EQ(train->size(), 15);
  EXPECT_EQ(train->raw_images().sizes().vec(), (std::vector<std::int64_t>{15, 3, 32, 32}));
  EXPECT_EQ(train->labels().to_vector<std::int64_t>()[13], 3);
  // Image 13 (file 5, record 1), green plane, pixel 7: (13*11 + 5 + 7) % 256 = 155.
  EXPECT_EQ(train->raw_images().data_ptr<std::uint8_t>()[13 * 3072 + 1024 + 7], 155);
  const Batch b = train->get_batch(std::vector<std::int64_t>{13}, BatchContext{});
  EXPECT_EQ(b.input.sizes().vec(), (std::vector<std::int64_t>{1, 3072}));
  EXPECT_FLOAT_EQ(b.input.data_ptr<float>()[1024 + 7], (155.0f / 255.0f - 0.4822f) / 0.2435f);
  EXPECT_FLOAT_EQ(b.input.data_ptr<float>()[2048],
                  ((13 * 11 + 10) % 256 / 255.0f - 0.4465f) / 0.2616f);
  o.train = false;
  o.dir = tmp.path() / "cifar-10-batches-bin";
  o.image.normalize = false;
  const auto test = load_cifar(o);
  EXPECT_EQ(test->size(), 4);
  EXPECT_EQ(test->labels().to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(test->get_batch(std::vector<std::int64_t>{0}, {}).input.data_ptr<float>()[0],
                  static_cast<float>(100 * 11 % 256) / 255.0f);
}

TEST(DataCifar, Cifar100FineOrCoarseLabels) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "cifar-100-binary";
  fs::create_directories(dir);
  write_plain(dir / "train.bin", cifar_records(CifarVariant::kCifar100, 30));
  write_plain(dir / "test.bin", cifar_records(CifarVariant::kCifar100, 5));
  CifarOptions o;
  o.dir = dir;
  o.variant = CifarVariant::kCifar100;
  const auto fine = load_cifar(o);
  EXPECT_EQ(fine->classes(), 100);
  EXPECT_EQ(fine->labels().to_vector<std::int64_t>()[25], 25);
  o.fine_labels = false;
  const auto coarse = load_cifar(o);
  EXPECT_EQ(coarse->classes(), 20);
  EXPECT_EQ(coarse->labels().to_vector<std::int64_t>()[25], 5);
  EXPECT_EQ(coarse->raw_images().data_ptr<std::uint8_t>()[25 * 3072 + 2048 + 1],
            (25 * 11 + 10 + 1) % 256);
}

TEST(DataCifar, DamagedFilesNameTheFileTheOffsetAndWhatWasExpected) {
  TempDir tmp;
  const fs::path dir = write_cifar10(tmp.path());
  CifarOptions o;
  o.dir = dir;
  auto bytes = cifar_records(CifarVariant::kCifar10, 3);
  bytes.resize(bytes.size() - 100);
  write_plain(dir / "data_batch_2.bin", bytes);
  EXPECT_CONTAINS(error_message([&] { load_cifar(o); }),
                  "[cifar-10] " + (dir / "data_batch_2.bin").string() +
                      ": 9119 bytes is not a whole number of 3073-byte records (a label byte and "
                      "3072 pixel bytes): the record at offset 6146 has only 2973 bytes");
  bytes = cifar_records(CifarVariant::kCifar10, 3);
  bytes[3073] = 10;
  write_plain(dir / "data_batch_2.bin", bytes);
  EXPECT_CONTAINS(error_message([&] { load_cifar(o); }),
                  "data_batch_2.bin: offset 3073 (record 1): label 10 is outside 0..9");
  write_plain(dir / "data_batch_2.bin", {});
  EXPECT_CONTAINS(error_message([&] { load_cifar(o); }),
                  "data_batch_2.bin: empty file, expected 3073-byte records");
  fs::remove(dir / "data_batch_2.bin");
  EXPECT_CONTAINS(error_message([&] { load_cifar(o); }),
                  "[cifar-10] cannot open " + (dir / "data_batch_2.bin").string());
  o.dir = tmp.path() / "nowhere";
  EXPECT_CONTAINS(error_message([&] { load_cifar(o); }),
                  "nowhere: no CIFAR binary files here or in cifar-10-batches-bin/ (expected "
                  "data_batch_1.bin, data_batch_2.bin");
  o.dir.clear();
  EXPECT_CONTAINS(error_message([&] { load_cifar(o); }),
                  "[cifar-10] data.path: give the folder of the binary version");
  // CIFAR-100: the coarse label is checked even when the fine ones are used.
  CifarRecords r;
  auto c100 = cifar_records(CifarVariant::kCifar100, 2);
  c100[3074] = 20;
  EXPECT_CONTAINS(
      error_message([&] { parse_cifar_records(c100, CifarVariant::kCifar100, true, "t.bin", r); }),
      "[cifar-100] t.bin: offset 3074 (record 1): coarse label 20 is outside 0..19");
}

// ---------------------------------------------------------------- token files

// llm.c's .bin: 256 int32 header (magic, version, count), then the tokens.
std::vector<std::uint8_t> llmc_bytes(const std::vector<std::uint32_t>& tokens,
                                     std::int32_t magic = kLlmcMagicGpt2, std::int32_t version = 1,
                                     std::int64_t count = -1) {
  std::vector<std::uint8_t> out(1024, 0);
  const std::int32_t n =
      count == -1 ? static_cast<std::int32_t>(tokens.size()) : static_cast<std::int32_t>(count);
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 4);
  std::memcpy(out.data() + 8, &n, 4);
  const std::size_t w = magic == kLlmcMagicGpt2 ? 2 : 4;
  for (std::uint32_t t : tokens) {
    const std::size_t at = out.size();
    out.resize(at + w);
    std::memcpy(out.data() + at, &t, w);
  }
  return out;
}

std::vector<std::uint8_t> uint16_bytes(const std::vector<std::uint32_t>& tokens) {
  std::vector<std::uint8_t> out;
  for (std::uint32_t t : tokens) {
    out.push_back(static_cast<std::uint8_t>(t & 0xff));
    out.push_back(static_cast<std::uint8_t>(t >> 8));
  }
  return out;
}

std::vector<std::uint32_t> iota_tokens(std::uint32_t n, std::uint32_t first = 0) {
  std::vector<std::uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(DataTokens, LlmcAndNanoGptFilesReadAsOneStream) {
  TempDir tmp;
  write_plain(tmp.path() / "shard_000.bin", llmc_bytes(iota_tokens(10)));
  write_plain(tmp.path() / "shard_001.bin", llmc_bytes(iota_tokens(10, 10)));
  write_plain(tmp.path() / "llama.bin", llmc_bytes({70000, 128000, 5}, kLlmcMagicLlama3, 7));
  write_plain(tmp.path() / "train.bin", uint16_bytes(iota_tokens(30, 100)));
  const TokenStream shards =
      open_token_stream((tmp.path() / "shard_*.bin").string(), TokenFormat::kAuto);
  ASSERT_EQ(shards.files.size(), 2u);
  EXPECT_EQ(shards.size, 20);
  std::vector<std::int64_t> got(6);
  shards.read(7, 6, 50257, got.data());  // across the shard boundary
  EXPECT_EQ(got, (std::vector<std::int64_t>{7, 8, 9, 10, 11, 12}));
  const TokenFile llama(tmp.path() / "llama.bin", TokenFormat::kAuto);
  EXPECT_EQ(llama.layout().token_bytes, 4);
  EXPECT_EQ(llama.token(1), 128000);
  const TokenFile raw(tmp.path() / "train.bin", TokenFormat::kAuto);
  EXPECT_EQ(raw.layout().offset, 0);
  EXPECT_EQ(raw.size(), 30);
  EXPECT_EQ(raw.token(29), 129);

  // Sequential windows tile the validation split; random ones follow the batch seed only.
  TokenDatasetOptions o;
  o.context_length = 4;
  o.val_fraction = 0.5;
  o.split = TextSplit::kValidation;
  o.sampling = TextSampling::kSequential;
  const TokenDataset val(shards, o);
  EXPECT_EQ(val.begin(), 10);
  EXPECT_EQ(val.size(), 2);  // (10 - 1) / 4
  const Batch vb = val.get_batch(std::vector<std::int64_t>{0, 1}, {});
  EXPECT_EQ(vb.input.to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{10, 11, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(vb.target.to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{11, 12, 13, 14, 15, 16, 17, 18}));
  o.split = TextSplit::kTrain;
  o.sampling = TextSampling::kRandom;
  const TokenDataset train(
      open_token_stream((tmp.path() / "train.bin").string(), TokenFormat::kUint16), o);
  BatchContext ctx;
  ctx.seed = 99;
  const Batch a = train.get_batch(std::vector<std::int64_t>{0, 1, 2}, ctx);
  ctx.worker_id = 1;
  EXPECT_EQ(
      train.get_batch(std::vector<std::int64_t>{0, 1, 2}, ctx).input.to_vector<std::int64_t>(),
      a.input.to_vector<std::int64_t>());
  const auto in = a.input.to_vector<std::int64_t>();
  const auto tg = a.target.to_vector<std::int64_t>();
  for (std::size_t k = 0; k < in.size(); ++k) {
    EXPECT_EQ(tg[k], in[k] + 1);
    EXPECT_GE(in[k], 100);
    EXPECT_LT(tg[k], 115);  // the train half: tokens 100..114
  }
}

// A pattern's files are said in the run's notes (a mix of formats, how many tokens), and a
// validation file that is also a training file is a warning: the run evaluates on its own data.
TEST(DataTokens, WhatAPatternMatchedIsSaidAndAValidationFileInTrainingWarns) {
  TempDir tmp;
  write_plain(tmp.path() / "shard_000.bin", llmc_bytes(iota_tokens(100)));
  write_plain(tmp.path() / "shard_001.bin", uint16_bytes(iota_tokens(100, 10)));
  const auto kind = dataset_registry().at("tokens");
  nlohmann::json d = {{"path", (tmp.path() / "shard_*.bin").string()},
                      {"val_path", (tmp.path() / "shard_001.bin").string()},
                      {"context_length", 8},
                      {"vocab", 512}};
  const DataSplits s = kind->make(d, 0);
  ASSERT_EQ(s.notes.size(), 2u);
  EXPECT_CONTAINS(s.notes[0],
                  "shard_*.bin': 2 files (1 llm.c, 1 raw uint16), 200 tokens "
                  "(shard_000.bin, shard_001.bin)");
  EXPECT_CONTAINS(s.notes[1], "tokens data.val_path '");
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_CONTAINS(s.warnings[0],
                  "shard_001.bin is a validation file (data.val_path) and a "
                  "training file (data.path)");
}

TEST(DataTokens, BadFilesNameTheFileTheOffsetAndWhatWasExpected) {
  TempDir tmp;
  auto path = [&](const char* name) { return tmp.path() / name; };
  auto error_for = [&](const char* name, const std::vector<std::uint8_t>& bytes,
                       TokenFormat format = TokenFormat::kAuto) {
    write_plain(path(name), bytes);
    return error_message([&] { TokenFile f(path(name), format); });
  };
  auto cut = llmc_bytes(iota_tokens(8));
  cut.resize(cut.size() - 3);
  EXPECT_CONTAINS(error_for("cut.bin", cut),
                  path("cut.bin").string() +
                      ": truncated: the header says 8 tokens (1040 bytes "
                      "with the header) but the file has 1037 bytes");
  auto extra = llmc_bytes(iota_tokens(8));
  extra.push_back(1);
  EXPECT_CONTAINS(error_for("extra.bin", extra),
                  ": 1 trailing bytes after the 8 tokens the header announces (offset 1040)");
  EXPECT_CONTAINS(error_for("magic.bin", uint16_bytes(iota_tokens(600)), TokenFormat::kLlmc),
                  "magic.bin: offset 0: bad magic 65536, expected 20240520 (llm.c GPT-2 "
                  "tokens) or 20240801");
  EXPECT_CONTAINS(error_for("version.bin", llmc_bytes(iota_tokens(4), kLlmcMagicGpt2, 2)),
                  "version.bin: offset 4: version 2 of magic 20240520, expected 1");
  EXPECT_CONTAINS(error_for("count.bin", llmc_bytes({}, kLlmcMagicGpt2, 1, -5)),
                  "count.bin: offset 8: token count -5, expected > 0");
  // The GPT-2 magic (20240520, little-endian) and nothing after the version.
  EXPECT_CONTAINS(error_for("short.bin", {136, 216, 52, 1, 1, 0, 0, 0}),
                  "short.bin: 8 bytes is shorter than llm.c's 1024-byte header");
  EXPECT_CONTAINS(error_for("odd.bin", {1, 2, 3}),
                  "odd.bin: 3 bytes is not a whole number of uint16 tokens");
  EXPECT_CONTAINS(error_for("empty.bin", {}), "empty.bin: empty file");
  EXPECT_CONTAINS(
      error_message([&] { TokenFile f(path("missing.bin"), TokenFormat::kAuto); }),
      "[tokens] cannot open " + path("missing.bin").string() + ": No such file or directory");
  EXPECT_CONTAINS(error_message([&] {
                    open_token_stream((tmp.path() / "nothing_*.bin").string(), TokenFormat::kAuto);
                  }),
                  "[tokens] no file matches");
  // A token outside the vocabulary is found when its window is read.
  write_plain(path("big.bin"), llmc_bytes({1, 2, 3, 60000, 4, 5}));
  TokenDatasetOptions o;
  o.context_length = 5;
  o.sampling = TextSampling::kSequential;
  const TokenDataset ds(open_token_stream(path("big.bin").string(), TokenFormat::kAuto), o);
  EXPECT_CONTAINS(error_message([&] { ds.get_batch(std::vector<std::int64_t>{0}, {}); }),
                  path("big.bin").string() +
                      ": offset 1030 (token 3): token 60000 is outside "
                      "the vocabulary of 50257 (data.vocab)");
  o.context_length = 6;
  EXPECT_CONTAINS(error_message([&] {
                    TokenDataset d(open_token_stream(path("big.bin").string(), TokenFormat::kAuto),
                                   o);
                  }),
                  "context length 6 exceeds the 6 tokens of the train split");
}

// ---------------------------------------------------------------- text

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string corpus_text(const TextCorpus& c) {
  return std::string(c.bytes->begin(), c.bytes->end());
}

// Paths as strings (GoogleTest prints those readably).
std::vector<std::string> strings(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const fs::path& p : paths) {
    out.push_back(p.string());
  }
  return out;
}

TEST(DataText, FortunesFolder) {
  const TextCorpus corpus = load_text_corpus();  // /usr/share/games/fortunes
  ASSERT_FALSE(corpus.files.empty());
  EXPECT_EQ(corpus.source, std::string(kTextDefaultDir));
  // Sorted; no .dat index files; each "x.u8 -> x" link is read once, as "x".
  EXPECT_TRUE(
      std::is_sorted(corpus.files.begin(), corpus.files.end(),
                     [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); }));
  std::uintmax_t expected_size = 0;
  for (const fs::path& f : corpus.files) {
    EXPECT_NE(f.extension().string(), ".dat") << f.string();
    EXPECT_FALSE(fs::is_symlink(f)) << f.string();
    expected_size += fs::file_size(f);
  }
  EXPECT_EQ(static_cast<std::uintmax_t>(corpus.size()), expected_size);
  EXPECT_EQ(corpus.files.front().filename().string(), "art");
  const auto skipped = [&](const std::string& name) {
    return std::find(corpus.skipped.begin(), corpus.skipped.end(),
                     fs::path(kTextDefaultDir) / name) != corpus.skipped.end();
  };
  EXPECT_TRUE(skipped("art.dat"));
  EXPECT_TRUE(skipped("art.u8"));
  EXPECT_GT(corpus.size(), 500000);

  TextDatasetOptions o;
  o.context_length = 64;
  const TextDataset train(corpus, TextSplit::kTrain, o);
  const TextDataset val(corpus, TextSplit::kValidation, o);
  EXPECT_EQ(train.split_bytes().size() + val.split_bytes().size(),
            static_cast<std::size_t>(corpus.size()));
  EXPECT_EQ(static_cast<std::int64_t>(val.split_bytes().size()), corpus.size() / 10);
  EXPECT_EQ(train.size(), (static_cast<std::int64_t>(train.split_bytes().size()) - 1) / 64);

  BatchContext ctx;
  ctx.seed = 123;
  const std::vector<std::int64_t> idx = {0, 1, 2, 3};
  const Batch b = val.get_batch(idx, ctx);
  ASSERT_EQ(b.input.sizes().vec(), (std::vector<std::int64_t>{4, 64}));
  ASSERT_EQ(b.target.dtype(), ScalarType::Int64);
  const std::string text = corpus_text(corpus);
  const std::string val_text = text.substr(text.size() - val.split_bytes().size());
  for (int r = 0; r < 4; ++r) {
    const std::string row_in = decode_bytes(b.input.select(0, r));
    const std::string row_tg = decode_bytes(b.target.select(0, r));
    EXPECT_EQ(row_in.substr(1), row_tg.substr(0, 63));
    // The window is a piece of the validation split.
    EXPECT_NE(val_text.find(row_in + row_tg.back()), std::string::npos);
  }
}

TEST(DataText, TinyFolderRulesAndSequentialWindows) {
  TempDir dir;
  write_text(dir.path() / "b.txt", "bbbb\n");
  write_text(dir.path() / "a.txt", "aaaa\n");
  write_text(dir.path() / "sub" / "c", "cccc\n");
  write_text(dir.path() / "index.dat", "dddd\n");
  write_text(dir.path() / ".hidden", "hhhh\n");
  write_text(dir.path() / ".git" / "x", "gggg\n");
  write_text(dir.path() / "binary", std::string("ee\0ee\n", 6));
  fs::create_symlink(dir.path() / "a.txt", dir.path() / "z-link");

  const TextCorpus corpus = load_text_corpus(dir.path());
  EXPECT_EQ(corpus_text(corpus), "aaaa\nbbbb\ncccc\n");
  EXPECT_EQ(strings(corpus.files),
            strings({dir.path() / "a.txt", dir.path() / "b.txt", dir.path() / "sub" / "c"}));
  EXPECT_EQ(strings(corpus.skipped),
            strings({dir.path() / "binary", dir.path() / "index.dat", dir.path() / "z-link"}));

  TextDatasetOptions o;
  o.context_length = 4;
  o.val_fraction = 0.2;  // 15 bytes: 12 train, 3 validation
  o.sampling = TextSampling::kSequential;
  const TextDataset train(corpus, TextSplit::kTrain, o);
  EXPECT_EQ(train.size(), 2);  // (12 - 1) / 4
  const std::vector<std::int64_t> idx = {1, 0};
  const Batch b = train.get_batch(idx, BatchContext{});
  EXPECT_EQ(decode_bytes(b.input), "\nbbbaaaa");
  EXPECT_EQ(decode_bytes(b.target), "bbbbaaa\n");
  const std::vector<std::int64_t> bad = {2};
  EXPECT_THROW(train.get_batch(bad, BatchContext{}), IndexError);

  // Random windows depend on the batch seed only.
  o.sampling = TextSampling::kRandom;
  o.samples_per_epoch = 50;
  const TextDataset random(corpus, TextSplit::kTrain, o);
  EXPECT_EQ(random.size(), 50);
  BatchContext c1;
  c1.seed = 9;
  BatchContext c2 = c1;
  c2.worker_id = 3;
  const std::vector<std::int64_t> i1 = {0, 1, 2};
  const std::vector<std::int64_t> i2 = {7, 8, 9};
  EXPECT_EQ(random.get_batch(i1, c1).input.to_vector<std::int64_t>(),
            random.get_batch(i2, c2).input.to_vector<std::int64_t>());
  c2.seed = 10;
  EXPECT_NE(random.get_batch(i1, c1).input.to_vector<std::int64_t>(),
            random.get_batch(i1, c2).input.to_vector<std::int64_t>());
}

// A text folder's files are said in the run's notes; one left out for a NUL byte (UTF-16 text) is
// a warning naming it, while the fortune index files (*.dat) are left out quietly.
TEST(DataText, AFolderSaysWhatItReadAndWarnsOfBinaryFiles) {
  TempDir dir;
  write_text(dir.path() / "a.txt", std::string(400, 'a'));
  write_text(dir.path() / "b.txt", std::string(400, 'b'));
  write_text(dir.path() / "a.dat", "index");
  const auto kind = dataset_registry().at("text");
  const nlohmann::json d = {{"path", dir.path().string()}, {"context_length", 8}};
  DataSplits s = kind->make(d, 0);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_EQ(s.notes[0], "text: read 2 files (800 bytes) under " + dir.path().string() +
                            "; left out 1 *.dat index");
  EXPECT_TRUE(s.warnings.empty());
  write_text(dir.path() / "utf16.txt", std::string("h\0i\0", 4));
  s = kind->make(d, 0);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_EQ(
      s.warnings[0],
      "text: left out 1 file with a NUL byte (binary, or text in UTF-16: save it as UTF-8): " +
          (dir.path() / "utf16.txt").string());
  // One file given directly: nothing to say.
  EXPECT_TRUE(kind->make({{"path", (dir.path() / "a.txt").string()}, {"context_length", 8}}, 0)
                  .notes.empty());
}

TEST(DataText, Errors) {
  TempDir dir;
  EXPECT_EQ(error_message([&] { load_text_corpus(dir.path()); }),
            "[text dataset] no text files under " + dir.path().string() + " (the folder is empty)");
  write_text(dir.path() / "x.dat", "abc");
  write_text(dir.path() / "bin", std::string("a\0b", 3));
  EXPECT_CONTAINS(error_message([&] { load_text_corpus(dir.path()); }),
                  "[text dataset] no text files under " + dir.path().string() + " (2 skipped");
  EXPECT_CONTAINS(error_message([&] { load_text_corpus(dir.path()); }),
                  "; with a NUL byte (binary, or text in UTF-16: save it as UTF-8): " +
                      (dir.path() / "bin").string());
  EXPECT_CONTAINS(error_message([&] { load_text_corpus(dir.path() / "missing"); }),
                  "[text dataset] cannot open " + (dir.path() / "missing").string() +
                      ": No such file or directory");
  EXPECT_EQ(error_message([&] { load_text_corpus(dir.path() / "bin"); }),
            "[text dataset] " + (dir.path() / "bin").string() +
                " is not a text file (NUL byte at offset 1)");

  // 3000 bytes: the last 10% (300 bytes) are the validation split.
  TempDir dir2;
  write_text(dir2.path() / "t.txt", std::string(3000, 'x'));
  const TextCorpus corpus = load_text_corpus(dir2.path());
  TextDatasetOptions o;
  o.context_length = 512;
  EXPECT_NO_THROW(TextDataset(corpus, TextSplit::kTrain, o));
  EXPECT_EQ(error_message([&] { TextDataset(corpus, TextSplit::kValidation, o); }),
            "[text dataset] context length 512 exceeds the 300 bytes of the validation split of " +
                dir2.path().string() + " (a window needs context length + 1 bytes)");
  o.context_length = 299;
  EXPECT_NO_THROW(TextDataset(corpus, TextSplit::kValidation, o));
  o.context_length = 300;
  EXPECT_THROW(TextDataset(corpus, TextSplit::kValidation, o), ValueError);
  o.context_length = 0;
  EXPECT_CONTAINS(error_message([&] { TextDataset(corpus, TextSplit::kTrain, o); }),
                  "context length must be >= 1");
  o.context_length = 8;
  o.val_fraction = 1.0;
  EXPECT_CONTAINS(error_message([&] { TextDataset(corpus, TextSplit::kTrain, o); }),
                  "val_fraction must be in [0, 1)");
  EXPECT_CONTAINS(error_message([&] {
                    decode_bytes(core::from_vector<std::int64_t>({65, 300}));
                  }),
                  "token 300 at position 1 is not a byte");
}

// ---------------------------------------------------------------- synthetic

TEST(DataSynthetic, BlobsAreDeterministicAndBalanced) {
  GaussianBlobsOptions o;
  o.num_samples = 90;
  o.num_classes = 3;
  o.num_features = 4;
  o.cluster_std = 0.5;
  o.seed = 11;
  const TensorDataset a = make_gaussian_blobs(o);
  const TensorDataset b = make_gaussian_blobs(o);
  EXPECT_EQ(a.input().sizes().vec(), (std::vector<std::int64_t>{90, 4}));
  EXPECT_EQ(a.input().to_vector<float>(), b.input().to_vector<float>());
  const auto labels = a.target().to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < 90; ++i) {
    EXPECT_EQ(labels[static_cast<std::size_t>(i)], i % 3);
  }
  o.seed = 12;
  EXPECT_NE(a.input().to_vector<float>(), make_gaussian_blobs(o).input().to_vector<float>());
  // Samples of a class lie near each other (std 0.5); those of different classes, on average,
  // much further apart (centres uniform in [-10, 10]^4).
  const auto x = a.input().to_vector<float>();
  auto dist = [&](std::size_t i, std::size_t j) {
    double d = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      d += std::pow(x[i * 4 + k] - x[j * 4 + k], 2);
    }
    return std::sqrt(d);
  };
  double same = 0;
  double other = 0;
  for (std::size_t i = 0; i < 90; ++i) {
    for (std::size_t j = 0; j < 90; ++j) {
      (i % 3 == j % 3 ? same : other) += dist(i, j);
    }
  }
  same /= 90.0 * 30.0;
  other /= 90.0 * 60.0;
  EXPECT_LT(same, 1.5);
  EXPECT_GT(other, 4.0 * same);
  EXPECT_EQ(error_message([] {
              GaussianBlobsOptions bad;
              bad.num_classes = 0;
              make_gaussian_blobs(bad);
            }),
            "[synthetic] num_classes must be >= 1, got 0");
}

TEST(DataSynthetic, RandomText) {
  const TextCorpus a = make_synthetic_text(1000, 5, "xyz");
  EXPECT_EQ(a.size(), 1000);
  EXPECT_EQ(corpus_text(a), corpus_text(make_synthetic_text(1000, 5, "xyz")));
  EXPECT_NE(corpus_text(a), corpus_text(make_synthetic_text(1000, 6, "xyz")));
  EXPECT_EQ(corpus_text(a).find_first_not_of("xyz"), std::string::npos);
  for (char c : std::string("xyz")) {
    EXPECT_NE(corpus_text(a).find(c), std::string::npos);
  }
  EXPECT_EQ(a.source, "<synthetic text, seed 5>");
}

// ---------------------------------------------------------------- DataLoader

// Sample i is (i, i * 10); batches also report their seed, and some take a little time so that
// workers finish out of order.
class ProbeDataset final : public Dataset {
 public:
  explicit ProbeDataset(std::int64_t n, std::int64_t bad_index = -1, bool slow = false)
      : n_(n), bad_index_(bad_index), slow_(slow) {}
  std::int64_t size() const override { return n_; }
  Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override {
    if (slow_ && ctx.batch_index % 3 == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::vector<std::int64_t> in(indices.begin(), indices.end());
    std::vector<std::int64_t> tg;
    for (std::int64_t i : indices) {
      TB_CHECK(i != bad_index_, "[probe] bad sample ", i, " in batch ", ctx.batch_index);
      tg.push_back(i * 10);
    }
    tg.push_back(static_cast<std::int64_t>(ctx.seed));
    return Batch{core::from_vector(in), core::from_vector(tg)};
  }

 private:
  std::int64_t n_;
  std::int64_t bad_index_;
  bool slow_;
};

using Flat = std::vector<std::vector<std::int64_t>>;

// Every batch of the next `epochs` epochs (input and target flattened), with an empty entry
// marking each epoch end.
Flat drain(DataLoader& loader, int epochs) {
  Flat out;
  for (int e = 0; e < epochs; ++e) {
    while (std::optional<Batch> b = loader.next()) {
      out.push_back(b->input.to_vector<std::int64_t>());
      out.push_back(b->target.to_vector<std::int64_t>());
    }
    out.emplace_back();
  }
  return out;
}

TEST(DataLoader, OrderWithoutShuffleAndDropLast) {
  auto ds = std::make_shared<ProbeDataset>(10);
  DataLoaderOptions o;
  o.batch_size = 3;
  DataLoader keep(ds, o);
  EXPECT_EQ(keep.num_batches(), 4);
  std::vector<std::vector<std::int64_t>> inputs;
  while (std::optional<Batch> b = keep.next()) {
    inputs.push_back(b->input.to_vector<std::int64_t>());
  }
  EXPECT_EQ(inputs, (std::vector<std::vector<std::int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}));
  EXPECT_EQ(keep.epoch(), 1);

  o.drop_last = true;
  DataLoader drop(ds, o);
  EXPECT_EQ(drop.num_batches(), 3);
  int count = 0;
  while (drop.next()) {
    ++count;
  }
  EXPECT_EQ(count, 3);

  DataLoader exact(std::make_shared<ProbeDataset>(9), o);
  EXPECT_EQ(exact.num_batches(), 3);
  o.drop_last = false;
  DataLoader exact_keep(std::make_shared<ProbeDataset>(9), o);
  EXPECT_EQ(exact_keep.num_batches(), 3);
  DataLoader empty(std::make_shared<ProbeDataset>(0), o);
  EXPECT_FALSE(empty.next().has_value());
  EXPECT_EQ(empty.epoch(), 1);
}

TEST(DataLoader, ShuffleIsTorchRandpermPerEpoch) {
  auto ds = std::make_shared<ProbeDataset>(23);
  DataLoaderOptions o;
  o.batch_size = 5;
  o.shuffle = true;
  o.seed = 42;
  DataLoader loader(ds, o);
  rng::CpuGenerator gen(42);
  for (int e = 0; e < 3; ++e) {
    std::vector<std::int64_t> expected(23);
    rng::randperm(gen, expected.data(), 23);
    std::vector<std::int64_t> got;
    std::int64_t b = 0;
    while (std::optional<Batch> batch = loader.next()) {
      const auto in = batch->input.to_vector<std::int64_t>();
      got.insert(got.end(), in.begin(), in.end());
      EXPECT_EQ(static_cast<std::uint64_t>(batch->target.to_vector<std::int64_t>().back()),
                batch_seed(42, e, b++));
    }
    EXPECT_EQ(got, expected) << "epoch " << e;
  }
}

TEST(DataLoader, SameBatchesForZeroOneAndFourWorkers) {
  auto probe = std::make_shared<ProbeDataset>(103, -1, /*slow=*/true);
  TextDatasetOptions to;
  to.context_length = 16;
  auto text = std::make_shared<TextDataset>(make_synthetic_text(4000, 1), TextSplit::kTrain, to);
  GaussianBlobsOptions bo;
  bo.num_samples = 50;
  auto blobs = std::make_shared<TensorDataset>(make_gaussian_blobs(bo));
  for (const std::shared_ptr<const Dataset>& ds :
       std::vector<std::shared_ptr<const Dataset>>{probe, text}) {
    DataLoaderOptions o;
    o.batch_size = 8;
    o.shuffle = true;
    o.seed = 7;
    Flat reference;
    for (int workers : {0, 1, 4}) {
      o.num_workers = workers;
      DataLoader loader(ds, o);
      const Flat got = drain(loader, 3);
      if (workers == 0) {
        reference = got;
      } else {
        EXPECT_EQ(got, reference) << workers << " workers";
      }
    }
  }
  // Float batches too.
  DataLoaderOptions o;
  o.batch_size = 7;
  o.shuffle = true;
  DataLoader serial(blobs, o);
  o.num_workers = 4;
  o.prefetch_factor = 1;
  DataLoader parallel(blobs, o);
  while (std::optional<Batch> a = serial.next()) {
    std::optional<Batch> b = parallel.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(a->input.to_vector<float>(), b->input.to_vector<float>());
    EXPECT_EQ(a->target.to_vector<std::int64_t>(), b->target.to_vector<std::int64_t>());
  }
  EXPECT_FALSE(parallel.next().has_value());
}

// Input and target of a batch as doubles (float32 or int64 tensors).
std::vector<double> batch_values(const Batch& b) {
  std::vector<double> out;
  for (const core::Tensor* t : {&b.input, &b.target}) {
    if (t->dtype() == core::ScalarType::Float32) {
      for (float v : t->to_vector<float>())
        out.push_back(v);
    } else {
      for (std::int64_t v : t->to_vector<std::int64_t>())
        out.push_back(static_cast<double>(v));
    }
    out.push_back(-1e30);  // input | target
  }
  return out;
}

// Data-parallel loaders: shard r of c builds only its rows of every batch — per-row randomness
// included (augmented images, random text windows) — and the shards of batch k, in rank order,
// are the whole loader's batch k, empty shards of a short last batch included.
TEST(DataLoader, ShardsOfEachBatchMakeTheWholeBatch) {
  FashionMnistOptions fo;
  fo.augment.crop_padding = 2;
  fo.augment.horizontal_flip = true;
  TextDatasetOptions to;
  to.context_length = 8;
  to.sampling = TextSampling::kRandom;
  to.samples_per_epoch = 22;
  GaussianBlobsOptions bo;
  bo.num_samples = 23;
  // Fashion-MNIST: the first 23 images (a dataset view would do; the loader reads `size()`).
  struct FirstImages final : Dataset {
    std::shared_ptr<const FashionMnist> all;
    std::int64_t size() const override { return 23; }
    Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override {
      return all->get_batch(indices, ctx);
    }
  };
  auto images = std::make_shared<FirstImages>();
  images->all = std::make_shared<const FashionMnist>(fo);
  const std::vector<std::shared_ptr<const Dataset>> sets = {
      images, std::make_shared<TextDataset>(make_synthetic_text(2000, 3), TextSplit::kTrain, to),
      std::make_shared<TensorDataset>(make_gaussian_blobs(bo))};
  for (const auto& ds : sets) {
    for (const int count : {2, 3, 4}) {
      for (const int workers : {0, 2}) {
        SCOPED_TRACE("shards " + std::to_string(count) + ", workers " + std::to_string(workers));
        DataLoaderOptions o;
        o.batch_size = 10;  // 23 (22) samples: a short last batch, some shards of it empty
        o.shuffle = true;
        o.seed = 11;
        DataLoader whole(ds, o);
        std::vector<std::unique_ptr<DataLoader>> shards;
        for (int r = 0; r < count; ++r) {
          DataLoaderOptions so = o;
          so.shard_rank = r;
          so.shard_count = count;
          so.num_workers = workers;
          shards.push_back(std::make_unique<DataLoader>(ds, so));
        }
        for (int epoch = 0; epoch < 2; ++epoch) {
          while (std::optional<Batch> b = whole.next()) {
            std::vector<double> joined_in;
            std::vector<double> joined_tg;
            for (int r = 0; r < count; ++r) {
              std::optional<Batch> part = shards[static_cast<std::size_t>(r)]->next();
              ASSERT_TRUE(part.has_value());
              EXPECT_EQ(part->global_rows, b->input.size(0));
              const std::int64_t n = b->input.size(0);
              EXPECT_EQ(part->input.size(0), n / count + (r < n % count ? 1 : 0));
              EXPECT_EQ(part->input.size(0), part->target.size(0));
              const std::vector<double> v = batch_values(*part);
              const auto mid = std::find(v.begin(), v.end(), -1e30);
              joined_in.insert(joined_in.end(), v.begin(), mid);
              joined_tg.insert(joined_tg.end(), mid + 1, v.end() - 1);
            }
            const std::vector<double> w = batch_values(*b);
            const auto mid = std::find(w.begin(), w.end(), -1e30);
            EXPECT_EQ(joined_in, std::vector<double>(w.begin(), mid));
            EXPECT_EQ(joined_tg, std::vector<double>(mid + 1, w.end() - 1));
          }
          for (auto& sh : shards)
            EXPECT_FALSE(sh->next().has_value());
        }
      }
    }
  }
  DataLoaderOptions bad;
  bad.shard_rank = 2;
  bad.shard_count = 2;
  EXPECT_EQ(error_message([&] { DataLoader(sets[2], bad); }),
            "[dataloader] shard 2 of 2 is not a shard (0 <= shard_rank < shard_count)");
}

TEST(DataLoader, SaveAndRestoreMidEpochAndAcrossEpochs) {
  auto ds = std::make_shared<ProbeDataset>(20);
  DataLoaderOptions o;
  o.batch_size = 6;  // 4 batches per epoch
  o.shuffle = true;
  o.seed = 99;
  DataLoader uninterrupted(ds, o);
  const Flat reference = drain(uninterrupted, 3);  // 3 * (4 * 2 + 1) entries

  // Stop after k batches of epoch 0 (k = 0..4), save through JSON text, resume in a fresh
  // loader with another worker count, and compare the rest of the 3 epochs.
  for (int k = 0; k <= 4; ++k) {
    o.num_workers = k % 2 == 0 ? 0 : 3;
    DataLoader first(ds, o);
    Flat got;
    for (int i = 0; i < k; ++i) {
      std::optional<Batch> b = first.next();
      ASSERT_TRUE(b.has_value());
      got.push_back(b->input.to_vector<std::int64_t>());
      got.push_back(b->target.to_vector<std::int64_t>());
    }
    const std::string saved = nlohmann::json(first.state()).dump();
    o.num_workers = k % 2 == 0 ? 2 : 0;
    o.seed = 1;  // replaced by the saved seed
    DataLoader resumed(ds, o);
    resumed.load_state(nlohmann::json::parse(saved).get<DataLoaderState>());
    o.seed = 99;
    EXPECT_EQ(resumed.epoch(), 0);
    EXPECT_EQ(resumed.next_batch_index(), k);
    const Flat rest = drain(resumed, 3);  // the rest of epoch 0, then epochs 1 and 2
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, reference) << "saved after " << k << " batches";
  }

  // Across an epoch boundary: save at the start of epoch 1 and in the middle of epoch 2.
  DataLoader loader(ds, o);
  drain(loader, 1);
  const DataLoaderState at_epoch1 = loader.state();
  EXPECT_EQ(at_epoch1.epoch, 1);
  EXPECT_EQ(at_epoch1.next_batch, 0);
  drain(loader, 1);
  loader.next();
  const DataLoaderState mid_epoch2 = loader.state();
  DataLoader resumed(ds, o);
  resumed.load_state(at_epoch1);
  Flat after1 = drain(resumed, 2);
  EXPECT_EQ(after1, Flat(reference.begin() + 9, reference.end()));
  resumed.load_state(mid_epoch2);
  EXPECT_EQ(drain(resumed, 1), Flat(reference.begin() + 20, reference.end()));
}

TEST(DataLoader, EndEpochKeepsLaterEpochs) {
  auto ds = std::make_shared<ProbeDataset>(20);
  DataLoaderOptions o;
  o.batch_size = 6;
  o.shuffle = true;
  o.num_workers = 2;
  DataLoader full(ds, o);
  const Flat reference = drain(full, 2);
  DataLoader partial(ds, o);
  partial.next();
  partial.end_epoch();
  EXPECT_EQ(partial.epoch(), 1);
  EXPECT_EQ(drain(partial, 1), Flat(reference.begin() + 9, reference.end()));
}

TEST(DataLoader, RestoreChecksCompatibility) {
  auto ds = std::make_shared<ProbeDataset>(20);
  DataLoaderOptions o;
  o.batch_size = 6;
  DataLoader loader(ds, o);
  DataLoaderState s = loader.state();
  o.batch_size = 5;
  DataLoader other(ds, o);
  EXPECT_EQ(error_message([&] { other.load_state(s); }),
            "[dataloader] cannot restore a state saved with batch_size 6 into a loader with "
            "batch_size 5");
  DataLoader smaller(std::make_shared<ProbeDataset>(19), DataLoaderOptions{.batch_size = 6});
  EXPECT_CONTAINS(error_message([&] { smaller.load_state(s); }),
                  "saved for a dataset of 20 samples into a loader of a dataset of 19 samples");
  s.next_batch = 5;
  EXPECT_CONTAINS(error_message([&] { loader.load_state(s); }), "at batch 5 of an epoch of 4");
  s.next_batch = 0;
  s.generator_state.resize(10);
  EXPECT_THROW(loader.load_state(s), ValueError);

  nlohmann::json j = loader.state();
  j.erase("seed");
  EXPECT_CONTAINS(error_message([&] { j.get<DataLoaderState>(); }), "[dataloader] malformed state");
  j = loader.state();
  j["generator_state"] = "zz";
  EXPECT_CONTAINS(error_message([&] { j.get<DataLoaderState>(); }), "non-hex character");
}

TEST(DataLoader, WorkerErrorReachesTheConsumer) {
  for (int workers : {0, 1, 4}) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    DataLoader loader(std::make_shared<ProbeDataset>(40, /*bad_index=*/13), o);
    for (int b = 0; b < 3; ++b) {
      ASSERT_TRUE(loader.next().has_value());
    }
    EXPECT_EQ(error_message([&] { loader.next(); }), "[probe] bad sample 13 in batch 3")
        << workers << " workers";
    std::optional<Batch> after = loader.next();
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->input.to_vector<std::int64_t>(), (std::vector<std::int64_t>{16, 17, 18, 19}));
  }
}

TEST(DataLoader, DestroyMidEpochJoinsWorkers) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    DataLoaderOptions o;
    o.batch_size = 2;
    o.num_workers = 4;
    o.prefetch_factor = 4;
    DataLoader loader(std::make_shared<ProbeDataset>(1000, -1, /*slow=*/true), o);
    ASSERT_TRUE(loader.next().has_value());
  }  // each destructor drops ~16 queued batches and waits only for those being built
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(DataLoader, OptionChecksAndSeeds) {
  auto ds = std::make_shared<ProbeDataset>(5);
  EXPECT_EQ(error_message([&] { DataLoader l(ds, DataLoaderOptions{.batch_size = 0}); }),
            "[dataloader] batch_size must be >= 1, got 0");
  EXPECT_CONTAINS(error_message([&] { DataLoader l(ds, DataLoaderOptions{.num_workers = -1}); }),
                  "num_workers must be >= 0");
  EXPECT_CONTAINS(error_message([&] { DataLoader l(nullptr, DataLoaderOptions{}); }),
                  "the dataset is null");
  EXPECT_NE(worker_seed(1, 0), worker_seed(1, 1));
  EXPECT_NE(worker_seed(1, 0), worker_seed(2, 0));
  EXPECT_NE(batch_seed(1, 0, 1), batch_seed(1, 1, 0));
  EXPECT_NE(batch_seed(1, 0, 0), worker_seed(1, 0));
  static_assert(batch_seed(5, 2, 3) == mix64(mix64(mix64(5 ^ 0x6261746368000000ULL) + 2) + 3));
}

}  // namespace
}  // namespace tb::data
