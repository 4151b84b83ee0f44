// Tokenizers (engine/data/tokenizer.h) and the text kind over SentencePiece pieces: a model
// trained here on a generated text (the same bytes twice over: deterministic), texts that
// round-trip, errors naming the file or field, windows that are the encoded text's, and a run
// whose samples and `sample` come back as text.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/api/run_api.h"
#include "engine/api/tokenizer_api.h"
#include "engine/api/workbench_api.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/data/registry.h"
#include "engine/data/token_file.h"
#include "engine/data/tokenizer.h"
#include "tests/engine/test_util.h"

namespace {

using namespace tb;
using test::read_bytes;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// 600 lines of sentences over a small vocabulary of words (a fixed pseudo-random walk).
std::string corpus_text() {
  static const char* words[] = {"the",  "cat",   "sat",  "on",   "mat",  "a",     "dog",
                                "ran",  "after", "fast", "slow", "red",  "green", "ball",
                                "with", "and",   "then", "over", "hill", "under", "tree"};
  std::ostringstream os;
  std::uint32_t x = 12345;
  for (int line = 0; line < 600; ++line) {
    const int n = 4 + line % 7;
    for (int w = 0; w < n; ++w) {
      x = x * 1664525u + 1013904223u;
      os << (w ? " " : "") << words[(x >> 16) % 21];
    }
    os << (line % 5 == 4 ? ".\n\n" : ".\n");  // some empty lines
  }
  return os.str();
}

struct Fixture {
  test::TempDir dir{"tb_tokenizer"};
  std::filesystem::path text = dir.path() / "corpus.txt";
  std::filesystem::path model;
  Fixture() {
    std::ofstream(text) << corpus_text();
    data::SentencePieceTrainOptions o;
    o.model_prefix = dir.path() / "sp";
    o.vocab_size = 40;
    model = data::train_sentencepiece(data::load_text_corpus(text), o);
  }
};

TEST(Tokenizer, BytesAreTheirOwnIds) {
  const auto b = data::byte_tokenizer();
  EXPECT_EQ(b->vocab(), 256);
  EXPECT_EQ(b->encode("A\n\xff"), (std::vector<std::int64_t>{65, 10, 255}));
  const std::vector<std::int64_t> ids = {104, 105};
  EXPECT_EQ(b->decode(ids), "hi");
  const std::vector<std::int64_t> bad = {256};
  EXPECT_NE(error_of([&] { (void)b->decode(bad); }).find("id 256 is not a byte"),
            std::string::npos);
  EXPECT_EQ(b->start_ids(), std::vector<std::int64_t>{'\n'});
}

// Samples become one printable line of valid UTF-8: well-formed sequences kept (2 to 4 bytes),
// line breaks and tabs escaped, control characters and malformed bytes as '?' — a stray
// continuation byte, an overlong form, a surrogate, a code point beyond U+10FFFF, a sequence cut
// short.
TEST(Tokenizer, PrintableLinesAreValidUtf8) {
  EXPECT_EQ(data::printable_line("h\xC3\xA9llo\n\t\xE2\x82\xAC \xF0\x9F\x98\x80\x01\x7F"),
            "h\xC3\xA9llo\\n\\t\xE2\x82\xAC \xF0\x9F\x98\x80??");
  EXPECT_EQ(data::printable_line("a\x98"
                                 "b"),
            "a?b");
  EXPECT_EQ(data::printable_line("\xC0\xAF"), "??");
  EXPECT_EQ(data::printable_line("\xED\xA0\x80"), "???");
  EXPECT_EQ(data::printable_line("\xF4\x90\x80\x80"), "????");
  EXPECT_EQ(data::printable_line("\xE2\x82"), "??");
  EXPECT_EQ(data::printable_line("\xF4\x8F\xBF\xBF"), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  EXPECT_EQ(data::printable_line(""), "");
}

TEST(Tokenizer, ASentencePieceModelTrainsDeterministicallyAndRoundTrips) {
  Fixture f;
  ASSERT_TRUE(std::filesystem::exists(f.model));
  EXPECT_EQ(f.model.filename(), "sp.model");
  const auto sp = data::load_sentencepiece(f.model);
  EXPECT_EQ(sp->vocab(), 40);
  EXPECT_EQ(sp->describe(), "sentencepiece " + f.model.string());
  // The same text and options give the same model, byte for byte, and the same pieces and
  // scores in the .vocab files.
  data::SentencePieceTrainOptions o;
  o.model_prefix = f.dir.path() / "again";
  o.vocab_size = 40;
  const auto again = data::train_sentencepiece(data::load_text_corpus(f.text), o);
  auto vocab_of = [](std::filesystem::path m) { return read_bytes(m.replace_extension(".vocab")); };
  EXPECT_FALSE(vocab_of(f.model).empty());
  EXPECT_TRUE(vocab_of(again) == vocab_of(f.model));
  EXPECT_TRUE(read_bytes(again) == read_bytes(f.model));
  // Single-spaced words round-trip; frequent words are one piece each.
  const std::string line = "the dog ran after the red ball";
  const auto ids = sp->encode(line);
  EXPECT_LT(ids.size(), line.size());
  for (const auto id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 40);
  }
  EXPECT_EQ(sp->decode(ids), line);
  ASSERT_EQ(sp->start_ids().size(), 1u);
  EXPECT_EQ(sp->decode(sp->start_ids()), "");  // the word-start piece alone
  const std::vector<std::int64_t> bad = {40};
  EXPECT_NE(error_of([&] { (void)sp->decode(bad); }).find("id 40 is outside the vocabulary 0..39"),
            std::string::npos);
  // The corpus encodes line by line: the ids are the concatenation of each non-empty line's.
  const auto corpus = data::load_text_corpus(f.text);
  // Blocks of 512 lines are encoded in parallel: the ids must not depend on the thread count.
  const auto all = [&] {
    const core::ScopedNumThreads threads(3);
    return data::encode_corpus_lines(*sp, corpus);
  }();
  const auto serial = [&] {
    const core::ScopedNumThreads threads(1);
    return data::encode_corpus_lines(*sp, corpus);
  }();
  EXPECT_EQ(all, serial);
  std::vector<std::int32_t> by_line;
  std::istringstream in(corpus_text());
  for (std::string l; std::getline(in, l);) {
    if (l.empty()) continue;
    for (const auto id : sp->encode(l))
      by_line.push_back(static_cast<std::int32_t>(id));
  }
  EXPECT_EQ(all, by_line);
  // The CLI's report and encode.
  const std::string enc = api::encode_text(f.model.string(), line);
  EXPECT_NE(enc.find(std::to_string(ids.size()) + " pieces of sentencepiece"), std::string::npos)
      << enc;
  EXPECT_NE(enc.find("decoded: " + line), std::string::npos) << enc;
}

// -o naming a folder ("-o tok/") wrote the hidden files tok/.model and tok/.vocab.
TEST(Tokenizer, AModelPrefixThatIsAFolderIsRefused) {
  Fixture f;
  data::SentencePieceTrainOptions o;
  o.vocab_size = 40;
  for (const std::string& prefix : {f.dir.path().string() + "/", f.dir.path().string()}) {
    o.model_prefix = prefix;
    EXPECT_EQ(error_of([&] { (void)data::train_sentencepiece(data::load_text_corpus(f.text), o); }),
              "[tokenizer] -o " + prefix +
                  ": is a folder; give the name the files start with (PREFIX.model and "
                  "PREFIX.vocab are written, e.g. -o " +
                  (f.dir.path() / "tok").string() + ")");
  }
  EXPECT_FALSE(std::filesystem::exists(f.dir.path() / ".model"));
}

// A full disk while the model is written (here a file-size limit, which fails the same writes
// with EFBIG): an error naming the file and why, and neither file left behind; SentencePiece's
// own writer had reported success and left a cut .model and an empty .vocab.
TEST(Tokenizer, AModelThatCannotBeWrittenWholeIsNotLeftBehind) {
  Fixture f;
  const std::filesystem::path prefix = f.dir.path() / "full";
  // A full disk, as a file-size limit of this process while the model is written (in process:
  // the trainer starts threads, which a forked child of a threaded test binary may not under
  // ThreadSanitizer). The limit and SIGXFSZ are put back however the write ends.
  std::string message = "(no error)";
  {
    struct Limit {
      rlimit was{};
      void (*handler)(int) = nullptr;
      Limit() {
        getrlimit(RLIMIT_FSIZE, &was);
        handler = signal(SIGXFSZ, SIG_IGN);
        const rlimit small{100000, was.rlim_max};
        setrlimit(RLIMIT_FSIZE, &small);
      }
      ~Limit() {
        setrlimit(RLIMIT_FSIZE, &was);
        signal(SIGXFSZ, handler);
      }
    } limit;
    try {
      data::SentencePieceTrainOptions o;
      o.model_prefix = prefix;
      o.vocab_size = 40;
      (void)data::train_sentencepiece(data::load_text_corpus(f.text), o);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  EXPECT_EQ(message, "[tokenizer] cannot write " + prefix.string() + ".model: File too large");
  EXPECT_FALSE(std::filesystem::exists(prefix.string() + ".model"));
  EXPECT_FALSE(std::filesystem::exists(prefix.string() + ".model.tmp"));
  EXPECT_FALSE(std::filesystem::exists(prefix.string() + ".vocab"));
}

// The fuzz target's seed models (tests/fuzz/corpus/sentencepiece, made by hand as ModelProto
// bytes): the valid one encodes and decodes; a truncated, foreign or inconsistent one is refused
// with the file and what is wrong, in words rather than the library's source line.
TEST(Tokenizer, HandMadeAndHostileModels) {
  const std::string dir = std::string(TB_TEST_DATA_DIR) + "/../fuzz/corpus/sentencepiece/";
  const auto sp = data::load_sentencepiece(dir + "valid-bpe.model");
  EXPECT_EQ(sp->vocab(), 19);
  const auto ids = sp->encode("the cat sat");
  // ▁the ▁ c at ▁ s at: the merges the scores rank (▁the over ▁th over th), BPE's way.
  EXPECT_EQ(ids, (std::vector<std::int64_t>{17, 3, 6, 18, 3, 12, 18}));
  EXPECT_EQ(sp->decode(ids), "the cat sat");
  const std::pair<const char*, const char*> refused[] = {
      {"truncated.model", "its bytes do not parse as a SentencePiece ModelProto"},
      {"not-a-model.model", "its bytes do not parse as a SentencePiece ModelProto"},
      {"length-past-the-end.model", "its bytes do not parse as a SentencePiece ModelProto"},
      {"no-pieces.model", "(unk is not defined.)"},
      {"no-unknown-piece.model", "(unk is not defined.)"},
      {"two-unknown-pieces.model", "(unk is already defined.)"},
      {"duplicate-pieces.model", "(th is already defined.)"},
      {"empty-piece.model", "(piece must not be empty.)"},
      // Found by libFuzzer: a unigram piece of three NUL bytes; darts-clone's exception escaped
      // the library.
      {"nul-piece.model", "(its pieces cannot be indexed: failed to insert key: zero-length key)"}};
  for (const auto& [file, why] : refused) {
    const std::string msg = error_of([&] { (void)data::load_sentencepiece(dir + file); });
    EXPECT_NE(msg.find("[tokenizer] " + dir + file + " is not a SentencePiece model ("),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << file << ": " << msg;
  }
}

TEST(Tokenizer, BadFilesAndOptionsAreNamed) {
  test::TempDir dir("tb_tokenizer_bad");
  const auto missing = dir.path() / "missing.model";
  EXPECT_NE(error_of([&] {
              (void)data::load_sentencepiece(missing);
            }).find("[tokenizer] cannot open " + missing.string()),
            std::string::npos);
  const auto text = dir.path() / "not.model";
  std::ofstream(text) << "this is not a protobuf";
  EXPECT_NE(error_of([&] {
              (void)data::load_sentencepiece(text);
            }).find(text.string() + " is not a SentencePiece model"),
            std::string::npos);
  std::ofstream(dir.path() / "small.txt") << "ab ab ab\nba ba\n";
  const auto small = data::load_text_corpus(dir.path() / "small.txt");
  data::SentencePieceTrainOptions o;
  o.model_prefix = dir.path() / "m";
  o.vocab_size = 5000;  // far more pieces than the text has
  const std::string too_many = error_of([&] { (void)data::train_sentencepiece(small, o); });
  EXPECT_NE(too_many.find("[tokenizer] training on"), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("Vocabulary size"), std::string::npos) << too_many;
  o.vocab_size = 100;
  o.model_type = "wordpiece";
  EXPECT_NE(error_of([&] {
              (void)data::train_sentencepiece(small, o);
            }).find("model_type must be one of unigram, bpe, char, word, got 'wordpiece'"),
            std::string::npos);
  // Only lines longer than SentencePiece's longest sentence: said so (its own error was an
  // internal check, "[!sentences_.empty()]").
  o.model_type = "unigram";
  std::ofstream(dir.path() / "long.txt") << std::string(5000, 'a') << "\n"
                                         << std::string(4193, 'b');
  const auto long_lines = data::load_text_corpus(dir.path() / "long.txt");
  EXPECT_NE(error_of([&] { (void)data::train_sentencepiece(long_lines, o); })
                .find(": every non-empty line is longer than 4192 bytes, the longest sentence "
                      "SentencePiece trains on; break the text into lines"),
            std::string::npos);
  // An output folder that is not there is named before any training.
  o.model_prefix = dir.path() / "no-such-folder" / "m";
  EXPECT_EQ(error_of([&] { (void)data::train_sentencepiece(small, o); }),
            "[tokenizer] -o " + o.model_prefix.string() + ": the folder " +
                (dir.path() / "no-such-folder").string() + " does not exist");
}

// data.kind = "text" with tokenizer = "sentencepiece": the shape's vocabulary is the model's,
// windows are the encoded text's (validation: the last tenth, in order), and a missing model is
// named by its field — at load time, while the config check reads vocabulary 0 (not known).
TEST(Tokenizer, TheTextKindReadsPieces) {
  Fixture f;
  const auto kind = data::dataset_registry().at("text");
  nlohmann::json d = {{"path", f.text.string()},
                      {"tokenizer", "sentencepiece"},
                      {"tokenizer_model", f.model.string()},
                      {"context_length", 8},
                      {"val_fraction", 0.1}};
  EXPECT_EQ(kind->shape(d).vocab, 40);
  ASSERT_NE(data::tokenizer_of(*kind, d), nullptr);
  EXPECT_EQ(data::tokenizer_of(*kind, d)->vocab(), 40);
  const data::DataSplits s = kind->make(d, 1);
  const auto sp = data::load_sentencepiece(f.model);
  const auto ids = data::encode_corpus_lines(*sp, data::load_text_corpus(f.text));
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t val_begin = n - static_cast<std::int64_t>(static_cast<double>(n) * 0.1);
  const std::vector<std::int64_t> first = {0, 1};
  const data::Batch b = s.eval->get_batch(first, data::BatchContext{});
  ASSERT_EQ(b.input.size(1), 8);
  const auto in = b.input.to_vector<std::int64_t>();
  const auto tg = b.target.to_vector<std::int64_t>();
  for (std::int64_t j = 0; j < 8; ++j) {
    EXPECT_EQ(in[static_cast<std::size_t>(j)], ids[static_cast<std::size_t>(val_begin + j)]);
    EXPECT_EQ(tg[static_cast<std::size_t>(j)], ids[static_cast<std::size_t>(val_begin + j + 1)]);
    EXPECT_EQ(in[static_cast<std::size_t>(8 + j)],
              ids[static_cast<std::size_t>(val_begin + 8 + j)]);
  }
  const std::vector<std::int64_t> some = {0, 5, 9};
  for (const auto t :
       s.train->get_batch(some, data::BatchContext{7}).input.to_vector<std::int64_t>())
    EXPECT_LT(t, 40);
  // Bytes stay the default.
  EXPECT_EQ(kind->shape({{"path", f.text.string()}}).vocab, 256);
  EXPECT_EQ(data::tokenizer_of(*kind, {{"path", f.text.string()}})->describe(), "bytes");
  // A missing model.
  d["tokenizer_model"] = (f.dir.path() / "nope.model").string();
  EXPECT_EQ(kind->shape(d).vocab, 0);
  EXPECT_NE(error_of([&] {
              (void)kind->make(d, 1);
            }).find("[text] data.tokenizer_model: [tokenizer] cannot open"),
            std::string::npos);
  d.erase("tokenizer_model");
  EXPECT_NE(error_of([&] {
              (void)kind->make(d, 1);
            }).find("data.tokenizer = \"sentencepiece\" needs data.tokenizer_model"),
            std::string::npos);
}

// A qwen-tiny run config over the fixture's pieces, evaluated every `eval_interval` steps on
// `batches` batches, writing `samples` texts of `sample_tokens` each; the [optimizer] table
// comes last, for the caller to extend.
struct PiecesRun {
  std::string name;
  int vocab = 64;
  int steps = 40;
  int eval_interval = 40;
  int batches = 2;
  int samples = 1;
  int sample_tokens = 10;
};

std::string pieces_config(const Fixture& f, const PiecesRun& r) {
  std::ostringstream os;
  os << "[run]\nname = \"" << r.name << "\"\nsteps = " << r.steps << "\nseed = 3\n"
     << "[model]\nkind = \"qwen-tiny\"\nvocab = " << r.vocab
     << "\nd_model = 32\nn_layers = 1\nn_heads = 2\ncontext_length = 16\n"
     << "[data]\nkind = \"text\"\npath = \"" << f.text.string() << "\"\n"
     << "tokenizer = \"sentencepiece\"\ntokenizer_model = \"" << f.model.string() << "\"\n"
     << "context_length = 16\nbatch_size = 8\nworkers = 0\n"
     << "[eval]\ninterval = " << r.eval_interval << "\nbatches = " << r.batches
     << "\nsamples = " << r.samples << "\nsample_tokens = " << r.sample_tokens
     << "\n[optimizer]\nkind = \"adamw\"\n";
  return os.str();
}

// A qwen-tiny run over the pieces: it learns (eval loss below the uniform guess ln 40), writes
// its eval samples as text, and `sample` takes and gives text through the run's tokenizer.
TEST(Tokenizer, ARunOverPiecesSamplesText) {
  Fixture f;
  const auto config = f.dir.path() / "lm.toml";
  std::ofstream(config) << pieces_config(f, {.name = "pieces"}) << "lr = 0.01\n";
  const auto db = (f.dir.path() / "runs.sqlite").string();
  const auto run = api::run_training(api::RunRequest{config.string(), {}, db, std::nullopt, ""},
                                     nullptr, nullptr);
  ASSERT_EQ(run.status, "finished") << run.message;
  const auto evals = api::StoreReader(db).series(run.run_id, "eval.loss");
  ASSERT_FALSE(evals.value.empty());
  EXPECT_LT(evals.value.back(), std::log(40.0) - 0.5);
  // The sample event is text of the corpus's words (letters, spaces, full stops).
  int samples = 0;
  for (const auto& e : api::StoreReader(db).events(run.run_id)) {
    const auto at = e.find("sample at step 40: ");
    if (at == std::string::npos) continue;
    ++samples;
    const std::string text = e.substr(at + 19);
    EXPECT_FALSE(text.empty());
    for (const char c : text)
      EXPECT_TRUE((c >= 'a' && c <= 'z') || c == ' ' || c == '.' || c == '?') << e;
  }
  EXPECT_EQ(samples, 1);
  api::SampleRequest req;
  req.db_path = db;
  req.run_id = run.run_id;
  req.prompt = "the cat";
  req.tokens = 12;
  req.temperature = 0.0;
  const auto a = api::sample_run(req);
  EXPECT_TRUE(a.has_text);
  EXPECT_EQ(a.tokenizer, "sentencepiece " + f.model.string());
  EXPECT_EQ(a.text.rfind("the cat", 0), 0u) << a.text;
  EXPECT_EQ(a.tokens.size(), data::load_sentencepiece(f.model)->encode("the cat").size() + 12);
  req.prompt.clear();
  req.prompt_tokens = {3};
  EXPECT_NE(error_of([&] { (void)api::sample_run(req); }).find("give the prompt as text"),
            std::string::npos);
  // The tokenizer moved: the error says how to name its new place, and that gives the same text.
  const auto moved = f.model.parent_path() / "moved.model";
  std::filesystem::rename(f.model, moved);
  req.prompt_tokens.clear();
  req.prompt = "the cat";
  const std::string gone = error_of([&] { (void)api::sample_run(req); });
  EXPECT_NE(gone.find(f.model.string()), std::string::npos) << gone;
  EXPECT_NE(gone.find("; if the tokenizer moved, give its new place: trainbench-cli sample " +
                      std::to_string(run.run_id) + " --tokenizer-model PATH"),
            std::string::npos)
      << gone;
  req.tokenizer_model = (f.model.parent_path() / "nowhere.model").string();
  const std::string wrong = error_of([&] { (void)api::sample_run(req); });
  // Named by the option given, not the config key it stands in for.
  EXPECT_EQ(wrong.rfind("[sample] --tokenizer-model " + req.tokenizer_model + ": [tokenizer] ", 0),
            0u)
      << wrong;
  EXPECT_EQ(wrong.find("data.tokenizer_model"), std::string::npos) << wrong;
  EXPECT_EQ(wrong.find("if the tokenizer moved"), std::string::npos) << wrong;
  req.tokenizer_model = moved.string();
  const auto b = api::sample_run(req);
  EXPECT_EQ(b.text, a.text);
  EXPECT_EQ(b.tokenizer, "sentencepiece " + moved.string());
}

// A model whose table is larger than the tokenizer's pieces (model.vocab 256, 40 pieces), barely
// trained: its draws stay among the pieces, so its samples decode and the run finishes (a draw of
// an id the tokenizer lacks failed the run at its first evaluation).
TEST(Tokenizer, SamplesOfAModelLargerThanItsTokenizerStayAmongThePieces) {
  Fixture f;
  const auto config = f.dir.path() / "wide.toml";
  std::ofstream(config) << pieces_config(f, {.name = "wide",
                                             .vocab = 256,
                                             .steps = 1,
                                             .eval_interval = 1,
                                             .batches = 1,
                                             .samples = 2,
                                             .sample_tokens = 60});
  const auto db = (f.dir.path() / "runs.sqlite").string();
  const auto run = api::run_training(api::RunRequest{config.string(), {}, db, std::nullopt, ""},
                                     nullptr, nullptr);
  ASSERT_EQ(run.status, "finished") << run.message;
  api::SampleRequest req;
  req.db_path = db;
  req.run_id = run.run_id;
  req.prompt = "the";
  req.tokens = 200;
  const auto out = api::sample_run(req);
  const std::int64_t pieces = data::load_sentencepiece(f.model)->vocab();
  ASSERT_LT(pieces, 256);
  for (const std::int64_t t : out.tokens)
    EXPECT_LT(t, pieces);
}

}  // namespace

namespace {

// ---- GPT-2's byte-level BPE ---------------------------------------------------------------------

std::filesystem::path gpt2_vocab() {
  return std::filesystem::path(TB_TEST_DATA_DIR) / "gpt2_bpe" / "vocab.json";
}

// A GPT-2-format vocabulary and merges learned by tests/data/gen_gpt2_bpe_ref.py, and the ids
// openai/gpt-2's own encoder.py gives for texts that exercise every branch of its pattern
// (contractions, letters/numbers/other runs with their one leading space, white-space runs
// before words and at the end, non-Latin letters and digits, no-break and ideographic spaces,
// emoji, the special token's text) — and decoding gives each text back byte for byte.
TEST(Gpt2Bpe, EncodesAsGpt2sEncoderAndDecodesBack) {
  const auto bpe = data::load_gpt2_bpe(gpt2_vocab());
  EXPECT_EQ(bpe->vocab(), 377);
  EXPECT_EQ(bpe->describe(), "gpt2-bpe " + gpt2_vocab().string());
  EXPECT_EQ(bpe->start_ids(), std::vector<std::int64_t>{376});  // <|endoftext|>
  std::ifstream in(std::filesystem::path(TB_TEST_DATA_DIR) / "gpt2_bpe" / "expected.json");
  const auto ref = nlohmann::json::parse(in);
  ASSERT_GE(ref.at("cases").size(), 10u);
  for (const auto& c : ref.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<std::int64_t>>();
    EXPECT_EQ(bpe->encode(text), want) << "text: '" << text << "'";
    EXPECT_EQ(bpe->decode(want), text);
  }
  // Bytes that are not UTF-8 still round-trip (each is a character of no class).
  const std::string raw = "a\xff\xfe b\x80";
  EXPECT_EQ(bpe->decode(bpe->encode(raw)), raw);
  EXPECT_NE(error_of([&] {
              (void)bpe->decode(std::vector<std::int64_t>{5, 377});
            }).find("id 377 is outside the vocabulary 0..376"),
            std::string::npos);
}

// Missing and malformed files are named, with the line of a bad merge.
TEST(Gpt2Bpe, BadFilesAreNamed) {
  test::TempDir dir("tb_gpt2_bpe");
  const auto vocab = dir.path() / "vocab.json";
  std::filesystem::copy_file(gpt2_vocab(), vocab);
  EXPECT_NE(error_of([&] {
              (void)data::load_gpt2_bpe(vocab);
            }).find("no merges.txt or vocab.bpe beside " + vocab.string()),
            std::string::npos);
  std::ofstream(dir.path() / "vocab.bpe") << "#version: 0.2\nh e\nthree sym bols\n";
  EXPECT_NE(error_of([&] {
              (void)data::load_gpt2_bpe(vocab);
            }).find((dir.path() / "vocab.bpe").string() + " line 3: expected a merge"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)data::load_gpt2_bpe(dir.path() / "encoder.json");
            }).find("cannot open " + (dir.path() / "encoder.json").string()),
            std::string::npos);
  const auto other = dir.path() / "b";
  std::filesystem::create_directories(other);
  std::ofstream(other / "merges.txt") << "h e\n";
  std::ofstream(other / "vocab.json") << R"({"h": 0, "e": 0})";
  EXPECT_NE(error_of([&] {
              (void)data::load_gpt2_bpe(other / "vocab.json");
            }).find("id 0 is given to two tokens"),
            std::string::npos);
  std::ofstream(other / "vocab.json") << R"(["h", "e"])";
  EXPECT_NE(error_of([&] {
              (void)data::load_gpt2_bpe(other / "vocab.json");
            }).find("expected a JSON object of token -> id"),
            std::string::npos);
}

// Text made into a token file for the tokens kind: each file one document after <|endoftext|>,
// as llm.c's .bin (header: magic, version, count) or raw uint16; the ids read back are the
// encoder's, and the tokens kind's layout check takes both.
TEST(Gpt2Bpe, TextBecomesATokenFileTheTokensKindReads) {
  tb::test::TempDir dir("tb_token_file");
  std::filesystem::create_directories(dir.path() / "text");
  std::ofstream(dir.path() / "text" / "a.txt") << "Hello world.\nIt's 2026.\n";
  std::ofstream(dir.path() / "text" / "b.txt") << "Another one, caf\xc3\xa9.\n";
  const auto bpe = data::load_gpt2_bpe(gpt2_vocab());
  std::vector<std::int64_t> want;
  for (const char* text : {"Hello world.\nIt's 2026.\n", "Another one, caf\xc3\xa9.\n"}) {
    const auto start = bpe->start_ids();
    const auto ids = bpe->encode(text);
    want.insert(want.end(), start.begin(), start.end());
    want.insert(want.end(), ids.begin(), ids.end());
  }
  for (const bool raw : {false, true}) {
    api::TokenFileRequest r;
    r.model = gpt2_vocab().string();
    r.input = (dir.path() / "text").string();
    r.output = (dir.path() / (raw ? "raw.bin" : "llmc.bin")).string();
    r.raw = raw;
    const std::string report = api::encode_token_file(r);
    EXPECT_NE(report.find("wrote " + r.output + ": " + std::to_string(want.size()) +
                          " tokens of gpt2-bpe"),
              std::string::npos)
        << report;
    std::ifstream in(r.output, std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), {});
    const std::vector<std::uint8_t> bytes(chars.begin(), chars.end());
    const data::TokenLayout layout = data::parse_token_layout(
        bytes, raw ? data::TokenFormat::kUint16 : data::TokenFormat::kLlmc, r.output);
    EXPECT_EQ(layout.offset, raw ? 0 : 1024);
    ASSERT_EQ(layout.count, static_cast<std::int64_t>(want.size()));
    std::vector<std::int64_t> got;
    for (std::int64_t i = 0; i < layout.count; ++i)
      got.push_back(bytes[static_cast<std::size_t>(layout.offset + 2 * i)] |
                    (bytes[static_cast<std::size_t>(layout.offset + 2 * i + 1)] << 8));
    EXPECT_EQ(got, want);
  }
  api::TokenFileRequest none;
  none.model = gpt2_vocab().string();
  none.input = (dir.path() / "missing").string();
  none.output = (dir.path() / "x.bin").string();
  EXPECT_NE(error_of([&] { (void)api::encode_token_file(none); }).find("missing"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(none.output));
  // An output that is a folder is named as one (it said "cannot write: Success": the rename's
  // reason was lost), and one that cannot be created says the system's reason.
  api::TokenFileRequest to_folder = none;
  to_folder.input = (dir.path() / "text").string();
  to_folder.output = (dir.path() / "text").string();
  EXPECT_EQ(error_of([&] { (void)api::encode_token_file(to_folder); }),
            "[tokenizer] -o " + to_folder.output +
                ": is a folder; give the token file to write (e.g. " +
                (dir.path() / "text" / "train.bin").string() + ")");
  to_folder.output = (dir.path() / "no-such-folder" / "x.bin").string();
  EXPECT_NE(error_of([&] {
              (void)api::encode_token_file(to_folder);
            }).find(": cannot write (No such file or directory, writing "),
            std::string::npos);
}

// data.kind = "tokens" with tokenizer = "gpt2": the kind's tokenizer is the BPE (so samples and
// prompts are text); ids stay the default; a vocabulary larger than data.vocab and a missing
// model are named by their fields.
TEST(Gpt2Bpe, TheTokensKindDecodesThroughIt) {
  const auto kind = data::dataset_registry().at("tokens");
  nlohmann::json d = {{"path", "unused.bin"},
                      {"vocab", 400},
                      {"tokenizer", "gpt2"},
                      {"tokenizer_model", gpt2_vocab().string()}};
  const auto t = data::tokenizer_of(*kind, d);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->describe(), "gpt2-bpe " + gpt2_vocab().string());
  EXPECT_EQ(data::tokenizer_of(*kind, {{"path", "unused.bin"}}), nullptr);
  d["vocab"] = 300;
  EXPECT_NE(error_of([&] {
              (void)data::tokenizer_of(*kind, d);
            }).find("has 377 tokens, more than data.vocab = 300"),
            std::string::npos);
  d.erase("tokenizer_model");
  EXPECT_NE(error_of([&] {
              (void)data::tokenizer_of(*kind, d);
            }).find("data.tokenizer = \"gpt2\" needs data.tokenizer_model"),
            std::string::npos);
}

}  // namespace
