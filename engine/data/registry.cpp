// The data-set registry and the built-in kinds.
#include "engine/data/registry.h"

#include <cmath>
#include <filesystem>
#include <tuple>
#include <utility>

#include "engine/core/error.h"
#include "engine/data/cifar.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/idx.h"
#include "engine/data/image_folder.h"
#include "engine/data/synthetic.h"
#include "engine/data/text_dataset.h"
#include "engine/data/token_file.h"

#include <tuple>
#include <utility>

namespace tb::data {

namespace {

std::string path_of(const nlohmann::json& d) {
  return d.value("path", std::string());
}

// Training-split augmentation keys of the image kinds.
std::vector<core::FieldSpec> augment_fields() {
  using core::FieldSpec;
  using core::FieldType;
  return {FieldSpec("random_crop", FieldType::kInt, 0,
                    "training images: pad each side with this many zero pixels and crop back at "
                    "a random offset (torchvision RandomCrop(padding=...)); 0 = off")
              .at_least(0),
          FieldSpec("random_flip", FieldType::kBool, false,
                    "training images: mirror left-right with probability 1/2")};
}

ImageAugment augment_of(const nlohmann::json& d) {
  ImageAugment a;
  a.crop_padding = d.value("random_crop", std::int64_t{0});
  a.horizontal_flip = d.value("random_flip", false);
  return a;
}

DatasetKind fashion_mnist_kind() {
  DatasetKind k;
  k.name = "fashion-mnist";
  k.reads = {"path", "normalize"};
  k.help = "Zalando's 28x28 clothing images, 10 classes (Debian's dataset-fashion-mnist)";
  k.task = core::kTaskClassification;
  k.shape = [](const nlohmann::json&) {
    core::DataShape s;
    s.kind = "fashion-mnist";
    s.task = core::kTaskClassification;
    s.features = FashionMnist::kPixels;
    s.features_note = "28x28 pixels";
    s.classes = FashionMnist::kNumClasses;
    return s;
  };
  k.fields = augment_fields();
  k.make = [](const nlohmann::json& d, std::uint64_t) {
    FashionMnistOptions o;
    if (!path_of(d).empty()) o.dir = path_of(d);
    o.normalize = d.value("normalize", true);
    o.augment = augment_of(d);
    DataSplits s;
    s.train = std::make_shared<FashionMnist>(o);
    o.augment = ImageAugment{};  // evaluation sees the images as they are
    o.split = FashionMnistSplit::kTest;
    s.eval = std::make_shared<FashionMnist>(o);
    return s;
  };
  // The label file's header: 60000 labels, without decompressing the images.
  k.train_size = [](const nlohmann::json& d, std::uint64_t) {
    const std::filesystem::path dir = path_of(d).empty()
                                          ? std::filesystem::path(kFashionMnistDefaultDir)
                                          : std::filesystem::path(path_of(d));
    return read_idx_u8(FashionMnist::labels_file(dir, FashionMnistSplit::kTrain), idx_u8_magic(1),
                       "labels", "fashion-mnist")
        .size(0);
  };
  return k;
}

std::int64_t cifar_classes(CifarVariant v, const nlohmann::json& d) {
  if (v == CifarVariant::kCifar10) return 10;
  return d.value("labels", std::string("fine")) == "coarse" ? 20 : 100;
}

DatasetKind cifar_kind(CifarVariant v) {
  DatasetKind k;
  k.name = cifar_name(v);
  k.reads = {"path", "normalize"};
  k.help = v == CifarVariant::kCifar10
               ? "CIFAR-10's 32x32 colour images, 10 classes (binary version: data.path = the "
                 "cifar-10-batches-bin folder)"
               : "CIFAR-100's 32x32 colour images, 100 fine or 20 coarse classes (binary "
                 "version: data.path = the cifar-100-binary folder)";
  k.task = core::kTaskClassification;
  k.shape = [v](const nlohmann::json& d) {
    core::DataShape s;
    s.kind = cifar_name(v);
    s.task = core::kTaskClassification;
    s.features = 3 * 32 * 32;
    s.features_note = "3x32x32 pixels";
    s.classes = cifar_classes(v, d);
    return s;
  };
  k.path_required = v == CifarVariant::kCifar100
                        ? "the cifar-100-binary folder of CIFAR-100's binary version (from "
                          "https://www.cs.toronto.edu/~kriz/cifar.html)"
                        : "the cifar-10-batches-bin folder of CIFAR-10's binary version (from "
                          "https://www.cs.toronto.edu/~kriz/cifar.html)";
  k.fields = augment_fields();
  if (v == CifarVariant::kCifar100)
    k.fields.push_back(core::FieldSpec("labels", core::FieldType::kString, "fine",
                                       "which labels: fine (100 classes) or coarse (20)")
                           .one_of({"fine", "coarse"}));
  k.make = [v](const nlohmann::json& d, std::uint64_t) {
    CifarOptions o;
    o.dir = path_of(d);
    o.variant = v;
    o.fine_labels = cifar_classes(v, d) != 20;
    o.image.normalize = d.value("normalize", true);
    o.image.augment = augment_of(d);
    DataSplits s;
    s.train = load_cifar(o);
    o.train = false;
    o.image.augment = ImageAugment{};
    s.eval = load_cifar(o);
    return s;
  };
  return k;
}

// data.size of an image folder: [height, width]; one number (8 or [8]): square.
std::pair<std::int64_t, std::int64_t> image_size_of(const nlohmann::json& d) {
  const auto it = d.find("size");
  if (it == d.end()) return {32, 32};
  if (it->is_number_integer()) return {it->get<std::int64_t>(), it->get<std::int64_t>()};
  if (!it->is_array() || it->empty()) return {32, 32};
  const std::int64_t h = (*it)[0].get<std::int64_t>();
  return {h, it->size() >= 2 ? (*it)[1].get<std::int64_t>() : h};
}

// The image folder's own checks: a size of one or two whole pixel counts, grey or RGB.
std::optional<core::FieldProblem> validate_image_folder(const nlohmann::json& d) {
  if (const auto it = d.find("size"); it != d.end()) {
    const bool one = it->is_number_integer();
    bool ok = one || (it->is_array() && !it->empty() && it->size() <= 2);
    if (ok && !one)
      for (const auto& e : *it)
        ok = ok && e.is_number_integer();
    if (!ok)
      return core::FieldProblem{
          "size", "expected [height, width] or one number (a square), found " + it->dump()};
    const auto [h, w] = image_size_of(d);
    if (h < 1 || w < 1 || h > 65536 || w > 65536)
      return core::FieldProblem{"size", "expected sides of 1 to 65536 pixels, found " + it->dump()};
  }
  const std::int64_t c = d.value("channels", std::int64_t{3});
  if (c != 1 && c != 3)
    return core::FieldProblem{"channels",
                              "expected 1 (grey) or 3 (RGB), found " + std::to_string(c)};
  // Its classes are its subfolders, listed while the config is read: a path that is not a folder
  // is said here, as the config's mistake (absolute: a relative path is the current folder's);
  // likewise the validation folder, which would otherwise fail the run once it loads.
  for (const char* key : {"path", "val_path"}) {
    const std::string path = d.value(key, std::string());
    if (path.empty()) continue;
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (std::filesystem::is_directory(st)) continue;
    const std::string shown = std::filesystem::absolute(path, ec).string();
    return core::FieldProblem{
        key,
        (std::filesystem::exists(st) ? shown + " is not a folder" : shown + ": no such folder") +
            " (image-folder takes a folder with one subfolder of images per class)"};
  }
  return std::nullopt;
}

DatasetKind image_folder_kind() {
  using core::FieldSpec;
  using core::FieldType;
  DatasetKind k;
  k.name = "image-folder";
  k.reads = {"path", "val_fraction", "normalize"};
  k.help =
      "a folder of PNG/JPEG images, one subfolder per class (torchvision's ImageFolder layout), "
      "decoded once and resized to data.size";
  k.task = core::kTaskClassification;
  k.path_required = "a folder with one subfolder of images per class";
  k.fields = {FieldSpec("size", FieldType::kAny, std::vector<std::int64_t>{32, 32},
                        "[height, width] every image is resized to (antialiased bilinear, as "
                        "torchvision's Resize); one number: square")
                  .documented_as("array of integers or integer", ">= 1"),
              FieldSpec("channels", FieldType::kInt, 3, "1 (grey) or 3 (RGB)")
                  .at_least(1)
                  .at_most(3)
                  .documented_as("integer", "1 or 3"),
              FieldSpec("val_path", FieldType::kString, "",
                        "validation folder with the same class subfolders; \"\" = the last "
                        "val_fraction of each class of data.path (by file name)")};
  for (auto& f : augment_fields())
    k.fields.push_back(std::move(f));
  k.validate = validate_image_folder;
  k.shape = [](const nlohmann::json& d) {
    core::DataShape s;
    s.kind = "image-folder";
    s.task = core::kTaskClassification;
    const auto [h, w] = image_size_of(d);
    const std::int64_t c = d.value("channels", std::int64_t{3});
    s.features = c * h * w;
    s.features_note =
        std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) + " pixels";
    // The classes are the subfolders: listing them reads no image. One without images, or a
    // single class, is said here (the model's class count would be blamed otherwise, and a
    // classifier of one class learns nothing: loss 0, accuracy 1).
    const std::filesystem::path dir = path_of(d);
    const auto classes = image_folder_classes(dir);
    TB_CHECK(classes.size() >= 2, "[image-folder] ", dir.string(), " has one class folder (",
             classes.front(),
             "): a classifier needs two or more, one subfolder of images per class");
    for (const auto& name : classes)
      TB_CHECK(image_folder_has_image(dir / name), "[image-folder] ", (dir / name).string(),
               " (class ", name, ") has no .png, .jpg or .jpeg images, in it or its subfolders");
    s.classes = static_cast<std::int64_t>(classes.size());
    return s;
  };
  k.make = [](const nlohmann::json& d, std::uint64_t) {
    ImageFolderOptions o;
    o.dir = path_of(d);
    o.val_dir = d.value("val_path", std::string());
    o.val_fraction = d.value("val_fraction", 0.1);
    std::tie(o.height, o.width) = image_size_of(d);
    o.channels = d.value("channels", std::int64_t{3});
    o.image.normalize = d.value("normalize", true);
    o.image.augment = augment_of(d);
    ImageFolderSplits loaded = load_image_folder(o);
    DataSplits s;
    s.train = loaded.train;
    s.eval = loaded.eval;
    std::string note = "image-folder " + o.dir.string() + ": " +
                       std::to_string(loaded.classes.size()) + " classes, " +
                       std::to_string(loaded.train->size()) + " images to train, " +
                       std::to_string(loaded.eval->size()) + " to validate";
    // Images per class, the first 10 of them: a class much smaller than the rest shows.
    for (std::size_t c = 0; c < loaded.classes.size() && c < loaded.per_class.size(); ++c) {
      if (c == 10) {
        note += ", ...";
        break;
      }
      note +=
          (c == 0 ? " (" : ", ") + loaded.classes[c] + " " + std::to_string(loaded.per_class[c]);
    }
    if (!loaded.per_class.empty()) note += ")";
    s.notes.push_back(note);
    if (!loaded.skipped.empty()) {
      std::string skipped =
          "image-folder: left out " + std::to_string(loaded.skipped.size()) +
          (loaded.skipped.size() == 1 ? " file that is not a .png, .jpg or .jpeg image ("
                                      : " files that are not .png, .jpg or .jpeg images (");
      for (std::size_t i = 0; i < loaded.skipped.size() && i < 5; ++i)
        skipped += (i ? ", " : "") + loaded.skipped[i].string();
      skipped += loaded.skipped.size() > 5 ? ", ...)" : ")";
      s.notes.push_back(skipped);
    }
    if (!loaded.outside.empty()) {
      std::string outside = "image-folder: left out " + std::to_string(loaded.outside.size()) +
                            (loaded.outside.size() == 1 ? " file" : " files") +
                            " outside the class folders (an image belongs in DIR/CLASS/): ";
      for (std::size_t i = 0; i < loaded.outside.size() && i < 5; ++i)
        outside += (i ? ", " : "") + loaded.outside[i].string();
      outside += loaded.outside.size() > 5 ? ", ..." : "";
      s.notes.push_back(outside);
    }
    return s;
  };
  // Counted from the folder listing, without decoding an image (previews need only this).
  k.train_size = [](const nlohmann::json& d, std::uint64_t) {
    const std::filesystem::path dir = path_of(d);
    const bool held_out = d.value("val_path", std::string()).empty();
    const double fraction = d.value("val_fraction", 0.1);
    std::int64_t n = 0;
    for (const auto& c : image_folder_classes(dir)) {
      const auto files = static_cast<std::int64_t>(image_folder_files(dir / c).size());
      n += files -
           (held_out
                ? static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(files) + 0.5))
                : 0);
    }
    return n;
  };
  return k;
}

