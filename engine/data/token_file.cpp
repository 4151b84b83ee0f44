#include "engine/data/token_file.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "engine/core/error.h"

namespace tb::data {
namespace {

std::int32_t read_i32(const std::uint8_t* p) {
  std::int32_t v = 0;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts, like the files
  return v;
}

std::string errno_text(int err) {
  return std::generic_category().message(err);
}

}  // namespace

TokenFormat token_format_from_name(const std::string& name) {
  if (name == "auto") return TokenFormat::kAuto;
  if (name == "llmc") return TokenFormat::kLlmc;
  if (name == "uint16") return TokenFormat::kUint16;
  throw ValueError("[tokens] format '" + name + "' is not one of auto, llmc, uint16");
}

TokenLayout parse_token_layout(std::span<const std::uint8_t> bytes, TokenFormat format,
                               const std::string& file) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  TB_CHECK(size > 0, "[tokens] ", file, ": empty file");
  const bool has_magic = size >= 4 && (read_i32(bytes.data()) == kLlmcMagicGpt2 ||
                                       read_i32(bytes.data()) == kLlmcMagicLlama3);
  TokenLayout out;
  if (format == TokenFormat::kLlmc || (format == TokenFormat::kAuto && has_magic)) {
    TB_CHECK(size >= kLlmcHeaderBytes, "[tokens] ", file, ": ", size,
             " bytes is shorter than llm.c's ", kLlmcHeaderBytes, "-byte header");
    const std::int32_t magic = read_i32(bytes.data());
    const std::int32_t version = read_i32(bytes.data() + 4);
    const std::int32_t count = read_i32(bytes.data() + 8);
    TB_CHECK(magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3, "[tokens] ", file,
             ": offset 0: bad magic ", magic, ", expected ", kLlmcMagicGpt2,
             " (llm.c GPT-2 tokens) or ", kLlmcMagicLlama3,
             " (llm.c Llama-3 tokens); raw nanoGPT files need data.format = \"uint16\"");
    const std::int32_t want_version = magic == kLlmcMagicGpt2 ? 1 : 7;
    TB_CHECK(version == want_version, "[tokens] ", file, ": offset 4: version ", version,
             " of magic ", magic, ", expected ", want_version);
    out.offset = kLlmcHeaderBytes;
    out.token_bytes = magic == kLlmcMagicGpt2 ? 2 : 4;
    TB_CHECK(count > 0, "[tokens] ", file, ": offset 8: token count ", count, ", expected > 0");
    out.count = count;
    const std::int64_t want = kLlmcHeaderBytes + out.count * out.token_bytes;
    TB_CHECK(size >= want, "[tokens] ", file, ": truncated: the header says ", count, " tokens (",
             want, " bytes with the header) but the file has ", size, " bytes");
    TB_CHECK(size == want, "[tokens] ", file, ": ", size - want, " trailing bytes after the ",
             count, " tokens the header announces (offset ", want, ")");
    return out;
  }
  TB_CHECK(size % 2 == 0, "[tokens] ", file, ": ", size,
           " bytes is not a whole number of uint16 tokens (raw nanoGPT format; llm.c files "
           "start with magic ",
           kLlmcMagicGpt2, ")");
  out.offset = 0;
  out.token_bytes = 2;
  out.count = size / 2;
  return out;
}

TokenFile::TokenFile(const std::filesystem::path& path, TokenFormat format) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ValueError("[tokens] cannot open " + path.string() + ": " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ValueError("[tokens] " + path.string() + ": not a regular file");
  }
  mapped_ = static_cast<std::size_t>(st.st_size);
  if (mapped_ > 0) {
    void* p = ::mmap(nullptr, mapped_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      mapped_ = 0;
      throw ValueError("[tokens] cannot map " + path.string() + ": " + errno_text(err));
    }
    data_ = static_cast<const std::uint8_t*>(p);
  } else {
    ::close(fd);
  }
  try {
    layout_ = parse_token_layout({data_, mapped_}, format, path.string());
  } catch (...) {
    if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), mapped_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), mapped_);
}

