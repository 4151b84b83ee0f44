// safetensors: round trips of every dtype with metadata, the byte layout other tools read, a
// hand-written file, and malformed / truncated / hostile files rejected with messages.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/file_write.h"
#include "engine/ops/ops.h"
#include "engine/train/safetensors.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
using tb::core::ScalarType;
using tb::core::Tensor;
using tb::test::error_of;
namespace train = tb::train;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tb_safetensors_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A file made of an 8-byte length, `header` and `data` (the length may be forced).
  fs::path raw(const std::string& header, const std::string& data, std::uint64_t len = ~0ULL) {
    const fs::path p = dir_ / "raw.safetensors";
    std::ofstream out(p, std::ios::binary);
    const std::uint64_t n = len == ~0ULL ? header.size() : len;
    for (int i = 0; i < 8; ++i)
      out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << data;
    return p;
  }
  std::string load_error(const fs::path& p) {
    return error_of([&] { train::load_safetensors(p); });
  }
  fs::path dir_;
};

TEST_F(Safetensors, RoundTripEveryDtypeWithMetadata) {
  train::TensorList ts;
  ts.emplace_back("w.f64",
                  tb::ops::mul(tb::ops::arange(6, ScalarType::Float64).reshape({2, 3}), 0.5));
  ts.emplace_back("w.f32", tb::core::from_vector(std::vector<float>{1.5f, -2.25f, 3e-8f}));
  for (ScalarType t : {ScalarType::Float16, ScalarType::BFloat16, ScalarType::Int64,
                       ScalarType::Int32, ScalarType::Int16, ScalarType::Int8, ScalarType::UInt8}) {
    ts.emplace_back(std::string("t") + std::to_string(static_cast<int>(t)),
                    tb::ops::arange(5, ScalarType::Int64).to(t));
  }
  ts.emplace_back("flags", tb::core::from_vector(std::vector<bool>{true, false, true}));
  ts.emplace_back("scalar", tb::ops::full({}, 7.0));
  ts.emplace_back("empty", tb::ops::zeros({0, 4}));
  const fs::path p = dir_ / "m.safetensors";
  train::save_safetensors(p, ts, {{"format", "pt"}, {"step", "12"}});
  const auto f = train::load_safetensors(p);
  EXPECT_EQ(f.metadata.at("step"), "12");
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, ts[i].first);
    const Tensor& a = ts[i].second;
    const Tensor& b = f.tensors[i].second;
    EXPECT_EQ(a.dtype(), b.dtype()) << ts[i].first;
    EXPECT_EQ(tb::core::DimVector(a.sizes()), tb::core::DimVector(b.sizes())) << ts[i].first;
    EXPECT_EQ(a.nbytes(), b.nbytes());
    if (a.nbytes() == 0) continue;  // an empty tensor has no data pointer to compare
    EXPECT_EQ(std::memcmp(a.contiguous().data_ptr(), b.data_ptr(), a.nbytes()), 0) << ts[i].first;
  }
}

TEST_F(Safetensors, ByteLayoutIsTheStandardOne) {
  const fs::path p = dir_ / "x.safetensors";
  train::save_safetensors(p, {{"a", tb::core::from_vector(std::vector<float>{1, 2})},
                              {"b", tb::core::from_vector(std::vector<std::int64_t>{3})}});
  std::string bytes(fs::file_size(p), '\0');
  std::ifstream in(p, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);  // data area aligned
  ASSERT_EQ(bytes.size(), 8 + n + 16);
  const auto h = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["a"]["dtype"], "F32");
  EXPECT_EQ(h["a"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(h["b"]["dtype"], "I64");
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json::array({8, 16}));
  float two = 0;
  std::memcpy(&two, bytes.data() + 8 + n + 4, 4);
  EXPECT_EQ(two, 2.0f);
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors.tmp"));
}

TEST_F(Safetensors, ReadsAHandWrittenFile) {
  float v[3] = {0.5f, -1.0f, 4.0f};
  const std::string data(reinterpret_cast<const char*>(v), sizeof v);
  const auto f = train::load_safetensors(raw(
      R"({"__metadata__":{"who":"hand"},"x":{"dtype":"F32","shape":[3,1],"data_offsets":[0,12]}})",
      data));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), (std::vector<float>{0.5f, -1.0f, 4.0f}));
  EXPECT_EQ(f.tensors[0].second.size(0), 3);
  EXPECT_EQ(f.metadata.at("who"), "hand");
}