core::DataShape text_shape(const std::string& kind, const nlohmann::json& d) {
  core::DataShape s;
  s.kind = kind;
  s.task = core::kTaskLanguageModel;
  s.context_length = d.value("context_length", std::int64_t{64});
  s.vocab = 256;  // bytes
  return s;
}

// What a text folder gave: the files read, and a warning for those left out for a NUL byte
// (binary, or UTF-16 text: it would otherwise vanish from the data without a word; the fortune
// index files, *.dat, and a file reached twice through a link are left out as documented).
void note_text_files(const TextCorpus& corpus, DataSplits& s) {
  if (corpus.files.size() > 1 || !corpus.skipped.empty()) {
    std::size_t index_files = 0;
    for (const auto& f : corpus.skipped)
      index_files += f.extension() == ".dat";
    const std::size_t links = corpus.skipped.size() - index_files - corpus.binary.size();
    std::vector<std::string> left_out;
    if (index_files > 0) left_out.push_back(std::to_string(index_files) + " *.dat index");
    if (links > 0) left_out.push_back(std::to_string(links) + " reached again through a link");
    if (!corpus.binary.empty())
      left_out.push_back(std::to_string(corpus.binary.size()) + " binary");
    std::string note = "text: read " + std::to_string(corpus.files.size()) + " file" +
                       (corpus.files.size() == 1 ? "" : "s") + " (" +
                       std::to_string(corpus.size()) + " bytes) under " + corpus.source;
    for (std::size_t i = 0; i < left_out.size(); ++i)
      note += (i == 0 ? "; left out " : ", ") + left_out[i];
    s.notes.push_back(note);
  }
  if (corpus.binary.empty()) return;
  std::string binary = "text: left out " + std::to_string(corpus.binary.size()) + " file" +
                       (corpus.binary.size() == 1 ? "" : "s") +
                       " with a NUL byte (binary, or text in UTF-16: save it as UTF-8): ";
  for (std::size_t i = 0; i < corpus.binary.size() && i < 5; ++i)
    binary += (i ? ", " : "") + corpus.binary[i].string();
  if (corpus.binary.size() > 5) binary += ", ...";
  s.warnings.push_back(binary);
}

