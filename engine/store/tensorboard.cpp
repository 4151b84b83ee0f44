// TensorBoard event files (see tensorboard.h for the format and its sources).
#include "engine/store/tensorboard.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "engine/core/error.h"
#include "engine/store/run_store.h"

namespace tb::store {
namespace {

// ---- protocol buffer wire format (https://protobuf.dev/programming-guides/encoding/) ----------
enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_tag(std::string& out, std::uint32_t field, WireType type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | type);
}

template <typename T>
void put_little_endian(std::string& out, T bits) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out += static_cast<char>((bits >> (8 * i)) & 0xFF);
}

void put_double(std::string& out, std::uint32_t field, double v) {
  put_tag(out, field, kFixed64);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  put_little_endian(out, bits);
}

void put_float(std::string& out, std::uint32_t field, float v) {
  put_tag(out, field, kFixed32);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  put_little_endian(out, bits);
}

void put_int(std::string& out, std::uint32_t field, std::int64_t v) {
  put_tag(out, field, kVarint);
  put_varint(out, static_cast<std::uint64_t>(v));  // int64: two's complement, 10 bytes if < 0
}

void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// ---- the messages (tensorflow/core/util/event.proto, framework/summary.proto, tensor.proto) --
// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5.
// Summary: value = 1 (repeated Summary.Value). Summary.Value: tag = 1, simple_value = 2 (float),
// tensor = 8 (TensorProto), metadata = 9 (SummaryMetadata). SummaryMetadata: plugin_data = 1
// (PluginData: plugin_name = 1). TensorProto: dtype = 1 (DT_STRING = 7), tensor_shape = 2 (an
// empty TensorShapeProto: a scalar), string_val = 8.
constexpr std::int64_t kDtString = 7;

std::string scalar_value(const std::string& tag, double v) {
  std::string value;
  put_bytes(value, 1, tag);
  put_float(value, 2, static_cast<float>(v));
  return value;
}

std::string text_value(const std::string& tag, const std::string& text) {
  std::string plugin, metadata, tensor, value;
  put_bytes(plugin, 1, "text");
  put_bytes(metadata, 1, plugin);
  put_int(tensor, 1, kDtString);
  put_bytes(tensor, 2, "");
  put_bytes(tensor, 8, text);
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  return value;
}

std::string event(double wall_time, std::int64_t step, const std::vector<std::string>& values) {
  std::string summary, out;
  for (const auto& v : values)
    put_bytes(summary, 1, v);
  put_double(out, 1, wall_time);
  put_int(out, 2, step);
  put_bytes(out, 5, summary);
  return out;
}

const std::array<std::uint32_t, 256>& crc32c_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  const auto& table = crc32c_table();
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data)
    c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_little_endian(length, static_cast<std::uint64_t>(data.size()));
  std::string out = length;
  put_little_endian(out, masked_crc32c(length));
  out.append(data);
  put_little_endian(out, masked_crc32c(data));
  return out;
}

std::string tensorboard_events(const RunStore& store, std::int64_t run) {
  const RunDetails details = store.get_run(run);
  // Every point by step: (wall time of the step's first point, values).
  struct Step {
    double time = INFINITY;
    std::vector<std::string> values;
  };
  std::map<std::int64_t, Step> steps;
  for (const std::string& key : store.metric_keys(run)) {
    for (const SeriesPoint& p : store.series(run, key)) {
      Step& s = steps[p.step];
      s.time = std::min(s.time, p.time);
      s.values.push_back(scalar_value(key, p.value));
    }
  }
  const double start = steps.empty() ? details.summary.created_at : steps.begin()->second.time;
  std::string version;
  put_double(version, 1, start);
  put_bytes(version, 3, "brain.Event:2");
  std::string out = tfrecord(version);
  // The config as text at the first step (TensorBoard's Text tab shows it as Markdown: indented
  // four spaces, it stays a code block).
  std::string config;
  std::size_t at = 0;
  while (at < details.config.size()) {
    const std::size_t nl = details.config.find('\n', at);
    const std::size_t end = nl == std::string::npos ? details.config.size() : nl;
    config += "    " + details.config.substr(at, end - at) + "\n";
    at = end + 1;
  }
  const std::int64_t first = steps.empty() ? 0 : steps.begin()->first;
  out += tfrecord(event(start, first, {text_value("config", config)}));
  for (const auto& [step, s] : steps)
    out += tfrecord(event(s.time, step, s.values));
  return out;
}

std::filesystem::path write_tensorboard(const RunStore& store, std::int64_t run,
                                        const std::filesystem::path& dir) {
  const std::string bytes = tensorboard_events(store, run);  // before touching the disk
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("[export] cannot create " + dir.string() + ": " + ec.message());
  const auto created = static_cast<std::int64_t>(store.get_run(run).summary.created_at);
  const std::filesystem::path file = dir / ("events.out.tfevents." + std::to_string(created) +
                                            ".trainbench-run" + std::to_string(run));
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("[export] cannot write " + file.string() + ": " + std::strerror(errno));
  errno = 0;
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    const std::string why = errno != 0 ? std::strerror(errno) : "disk full?";
    std::filesystem::remove(file, ec);  // no partial event file for TensorBoard to read
    throw Error("[export] cannot write " + file.string() + ": " + why);
  }
  return file;
}

}  // namespace tb::store
