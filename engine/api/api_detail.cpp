#include "engine/api/api_detail.h"

#include <fnmatch.h>
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>

#include <ctime>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/store/run_store.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer.h"

namespace tb::api::detail {

std::filesystem::path store_path(const std::string& db) {
  return db.empty() ? store::default_database_path() : std::filesystem::path(db);
}

bool store_exists(const std::string& db) {
  std::error_code ec;
  return std::filesystem::exists(store_path(db), ec);
}

void require_run(const store::RunStore& st, std::int64_t id) {
  TB_CHECK(st.has_run(id), "[store] ", st.path().string(), ": no run ", id,
           " (trainbench-cli runs lists them)");
}

void require_resumable(const store::RunDetails& stored, std::int64_t id, const char* tag,
                       const std::string& recovery_error) {
  // A run another process is training (or setting up) is refused before its checkpoints are
  // touched: that process may be pruning or re-saving them (opening the store has already taken
  // a run whose process is gone as crashed, unless it could not write that: a full disk).
  const bool busy = stored.summary.status == store::RunStatus::kRunning ||
                    stored.summary.status == store::RunStatus::kQueued;
  TB_CHECK(!busy || recovery_error.empty(), tag, " run ", id, " reads ",
           store::to_string(stored.summary.status),
           ", but whether its process is gone could not be recorded: ", recovery_error);
  TB_CHECK(!busy, tag, " run ", id, " is ", store::to_string(stored.summary.status),
           " in another process: let it end (or cancel it) before resuming it");
  // A finished run has nothing left to train; resuming it would only rewrite its summary and end
  // time. Its weights can start a new run.
  TB_CHECK(stored.summary.status != store::RunStatus::kFinished, tag, " run ", id,
           " has finished: there is nothing to resume (a new run can start from its weights: "
           "trainbench-cli weights ",
           id, " -o FILE.safetensors, then run.init_from = FILE.safetensors)");
}

store::RunStore existing_store(const std::string& db) {
  const std::filesystem::path path = store_path(db);
  TB_CHECK(store_exists(db), "[store] ", path.string(), ": no run store there (",
           db.empty() ? "the first run creates it" : "a run creates one; is --db right?", ")");
  return store::RunStore::open(path);
}

std::string iso_time(double unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%d %H:%M:%S");
  return os.str();
}

std::filesystem::path checkpoint_dir(const train::RunConfig& config,
                                     const std::filesystem::path& db, const std::string& store_name,
                                     const std::string& store_id, std::int64_t run_id) {
  // Absolute, so that the paths the store lists hold from any folder (a relative --db would
  // otherwise list them relative to the folder the run was started in).
  std::error_code ec;
  const std::filesystem::path store_dir = std::filesystem::absolute(db, ec).parent_path();
  const std::filesystem::path base = config.checkpoint.dir.empty()
                                         ? store_dir / "checkpoints"
                                         : std::filesystem::path(config.checkpoint.dir);
  const std::string store = std::filesystem::path(store_name).stem().string() + "-" + store_id;
  return base / store / ("run-" + std::to_string(run_id));
}

void mark_failed(const std::filesystem::path& db, std::int64_t run_id,
                 const std::string& message) noexcept {
  try {
    auto st = store::RunStore::open(db);
    st.set_status(run_id, store::RunStatus::kFailed, message);
  } catch (...) {  // best effort: the caller reports the original error
  }
}

store::Checkpoint newest_checkpoint(store::RunStore& st, std::int64_t run,
                                    const std::string& prefix, const std::string& none) {
  namespace fs = std::filesystem;
  auto cks = st.checkpoints(run);
  TB_CHECK(!cks.empty(), prefix, " run ", run, " ", none);
  std::error_code ec;
  const fs::path beside = fs::absolute(st.path(), ec).parent_path() / "checkpoints";
  const auto there = [&](const fs::path& dir) {
    std::error_code e;
    if (fs::is_regular_file(dir / "state.json", e)) return true;
    // A folder that is there but cannot be read is not gone: an older checkpoint taken instead
    // would drop from the store every step after it.
    TB_CHECK(!e || e == std::errc::no_such_file_or_directory || e == std::errc::not_a_directory,
             prefix, " run ", run, "'s checkpoint ", dir.string(), " cannot be read (", e.message(),
             "); make it readable, or resume from an older one with run --resume ", run,
             " --from-checkpoint DIR");
    // A re-save of this step killed between its two renames (checkpoint_io.cpp) left the
    // previous save of the step aside, whole (.step-N.old): put it back under its name.
    const fs::path aside = dir.parent_path() / ("." + dir.filename().string() + ".old");
    if (!fs::is_regular_file(aside / "state.json", e)) return false;
    fs::rename(aside, dir, e);
    return !e;
  };
  const auto usable = std::find_if(cks.rbegin(), cks.rend(), [&](store::Checkpoint& c) {
    const fs::path dir(c.path);
    // The same STORE-ID/run-N/step-N beside the store first: a store moved or copied with its
    // checkpoints folder (a copy must not load, or rename in, the original's), or one listed
    // relative to the folder an older version ran in. Then the listed folder (checkpoint.dir).
    const fs::path own = beside / dir.parent_path().parent_path().filename() /
                         dir.parent_path().filename() / dir.filename();
    if (own != dir && there(own)) {
      c.path = own.string();
      return true;
    }
    return there(dir);
  });
  TB_CHECK(usable != cks.rend(), prefix, " run ", run, "'s checkpoints are gone: the store lists ",
           cks.size(), ", none of them on disk (newest: ", cks.back().path, ")");
  return *usable;
}

void StoreSink::on_metrics(std::int64_t step, const train::Metrics& m) {
  values_.clear();
  for (const auto& [k, v] : m) {
    auto it = keys_.find(k);
    if (it == keys_.end()) it = keys_.emplace(k, writer_.key(k)).first;
    values_.push_back({it->second, v});
  }
  writer_.log_metrics(step, values_);
}

void StoreSink::on_event(const std::string& level, const std::string& text) {
  writer_.log_event(level == "error"     ? store::EventLevel::kError
                    : level == "warning" ? store::EventLevel::kWarning
                                         : store::EventLevel::kInfo,
                    text);
}

void StoreSink::on_checkpoint(std::int64_t step, const std::string& path) {
  writer_.add_checkpoint(step, path);
  // Committed before the trainer prunes older checkpoints: otherwise a process killed in between
  // leaves the store naming only folders already deleted (its newer ones not yet committed), and
  // the run could not be resumed.
  writer_.flush();
}

namespace {

// The line without a trailing comment: '#' outside "basic" and 'literal' strings.
std::string strip_comment(const std::string& line) {
  bool basic = false;
  bool literal = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (basic) {
      if (c == '\\') {
        ++i;  // skip the escaped character
      } else if (c == '"') {
        basic = false;
      }
    } else if (literal) {
      if (c == '\'') literal = false;
    } else if (c == '"') {
      basic = true;
    } else if (c == '\'') {
      literal = true;
    } else if (c == '#') {
      return line.substr(0, i);
    }
  }
  return line;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> flatten_toml_ordered(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string raw;
  std::string section;
  while (std::getline(in, raw)) {
    const std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (line.front() == '[') {
      const auto close = line.rfind(']');
      section = trim(line.substr(1, close == std::string::npos ? std::string::npos : close - 1));
      if (!section.empty() && section.front() == '[') section = trim(section.substr(1));  // [[a]]
      if (!section.empty() && section.back() == ']')
        section = trim(section.substr(0, section.size() - 1));
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    out.emplace_back(section.empty() ? key : section + "." + key, value);
  }
  return out;
}

int ranks_in_metrics(const std::vector<std::string>& metric_keys) {
  const std::string prefix = core::metric::kRankPrefix;
  int ranks = 0;
  for (const auto& key : metric_keys) {
    if (key.rfind(prefix, 0) != 0) continue;
    const auto slash = key.find('/', prefix.size());
    if (slash == std::string::npos) continue;
    try {
      ranks = std::max(ranks, std::stoi(key.substr(prefix.size(), slash - prefix.size())) + 1);
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): not a rank's metric
    }
  }
  return ranks;
}

bool only_some(const std::vector<std::string>& values) {
  std::set<std::string> given;
  for (const auto& v : values)
    if (v != "-") given.insert(v);
  return given.size() == 1 && std::find(values.begin(), values.end(), "-") != values.end();
}

std::map<std::string, std::string> flatten_toml(const std::string& text) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : flatten_toml_ordered(text))
    out[k] = v;
  return out;
}

