#include "engine/data/text_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>

#include "engine/core/error.h"
#include "engine/rng/cpu_generator.h"

namespace tb::data {
namespace {

namespace fs = std::filesystem;

// Reads a whole file; throws "[text dataset] cannot open <file>: <reason>".
std::vector<std::uint8_t> read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw ValueError(detail::str_cat(
        "[text dataset] cannot open ", file.string(), ": ",
        err != 0 ? std::generic_category().message(err) : std::string("unknown error")));
  }
  std::vector<std::uint8_t> data((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
  TB_CHECK(!in.bad(), "[text dataset] cannot read ", file.string());
  return data;
}

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* split_name(TextSplit split) {
  return split == TextSplit::kTrain ? "train" : "validation";
}

}  // namespace

namespace {

// A uniform draw from [0, range) without modulo bias. Caller holds gen.mutex().
std::uint64_t uniform_below(rng::CpuGenerator& gen, std::uint64_t range) {
  const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % range);
  while (true) {
    const std::uint64_t r = gen.random64();
    if (r < limit) return r % range;
  }
}

}  // namespace

std::int64_t window_count(std::int64_t length, std::int64_t t, TextSampling sampling,
                          std::int64_t& samples_per_epoch) {
  const std::int64_t tiles = (length - 1) / t;
  if (sampling == TextSampling::kSequential) return tiles;
  if (samples_per_epoch == 0) samples_per_epoch = tiles;
  return samples_per_epoch;
}

WindowBatch window_batch(std::span<const std::int64_t> indices, const BatchContext& ctx,
                         TextSampling sampling, std::int64_t length, std::int64_t t,
                         std::int64_t size, const char* what) {
  std::optional<rng::CpuGenerator> gen;
  std::unique_lock<std::mutex> lock;
  if (sampling == TextSampling::kRandom) {
    gen.emplace(ctx.seed);
    lock = std::unique_lock(gen->mutex());
    // A shard's rows start at row_offset of the batch: the draws of the rows before it.
    for (std::int64_t j = 0; j < ctx.row_offset; ++j)
      (void)uniform_below(*gen, static_cast<std::uint64_t>(length - t));
  }
  const auto b = static_cast<std::int64_t>(indices.size());
  WindowBatch out{core::Tensor::empty({b, t}, core::ScalarType::Int64),
                  core::Tensor::empty({b, t}, core::ScalarType::Int64),
                  {}};
  std::vector<std::int64_t>& starts = out.starts;
  starts.reserve(indices.size());
  for (const std::int64_t i : indices) {
    TB_CHECK_T(IndexError, i >= 0 && i < size, "[", what, "] sample index ", i,
               " is out of range for a dataset of ", size, " samples");
    starts.push_back(
        gen ? static_cast<std::int64_t>(uniform_below(*gen, static_cast<std::uint64_t>(length - t)))
            : i * t);
  }
  return out;
}

TextCorpus load_text_corpus(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw ValueError(detail::str_cat("[text dataset] cannot open ", path.string(), ": ",
                                     ec ? ec.message() : std::generic_category().message(ENOENT)));
  }
  TextCorpus corpus;
  corpus.source = path.string();
  if (!fs::is_directory(status)) {
    std::vector<std::uint8_t> data = read_file(path);
    const void* nul = std::memchr(data.data(), 0, data.size());
    TB_CHECK(nul == nullptr, "[text dataset] ", path.string(),
             " is not a text file (NUL byte at offset ",
             static_cast<const std::uint8_t*>(nul) - data.data(), ")");
    corpus.files.push_back(path);
    corpus.bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(data));
    return corpus;
  }

  std::vector<fs::path> candidates;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  TB_CHECK(!ec, "[text dataset] cannot open ", path.string(), ": ", ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::directory_entry& entry = *it;
    if (is_hidden(entry.path())) {
      if (entry.is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (entry.is_regular_file(ec)) candidates.push_back(entry.path());
  }
  TB_CHECK(!ec, "[text dataset] cannot list ", path.string(), ": ", ec.message());
  std::sort(candidates.begin(), candidates.end(),
            [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });

  std::vector<std::uint8_t> all;
  std::set<fs::path> seen;
  for (const fs::path& file : candidates) {
    const fs::path canonical = fs::weakly_canonical(file, ec);
    if (!seen.insert(ec ? file : canonical).second || ends_with(file.string(), ".dat")) {
      corpus.skipped.push_back(file);
      continue;
    }
    std::vector<std::uint8_t> data = read_file(file);
    if (std::memchr(data.data(), 0, data.size()) != nullptr) {
      corpus.skipped.push_back(file);
      corpus.binary.push_back(file);
      continue;
    }
    all.insert(all.end(), data.begin(), data.end());
    corpus.files.push_back(file);
  }
  if (corpus.files.empty()) {
    std::string why = corpus.skipped.empty()
                          ? std::string(" (the folder is empty)")
                          : detail::str_cat(" (", corpus.skipped.size(),
                                            " skipped: .dat files, files with NUL bytes, duplicate "
                                            "links)");
    if (!corpus.binary.empty()) {  // text saved as UTF-16 has NUL bytes: say which, and why
      why += "; with a NUL byte (binary, or text in UTF-16: save it as UTF-8): ";
      for (std::size_t i = 0; i < corpus.binary.size() && i < 5; ++i)
        why += (i ? ", " : "") + corpus.binary[i].string();
      if (corpus.binary.size() > 5) why += ", ...";
    }
    throw ValueError("[text dataset] no text files under " + path.string() + why);
  }
  corpus.bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(all));
  return corpus;
}

