#include "engine/api/run_api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/api/api_detail.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/data/registry.h"
#include "engine/nn/models.h"
#include "engine/rng/cpu_generator.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "engine/store/sweeps.h"
#include "engine/store/tensorboard.h"
#include "engine/train/run_config.h"
#include "engine/train/safetensors.h"
#include "engine/train/sample.h"
#include "engine/train/trainer_state.h"
#include "engine/train/weights_io.h"

namespace tb::api {

using detail::iso_time;

std::string default_store_path() {
  return store::default_database_path().string();
}

RunOutcomeInfo run_training(const RunRequest& req,
                            const std::function<void(std::int64_t, const std::string&)>& on_start,
                            const std::function<void(const RunProgressInfo&)>& on_progress) {
  RunSpec spec;
  if (!req.config_path.empty()) {
    spec.config_text = train::read_config_file(req.config_path);
    spec.source = req.config_path;
  } else {
    TB_CHECK(req.resume.has_value(), "[run] give a run config (or --resume RUN)");
  }
  spec.overrides = req.overrides;
  spec.db_path = req.db_path;
  spec.resume = req.resume;
  spec.resume_checkpoint = req.resume_checkpoint;
  spec.sweep_trial = req.sweep_trial;
  spec.stop_at = req.stop_at;
  spec.control = req.control;
  // Progress for the CLI: loss, first LR, eval metrics, rate since the first logged step.
  RunObserver obs;
  obs.on_start = on_start;
  if (req.on_warning)
    obs.on_event = [&req](const std::string&, const std::string& text) { req.on_warning(text); };
  if (on_progress) {
    obs.on_metrics = [&on_progress, first = std::int64_t{-1},
                      first_wall = 0.0](const StepMetrics& m) mutable {
      RunProgressInfo p;
      p.run_id = m.run_id;
      p.step = m.step;
      p.total = m.total;
      bool lr_set = false;
      for (const auto& [k, v] : m.values) {
        if (k == core::metric::kLoss) p.loss = v;
        if (!lr_set && k.rfind(core::metric::kLrPrefix, 0) == 0) {
          p.lr = v;
          lr_set = true;
        }
        if (k.rfind(core::metric::kEvalPrefix, 0) == 0) p.eval.emplace_back(k, v);
      }
      // The rate counts trained steps, from the first one reported (not from the initial
      // evaluation's report, step 0, where the wall clock starts).
      if (first < 0 && m.step > 0) {
        first = m.step - 1;
        first_wall = m.wall_s;
      }
      const double span = m.wall_s - first_wall;
      p.steps_per_s = first >= 0 && span > 0 ? static_cast<double>(m.step - first - 1) / span : 0.0;
      on_progress(p);
    };
  }
  return execute_run(spec, obs);
}

// A stored message as one line of a table: its first line, cut at 200 characters (at a UTF-8
// character boundary); `show N` prints the whole of it. A failure such as a state dict that does
// not fit lists every key on lines of their own.
namespace {

// A checkpoint folder given by hand (--checkpoint, --from-checkpoint) must be one of `run`'s, as
// resume requires: another run's weights under this run's name would be silently wrong.
void check_checkpoint_of(const store::RunStore& st, std::int64_t run,
                         const std::filesystem::path& dir, const std::string& what) {
  const std::optional<std::string> key = train::detail::checkpoint_owner(dir);
  TB_CHECK(key.has_value(), what, " ", dir.string(),
           ": not a TrainBench checkpoint (no readable state.json)");
  const std::string mine = st.store_id() + "/" + std::to_string(run);
  if (key->empty() || *key == mine) return;  // written before owners were recorded, or ours
  const std::size_t slash = key->rfind('/');
  const std::string store = key->substr(0, slash);
  const std::string of =
      slash == std::string::npos
          ? *key
          : "run " + key->substr(slash + 1) +
                (store == st.store_id() ? " of this store"
                                        : " of another store (id " + store + ")");
  throw ValueError(what + " " + dir.string() + " is a checkpoint of " + of + ", not of run " +
                   std::to_string(run) + "; name that run instead");
}

// One UTF-8 character at `i` (advanced past it): its code point, or the byte itself when it is
// not the start of a valid sequence.
char32_t next_char(std::string_view s, std::size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n <= 1 || i + static_cast<std::size_t>(n) > s.size()) {
    ++i;
    return b;
  }
  char32_t c = b & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    const auto cb = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    if ((cb & 0xC0) != 0x80) {
      ++i;
      return b;
    }
    c = (c << 6) | (cb & 0x3F);
  }
  i += static_cast<std::size_t>(n);
  return c;
}