bool executable(const std::filesystem::path& p) {
  return !p.empty() && ::access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p);
}

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  const std::string dirs = path;
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t colon = std::min(dirs.find(':', at), dirs.size());
    const std::filesystem::path c = std::filesystem::path(dirs.substr(at, colon - at)) / program;
    if (colon > at && executable(c)) return c.string();
    at = colon + 1;
  }
  return {};
}

std::string from_set(const std::vector<std::string>& overrides, const std::string& key) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    const auto eq = it->find('=');
    if (eq == std::string::npos) continue;
    std::string k = it->substr(0, eq);
    k.erase(0, k.find_first_not_of(" \t"));
    k.erase(k.find_last_not_of(" \t") + 1);
    if (key == k || key.rfind(k + ".", 0) == 0) return " (from --set " + *it + ")";
  }
  return {};
}

void check_new_run(const train::RunConfig& c, const std::string& source,
                   const std::vector<std::string>& overrides, NewRunPlace place) {
  const std::string at = "[config] " + (source.empty() ? std::string() : source + ": ");
  // A name is one line (a newline split its row of the runs table). Checked for new runs only:
  // a run stored before the rule still resumes, samples and exports under its name.
  for (const char ch : c.run.name)
    TB_CHECK(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f, at,
             "run.name: a run name is one line of text, without control characters (a "
             "newline, a tab)",
             from_set(overrides, "run.name"));
  for (const std::string& tag : c.run.tags)
    for (const char ch : tag)
      TB_CHECK(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f, at,
               "run.tags: a tag is one line of text, without control characters (a newline, a "
               "tab, a NUL)",
               from_set(overrides, "run.tags"));
  // A device this machine cannot use (no GPU, openreg:7), as the config editor says it.
  const std::string why =
      place.here ? core::device_unavailable_reason(core::Device::parse(c.run.device)) : "";
  TB_CHECK(why.empty(), at, "run.device: '", c.run.device, "' cannot be used here: ", why,
           from_set(overrides, "run.device"));
  // A one-cycle schedule shorter than run.steps would fail at its end, or (as the trainer checks
  // it) at set-up after the run was stored: said here instead. Counted in epochs, the steps are
  // known once the data is read, and the trainer checks it then.
  if (c.run.steps > 0 && c.scheduler.config.is_object()) {
    try {
      (void)train::check_schedule_length(c, c.run.steps,
                                         "run.steps = " + std::to_string(c.run.steps));
    } catch (const ValueError& e) {
      std::string what = e.what();
      const std::string tag = "[scheduler] ";
      if (what.rfind(tag, 0) == 0) what.erase(0, tag.size());
      throw ValueError(at + what);
    }
    // A schedule whose LR is no LR (NaN or infinite: an lr_lambda of 1/0; negative: a gamma or
    // swa_lr below 0) would diverge or climb the loss, found once the run is stored: said here,
    // with its first such step (of the first 100k: a longer run's later steps are not previewed).
    std::vector<std::string> groups;
    const ScheduleTable t =
        preview_config(c, static_cast<int>(std::min<std::int64_t>(c.run.steps, 100000)), groups);
    for (const ScheduleRow& row : t.rows)
      for (std::size_t g = 0; g < row.lr.size() && g < groups.size(); ++g)
        TB_CHECK(std::isfinite(row.lr[g]) && row.lr[g] >= 0, at, "scheduler: kind = \"", t.kind,
                 "\" gives ", groups[g], " = ", row.lr[g], " at step ", row.step,
                 " (a learning rate must be a finite number >= 0); trainbench-cli schedule "
                 "CONFIG shows the whole schedule");
  }
  if (!place.here) return;  // the device, CPUs, files and folders of other hosts
  // A binding this machine cannot give (more exclusive slots than cores, CPUs not allowed here),
  // as the trainer would refuse it once the run is stored.
  if (place.own_binding) {
    try {
      train::check_binding(c);
    } catch (const ValueError& e) {
      std::string what = e.what();
      const std::string tag = "[trainer] ";
      if (what.rfind(tag, 0) == 0) what.erase(0, tag.size());
      throw ValueError(at + what);
    }
  }
  check_run_files(c, source, overrides);
  // A checkpoint.dir that cannot be made (a read-only place, /proc) failed the run after it was
  // stored: made now, as the run would make it (last: a config refused for another reason
  // leaves no folder).
  if (!c.checkpoint.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(c.checkpoint.dir, ec);
    TB_CHECK(!ec && std::filesystem::is_directory(c.checkpoint.dir, ec), at,
             "checkpoint.dir: ", c.checkpoint.dir, ": cannot make this folder (",
             ec ? ec.message() : std::string("not a folder"), ")",
             from_set(overrides, "checkpoint.dir"));
  }
}