DataSplits text_splits(const TextCorpus& corpus, const nlohmann::json& d) {
  TextDatasetOptions o;
  o.context_length = d.value("context_length", std::int64_t{64});
  o.val_fraction = d.value("val_fraction", 0.1);
  DataSplits s;
  note_text_files(corpus, s);
  s.train = std::make_shared<TextDataset>(corpus, TextSplit::kTrain, o);
  o.sampling = TextSampling::kSequential;
  s.eval = std::make_shared<TextDataset>(corpus, TextSplit::kValidation, o);
  return s;
}

// The text kind's tokenizer: bytes, or the SentencePiece model data.tokenizer_model names.
std::shared_ptr<const Tokenizer> text_tokenizer(const nlohmann::json& d) {
  if (d.value("tokenizer", std::string("bytes")) != "sentencepiece") return byte_tokenizer();
  const std::string model = d.value("tokenizer_model", std::string());
  TB_CHECK(!model.empty(),
           "[text] data.tokenizer = \"sentencepiece\" needs data.tokenizer_model, the path of a "
           "SentencePiece .model file (trainbench-cli tokenizer train makes one)");
  try {
    return load_sentencepiece(model);
  } catch (const ValueError& e) {
    throw ValueError(detail::str_cat("[text] data.tokenizer_model: ", e.what()));
  }
}