int char_width(char32_t c) {
  if (c == 0) return 0;
  // Combining marks, zero-width joiners and variation selectors.
  if ((c >= 0x0300 && c <= 0x036F) || (c >= 0x1AB0 && c <= 0x1AFF) ||
      (c >= 0x1DC0 && c <= 0x1DFF) || (c >= 0x200B && c <= 0x200F) ||
      (c >= 0x20D0 && c <= 0x20FF) || (c >= 0xFE00 && c <= 0xFE0F) || (c >= 0xFE20 && c <= 0xFE2F))
    return 0;
  // East Asian wide and fullwidth forms, and emoji.
  if ((c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0x303E) ||
      (c >= 0x3041 && c <= 0x33FF) || (c >= 0x3400 && c <= 0x4DBF) ||
      (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xA000 && c <= 0xA4CF) ||
      (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF) ||
      (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFF60) ||
      (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x1F300 && c <= 0x1F6FF) ||
      (c >= 0x1F900 && c <= 0x1F9FF) || (c >= 0x1FA70 && c <= 0x1FAFF) ||
      (c >= 0x20000 && c <= 0x3FFFD))
    return 2;
  return 1;
}

std::string one_line(const std::string& message, std::int64_t run) {
  constexpr std::size_t kMax = 200;
  const std::size_t end = message.find_last_not_of(" \t\r\n");
  const std::string text = end == std::string::npos ? "" : message.substr(0, end + 1);
  const std::size_t eol = text.find('\n');
  std::string line = text.substr(0, eol);
  bool cut = eol != std::string::npos;
  if (line.size() > kMax) {
    std::size_t n = kMax;
    while (n > 0 && (static_cast<unsigned char>(line[n]) & 0xC0) == 0x80)
      --n;
    line.resize(n);
    cut = true;
  }
  if (cut) line += " ... (trainbench-cli show " + std::to_string(run) + ")";
  return line;
}
}  // namespace

std::size_t display_width(std::string_view text) {
  std::size_t w = 0;
  for (std::size_t i = 0; i < text.size();)
    w += static_cast<std::size_t>(char_width(next_char(text, i)));
  return w;
}

std::string pad_right(std::string_view text, std::size_t width) {
  const std::size_t w = display_width(text);
  return std::string(text) + std::string(w < width ? width - w : 0, ' ');
}

std::string pad_left(std::string_view text, std::size_t width) {
  const std::size_t w = display_width(text);
  return std::string(w < width ? width - w : 0, ' ') + std::string(text);
}

std::string fit_width(std::string_view text, std::size_t width) {
  if (display_width(text) <= width) return std::string(text);
  const std::size_t room = width > 3 ? width - 3 : 0;
  std::size_t used = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    const int cw = char_width(next_char(text, j));
    if (used + static_cast<std::size_t>(cw) > room) break;
    used += static_cast<std::size_t>(cw);
    i = j;
  }
  return std::string(text.substr(0, i)) + "...";
}

