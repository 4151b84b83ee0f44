#include "engine/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "engine/core/error.h"

namespace tb::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const noexcept { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Reads up to `n` bytes; returns how many were read (fewer only at the end of the data). Throws
// for a zlib error other than a stream that ends early (*ended_early is set for that).
std::uint64_t read_some(gzFile f, std::uint8_t* out, std::uint64_t n, const std::string& prefix,
                        bool* ended_early) {
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 26;
  std::uint64_t done = 0;
  while (done < n) {
    const auto want = static_cast<unsigned>(std::min(kChunk, n - done));
    const int got = gzread(f, out + done, want);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      if (errnum == Z_BUF_ERROR) {
        if (ended_early != nullptr) *ended_early = true;
        break;
      }
      throw ValueError(
          detail::str_cat(prefix, "corrupt gzip data after ", done, " bytes (zlib: ", msg, ")"));
    }
    done += static_cast<std::uint64_t>(got);
    if (static_cast<unsigned>(got) < want) {
      int errnum = Z_OK;
      const char* msg = gzerror(f, &errnum);
      if (errnum == Z_BUF_ERROR) {
        if (ended_early != nullptr) *ended_early = true;
      } else if (errnum != Z_OK && errnum != Z_STREAM_END) {
        throw ValueError(
            detail::str_cat(prefix, "corrupt gzip data after ", done, " bytes (zlib: ", msg, ")"));
      }
      break;
    }
  }
  return done;
}

}  // namespace

core::Tensor read_idx_u8(const std::filesystem::path& path, std::uint32_t expected_magic,
                         std::string_view what, std::string_view component) {
  const std::string prefix = detail::str_cat("[", component, "] ", path.string(), ": ");
  std::error_code ec;
  TB_CHECK(!std::filesystem::is_directory(path, ec), "[", component, "] cannot open ",
           path.string(), ": it is a directory");
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    const int err = errno;
    throw ValueError(detail::str_cat(
        "[", component, "] cannot open ", path.string(), ": ",
        err != 0 ? std::generic_category().message(err) : std::string("zlib could not open it")));
  }
  gzbuffer(file.get(), 1U << 20);

  bool ended_early = false;
  std::uint8_t head[4 + 4 * 255];
  const std::uint64_t magic_bytes = read_some(file.get(), head, 4, prefix, &ended_early);
  TB_CHECK(magic_bytes == 4, prefix, "truncated header: ", magic_bytes,
           " bytes, but an IDX file starts with a 4-byte magic number");
  const std::uint32_t magic = (std::uint32_t{head[0]} << 24) | (std::uint32_t{head[1]} << 16) |
                              (std::uint32_t{head[2]} << 8) | std::uint32_t{head[3]};
  TB_CHECK(magic == expected_magic, prefix, "bad magic ", hex32(magic), ", expected ",
           hex32(expected_magic), " (", what, ")");

  const std::uint32_t ndims = magic & 0xffU;
  const std::uint64_t size_bytes = 4ULL * ndims;
  const std::uint64_t got_sizes = read_some(file.get(), head + 4, size_bytes, prefix, nullptr);
  TB_CHECK(got_sizes == size_bytes, prefix, "truncated header: ", ndims, " dimension sizes need ",
           size_bytes, " bytes after the magic but only ", got_sizes, " follow");
  std::vector<std::int64_t> dims(ndims);
  std::uint64_t total = 1;
  bool too_large = false;
  for (std::uint32_t d = 0; d < ndims; ++d) {
    const std::uint8_t* p = head + 4 + std::size_t{4} * d;
    const std::uint32_t v = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                            (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
    dims[d] = v;
    if (v != 0 && total > (std::uint64_t{1} << 40) / v) too_large = true;
    total *= v;
  }

  std::string described;
  {
    std::string shape;
    for (std::uint32_t d = 1; d < ndims; ++d) {
      // Appends, not "x" + string: GCC 12 -O3 reports a false -Wrestrict on that (PR 105329).
      if (d > 1) shape += 'x';
      shape += std::to_string(dims[d]);
    }
    described = detail::str_cat(ndims == 0 ? std::int64_t{1} : dims[0], " ", what,
                                shape.empty() ? "" : " of ", shape);
  }
  TB_CHECK(!too_large, prefix, "header says ", described,
           ", more than the 2^40 bytes this reader accepts");
  // Nothing is allocated beyond what the file delivers (found by fuzzing: a 40-byte file
  // claiming 2 x 3.9e9 x 4 images made the reader allocate 31 GB before reading): a plain file's
  // payload is checked against its size; a gzip stream is read into a buffer that grows with the
  // data, and the tensor is allocated only once the whole payload arrived.
  const bool plain = gzdirect(file.get()) == 1;
  if (plain) {
    const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
    const std::uint64_t header_bytes = 4 + std::uint64_t{4} * ndims;
    if (!ec) {
      const std::uint64_t follow = file_bytes > header_bytes ? file_bytes - header_bytes : 0;
      TB_CHECK(total <= follow, prefix, "truncated: header says ", described, " (", total,
               " bytes) but only ", follow, " bytes follow");
    }
  }
  std::vector<std::uint8_t> staged;
  if (!plain) {
    std::uint64_t got_so_far = 0;
    while (got_so_far < total) {
      const std::uint64_t want = std::min<std::uint64_t>(
          total - got_so_far, std::max<std::uint64_t>(got_so_far, 1U << 20));
      staged.resize(static_cast<std::size_t>(got_so_far + want));
      const std::uint64_t n =
          read_some(file.get(), staged.data() + got_so_far, want, prefix, &ended_early);
      got_so_far += n;
      if (n < want) break;
    }
    TB_CHECK(got_so_far == total, prefix, "truncated: header says ", described, " (", total,
             " bytes) but only ", got_so_far, " bytes follow",
             ended_early ? " (the gzip stream ends early)" : "");
  }
  core::Tensor out =
      core::Tensor::empty(core::IntList(dims.data(), dims.size()), core::ScalarType::UInt8);
  auto* data = static_cast<std::uint8_t*>(out.data_ptr());
  std::uint64_t got = total;
  if (plain)
    got = read_some(file.get(), data, total, prefix, &ended_early);
  else if (total > 0)
    std::memcpy(data, staged.data(), static_cast<std::size_t>(total));
  TB_CHECK(got == total, prefix, "truncated: header says ", described, " (", total,
           " bytes) but only ", got, " bytes follow",
           ended_early ? " (the gzip stream ends early)" : "");

  std::uint64_t extra = 0;
  std::vector<std::uint8_t> scratch(1U << 16);
  while (true) {
    const std::uint64_t n =
        read_some(file.get(), scratch.data(), scratch.size(), prefix, &ended_early);
    extra += n;
    if (n < scratch.size()) break;
  }
  TB_CHECK(extra == 0, prefix, "trailing data: header says ", described, " (", total,
           " bytes) but ", total + extra, " bytes follow");
  TB_CHECK(!ended_early, prefix, "the gzip stream ends before its checksum: the file is cut short");
  return out;
}

}  // namespace tb::data
