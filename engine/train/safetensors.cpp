#include "engine/train/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "engine/core/error.h"

namespace tb::train {

using core::ScalarType;
using core::Tensor;

namespace {

struct DtypeName {
  ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {ScalarType::Float64, "F64"},   {ScalarType::Float32, "F32"}, {ScalarType::Float16, "F16"},
    {ScalarType::BFloat16, "BF16"}, {ScalarType::Int64, "I64"},   {ScalarType::Int32, "I32"},
    {ScalarType::Int16, "I16"},     {ScalarType::Int8, "I8"},     {ScalarType::UInt8, "U8"},
    {ScalarType::Bool, "BOOL"},
};

const char* dtype_name(ScalarType t, const std::string& tensor) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw TypeError(tb::detail::str_cat("[safetensors] tensor '", tensor, "' has dtype ", t,
                                      ", which safetensors files here do not store"));
}

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& what) {
  throw ValueError("[safetensors] " + path.string() + ": " + what);
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const TensorList& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // An object even when empty: a file of no tensors (the state of SGD without momentum) was
  // written with the header "null", which no reader takes.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TB_CHECK(!name.empty() && name != "__metadata__", "[safetensors] invalid tensor name '", name,
             "'");
    TB_CHECK(names.insert(name).second, "[safetensors] tensor name '", name,
             "' appears more than once");
    TB_CHECK(t.defined(), "[safetensors] tensor '", name, "' is undefined");
    const Tensor c = t.to(core::Device()).contiguous();
    const std::uint64_t bytes = c.nbytes();
    header[name] = {{"dtype", dtype_name(c.dtype(), name)},
                    {"shape", std::vector<std::int64_t>(c.sizes().begin(), c.sizes().end())},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(c);
  }
  std::string text = header.dump();
  // Pad the header with spaces to a multiple of 8 so the data area is aligned (as the reference
  // writer does).
  text.append((8 - (text.size() % 8)) % 8, ' ');
  // Written beside the target under a temporary name, then renamed over it. Messages name the
  // file asked for: the temporary name is ours, not the user's. A symbolic link is written
  // through (the file it names is replaced, the link kept); a device, FIFO or socket is refused,
  // not replaced by a file of that name (`-o /dev/full` replaced the device node).
  std::filesystem::path target = path;
  {
    std::error_code ec;
    // What the path is, as the kernel resolves it (/dev/stdout on a pipe is a FIFO)...
    const auto st = std::filesystem::status(path, ec);
    TB_CHECK(st.type() == std::filesystem::file_type::not_found ||
                 st.type() == std::filesystem::file_type::regular ||
                 st.type() == std::filesystem::file_type::none,
             "[safetensors] cannot write ", path.string(), ": it is ",
             st.type() == std::filesystem::file_type::directory ? "a folder"
                                                                : "a device, FIFO or socket",
             ", not a file (give a file's path)");
    // ... and the name to replace, followed link by link: the file a link names may not exist
    // yet (weakly_canonical would then stop at the link itself).
    for (int hops = 0; std::filesystem::is_symlink(std::filesystem::symlink_status(target, ec));
         ++hops) {
      TB_CHECK(hops < 40, "[safetensors] cannot write ", path.string(),
               ": too many levels of symbolic links");
      const std::filesystem::path next = std::filesystem::read_symlink(target, ec);
      TB_CHECK(!ec, "[safetensors] cannot write ", path.string(),
               ": the symbolic link cannot be read (", ec.message(), ")");
      target = next.is_absolute() ? next : target.parent_path() / next;
    }
  }
  const std::filesystem::path tmp = target.string() + ".tmp";
  const std::filesystem::path folder =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  {
    std::error_code dir_ec;
    const auto st = std::filesystem::status(folder, dir_ec);
    TB_CHECK(st.type() != std::filesystem::file_type::not_found, "[safetensors] cannot write ",
             path.string(), ": the folder ", folder.string(), " does not exist");
    TB_CHECK(dir_ec || std::filesystem::is_directory(st), "[safetensors] cannot write ",
             path.string(), ": ", folder.string(), " is not a folder");
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const int open_errno = errno;
    TB_CHECK(out.good(), "[safetensors] cannot write ", path.string(), ": ",
             open_errno ? std::strerror(open_errno) : "cannot create a file in its folder");
    const std::uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& c : host)
      out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    out.flush();
    if (!out.good()) {
      out.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);  // no partial file left behind
      throw Error("[safetensors] writing " + path.string() + " failed (disk full?)");
    }
  }
  // Durable before it takes the name: a crash leaves either the old file or the new one, whole.
  std::error_code ec;
  try {
    sync_to_disk(tmp);
  } catch (const Error&) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw Error("[safetensors] cannot move the written file to " + path.string() + ": " + why);
  }
  sync_to_disk(folder);
}