std::vector<RunRow> list_runs(const std::string& db_path, const std::string& sweep,
                              std::string* warning) {
  if (db_path.empty() && sweep.empty() && !detail::store_exists(db_path)) return {};
  auto st = detail::existing_store(db_path);
  if (warning != nullptr) *warning = st.recovery_error();
  std::map<std::int64_t, std::string> sweep_names;
  for (const auto& s : store::list_sweeps(st))
    sweep_names[s.id] = s.name;
  std::optional<std::int64_t> only;
  if (!sweep.empty()) {
    for (const auto& [id, name] : sweep_names)
      if (name == sweep) only = id;
    TB_CHECK(only.has_value(), "[runs] --sweep: ", st.path().string(), " has no sweep '", sweep,
             "' (trainbench-cli sweeps lists them)");
  }
  std::vector<RunRow> rows;
  for (const auto& r : st.list_runs()) {
    if (only && r.sweep_id != only) continue;
    RunRow row;
    row.id = r.id;
    row.name = r.name;
    row.status = std::string(store::to_string(r.status));
    row.created = iso_time(r.created_at);
    row.last_step = r.last_step;
    row.message = one_line(r.message, r.id);
    if (r.sweep_id) row.sweep = sweep_names[*r.sweep_id];
    row.point = r.sweep_point;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string show_run(const std::string& db_path, std::int64_t run_id) {
  auto st = detail::existing_store(db_path);
  detail::require_run(st, run_id);
  const auto d = st.get_run(run_id);
  std::ostringstream os;
  os << "run " << d.summary.id << " '" << d.summary.name
     << "': " << store::to_string(d.summary.status) << "\n  created "
     << iso_time(d.summary.created_at);
  if (d.summary.ended_at) os << ", ended " << iso_time(*d.summary.ended_at);
  os << "\n";
  if (!d.summary.message.empty()) os << "  " << d.summary.message << "\n";
  if (d.seed) os << "  seed " << *d.seed << "\n";
  os << "\nmetrics (last / min / max):\n";
  for (const auto& m : d.metrics) {
    os << "  " << std::left << std::setw(24) << m.key << std::right << std::setw(14) << m.last_value
       << " @" << m.last_step << std::setw(14) << m.min_value << std::setw(14) << m.max_value
       << "\n";
  }
  // Events: binding, memory placement, warnings, how it ended (the newest 30).
  const auto events = st.events(run_id);
  if (!events.empty()) {
    os << "\nevents:\n";
    const std::size_t first = events.size() > 30 ? events.size() - 30 : 0;
    if (first > 0) os << "  (" << first << " older events not shown)\n";
    for (std::size_t i = first; i < events.size(); ++i)
      os << "  " << iso_time(events[i].time) << " " << store::to_string(events[i].level) << ": "
         << events[i].text << "\n";
  }
  os << "\nconfig:\n" << d.config;
  return os.str();
}

std::string compare_runs(const std::string& db_path, const std::vector<std::int64_t>& ids,
                         bool all_keys) {
  TB_CHECK(ids.size() >= 2, "[compare] give at least two run ids, got ", ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      TB_CHECK(ids[i] != ids[j], "[compare] run ", ids[i], " is given twice; give each run once");
  auto st = detail::existing_store(db_path);
  std::vector<store::RunDetails> runs;
  std::vector<std::map<std::string, std::string>> configs;
  for (auto id : ids) {
    detail::require_run(st, id);
    runs.push_back(st.get_run(id));
    configs.push_back(detail::flatten_toml(runs.back().config));
  }
  std::set<std::string> keys;
  for (const auto& c : configs)
    for (const auto& [k, v] : c)
      keys.insert(k);
  // Column widths from the content, in terminal cells: keys, and values up to 30 cells.
  std::size_t kw = 26;
  for (const auto& k : keys)
    kw = std::max(kw, display_width(k) + 2);
  std::size_t vw = 12;
  for (const auto& k : keys) {
    std::set<std::string> distinct;
    for (const auto& c : configs)
      distinct.insert(c.count(k) ? c.at(k) : "-");
    if (distinct.size() < 2) continue;  // only differing keys are shown
    for (const auto& v : distinct)
      vw = std::max(vw, std::min<std::size_t>(display_width(v), 30));
  }
  for (const auto& r : runs)
    vw = std::max(vw, std::min<std::size_t>(display_width(r.summary.name), 30));
  const std::size_t w = vw + 2;
  // A value longer than its column ends in "..." (at a character boundary), and a note under the
  // table says where the whole of it is.
  bool cut = false;
  const auto fit = [&](const std::string& v) {
    std::string f = fit_width(v, vw);
    cut = cut || f.size() != v.size();
    return pad_left(f, w);
  };
  // A row of values that first differ past the column's width would look alike cut at the end
  // (["fashion-mnist", "mlp", "m... twice): each such value is cut in front instead, from a few
  // characters before where it first differs from the value most like it ("-", a key a run
  // lacks, is compared with nothing).
  const auto fit_row = [&](const std::vector<std::string>& vals) {
    std::string out;
    for (std::size_t i = 0; i < vals.size(); ++i) {
      const std::string& v = vals[i];
      std::size_t same = 0;
      for (std::size_t j = 0; j < vals.size(); ++j) {
        if (j == i || vals[j] == "-" || v == "-") continue;
        std::size_t n = 0;
        while (n < v.size() && n < vals[j].size() && v[n] == vals[j][n])
          ++n;
        same = std::max(same, n);
      }
      while (same > 0 && same < v.size() && (static_cast<unsigned char>(v[same]) & 0xC0) == 0x80)
        --same;
      if (display_width(v) <= vw || display_width(std::string_view(v).substr(0, same)) + 4 <= vw) {
        out += fit(v);
        continue;
      }
      std::size_t from = same > 8 ? same - 8 : 0;
      while (from > 0 && (static_cast<unsigned char>(v[from]) & 0xC0) == 0x80)
        --from;
      cut = true;
      out += pad_left(fit_width("..." + v.substr(from), vw), w);
    }
    return out;
  };
  std::ostringstream os;
  os << pad_right("", kw + 2);
  for (const auto& r : runs)
    os << pad_left("run " + std::to_string(r.summary.id), w);
  os << "\n" << pad_right("name", kw + 2);
  for (const auto& r : runs)
    os << fit(r.summary.name);
  os << "\n\nconfig differences:\n";
  // By section: the keys every run has, then the keys only some runs have (another optimizer's
  // or model's own: [optimizer.adamw] beside [optimizer]) counted on one line per section —
  // listed with all_keys — as the GUI's comparison folds them, unless the runs that have one
  // differ on it.
  const auto section_of = [](const std::string& k) {
    const auto dot = k.find('.');
    return dot == std::string::npos ? std::string() : k.substr(0, dot);
  };
  std::map<std::string, std::vector<std::vector<std::string>>> shared, one_sided;
  std::map<std::string, std::vector<std::string>> shared_keys, one_sided_keys;
  for (const auto& k : keys) {
    std::vector<std::string> vals;
    for (const auto& c : configs) {
      auto it = c.find(k);
      vals.push_back(it == c.end() ? "-" : it->second);
    }
    if (std::all_of(vals.begin(), vals.end(), [&](const auto& v) { return v == vals[0]; }))
      continue;
    // Folded: a key some runs lack while those that have it agree (another optimizer's table).
    // One whose values differ among the runs that have it is listed: three runs, two AdamW
    // learning rates and a Muon, must show the two rates.
    const bool listed = !detail::only_some(vals);
    (listed ? shared : one_sided)[section_of(k)].push_back(vals);
    (listed ? shared_keys : one_sided_keys)[section_of(k)].push_back(k);
  }
  std::set<std::string> sections;
  for (const auto& [sec, rows] : shared)
    sections.insert(sec);
  for (const auto& [sec, rows] : one_sided)
    sections.insert(sec);
  bool folded = false;
  for (const auto& sec : sections) {
    for (std::size_t i = 0; i < shared[sec].size(); ++i) {
      os << "  " << pad_right(shared_keys[sec][i], kw) << fit_row(shared[sec][i]) << "\n";
    }
    const auto& rows = one_sided[sec];
    if (rows.empty()) continue;
    if (all_keys) {
      for (std::size_t i = 0; i < rows.size(); ++i) {
        os << "  " << pad_right(one_sided_keys[sec][i], kw) << fit_row(rows[i]) << "\n";
      }
      continue;
    }
    folded = true;
    os << "  "
       << pad_right((sec.empty() ? std::string("top level") : sec + ".*") + " only in some", kw);
    for (std::size_t r = 0; r < runs.size(); ++r) {
      std::size_t have = 0;
      for (const auto& vals : rows)
        have += vals[r] != "-";
      os << pad_left(
          have == 0 ? std::string("-") : std::to_string(have) + (have == 1 ? " key" : " keys"), w);
    }
    os << "\n";
  }
  if (sections.empty()) os << "  (none: the configs are equal)\n";
  if (folded)
    os << "  (\"only in some\": keys some runs' configs lack, such as another optimizer's; "
          "compare --all lists them)\n";
  if (cut) os << "  (... : cut to the column; trainbench-cli show N prints the whole config)\n";
  os << "\nsummary:\n";
  auto row = [&](const std::string& label, auto&& cell) {
    os << "  " << pad_right(label, kw);
    for (const auto& r : runs)
      os << pad_left(cell(r), w);
    os << "\n";
  };
  row("status",
      [](const store::RunDetails& r) { return std::string(store::to_string(r.summary.status)); });
  row("steps", [](const store::RunDetails& r) {
    return r.summary.last_step ? std::to_string(*r.summary.last_step) : std::string("-");
  });
  row("duration (s)", [](const store::RunDetails& r) {
    if (!r.summary.started_at || !r.summary.ended_at) return std::string("-");
    std::ostringstream v;  // the time it trained: not the time it spent ended before a resume
    v << std::fixed << std::setprecision(1) << r.summary.duration_seconds(0).value_or(0);
    return v.str();
  });
  // The step time as the reports give it: the mean over the run (a last step says little).
  bool any_step_ms = false;
  for (const auto& r : runs)
    for (const auto& m : r.metrics)
      any_step_ms |= m.key == core::metric::kStepMs;
  if (any_step_ms)
    row(std::string("mean ") + core::metric::kStepMs, [&](const store::RunDetails& r) {
      const auto points = st.series(r.summary.id, core::metric::kStepMs);
      if (points.empty()) return std::string("-");
      double sum = 0;
      for (const auto& p : points)
        sum += p.value;
      std::ostringstream v;
      v << std::setprecision(5) << sum / static_cast<double>(points.size());
      return v.str();
    });
  for (const char* key : {core::metric::kLoss, core::metric::kEvalLoss, core::metric::kEvalAccuracy,
                          core::metric::kEvalPerplexity}) {
    bool any = false;
    for (const auto& r : runs)
      for (const auto& m : r.metrics)
        any |= m.key == key;
    if (!any) continue;
    row(std::string("last ") + key, [&](const store::RunDetails& r) {
      for (const auto& m : r.metrics) {
        if (m.key != key) continue;
        std::ostringstream v;
        v << std::setprecision(5) << m.last_value;
        return v.str();
      }
      return std::string("-");
    });
  }
  return os.str();
}

namespace {

// Whether `model` holds BatchNorm running statistics (a "running_mean" buffer, as update_bn
// looks for them).
bool has_batch_norm(const nn::Module& model) {
  const std::string suffix = ".running_mean";
  for (const auto& [name, t] : model.state_dict())
    if (name == "running_mean" ||
        (name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0))
      return true;
  return false;
}

}  // namespace

std::string export_weights(const std::string& db_path, std::int64_t run_id, const std::string& out,
                           const std::string& layout, const std::string& checkpoint, bool average) {
  auto st = detail::existing_store(db_path);
  detail::require_run(st, run_id);
  const train::RunConfig config =
      train::parse_run_config(st.get_run(run_id, store::RunStore::Metrics::kNone).config,
                              "run " + std::to_string(run_id) + "'s stored config");
  std::filesystem::path dir = checkpoint;
  std::string from = dir.string();
  if (!dir.empty()) check_checkpoint_of(st, run_id, dir, "[weights]");
  if (dir.empty()) {
    const auto ck = detail::newest_checkpoint(
        st, run_id, "[weights]",
        "has no checkpoint (checkpoints are written at each checkpoint.interval and at the end "
        "of the run)");
    dir = ck.path;
    from = "checkpoint of step " + std::to_string(ck.step);
  }
  TB_CHECK(!average || config.swa.kind != "none", "[weights] --average: run ", run_id,
           " keeps no SWA/EMA average (swa.kind = \"none\"); its trained weights are written "
           "without --average");
  const std::filesystem::path file = dir / (average ? "average.safetensors" : "model.safetensors");
  if (average) {
    // Every checkpoint holds the average's file; before swa.start_step its count is 0 and its
    // weights the initial ones.
    const train::SafetensorsFile f = train::load_safetensors(file);
    const auto n = std::find_if(f.tensors.begin(), f.tensors.end(),
                                [](const auto& e) { return e.first == "n_averaged"; });
    TB_CHECK(n != f.tensors.end() && n->second.item() > 0, "[weights] --average: ", from,
             " of run ", run_id, " holds no ", config.swa.kind,
             " average yet (it was saved before swa.start_step = ", config.swa.start_step,
             "); a later checkpoint has one");
  }
  rng::CpuGenerator gen;  // the weights are replaced; the init only gives the shapes
  const auto model = nn::build_model(config.model, &gen);
  (void)train::load_weights(*model, file);
  const train::WeightsSaved saved = train::save_weights(*model, out, layout);
  std::ostringstream os;
  os << "wrote " << out << ": " << saved.tensors << " tensors, " << saved.elements << " values";
  // A tied head written as its own tensor, or a padded table cut to the vocabulary, makes the
  // file's count differ from the model's.
  if (saved.elements != model->num_parameters())
    os << " (the model's " << model->num_parameters() << " parameters in layout " << layout << ")";
  os << " of run " << run_id << " (" << (average ? "its " + config.swa.kind + " average, " : "")
     << from << "), layout " << layout << "\n";
  // Without swa.use_buffers the average holds the live model's BatchNorm statistics (PyTorch's
  // AveragedModel default): they do not fit the averaged weights until recomputed.
  if (average && !config.swa.use_buffers && has_batch_norm(*model))
    os << "note: swa.use_buffers = false: the BatchNorm statistics are the trained model's; "
          "recompute them for the averaged weights (torch.optim.swa_utils.update_bn) before "
          "evaluating\n";
  return os.str();
}

SampleResult sample_run(const SampleRequest& req) {
  auto st = detail::existing_store(req.db_path);
  detail::require_run(st, req.run_id);
  const std::string stored = st.get_run(req.run_id, store::RunStore::Metrics::kNone).config;
  const std::string source = "run " + std::to_string(req.run_id) + "'s stored config";
  train::RunConfig config = train::parse_run_config(stored, source);
  if (!req.tokenizer_model.empty()) {
    // Only where the run's data read a tokenizer model (not as a --set the user never typed).
    const nlohmann::json& d = config.data.extra;
    const std::string tokenizer =
        d.is_object() && d.contains("tokenizer") && d["tokenizer"].is_string()
            ? d["tokenizer"].get<std::string>()
            : std::string();
    TB_CHECK(d.is_object() && d.contains("tokenizer_model") && tokenizer != "bytes" &&
                 tokenizer != "ids",
             "[sample] --tokenizer-model: run ", req.run_id, "'s data read no tokenizer model (",
             tokenizer.empty() ? "data.kind = \"" + config.data.kind + "\""
                               : "data.tokenizer = \"" + tokenizer + "\"",
             ")");
    config = train::parse_run_config(
        stored, source,
        {"data.tokenizer_model=" +
         nlohmann::json(std::filesystem::absolute(req.tokenizer_model).string()).dump()});
  }
  std::filesystem::path dir = req.checkpoint;
  if (!dir.empty()) check_checkpoint_of(st, req.run_id, dir, "[sample]");
  SampleResult out;
  out.from = "run " + std::to_string(req.run_id) + ", " + dir.string();
  if (dir.empty()) {
    const auto ck = detail::newest_checkpoint(
        st, req.run_id, "[sample]",
        "has no checkpoint to sample from (checkpoints are written at each "
        "checkpoint.interval and at the end of the run)");
    dir = ck.path;
    out.from =
        "run " + std::to_string(req.run_id) + ", checkpoint of step " + std::to_string(ck.step);
  }
  rng::CpuGenerator gen;  // the weights are replaced; the init only gives the shapes
  const auto model = nn::build_model(config.model, &gen);
  const auto [vocab, context] = train::language_model_shape(*model);
  (void)context;
  (void)train::load_weights(*model, dir / "model.safetensors");
  // The text form of the run's ids: its data kind's tokenizer (bytes, a SentencePiece model), or
  // none (bare ids: token files, also of 256 ids); bytes for a 256-id model of a kind this build
  // does not know.
  std::shared_ptr<const data::Tokenizer> tokenizer;
  const auto kind = data::dataset_registry().find(config.data.kind);
  if (kind) {
    try {
      tokenizer = data::tokenizer_of(*kind, train::data_settings(config.data));
    } catch (const ValueError& e) {
      // The place given is wrong: said with the option given, not the config key it replaces.
      if (!req.tokenizer_model.empty()) {
        std::string why = e.what();
        const std::string key = "data.tokenizer_model: ";
        if (const auto at = why.find(key); at != std::string::npos) why.erase(0, at + key.size());
        throw ValueError("[sample] --tokenizer-model " + req.tokenizer_model + ": " + why);
      }
      throw ValueError(std::string(e.what()) +
                       "; if the tokenizer moved, give its new place: trainbench-cli sample " +
                       std::to_string(req.run_id) + " --tokenizer-model PATH");
    }
  }
  if (!kind && vocab == 256) tokenizer = data::byte_tokenizer();
  out.has_text = tokenizer != nullptr;
  out.tokenizer = tokenizer != nullptr ? tokenizer->describe() : "";
  std::vector<std::int64_t> prompt = req.prompt_tokens;
  if (tokenizer != nullptr) {
    TB_CHECK(req.prompt_tokens.empty(), "[sample] run ", req.run_id, " models text (",
             tokenizer->describe(), "): give the prompt as text (--prompt), not token ids");
    prompt = req.prompt.empty() ? tokenizer->start_ids() : tokenizer->encode(req.prompt);
    if (prompt.empty()) prompt = tokenizer->start_ids();
  } else {
    TB_CHECK(req.prompt.empty(), "[sample] run ", req.run_id, " models ", vocab,
             " token ids (no tokenizer is stored with it): give the prompt as ids "
             "(--prompt-tokens 464,2068), not text");
    // GPT-2's <|endoftext|> starts a document; other vocabularies start from token 0.
    if (prompt.empty()) prompt.push_back(vocab >= 50257 ? 50256 : 0);
  }
  TB_CHECK(req.num_samples >= 1, "[sample] --num-samples must be at least 1, got ",
           req.num_samples);
  train::SampleOptions o;
  o.tokens = req.tokens;
  o.temperature = req.temperature;
  o.top_k = req.top_k;
  if (tokenizer != nullptr) o.vocab_limit = tokenizer->vocab();
  for (std::int64_t i = 0; i < req.num_samples; ++i) {
    o.seed = req.seed + static_cast<std::uint64_t>(i);
    out.all_tokens.push_back(train::sample_tokens(*model, prompt, o));
    out.texts.push_back(tokenizer != nullptr ? tokenizer->decode(out.all_tokens.back()) : "");
  }
  out.tokens = out.all_tokens.front();
  out.text = out.texts.front();
  return out;
}

std::string export_run(const std::string& db_path, std::int64_t run_id, const std::string& format) {
  auto st = detail::existing_store(db_path);
  detail::require_run(st, run_id);
  if (format == "csv") return st.export_csv(run_id);
  if (format == "json") return st.export_json(run_id);
  throw ValueError("[export] unknown format '" + format + "' (choose csv, json or tensorboard)");
}

std::string export_tensorboard(const std::string& db_path, std::int64_t run_id,
                               const std::string& dir) {
  TB_CHECK(!dir.empty(), "[export] --format tensorboard needs DIR, the log directory to write to");
  const auto st = detail::existing_store(db_path);
  detail::require_run(st, run_id);
  return store::write_tensorboard(st, run_id, dir).string();
}

}  // namespace tb::api