TextCorpus text_corpus_from_bytes(std::vector<std::uint8_t> bytes, std::string name) {
  TextCorpus corpus;
  corpus.source = std::move(name);
  corpus.bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  return corpus;
}

std::pair<std::int64_t, std::int64_t> TextDataset::split_range(std::int64_t total, TextSplit split,
                                                               double val_fraction) {
  TB_CHECK(val_fraction >= 0.0 && val_fraction < 1.0,
           "[text dataset] val_fraction must be in [0, 1), got ", val_fraction);
  TB_CHECK(total >= 0, "[text dataset] negative corpus size ", total);
  const auto n_val =
      static_cast<std::int64_t>(std::floor(static_cast<double>(total) * val_fraction));
  const std::int64_t n_train = total - n_val;
  return split == TextSplit::kTrain ? std::pair{std::int64_t{0}, n_train}
                                    : std::pair{n_train, n_val};
}

TextDataset::TextDataset(TextCorpus corpus, TextSplit split, const TextDatasetOptions& options)
    : corpus_(std::move(corpus)), split_(split), options_(options) {
  TB_CHECK(corpus_.bytes != nullptr,
           "[text dataset] the corpus has no bytes (default-constructed)");
  TB_CHECK(options_.context_length >= 1, "[text dataset] context length must be >= 1, got ",
           options_.context_length);
  TB_CHECK(options_.samples_per_epoch >= 0, "[text dataset] samples_per_epoch must be >= 0, got ",
           options_.samples_per_epoch);
  std::tie(begin_, length_) = split_range(corpus_.size(), split, options_.val_fraction);
  const std::int64_t t = options_.context_length;
  TB_CHECK(t < length_, "[text dataset] context length ", t, " exceeds the ", length_,
           " bytes of the ", split_name(split), " split of ", corpus_.source,
           " (a window needs context length + 1 bytes)");
  size_ = window_count(length_, t, options_.sampling, options_.samples_per_epoch);
}

std::span<const std::uint8_t> TextDataset::split_bytes() const {
  return {corpus_.bytes->data() + begin_, static_cast<std::size_t>(length_)};
}

Batch TextDataset::get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const {
  const std::int64_t t = options_.context_length;
  WindowBatch w = window_batch(indices, ctx, options_.sampling, length_, t, size_, "text dataset");
  auto* in = w.input.data_ptr<std::int64_t>();
  auto* tg = w.target.data_ptr<std::int64_t>();
  const std::uint8_t* bytes = corpus_.bytes->data() + begin_;
  const auto b = static_cast<std::int64_t>(w.starts.size());
  for (std::int64_t j = 0; j < b; ++j) {
    const std::uint8_t* window = bytes + w.starts[static_cast<std::size_t>(j)];
    for (std::int64_t k = 0; k < t; ++k) {
      in[j * t + k] = window[k];
      tg[j * t + k] = window[k + 1];
    }
  }
  return Batch{w.input, w.target};
}

std::string decode_bytes(const core::Tensor& tokens) {
  TB_CHECK(tokens.defined(), "[text dataset] decode_bytes of an undefined tensor");
  const core::ScalarType dt = tokens.dtype();
  TB_CHECK(dt == core::ScalarType::Int64 || dt == core::ScalarType::Int32 ||
               dt == core::ScalarType::UInt8 || dt == core::ScalarType::Int16,
           "[text dataset] decode_bytes needs integer tokens, got ", core::scalar_type_name(dt));
  const std::vector<std::int64_t> values = tokens.to_vector<std::int64_t>();
  std::string out;
  out.reserve(values.size());
  for (std::size_t k = 0; k < values.size(); ++k) {
    TB_CHECK(values[k] >= 0 && values[k] < kByteVocabSize, "[text dataset] token ", values[k],
             " at position ", k, " is not a byte (0..255)");
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(values[k])));
  }
  return out;
}

}  // namespace tb::data