// A tokenizer kind that reads data.tokenizer_model (`with_model`: "sentencepiece", "gpt2") needs
// it; the other (bytes, ids) does not read it, and a model file left there would be ignored.
std::optional<core::FieldProblem> check_tokenizer_model(const nlohmann::json& d,
                                                        const std::string& plain,
                                                        const std::string& with_model,
                                                        const std::string& model_is) {
  const std::string tokenizer = d.value("tokenizer", plain);
  const std::string model = d.value("tokenizer_model", std::string());
  if (tokenizer == with_model && model.empty())
    return core::FieldProblem{
        "tokenizer_model", "is required with data.tokenizer = \"" + with_model + "\": " + model_is};
  if (tokenizer != with_model && !model.empty())
    return core::FieldProblem{"tokenizer_model", "is only read with data.tokenizer = \"" +
                                                     with_model + "\", found tokenizer = \"" +
                                                     tokenizer + "\"; set data.tokenizer = \"" +
                                                     with_model + "\" to use " + model +
                                                     ", or remove the key"};
  return std::nullopt;
}

DatasetKind text_kind() {
  using core::FieldSpec;
  using core::FieldType;
  DatasetKind k;
  k.name = "text";
  k.reads = {"path", "context_length", "val_fraction"};
  k.help =
      "a text file or folder (default: Debian's fortunes), as bytes or SentencePiece pieces; "
      "next-token prediction";
  k.task = core::kTaskLanguageModel;
  k.fields = {FieldSpec("tokenizer", FieldType::kString, "bytes",
                        "bytes (256 ids) or sentencepiece (the pieces of data.tokenizer_model; "
                        "each line encoded on its own)")
                  .one_of({"bytes", "sentencepiece"}),
              FieldSpec("tokenizer_model", FieldType::kString, "",
                        "SentencePiece .model file (tokenizer = \"sentencepiece\"); its piece "
                        "count is the data's vocabulary")};
  // With SentencePiece the vocabulary is the model's piece count, read from its file; 0
  // (unknown) while that file is missing or unreadable, which the run itself then reports.
  k.shape = [](const nlohmann::json& d) {
    core::DataShape s = text_shape("text", d);
    if (d.value("tokenizer", std::string("bytes")) == "sentencepiece") {
      try {
        s.vocab = text_tokenizer(d)->vocab();
      } catch (const ValueError&) {
        s.vocab = 0;
      }
    }
    return s;
  };
  k.make = [](const nlohmann::json& d, std::uint64_t) {
    const TextCorpus corpus =
        path_of(d).empty() ? load_text_corpus() : load_text_corpus(path_of(d));
    if (d.value("tokenizer", std::string("bytes")) != "sentencepiece")
      return text_splits(corpus, d);
    const auto tokenizer = text_tokenizer(d);
    TokenDatasetOptions o;
    o.context_length = d.value("context_length", std::int64_t{64});
    o.vocab = tokenizer->vocab();
    o.val_fraction = d.value("val_fraction", 0.1);
    TB_CHECK(o.val_fraction > 0.0, "[text] data.val_fraction is 0: there is no validation split");
    TokenStream ids = token_stream_from_ids(encode_corpus_lines(*tokenizer, corpus),
                                            corpus.source + " (" + tokenizer->describe() + ")");
    DataSplits s;
    note_text_files(corpus, s);
    s.train = std::make_shared<TokenDataset>(ids, o);
    o.split = TextSplit::kValidation;
    o.sampling = TextSampling::kSequential;
    s.eval = std::make_shared<TokenDataset>(std::move(ids), o);
    return s;
  };
  k.tokenizer = text_tokenizer;
  k.validate = [](const nlohmann::json& d) {
    return check_tokenizer_model(
        d, "bytes", "sentencepiece",
        "the path of a SentencePiece .model file (trainbench-cli tokenizer train makes one)");
  };
  return k;
}