std::int64_t TokenFile::token(std::int64_t i) const {
  const std::uint8_t* p = data_ + layout_.offset + i * layout_.token_bytes;
  if (layout_.token_bytes == 2) {
    std::uint16_t v = 0;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  std::uint32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::vector<std::filesystem::path> expand_token_paths(const std::string& pattern) {
  TB_CHECK(!pattern.empty(),
           "[tokens] data.path: give a token file (or a pattern such as "
           "data/fineweb_train_*.bin)");
  const std::filesystem::path p(pattern);
  const std::string name = p.filename().string();
  if (name.find_first_of("*?[") == std::string::npos) return {p};
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && ::fnmatch(name.c_str(), it->path().filename().c_str(), 0) == 0)
      out.push_back(it->path());
  TB_CHECK(!ec, "[tokens] cannot list ", dir.string(), ": ", ec.message());
  TB_CHECK(!out.empty(), "[tokens] no file matches ", pattern);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.string() < b.string(); });
  return out;
}

TokenStream open_token_stream(const std::string& pattern, TokenFormat format) {
  TokenStream s;
  s.source = pattern;
  for (const auto& path : expand_token_paths(pattern)) {
    s.files.push_back(std::make_shared<TokenFile>(path, format));
    s.starts.push_back(s.size);
    s.size += s.files.back()->size();
  }
  return s;
}

TokenStream token_stream_from_ids(std::vector<std::int32_t> ids, std::string source) {
  TokenStream s;
  s.source = std::move(source);
  s.size = static_cast<std::int64_t>(ids.size());
  s.memory = std::make_shared<const std::vector<std::int32_t>>(std::move(ids));
  return s;
}

void TokenStream::read(std::int64_t begin, std::int64_t n, std::int64_t vocab,
                       std::int64_t* out) const {
  if (memory) {
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t t = (*memory)[static_cast<std::size_t>(begin + k)];
      if (t < 0 || t >= vocab)
        throw ValueError(detail::str_cat("[tokens] ", source, ": token ", begin + k, " (", t,
                                         ") is outside the vocabulary of ", vocab));
      out[k] = t;
    }
    return;
  }
  auto f = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), begin) -
                                    starts.begin() - 1);
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t pos = begin + k;
    while (pos >= starts[f] + files[f]->size())
      ++f;
    const TokenFile& file = *files[f];
    const std::int64_t i = pos - starts[f];
    const std::int64_t t = file.token(i);
    if (t >= vocab)
      throw ValueError(detail::str_cat("[tokens] ", file.path().string(), ": offset ",
                                       file.layout().offset + i * file.layout().token_bytes,
                                       " (token ", i, "): token ", t,
                                       " is outside the vocabulary of ", vocab, " (data.vocab)"));
    out[k] = t;
  }
}

TokenDataset::TokenDataset(TokenStream stream, const TokenDatasetOptions& options)
    : stream_(std::move(stream)), options_(options) {
  TB_CHECK(options_.context_length >= 1, "[tokens] context length must be >= 1, got ",
           options_.context_length);
  TB_CHECK(options_.vocab >= 1, "[tokens] vocab must be >= 1, got ", options_.vocab);
  TB_CHECK(options_.samples_per_epoch >= 0, "[tokens] samples_per_epoch must be >= 0, got ",
           options_.samples_per_epoch);
  std::tie(begin_, length_) =
      TextDataset::split_range(stream_.size, options_.split, options_.val_fraction);
  const std::int64_t t = options_.context_length;
  TB_CHECK(t < length_, "[tokens] context length ", t, " exceeds the ", length_, " tokens of the ",
           options_.split == TextSplit::kTrain ? "train" : "validation", " split of ",
           stream_.source, " (a window needs context length + 1 tokens)");
  size_ = window_count(length_, t, options_.sampling, options_.samples_per_epoch);
}

Batch TokenDataset::get_batch(std::span<const std::int64_t> indices,
                              const BatchContext& ctx) const {
  const std::int64_t t = options_.context_length;
  WindowBatch w = window_batch(indices, ctx, options_.sampling, length_, t, size_, "tokens");
  auto* in = w.input.data_ptr<std::int64_t>();
  auto* tg = w.target.data_ptr<std::int64_t>();
  std::vector<std::int64_t> window(static_cast<std::size_t>(t + 1));
  for (std::size_t j = 0; j < w.starts.size(); ++j) {
    const auto row = static_cast<std::int64_t>(j) * t;
    stream_.read(begin_ + w.starts[j], t + 1, options_.vocab, window.data());
    std::copy(window.begin(), window.end() - 1, in + row);
    std::copy(window.begin() + 1, window.end(), tg + row);
  }
  return Batch{w.input, w.target};
}

}  // namespace tb::data