void sync_to_disk(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TB_CHECK(fd >= 0, "[io] cannot open ", path.string(), " to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TB_CHECK(rc == 0, "[io] syncing ", path.string(), " to disk failed: ", std::strerror(err));
}

namespace {

// The reader; with `data` false, the checks alone (no tensor allocated or read).
SafetensorsFile read_safetensors(const std::filesystem::path& path, bool data) {
  // A folder opens as a stream on Linux and a FIFO blocks: only a regular file is read.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st)) bad(path, "is a folder, not a safetensors file");
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    bad(path, "is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) bad(path, std::string("cannot open the file (") + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) bad(path, "truncated: " + std::to_string(file_size) + " bytes, no header");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  if (!in.good()) bad(path, "read error in the header length");
  // What torch.save writes (a zip archive since PyTorch 1.6, a pickle before: nanoGPT's ckpt.pt,
  // pytorch_model.bin) is recognised by its first bytes, and said so with the conversion.
  // (A safetensors header starts with '{' after its length, whatever that length's bytes.)
  const bool json_follows = in.peek() == '{';
  const bool zip = len[0] == 'P' && len[1] == 'K' && len[2] == 3 && len[3] == 4;
  const bool pickle = len[0] == 0x80 && len[1] >= 2 && len[1] <= 5;
  if ((zip || pickle) && !json_follows)
    bad(path, std::string("is a PyTorch file written by torch.save (") +
                  (zip ? "a zip archive" : "a pickle") +
                  "), not safetensors; convert it once with PyTorch: sd = torch.load(FILE, "
                  "map_location=\"cpu\") (nanoGPT's ckpt.pt: sd = sd[\"model\"]), then "
                  "safetensors.torch.save_file({k: v.clone() for k, v in sd.items()}, "
                  "\"model.safetensors\") (clone: save_file refuses tensors that share memory, "
                  "as a tied lm_head.weight does); Hugging Face publishes GPT-2 as "
                  "model.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | len[i];
  // Any other file (a config, a text) reads as a huge header length: said as what it is.
  if ((n > kMaxSafetensorsHeader || n > file_size - 8) && !json_follows && file_size > 8)
    bad(path,
        "is not a safetensors file (one starts with an 8-byte header length and a JSON header)");
  if (n > kMaxSafetensorsHeader) {
    bad(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                  std::to_string(kMaxSafetensorsHeader) + " bytes");
  }
  if (n > file_size - 8) {
    bad(path, "truncated: header length " + std::to_string(n) + " but only " +
                  std::to_string(file_size - 8) + " bytes follow");
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in.good()) bad(path, "read error in the header");
  nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
  // "null": a file of no tensors as earlier builds wrote it (SGD without momentum's
  // optimizer state in every checkpoint): read as the empty file it stands for.
  if (!header.is_discarded() && header.is_null() && file_size - 8 - n == 0)
    header = nlohmann::json::object();
  if (header.is_discarded() || !header.is_object()) bad(path, "the header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - n;

  struct Entry {
    std::string name;
    ScalarType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin, end;
  };
  std::vector<Entry> entries;
  SafetensorsFile out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__ value '" + m.key() + "' is not text");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      bad(path, where + "needs dtype, shape and data_offsets");
    }
    Entry e;
    e.name = name;
    if (!v["dtype"].is_string()) bad(path, where + "dtype is not text");
    const std::string dt = v["dtype"].get<std::string>();
    bool known = false;
    for (const auto& d : kDtypes) {
      if (dt == d.name) {
        e.dtype = d.type;
        known = true;
      }
    }
    if (!known) bad(path, where + "unsupported dtype '" + dt + "'");
    if (!v["shape"].is_array()) bad(path, where + "shape is not a list");
    std::uint64_t numel = 1;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) bad(path, where + "shape entries must be integers >= 0");
      const auto d = s.get<std::uint64_t>();
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (d != 0 && numel > std::numeric_limits<std::uint64_t>::max() / d)) {
        bad(path, where + "shape overflows");
      }
      numel *= d;
      e.shape.push_back(static_cast<std::int64_t>(d));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      bad(path, where + "data_offsets must be two integers >= 0");
    }
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    if (e.begin > e.end || e.end > data_size) {
      bad(path, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                    "] fall outside the " + std::to_string(data_size) + "-byte data area");
    }
    const std::uint64_t esize = core::element_size(e.dtype);
    if (numel > std::numeric_limits<std::uint64_t>::max() / esize ||
        numel * esize != e.end - e.begin) {
      bad(path, where + "data_offsets span " + std::to_string(e.end - e.begin) +
                    " bytes but dtype and shape need " +
                    (numel > std::numeric_limits<std::uint64_t>::max() / esize
                         ? std::string("more than 2^64")
                         : std::to_string(numel * esize)));
    }
    entries.push_back(std::move(e));
  }
  // Non-overlapping, covering the data area exactly (no holes: what the format requires). An empty
  // tensor shares its offset with the next one (the reference writer puts it there), so ties on
  // the start go to the shorter span.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expect = 0;
  for (const auto& e : entries) {
    if (e.begin != expect) {
      bad(path, "tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) +
                    " of the data area, expected " + std::to_string(expect) +
                    (e.begin < expect ? " (overlapping tensors)" : " (a hole)"));
    }
    expect = e.end;
  }
  if (expect != data_size) {
    bad(path, "the data area has " + std::to_string(data_size) + " bytes but the tensors cover " +
                  std::to_string(expect));
  }
  // Valid: allocate and read (the total equals the file's remaining size).
  if (!data) return out;
  for (const auto& e : entries) {
    Tensor t = Tensor::empty(core::IntList(e.shape.data(), e.shape.size()), e.dtype);
    if (e.end > e.begin) {
      in.seekg(static_cast<std::streamoff>(8 + n + e.begin));
      in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
      if (!in.good()) bad(path, "read error in tensor '" + e.name + "'");
    }
    if (e.dtype == ScalarType::Bool) {
      const auto* b = static_cast<const unsigned char*>(t.data_ptr());
      for (std::uint64_t i = 0; i < e.end - e.begin; ++i)
        if (b[i] > 1) bad(path, "tensor '" + e.name + "' holds a bool byte other than 0 or 1");
    }
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  return read_safetensors(path, true);
}

void check_safetensors(const std::filesystem::path& path) {
  (void)read_safetensors(path, false);
}

}  // namespace tb::train