// The tokens kind's tokenizer: none (ids), or GPT-2's BPE from data.tokenizer_model, whose
// vocabulary must fit data.vocab.
std::shared_ptr<const Tokenizer> tokens_tokenizer(const nlohmann::json& d) {
  if (d.value("tokenizer", std::string("ids")) != "gpt2") return nullptr;
  const std::string model = d.value("tokenizer_model", std::string());
  TB_CHECK(!model.empty(),
           "[tokens] data.tokenizer = \"gpt2\" needs data.tokenizer_model, the path of GPT-2's "
           "vocab.json (or encoder.json) with merges.txt (or vocab.bpe) beside it");
  std::shared_ptr<const Tokenizer> t;
  try {
    t = load_gpt2_bpe(model);
  } catch (const ValueError& e) {
    throw ValueError(detail::str_cat("[tokens] data.tokenizer_model: ", e.what()));
  }
  const std::int64_t vocab = d.value("vocab", std::int64_t{50257});
  TB_CHECK(t->vocab() <= vocab, "[tokens] data.tokenizer_model ", model, " has ", t->vocab(),
           " tokens, more than data.vocab = ", vocab);
  return t;
}

// "tokens data.path 'fineweb_train_*.bin': 3 files (2 llm.c, 1 raw uint16), 300000000 tokens
// (a.bin, b.bin, c.bin)": what a path or pattern matched.
std::string token_note(const std::string& key, const TokenStream& stream) {
  std::int64_t llmc = 0, raw = 0;
  for (const auto& f : stream.files)
    (f->layout().offset > 0 ? llmc : raw) += 1;
  std::string note = "tokens " + key + " '" + stream.source +
                     "': " + std::to_string(stream.files.size()) +
                     (stream.files.size() == 1 ? " file" : " files");
  if (llmc > 0 && raw > 0)
    note += " (" + std::to_string(llmc) + " llm.c, " + std::to_string(raw) + " raw uint16)";
  else
    note += llmc > 0 ? " (llm.c)" : " (raw)";
  note += ", " + std::to_string(stream.size) + " tokens";
  if (stream.files.size() > 1) {
    note += " (";
    for (std::size_t i = 0; i < stream.files.size() && i < 5; ++i)
      note += (i ? ", " : "") + stream.files[i]->path().filename().string();
    note += stream.files.size() > 5 ? ", ...)" : ")";
  }
  return note;
}

