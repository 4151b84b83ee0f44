#include "tests/fuzz/targets.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/core/error.h"
#include "engine/data/cifar.h"
#include "engine/data/idx.h"
#include "engine/data/image_decode.h"
#include "engine/data/token_file.h"
#include "engine/data/tokenizer.h"
#include "engine/nn/gpt.h"
#include "engine/rng/cpu_generator.h"
#include "engine/sched/lr_lambda_expr.h"
#include "engine/store/run_store.h"
#include "engine/train/run_config.h"
#include "engine/train/safetensors.h"
#include "engine/train/weights_io.h"

namespace tb::fuzz {

namespace {

// A scratch file of this process (parsers that read files get the bytes through the disk).
std::filesystem::path scratch(const char* name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("tb-fuzz-" + std::to_string(static_cast<long>(getpid())));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir / name;
}

void write(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace

void run_config(const std::uint8_t* data, std::size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  const std::string toml = all.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::istringstream in(all.substr(nul + 1));
    for (std::string line; std::getline(in, line);)
      overrides.push_back(line);
  }
  try {
    const train::RunConfig c = train::parse_run_config(toml, "fuzz.toml", overrides);
    // An accepted config must round-trip through its effective TOML.
    const std::string text = train::to_toml(c);
    if (train::to_toml(train::parse_run_config(text, "effective")) != text)
      throw std::logic_error("to_toml does not round-trip");
  } catch (const Error&) {
  }
}

void safetensors(const std::uint8_t* data, std::size_t size) {
  const auto path = scratch("f.safetensors");
  write(path, data, size);
  try {
    const train::SafetensorsFile f = train::load_safetensors(path);
    std::size_t bytes = 0;
    for (const auto& [name, t] : f.tensors)
      bytes += t.nbytes();
    // Nothing is allocated beyond the file's size.
    if (bytes > size) throw std::logic_error("tensors larger than the file");
  } catch (const Error&) {
  }
}

void idx(const std::uint8_t* data, std::size_t size) {
  const auto path = scratch("f.idx");
  write(path, data, size);
  try {
    const core::Tensor t = data::read_idx_u8(path, data::idx_u8_magic(3), "images", "fuzz");
    if (t.nbytes() > size) throw std::logic_error("tensor larger than the file");
  } catch (const Error&) {
  }
}

void cifar(const std::uint8_t* data, std::size_t size) {
  for (auto variant : {data::CifarVariant::kCifar10, data::CifarVariant::kCifar100}) {
    try {
      data::CifarRecords r;
      data::parse_cifar_records({data, size}, variant, true, "fuzz.bin", r);
      if (r.pixels.size() > size) throw std::logic_error("pixels larger than the file");
      const auto n = static_cast<std::int64_t>(r.labels.size());
      core::Tensor images = core::Tensor::empty({n, 3, 32, 32}, core::ScalarType::UInt8);
      std::copy(r.pixels.begin(), r.pixels.end(), images.data_ptr<std::uint8_t>());
      core::Tensor labels = core::Tensor::empty({n}, core::ScalarType::Int64);
      std::copy(r.labels.begin(), r.labels.end(), labels.data_ptr<std::int64_t>());
      data::ImageDatasetOptions o;
      o.augment.crop_padding = 4;
      o.augment.horizontal_flip = true;
      const data::ImageDataset ds("fuzz", images, labels,
                                  variant == data::CifarVariant::kCifar10 ? 10 : 100, o);
      std::vector<std::int64_t> idx;
      for (std::int64_t i = 0; i < std::min<std::int64_t>(n, 4); ++i)
        idx.push_back(i);
      (void)ds.get_batch(idx, data::BatchContext{});
    } catch (const Error&) {
    }
  }
}

void image(const std::uint8_t* data, std::size_t size) {
  for (std::int64_t channels : {1, 3}) {
    try {
      const data::DecodedImage img = data::decode_image({data, size}, channels, "fuzz");
      if (static_cast<std::int64_t>(img.pixels.size()) != img.width * img.height * channels)
        throw std::logic_error("decoded pixel count does not match the image size");
      if (img.width * img.height >
          (std::int64_t{16} << 20) + 1100 * static_cast<std::int64_t>(size))
        throw std::logic_error("more pixels than the file can hold");
      (void)data::resize_to_planes(img, 5, 7);
    } catch (const Error&) {
    }
  }
}

void tokens(const std::uint8_t* data, std::size_t size) {
  const auto path = scratch("f.tokens");
  write(path, data, size);
  try {
    data::TokenDatasetOptions o;
    o.context_length = 8;
    o.sampling = data::TextSampling::kSequential;
    const data::TokenDataset ds(data::open_token_stream(path.string(), data::TokenFormat::kAuto),
                                o);
    if (ds.stream().size * 2 > static_cast<std::int64_t>(size))
      throw std::logic_error("more tokens than the file holds");
    std::vector<std::int64_t> idx;
    for (std::int64_t i = 0; i < std::min<std::int64_t>(ds.size(), 4); ++i)
      idx.push_back(i);
    (void)ds.get_batch(idx, data::BatchContext{});
  } catch (const Error&) {
  }
}

void gpt2_bpe(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = bytes.find('\0');
  const std::string vocab = bytes.substr(0, nul);
  const std::string merges = nul == std::string::npos ? "" : bytes.substr(nul + 1);
  const auto vocab_path = scratch("vocab.json");
  const auto merges_path = scratch("merges.txt");
  write(vocab_path, reinterpret_cast<const std::uint8_t*>(vocab.data()), vocab.size());
  write(merges_path, reinterpret_cast<const std::uint8_t*>(merges.data()), merges.size());
  try {
    const auto bpe = data::read_gpt2_bpe(vocab_path, merges_path);
    for (const std::string& text : {std::string("It's 2026 \xe2\x80\x94 caf\xc3\xa9  ok\n"),
                                    bytes.substr(0, std::min<std::size_t>(bytes.size(), 256))}) {
      const auto ids = bpe->encode(text);
      if (bpe->decode(ids) != text) throw std::logic_error("decode(encode(text)) != text");
    }
    (void)bpe->decode(bpe->start_ids());
  } catch (const Error&) {
  }
}

void sentencepiece(const std::uint8_t* data, std::size_t size) {
  const auto path = scratch("f.model");
  write(path, data, size);
  try {
    const auto sp = data::load_sentencepiece(path);
    if (sp->vocab() <= 0) throw std::logic_error("a loaded model with no pieces");
    const std::string text("It's 2026 \xe2\x80\x94 caf\xc3\xa9  ok\n");
    for (const std::int64_t id : sp->encode(text))
      if (id < 0 || id >= sp->vocab()) throw std::logic_error("encode gave an id out of range");
    (void)sp->decode(sp->encode(text));
    (void)sp->decode(sp->start_ids());
    const std::int64_t edge[] = {0, sp->vocab() - 1};
    (void)sp->decode(edge);
    try {
      const std::int64_t outside[] = {sp->vocab()};
      (void)sp->decode(outside);
      throw std::logic_error("decode took an id outside the vocabulary");
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
}

void weights(const std::uint8_t* data, std::size_t size) {
  const auto path = scratch("w.safetensors");
  write(path, data, size);
  // The model of the seed corpus (tests/data/gpt2_tiny_hf.safetensors): 23 tokens in a padded
  // 32-row table.
  nn::GptConfig c;
  c.vocab = 23;
  c.padded_vocab = 32;
  c.context_length = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 16;
  rng::CpuGenerator gen;
  gen.manual_seed(1);
  nn::Gpt model(c, &gen);
  std::vector<std::vector<double>> before;
  for (const auto& [name, t] : model.state_dict())
    before.push_back(t.contiguous().to_vector<double>());
  try {
    (void)train::load_weights(model, path);
  } catch (const Error&) {
    std::size_t i = 0;
    for (const auto& [name, t] : model.state_dict())
      if (t.contiguous().to_vector<double>() != before[i++])
        throw std::logic_error("a refused weights file changed " + name);
  }
}

void lr_lambda(const std::uint8_t* data, std::size_t size) {
  const std::string expr(reinterpret_cast<const char*>(data), size);
  try {
    const sched::LrLambda f(expr);
    for (double epoch : {0.0, 1.0, 7.0, 1e6})
      (void)f(epoch);
  } catch (const Error&) {
  }
}

void store(const std::uint8_t* data, std::size_t size) {
  const auto path = scratch("f.sqlite");
  std::filesystem::remove(path.string() + "-wal");
  std::filesystem::remove(path.string() + "-shm");
  write(path, data, size);
  try {
    auto st = store::RunStore::open(path);
    for (const auto& r : st.list_runs()) {
      (void)st.get_run(r.id);
      for (const auto& k : st.metric_keys(r.id))
        (void)st.series(r.id, k);
      (void)st.events(r.id);
    }
  } catch (const Error&) {
  }
}

const std::vector<NamedTarget>& targets() {
  static const std::vector<NamedTarget> all = {{"run_config", &run_config},
                                               {"safetensors", &safetensors},
                                               {"idx", &idx},
                                               {"cifar", &cifar},
                                               {"tokens", &tokens},
                                               {"image", &image},
                                               {"gpt2_bpe", &gpt2_bpe},
                                               {"lr_lambda", &lr_lambda},
                                               {"store", &store},
                                               {"sentencepiece", &sentencepiece},
                                               {"weights", &weights}};
  return all;
}

}  // namespace tb::fuzz
