#include "engine/data/cifar.h"

#include <cstring>
#include <fstream>
#include <system_error>

#include "engine/core/error.h"

namespace tb::data {
namespace {

constexpr std::int64_t kImageBytes = 3 * 32 * 32;

// Per-channel mean and standard deviation of the training images, scaled to [0, 1] (the values
// commonly used with torchvision.transforms.Normalize for these sets).
constexpr float kCifar10Mean[] = {0.4914f, 0.4822f, 0.4465f};
constexpr float kCifar10Std[] = {0.2470f, 0.2435f, 0.2616f};
constexpr float kCifar100Mean[] = {0.5071f, 0.4865f, 0.4409f};
constexpr float kCifar100Std[] = {0.2673f, 0.2564f, 0.2762f};

const char* subfolder(CifarVariant v) {
  return v == CifarVariant::kCifar10 ? "cifar-10-batches-bin" : "cifar-100-binary";
}

std::vector<std::string> file_names(CifarVariant v, bool train) {
  if (v == CifarVariant::kCifar100) return {train ? "train.bin" : "test.bin"};
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> out;
  for (int i = 1; i <= 5; ++i)
    out.push_back("data_batch_" + std::to_string(i) + ".bin");
  return out;
}

bool holds_files(const std::filesystem::path& dir, CifarVariant v) {
  std::error_code ec;
  for (bool train : {true, false})
    for (const auto& f : file_names(v, train))
      if (std::filesystem::is_regular_file(dir / f, ec)) return true;
  return false;
}

}  // namespace

std::string cifar_name(CifarVariant variant) {
  return variant == CifarVariant::kCifar10 ? "cifar-10" : "cifar-100";
}

std::int64_t cifar_record_bytes(CifarVariant variant) {
  return (variant == CifarVariant::kCifar10 ? 1 : 2) + kImageBytes;
}

std::filesystem::path cifar_folder(const std::filesystem::path& dir, CifarVariant variant) {
  TB_CHECK(!dir.empty(), "[", cifar_name(variant),
           "] data.path: give the folder of the binary "
           "version (",
           subfolder(variant), ", from https://www.cs.toronto.edu/~kriz/cifar.html)");
  if (holds_files(dir, variant)) return dir;
  if (holds_files(dir / subfolder(variant), variant)) return dir / subfolder(variant);
  std::string expected;
  for (bool train : {true, false})
    for (const auto& f : file_names(variant, train))
      expected += (expected.empty() ? "" : ", ") + f;
  throw ValueError(detail::str_cat("[", cifar_name(variant), "] ", dir.string(),
                                   ": no CIFAR binary files here or in ", subfolder(variant),
                                   "/ (expected ", expected, ")"));
}

std::vector<std::filesystem::path> cifar_files(const std::filesystem::path& dir,
                                               CifarVariant variant, bool train) {
  const std::filesystem::path folder = cifar_folder(dir, variant);
  std::vector<std::filesystem::path> out;
  for (const auto& f : file_names(variant, train))
    out.push_back(folder / f);
  return out;
}

void parse_cifar_records(std::span<const std::uint8_t> bytes, CifarVariant variant,
                         bool fine_labels, const std::string& file, CifarRecords& out) {
  const std::string name = cifar_name(variant);
  const std::int64_t rec = cifar_record_bytes(variant);
  const auto size = static_cast<std::int64_t>(bytes.size());
  TB_CHECK(size > 0, "[", name, "] ", file, ": empty file, expected ", rec, "-byte records");
  const std::int64_t whole = size / rec;
  TB_CHECK(size % rec == 0, "[", name, "] ", file, ": ", size, " bytes is not a whole number of ",
           rec, "-byte records (",
           variant == CifarVariant::kCifar10 ? "a label byte" : "two label bytes",
           " and 3072 pixel bytes): the record at offset ", whole * rec, " has only ",
           size - whole * rec, " bytes (truncated file, or not CIFAR binary data)");
  // Both CIFAR-100 labels are checked, whichever is used: a bad one means a bad file.
  for (std::int64_t r = 0; r < whole; ++r) {
    const std::int64_t at = r * rec;
    if (variant == CifarVariant::kCifar100) {
      TB_CHECK(bytes[static_cast<std::size_t>(at)] < 20, "[", name, "] ", file, ": offset ", at,
               " (record ", r, "): coarse label ", int{bytes[static_cast<std::size_t>(at)]},
               " is outside 0..19");
      TB_CHECK(bytes[static_cast<std::size_t>(at + 1)] < 100, "[", name, "] ", file, ": offset ",
               at + 1, " (record ", r, "): fine label ",
               int{bytes[static_cast<std::size_t>(at + 1)]}, " is outside 0..99");
    } else {
      TB_CHECK(bytes[static_cast<std::size_t>(at)] < 10, "[", name, "] ", file, ": offset ", at,
               " (record ", r, "): label ", int{bytes[static_cast<std::size_t>(at)]},
               " is outside 0..9");
    }
  }
  const std::size_t base = out.pixels.size();
  out.pixels.resize(base + static_cast<std::size_t>(whole * kImageBytes));
  out.labels.reserve(out.labels.size() + static_cast<std::size_t>(whole));
  const std::int64_t label_at = variant == CifarVariant::kCifar100 && fine_labels ? 1 : 0;
  for (std::int64_t r = 0; r < whole; ++r) {
    const std::uint8_t* src = bytes.data() + r * rec;
    out.labels.push_back(src[label_at]);
    std::memcpy(out.pixels.data() + base + static_cast<std::size_t>(r * kImageBytes),
                src + (rec - kImageBytes), static_cast<std::size_t>(kImageBytes));
  }
}

std::shared_ptr<ImageDataset> load_cifar(const CifarOptions& options) {
  const std::string name = cifar_name(options.variant);
  const std::int64_t rec = cifar_record_bytes(options.variant);
  CifarRecords records;
  for (const auto& path : cifar_files(options.dir, options.variant, options.train)) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    TB_CHECK(!ec, "[", name, "] cannot open ", path.string(), ": ", ec.message());
    // Sizes first: a CIFAR file holds 10000 (CIFAR-10) or 50000 records; anything far larger
    // is not one, and is refused before it is read into memory.
    TB_CHECK(size <= static_cast<std::uintmax_t>(60000 * rec), "[", name, "] ", path.string(), ": ",
             size, " bytes is more than a CIFAR file holds (at most 60000 records of ", rec,
             " bytes)");
    std::ifstream in(path, std::ios::binary);
    TB_CHECK(static_cast<bool>(in), "[", name, "] cannot open ", path.string());
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
    TB_CHECK(in.gcount() == static_cast<std::streamsize>(size), "[", name, "] ", path.string(),
             ": read ", in.gcount(), " of ", size, " bytes");
    parse_cifar_records(bytes, options.variant, options.fine_labels, path.string(), records);
  }
  const auto n = static_cast<std::int64_t>(records.labels.size());
  core::Tensor images = core::Tensor::empty({n, 3, 32, 32}, core::ScalarType::UInt8);
  std::memcpy(images.data_ptr<std::uint8_t>(), records.pixels.data(), records.pixels.size());
  core::Tensor labels = core::Tensor::empty({n}, core::ScalarType::Int64);
  std::memcpy(labels.data_ptr<std::int64_t>(), records.labels.data(),
              records.labels.size() * sizeof(std::int64_t));
  ImageDatasetOptions image = options.image;
  const bool c10 = options.variant == CifarVariant::kCifar10;
  if (image.mean.empty())
    image.mean.assign(c10 ? kCifar10Mean : kCifar100Mean, (c10 ? kCifar10Mean : kCifar100Mean) + 3);
  if (image.std.empty())
    image.std.assign(c10 ? kCifar10Std : kCifar100Std, (c10 ? kCifar10Std : kCifar100Std) + 3);
  const std::int64_t classes = c10 ? 10 : (options.fine_labels ? 100 : 20);
  return std::make_shared<ImageDataset>(name, std::move(images), std::move(labels), classes, image);
}

}  // namespace tb::data