DatasetKind tokens_kind() {
  using core::FieldSpec;
  using core::FieldType;
  DatasetKind k;
  k.name = "tokens";
  k.reads = {"path", "context_length", "val_fraction"};
  k.help =
      "token files, memory-mapped: llm.c .bin shards or nanoGPT's raw uint16 train.bin "
      "(data.path: a file or a pattern such as fineweb_train_*.bin)";
  k.task = core::kTaskLanguageModel;
  k.path_required = "a token file, or a pattern such as data/fineweb_train_*.bin";
  k.fields = {
      FieldSpec("val_path", FieldType::kString, "",
                "validation token file or pattern; \"\" = the last val_fraction of data.path"),
      FieldSpec("format", FieldType::kString, "auto",
                "auto (llm.c when the file starts with its magic number, else raw uint16), "
                "llmc, uint16")
          .one_of({"auto", "llmc", "uint16"}),
      FieldSpec("vocab", FieldType::kInt, 50257,
                "vocabulary size; every token must be below it (GPT-2: 50257)")
          .at_least(1),
      FieldSpec("tokenizer", FieldType::kString, "ids",
                "ids (samples and prompts as token ids) or gpt2 (text through GPT-2's "
                "byte-level BPE, data.tokenizer_model)")
          .one_of({"ids", "gpt2"}),
      FieldSpec("tokenizer_model", FieldType::kString, "",
                "GPT-2 vocabulary file (vocab.json or encoder.json) with merges.txt or "
                "vocab.bpe beside it (tokenizer = \"gpt2\")")};
  k.shape = [](const nlohmann::json& d) {
    core::DataShape s = text_shape("tokens", d);
    s.vocab = d.value("vocab", std::int64_t{50257});
    s.vocab_note = "data.vocab = " + std::to_string(s.vocab) +
                   ", the ids the token files may hold (GPT-2's by default); set it to your "
                   "vocabulary's size";
    return s;
  };
  k.tokenizer = tokens_tokenizer;
  k.validate = [](const nlohmann::json& d) {
    return check_tokenizer_model(
        d, "ids", "gpt2",
        "the path of GPT-2's vocab.json (or encoder.json), with merges.txt (or vocab.bpe) beside "
        "it");
  };
  k.make = [](const nlohmann::json& d, std::uint64_t) {
    const TokenFormat format = token_format_from_name(d.value("format", std::string("auto")));
    const std::string val_path = d.value("val_path", std::string());
    TokenDatasetOptions o;
    o.context_length = d.value("context_length", std::int64_t{64});
    o.vocab = d.value("vocab", std::int64_t{50257});
    TokenStream train = open_token_stream(path_of(d), format);
    DataSplits s;
    s.notes.push_back(token_note("data.path", train));  // before the stream moves
    if (val_path.empty()) {
      o.val_fraction = d.value("val_fraction", 0.1);
      TB_CHECK(o.val_fraction > 0.0,
               "[tokens] data.val_fraction is 0 and data.val_path is "
               "empty: there is no validation split");
      s.train = std::make_shared<TokenDataset>(train, o);
      o.split = TextSplit::kValidation;
      o.sampling = TextSampling::kSequential;
      s.eval = std::make_shared<TokenDataset>(std::move(train), o);
    } else {
      TokenStream val = open_token_stream(val_path, format);
      for (const auto& v : val.files)
        for (const auto& t : train.files)
          if (std::filesystem::equivalent(v->path(), t->path()))
            s.warnings.push_back("tokens: " + v->path().string() +
                                 " is a validation file (data.val_path) and a training file "
                                 "(data.path): the evaluation reads tokens the run trains on");
      s.notes.push_back(token_note("data.val_path", val));
      s.train = std::make_shared<TokenDataset>(train, o);
      o.sampling = TextSampling::kSequential;
      s.eval = std::make_shared<TokenDataset>(std::move(val), o);
    }
    return s;
  };
  return k;
}