// A file of no tensors and no metadata (the optimizer state of SGD without momentum, in every
// checkpoint) had the header "null" and could not be read back: such a run never resumed. Its
// header is "{}" now, and a "null" one written before reads as the empty file it stands for.
TEST_F(Safetensors, AFileOfNoTensorsRoundTrips) {
  const fs::path p = dir_ / "empty.safetensors";
  train::save_safetensors(p, {});
  std::string bytes(fs::file_size(p), '\0');
  std::ifstream(p, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_EQ(nlohmann::json::parse(bytes.substr(8)), nlohmann::json::object()) << bytes.substr(8);
  EXPECT_TRUE(train::load_safetensors(p).tensors.empty());
  EXPECT_TRUE(train::load_safetensors(raw("null", "")).tensors.empty());
  EXPECT_NE(load_error(raw("null", "xy")).find("the header is not a JSON object"),
            std::string::npos);
}

TEST_F(Safetensors, MalformedFilesAreRejectedWithMessages) {
  const std::string ok8(8, '\0');
  auto has = [&](const fs::path& p, const std::string& what) {
    const std::string e = load_error(p);
    EXPECT_NE(e.find(what), std::string::npos) << "got: " << e;
    EXPECT_NE(e.find(p.string()), std::string::npos) << "the message names the file: " << e;
  };
  {
    const fs::path p = dir_ / "short.safetensors";
    std::ofstream(p, std::ios::binary) << "abc";
    has(p, "truncated: 3 bytes, no header");
  }
  has(raw("{}", "", 1ULL << 60), "exceeds the limit");  // hostile length: nothing allocated
  {
    // Another kind of file (a config given as run.init_from): said as what it is, not as the
    // header length its first 8 bytes would be.
    const fs::path p = dir_ / "config.toml";
    std::ofstream(p, std::ios::binary) << "[run]\nname = \"not weights\"\n";
    has(p,
        "is not a safetensors file (one starts with an 8-byte header length and a JSON "
        "header)");
  }
  has(raw(R"({"x":{})", "", 5000), "truncated: header length 5000 but only 7 bytes follow");
  has(raw("", "", 5000), "truncated: header length 5000 but only 0 bytes follow");  // cut at 8
  has(raw("[1,2]", ""), "the header is not a JSON object");
  has(raw("{not json", ""), "the header is not a JSON object");
  has(raw(R"({"x":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", "a"),
      "tensor 'x': unsupported dtype 'F8'");
  has(raw(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
      "data_offsets [0, 8] fall outside the 4-byte data area");
  has(raw(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", ok8),
      "data_offsets span 8 bytes but dtype and shape need 12");
  has(raw(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
          R"("y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
          ok8),
      "(overlapping tensors)");
  has(raw(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", ok8), "(a hole)");
  has(raw(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", ok8),
      "the data area has 8 bytes but the tensors cover 4");
  has(raw(R"({"x":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", ok8),
      "tensor 'x': shape overflows");
  has(raw(R"({"x":{"dtype":"F64","shape":[2147483648,2147483648],"data_offsets":[0,8]}})", ok8),
      "dtype and shape need more than 2^64");
  has(raw(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", ok8.substr(0, 4)),
      "shape entries must be integers >= 0");
  has(raw(R"({"x":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", "\x07"),
      "bool byte other than 0 or 1");
  has(raw(R"({"x":{"dtype":"F32","shape":[1]}})", ""), "needs dtype, shape and data_offsets");
  has(dir_ / "missing.safetensors", "cannot open the file");
  has(dir_, "is a folder, not a safetensors file");
  const fs::path fifo = dir_ / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  has(fifo, "is not a regular file");  // refused, not opened: reading a FIFO would block
  // What torch.save writes: a zip archive (PyTorch >= 1.6) or, before, a pickle — named as such,
  // with the conversion; a real safetensors file whose length bytes happen to look the same is
  // told apart by the '{' of its header.
  {
    const fs::path zip = dir_ / "ckpt.pt";
    std::ofstream(zip, std::ios::binary) << std::string("PK\x03\x04\x00\x00\x08\x00\x00\x00", 10);
    has(zip,
        "is a PyTorch file written by torch.save (a zip archive), not safetensors; convert "
        "it once with PyTorch: sd = torch.load(FILE, map_location=\"cpu\")");
    const fs::path pickle = dir_ / "pytorch_model.bin";
    std::ofstream(pickle, std::ios::binary) << std::string("\x80\x02\x8a\x0al\xfc\x9c\x46\xf9", 9);
    has(pickle, "(a pickle), not safetensors");
    EXPECT_EQ(load_error(pickle), error_of([&] { train::check_safetensors(pickle); }));
  }
  // A header of 0x280 = 640 bytes starts with the bytes 0x80 0x02, as a pickle does.
  {
    std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    header.resize(640, ' ');
    const fs::path p = raw(header, ok8);
    EXPECT_EQ(train::load_safetensors(p).tensors.size(), 1u);
    train::check_safetensors(p);
  }
}

// The reference writer (safetensors' serialize) puts an empty tensor at the offset of the tensor
// after it; the reader sorts ties on the start by the end, so both layouts read.
TEST_F(Safetensors, AnEmptyTensorMayShareItsOffsetWithTheNextOne) {
  float v = 2.5f;
  const std::string data(reinterpret_cast<const char*>(&v), sizeof v);
  const auto f =
      train::load_safetensors(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("b":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
                                  R"("c":{"dtype":"I64","shape":[0],"data_offsets":[4,4]}})",
                                  data));
  ASSERT_EQ(f.tensors.size(), 3u);
  for (const auto& [name, t] : f.tensors) {
    if (name == "a") {
      EXPECT_EQ(t.to_vector<float>(), std::vector<float>{2.5f});
    } else {
      EXPECT_EQ(t.numel(), 0) << name;
    }
  }
}

TEST_F(Safetensors, WriterRefusesBadNames) {
  const Tensor t = tb::ops::zeros({1});
  EXPECT_NE(error_of([&] {
              train::save_safetensors(dir_ / "a", {{"x", t}, {"x", t}});
            }).find("tensor name 'x' appears more than once"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              train::save_safetensors(dir_ / "a", {{"__metadata__", t}});
            }).find("invalid tensor name '__metadata__'"),
            std::string::npos);
}

// A file that cannot be written is named as the user gave it, with the reason; the temporary
// name it is written under first is ours and stays out of the message.
TEST_F(Safetensors, AnUnwritableTargetIsNamedWithTheReason) {
  const Tensor t = tb::ops::zeros({1});
  const fs::path missing = dir_ / "no-such-folder" / "w.safetensors";
  EXPECT_EQ(error_of([&] {
              train::save_safetensors(missing, {{"x", t}});
            }),
            "[safetensors] cannot write " + missing.string() + ": the folder " +
                missing.parent_path().string() + " does not exist");
  fs::create_directories(dir_ / "taken.safetensors.tmp");  // a folder where the file must go
  const std::string e = error_of([&] {
    train::save_safetensors(dir_ / "taken.safetensors", {{"x", t}});
  });
  EXPECT_EQ(
      e.rfind("[safetensors] cannot write " + (dir_ / "taken.safetensors").string() + ": ", 0), 0U)
      << e;
  EXPECT_EQ(e.find(".tmp"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(missing.parent_path()));
}

// `weights -o PATH` where PATH is a symbolic link writes the file it names and keeps the link;
// a FIFO (or a device: `-o /dev/full` replaced the device node) is refused, left as it was.
TEST_F(Safetensors, ALinkIsWrittenThroughAndADeviceOrFifoRefused) {
  const Tensor t = tb::ops::full({3}, 2.0f);
  const fs::path real = dir_ / "real.safetensors";
  const fs::path link = dir_ / "link.safetensors";
  fs::create_symlink(real.filename(), link);  // relative, as `ln -s` makes it
  train::save_safetensors(link, {{"x", t}});
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  ASSERT_TRUE(fs::is_regular_file(real));
  EXPECT_EQ(tb::ops::sum(train::load_safetensors(real).tensors.at(0).second).item(), 6.0);
  EXPECT_FALSE(fs::exists(dir_ / "real.safetensors.tmp"));

  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] {
              train::save_safetensors(fifo, {{"x", t}});
            }),
            "[safetensors] cannot write " + fifo.string() +
                ": it is a device, FIFO or socket, not a file (give a file's path)");
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
  const fs::path to_fifo = dir_ / "to-fifo";
  fs::create_symlink(fifo, to_fifo);
  EXPECT_NE(error_of([&] {
              train::save_safetensors(to_fifo, {{"x", t}});
            }).find("it is a device, FIFO or socket"),
            std::string::npos);
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
  // /dev/stdout on a pipe: a link to "pipe:[N]" that only the kernel resolves.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const fs::path proc = "/proc/self/fd/" + std::to_string(fds[1]);
  if (fs::exists(fs::path("/proc/self/fd"))) {
    EXPECT_NE(error_of([&] {
                train::save_safetensors(proc, {{"x", t}});
              }).find("it is a device, FIFO or socket"),
              std::string::npos);
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

// A disk that fills up mid-write (a 64 KiB file-size limit, in a child process): a clear error
// and no partial file, neither under the name asked for nor the temporary one.
TEST_F(Safetensors, AFullDiskLeavesNoPartialFile) {
  const fs::path path = dir_ / "w.safetensors";
  const train::TensorList big{{"w", tb::ops::full({1 << 18}, 1.0f)}};  // 1 MiB
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    const rlimit limit{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string e = error_of([&] { train::save_safetensors(path, big); });
    const bool clear = e == "[safetensors] writing " + path.string() + " failed (disk full?)";
    ::_exit(clear ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the error was not the disk-full message";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir_ / "w.safetensors.tmp"));
}

// core::write_whole, which sweeps and the tokenizer write through: on a full disk (the same
// file-size limit) the error names the file and gives the system's reason, the old file stays as
// it was, and no ".tmp" is left; with room the new content is in place.
TEST_F(Safetensors, WriteWholeKeepsTheOldFileOnAFullDisk) {
  const fs::path path = dir_ / "trial-0.toml";
  tb::core::write_whole(path, "old", "sweep");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string e =
        error_of([&] { tb::core::write_whole(path, std::string(1 << 20, 'x'), "sweep"); });
    ::_exit(e == "[sweep] cannot write " + path.string() + ": File too large" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the error was not the file-size message";
  EXPECT_EQ(tb::test::read_bytes(path), "old");
  EXPECT_FALSE(fs::exists(dir_ / "trial-0.toml.tmp"));
  tb::core::write_whole(path, "new", "sweep");
  EXPECT_EQ(tb::test::read_bytes(path), "new");
}

// A writer killed at a random moment (20 times, SIGKILL from the parent) never leaves a broken file
// under the real name: it holds the last whole version, old or new; only a ".tmp" may be left.
TEST_F(Safetensors, AWriteKilledMidwayNeverReplacesTheLastGoodFile) {
  const fs::path path = dir_ / "weights.safetensors";
  const auto version = [](float v) {
    return train::TensorList{{"w", tb::ops::full({4 << 20}, v)}};  // 16 MiB: writes take a while
  };
  train::save_safetensors(path, version(1.0f));
  // Made before forking: the child only writes files (no kernels, no thread pool).
  const train::TensorList two = version(2.0f);
  const train::TensorList three = version(3.0f);
  std::mt19937 rng(12345);
  int interrupted = 0;
  for (int round = 0; round < 20; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child writes version 2, 3, 2, 3, ... until it is killed (plain file I/O only).
      for (int i = 0;; ++i)
        train::save_safetensors(path, i % 2 == 0 ? two : three);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 150000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    const auto f = train::load_safetensors(path);  // whole, whatever moment the kill came
    ASSERT_EQ(f.tensors.size(), 1u);
    const auto v = f.tensors.at(0).second.to_vector<float>();
    ASSERT_EQ(v.size(), std::size_t{4} << 20);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [&](float x) { return x == v[0]; }))
        << "round " << round << ": a mixed file";
    EXPECT_TRUE(v[0] >= 1.0f && v[0] <= 3.0f);
    interrupted += fs::exists(path.string() + ".tmp") ? 1 : 0;
  }
  // Most kills land inside a write (the temporary file is left behind, the real one intact).
  EXPECT_GT(interrupted, 0);
}

}  // namespace