void check_run_files(const train::RunConfig& c, const std::string& source,
                     const std::vector<std::string>& overrides) {
  const std::string at = "[config] " + (source.empty() ? std::string() : source + ": ");
  // A key that names one file (not a folder of data) refuses a folder, a FIFO or a device: reading
  // one would fail later with a vaguer error, or block forever.
  const auto need = [&at, &overrides](const std::string& path, const std::string& key,
                                      bool one_file, const std::string& if_missing = "") {
    if (path.empty()) return;
    const std::string set = from_set(overrides, key);
    std::filesystem::path p(path);
    const std::string pattern = p.filename().string();
    const bool matching = pattern.find_first_of("*?[") != std::string::npos;
    if (matching) p = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
    TB_CHECK(p.string().find_first_of("*?[") == std::string::npos || !matching, at, key, ": ", path,
             ": a pattern matches file names only, not folder names", set);
    std::error_code ec;
    const auto st = std::filesystem::status(p, ec);
    TB_CHECK(std::filesystem::exists(st), at, key, ": ", p.string(), ": ",
             ec && ec != std::errc::no_such_file_or_directory
                 ? ec.message()
                 : std::string("no such file or folder") + if_missing,
             set);
    if (matching) {  // a pattern that matches nothing is said now, not once the run exists
      bool any = false;
      for (std::filesystem::directory_iterator it(p, ec), end; !any && !ec && it != end;
           it.increment(ec))
        any = it->is_regular_file(ec) &&
              ::fnmatch(pattern.c_str(), it->path().filename().c_str(), 0) == 0;
      TB_CHECK(any, at, key, ": no file in ", p.string(), " matches ", pattern, set);
      return;
    }
    if (!one_file) return;
    TB_CHECK(!std::filesystem::is_directory(st), at, key, ": ", p.string(),
             " is a folder; name a file", set);
    TB_CHECK(std::filesystem::is_regular_file(st), at, key, ": ", p.string(),
             " is not a regular file", set);
  };
  need(c.data.path, "data.path", false);
  // nanoGPT's init_from = 'gpt2' / 'resume' are names, not files: say where those come from.
  need(c.run.init_from, "run.init_from", true,
       " (a safetensors file: GPT-2's weights are the model.safetensors of "
       "huggingface.co/openai-community/gpt2 and its -medium, -large, -xl; a run of this store "
       "continues with `trainbench-cli run --resume RUN`)");
  // ... and is a safetensors file (a PyTorch .pt, a truncated download): said before the run is
  // created, not as its failure. Whether its tensors fit the model is known once it is built.
  if (!c.run.init_from.empty()) {
    try {
      train::check_safetensors(c.run.init_from);
    } catch (const ValueError& e) {
      throw ValueError(at + "run.init_from: " + e.what() + from_set(overrides, "run.init_from"));
    }
  }
  const nlohmann::json& d = c.data.extra;
  if (d.is_object() && d.contains("val_path") && d["val_path"].is_string())
    need(d["val_path"].get<std::string>(), "data.val_path", false);
  if (d.is_object() && d.contains("tokenizer_model") && d["tokenizer_model"].is_string() &&
      d.contains("tokenizer") && d["tokenizer"].is_string() && d["tokenizer"] != "bytes" &&
      d["tokenizer"] != "ids")
    need(d["tokenizer_model"].get<std::string>(), "data.tokenizer_model", true);
}

}  // namespace tb::api::detail