DatasetKind synthetic_blobs_kind() {
  DatasetKind k;
  k.name = "synthetic-blobs";
  k.help = "2,560 samples of 4 Gaussian blobs in 16-D drawn from run.seed (the last 512 held out)";
  k.task = core::kTaskClassification;
  k.shape = [](const nlohmann::json&) {
    core::DataShape s;
    s.kind = "synthetic-blobs";
    s.task = core::kTaskClassification;
    s.features = 16;
    s.classes = 4;
    return s;
  };
  k.make = [](const nlohmann::json&, std::uint64_t seed) {
    GaussianBlobsOptions o;
    o.num_samples = 2560;
    o.num_classes = 4;
    o.num_features = 16;
    o.seed = seed;
    const TensorDataset all = make_gaussian_blobs(o);
    DataSplits s;
    s.train = std::make_shared<TensorDataset>(all.input().narrow(0, 0, 2048),
                                              all.target().narrow(0, 0, 2048));
    s.eval = std::make_shared<TensorDataset>(all.input().narrow(0, 2048, 512),
                                             all.target().narrow(0, 2048, 512));
    return s;
  };
  return k;
}

DatasetKind synthetic_text_kind() {
  DatasetKind k;
  k.name = "synthetic-text";
  k.reads = {"context_length", "val_fraction"};
  k.help = "200,000 random bytes over a 10-letter alphabet drawn from run.seed";
  k.task = core::kTaskLanguageModel;
  k.shape = [](const nlohmann::json& d) { return text_shape("synthetic-text", d); };
  k.make = [](const nlohmann::json& d, std::uint64_t seed) {
    return text_splits(make_synthetic_text(200000, seed), d);
  };
  k.tokenizer = [](const nlohmann::json&) { return byte_tokenizer(); };
  return k;
}

}  // namespace

std::int64_t train_samples(const DatasetKind& kind, const nlohmann::json& settings,
                           std::uint64_t seed) {
  if (kind.train_size) return kind.train_size(settings, seed);
  const DataSplits splits = kind.make(settings, seed);
  TB_CHECK(splits.train != nullptr, "[data] ", kind.name, ": no training split");
  return splits.train->size();
}

std::shared_ptr<const Tokenizer> tokenizer_of(const DatasetKind& kind,
                                              const nlohmann::json& settings) {
  return kind.tokenizer ? kind.tokenizer(settings) : nullptr;
}

core::Registry<DatasetKind>& dataset_registry() {
  static core::Registry<DatasetKind>* registry = [] {
    auto* r = new core::Registry<DatasetKind>("data");
    r->add(fashion_mnist_kind());
    r->add(cifar_kind(CifarVariant::kCifar10));
    r->add(cifar_kind(CifarVariant::kCifar100));
    r->add(image_folder_kind());
    r->add(text_kind());
    r->add(tokens_kind());
    r->add(synthetic_blobs_kind());
    r->add(synthetic_text_kind());
    return r;
  }();
  return *registry;
}

}  // namespace tb::data
