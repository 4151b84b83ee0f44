// Helpers shared by the engine test suites.
#pragma once

#include <unistd.h>

#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <system_error>

#include "engine/data/registry.h"

namespace tb::test {

/// A run config of 20 quick steps: 4 Gaussian blobs in 16-D (synthetic-blobs, seed 5), an MLP
/// 16-32-4 with AdamW lr 0.01, evaluation every 10 steps. Suites add to it or --set over it.
inline const std::string kBlobs = R"(
[run]
name = "blobs"
seed = 5
steps = 20

[model]
kind = "mlp"
input = 16
hidden = [32]
classes = 4

[data]
kind = "synthetic-blobs"
batch_size = 32
workers = 0

[optimizer]
kind = "adamw"
lr = 0.01

[eval]
interval = 10
)";

/// A byte-level language model run of 20 quick steps: qwen-tiny (16 wide, 1 layer) on
/// synthetic text, AdamW lr 0.01, evaluation at steps 10 and 20 writing two 12-byte samples
/// each (eval.samples). Shared by the engine's and the GUI's sample tests.
inline const std::string kTinyLm = R"(
[run]
name = "lm"
steps = 20
seed = 2
[model]
kind = "qwen-tiny"
d_model = 16
n_layers = 1
n_heads = 2
context_length = 16
[data]
kind = "synthetic-text"
context_length = 16
batch_size = 4
workers = 0
[optimizer]
kind = "adamw"
lr = 0.01
[eval]
interval = 10
batches = 1
samples = 2
sample_tokens = 12
)";

/// Runs f and returns the message of the exception it throws, or "<no error>".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

/// A fresh temporary folder named `<prefix>_<pid>_<n>`, removed with everything in it when the
/// object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tb_test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The folder.
  const std::filesystem::path& path() const { return path_; }
  /// A run store path inside it.
  std::string db() const { return (path_ / "runs.sqlite").string(); }

 private:
  std::filesystem::path path_;
};

/// The bytes of file `p` ("" when it cannot be read).
inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Replaces file `p`'s contents with `bytes`.
inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

/// Registers (once per process) the data kind `name`: the kind `base` with `change` applied to
/// the splits it makes — a NaN sample, an unreadable training split — for tests of what a run
/// does with such data.
inline void register_derived_data_kind(const std::string& base, const std::string& name,
                                       const std::string& help,
                                       std::function<void(data::DataSplits&)> change) {
  if (data::dataset_registry().find(name) != nullptr) return;
  data::DatasetKind k = *data::dataset_registry().at(base);
  k.name = name;
  k.help = help;
  k.make = [make = k.make, change](const nlohmann::json& d, std::uint64_t seed) {
    data::DataSplits s = make(d, seed);
    change(s);
    return s;
  };
  data::dataset_registry().add(k);
}

}  // namespace tb::test
