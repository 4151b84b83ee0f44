// Checkpoint files of a run: writing one atomically (a hidden folder, synced, renamed into
// place), pruning to checkpoint.keep among the folders this run's owner wrote, and restoring a
// run from one (the config and the owner checked first).
//
// <dir>/model.safetensors      the model's state_dict
// <dir>/optimizer.safetensors  optimizer state tensors, named "<optimizer index>.<id>.<key>"
// <dir>/average.safetensors    the SWA/EMA average (swa.kind != none)
// <dir>/state.json             step, counters, optimizer hyper-parameters, scheduler
//                              state_dicts, loader position, the model generator's state, the
//                              config (TOML) and the owner (store id/run)
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer_state.h"

namespace tb::train {

using core::Tensor;

namespace {

std::string hex(const std::vector<std::uint8_t>& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    s.push_back(d[b >> 4]);
    s.push_back(d[b & 15]);
  }
  return s;
}

std::vector<std::uint8_t> unhex(const std::string& s) {
  TB_CHECK(s.size() % 2 == 0, "[checkpoint] malformed generator state");
  std::vector<std::uint8_t> out(s.size() / 2);
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw ValueError("[checkpoint] malformed generator state");
  };
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(val(s[2 * i]) * 16 + val(s[2 * i + 1]));
  return out;
}

// The keys that say where a run's data is: data.path, and the kind's data.val_path and
// data.tokenizer_model when it has them.
std::vector<std::string> data_path_keys(const RunConfig& c) {
  std::vector<std::string> keys = {"data.path"};
  for (const char* k : {"val_path", "tokenizer_model"})
    if (c.data.extra.is_object() && c.data.extra.contains(k) && c.data.extra.at(k).is_string())
      keys.push_back(std::string("data.") + k);
  return keys;
}

std::string data_path(const RunConfig& c, const std::string& key) {
  if (key == "data.path") return c.data.path;
  return c.data.extra.at(key.substr(5)).get<std::string>();
}

void set_data_path(RunConfig& c, const std::string& key, const std::string& value) {
  if (key == "data.path") {
    c.data.path = value;
  } else {
    c.data.extra[key.substr(5)] = value;
  }
}

// Where two configs written by to_toml differ, for the message of a refused resume: up to three
// "section.key: A in the checkpoint, B now".
std::string config_differences(const std::string& stored, const std::string& now) {
  const auto flat = [](const std::string& text) {
    std::map<std::string, std::string> keys;
    std::string section;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      if (line[0] == '[') {
        const std::size_t open = line.find_first_not_of('[');
        section = line.substr(open, line.find(']') - open);
        continue;
      }
      const std::size_t eq = line.find(" = ");
      if (eq == std::string::npos) continue;
      keys[(section.empty() ? "" : section + ".") + line.substr(0, eq)] = line.substr(eq + 3);
    }
    return keys;
  };
  const auto a = flat(stored);
  const auto b = flat(now);
  std::set<std::string> names;
  for (const auto& [k, v] : a)
    names.insert(k);
  for (const auto& [k, v] : b)
    names.insert(k);
  // A kind first (optimizer.kind adamw vs muon): it explains the keys that differ with it,
  // which were listed before it in key order and hid it among "and 25 more".
  std::vector<std::string> ordered(names.begin(), names.end());
  std::stable_partition(ordered.begin(), ordered.end(), [](const std::string& k) {
    return k == "kind" || (k.size() > 5 && k.compare(k.size() - 5, 5, ".kind") == 0);
  });
  std::string out;
  int shown = 0;
  int more = 0;
  for (const std::string& k : ordered) {
    const auto x = a.find(k);
    const auto y = b.find(k);
    const std::string was = x == a.end() ? "(none)" : x->second;
    const std::string is = y == b.end() ? "(none)" : y->second;
    if (was == is) continue;
    if (shown == 3) {
      ++more;
      continue;
    }
    out += (shown++ == 0 ? "" : "; ") + k + ": " + was + " in the checkpoint, " + is + " now";
  }
  if (more > 0) out += "; and " + std::to_string(more) + " more";
  return out;
}

// The owner key a checkpoint folder records ("" for one written without an owner, or before
// owners were recorded); nullopt when its state cannot be read.
std::optional<std::string> checkpoint_owner_key(const std::filesystem::path& dir) {
  std::ifstream in(dir / "state.json");
  if (!in) return std::nullopt;
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.is_object()) return std::nullopt;
  if (!state.contains("owner") || !state.at("owner").is_object()) return std::string();
  const auto key = state.at("owner").find("key");
  if (key == state.at("owner").end() || !key->is_string()) return std::nullopt;
  return key->get<std::string>();
}

nlohmann::json hyper_to_json(const optim::HyperValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return {{"tensor", std::get<Tensor>(v).item()}};
}

// A saved hyper-parameter, of the kind the optimizer holds now (a number, a flag, a name): a
// state.json edited by hand ("lr": "fast") is refused here, naming the key, not at the first step.
optim::HyperValue hyper_from_json(const nlohmann::json& j, const optim::HyperValue& current,
                                  const std::string& key, bool known) {
  // A setting this build's optimizer does not have (an older build's) is kept as saved.
  if (!known)
    return j.is_boolean()  ? optim::HyperValue(j.get<bool>())
           : j.is_string() ? optim::HyperValue(j.get<std::string>())
           : j.is_number() ? optim::HyperValue(j.get<double>())
           : j.is_object() && j.contains("tensor") && j.at("tensor").is_number()
               ? optim::HyperValue(j.at("tensor").get<double>())
               : optim::HyperValue(j.dump());
  const bool number =
      std::holds_alternative<double>(current) || std::holds_alternative<Tensor>(current);
  const bool fits = number ? j.is_number() || (j.is_object() && j.contains("tensor") &&
                                               j.at("tensor").is_number())
                    : std::holds_alternative<bool>(current) ? j.is_boolean()
                                                            : j.is_string();
  TB_CHECK(fits, "hyper-parameter '", key, "' is ", j.dump(), ", not ",
           number                                  ? "a number"
           : std::holds_alternative<bool>(current) ? "true or false"
                                                   : "a string");
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object()) {
    // A tensor LR: filled into the live tensor, never replaced (as in PyTorch PR 163098).
    if (const auto* t = std::get_if<Tensor>(&current)) {
      Tensor live = *t;
      live.fill_(j.at("tensor").get<double>());
      return live;
    }
    return j.at("tensor").get<double>();
  }
  return j.get<double>();
}

}  // namespace

namespace detail {

std::optional<std::string> checkpoint_owner(const std::filesystem::path& dir) {
  return checkpoint_owner_key(dir);
}

std::string checkpoint_name(std::int64_t step) {
  std::ostringstream name;
  name << "step-" << std::setw(8) << std::setfill('0') << step;
  return name.str();
}

void prune_checkpoints(const std::filesystem::path& dir, std::int64_t keep,
                       const std::string& owner_key, std::int64_t current_step) {
  if (keep <= 0) return;
  std::vector<std::pair<std::int64_t, std::filesystem::path>> mine;  // (step, folder)
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    const auto ends_with = [&](std::string_view tail) {
      return name.size() > tail.size() &&
             name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    // What a killed save left (a ".step-N.partial" being written, a ".step-N.old" stepping
    // aside): only this run's saves write into its folder, and this one is complete.
    if (name.rfind(".step-", 0) == 0 && (ends_with(".partial") || ends_with(".old"))) {
      std::filesystem::remove_all(e.path());
      continue;
    }
    if (name.rfind("step-", 0) != 0 ||
        checkpoint_owner_key(e.path()) != std::optional<std::string>(owner_key))
      continue;
    std::int64_t step = 0;
    const char* digits = name.c_str() + 5;
    const auto [end, ec] = std::from_chars(digits, name.c_str() + name.size(), step);
    if (ec != std::errc() || end != name.c_str() + name.size()) continue;
    mine.emplace_back(step, e.path());
  }
  std::sort(mine.begin(), mine.end());
  // Past the current step: written by a continuation that was cut short (killed after them, then
  // resumed from an earlier checkpoint). That timeline is abandoned, and kept by step the
  // folders would outlive the checkpoint just written.
  while (!mine.empty() && mine.back().first > current_step) {
    std::filesystem::remove_all(mine.back().second);
    mine.pop_back();
  }
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < mine.size(); ++i)
    std::filesystem::remove_all(mine[i].second);
}

}  // namespace detail

std::filesystem::path Trainer::save_checkpoint(const std::filesystem::path& final_dir) {
  // Written into a hidden sibling folder, synced, then renamed into place: a save killed midway
  // leaves only the hidden folder (cleared by the next save), never a half checkpoint under the
  // real name, and never touches the previous checkpoint. A save that fails removes it at once
  // (on a full disk it held the space a later save needs).
  const std::filesystem::path parent =
      final_dir.has_parent_path() ? final_dir.parent_path() : std::filesystem::path(".");
  const std::filesystem::path partial = parent / ("." + final_dir.filename().string() + ".partial");
  const auto clear = [&] {
    std::error_code ec;
    std::filesystem::remove_all(partial, ec);
  };
  try {
    write_checkpoint(final_dir, partial);
  } catch (const std::filesystem::filesystem_error& e) {
    clear();
    throw ValueError("[checkpoint] cannot write " + final_dir.string() + ": " + e.code().message() +
                     (e.path1().empty() ? std::string() : " (" + e.path1().string() + ")"));
  } catch (...) {
    clear();
    throw;
  }
  return final_dir;
}

void Trainer::write_checkpoint(const std::filesystem::path& final_dir,
                               const std::filesystem::path& dir) {
  State& s = *s_;
  const std::filesystem::path parent =
      final_dir.has_parent_path() ? final_dir.parent_path() : std::filesystem::path(".");
  const std::string leaf = final_dir.filename().string();
  std::filesystem::create_directories(parent);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  save_safetensors(dir / "model.safetensors", s.model->state_dict(),
                   {{"format", "pt"}, {"step", std::to_string(s.step)}});
  TensorList opt_tensors;
  nlohmann::json state;
  state["version"] = 1;
  state["step"] = s.step;
  state["skipped"] = s.skipped;
  state["nonfinite_in_row"] = s.nonfinite_in_row;
  state["config"] = to_toml(config_);
  if (numerics_) state["numerics"] = numerics_();
  state["owner"] = {{"key", owner_key_}, {"description", owner_description_}};
  nlohmann::json opts = nlohmann::json::array();
  for (std::size_t i = 0; i < s.opts.size(); ++i) {
    const auto sd = s.opts[i]->state_dict();
    nlohmann::json o;
    o["name"] = s.opt_names[i];
    o["param_groups"] = nlohmann::json::array();
    for (const auto& g : sd.param_groups) {
      nlohmann::json gj;
      for (const auto& [k, v] : g.options)
        gj["options"][k] = hyper_to_json(v);
      gj["params"] = g.params;
      o["param_groups"].push_back(gj);
    }
    o["state_ids"] = nlohmann::json::array();
    for (const auto& [id, st] : sd.state) {
      nlohmann::json keys = nlohmann::json::array();
      for (const auto& [k, t] : st) {
        opt_tensors.emplace_back(std::to_string(i) + "." + std::to_string(id) + "." + k, t);
        keys.push_back(k);
      }
      o["state_ids"].push_back({{"id", id}, {"keys", keys}});
    }
    o["scheduler"] = i < s.scheds.size() ? s.scheds[i]->state_dict() : nlohmann::json();
    opts.push_back(o);
  }
  state["optimizers"] = opts;
  save_safetensors(dir / "optimizer.safetensors", opt_tensors);
  state["scaler_skipped"] = s.scaler_skipped;
  if (s.scaler) {
    if (const auto ss = s.scaler->state_dict()) {
      state["scaler"] = {{"scale", ss->scale},
                         {"growth_factor", ss->growth_factor},
                         {"backoff_factor", ss->backoff_factor},
                         {"growth_interval", ss->growth_interval},
                         {"growth_tracker", ss->growth_tracker}};
    }
  }
  if (s.average) {
    nn::NamedTensors avg = s.average->state_dict();
    save_safetensors(dir / "average.safetensors", TensorList(avg.begin(), avg.end()),
                     {{"kind", config_.swa.kind}});
  }
  state["loader"] = s.loader->state();
  state["generator"] = hex(s.gen.get_state());
  {
    std::ofstream out(dir / "state.json");
    out << state.dump(1);
    out.flush();
    TB_CHECK(out.good(), "[checkpoint] writing ", (dir / "state.json").string(),
             " failed (disk full?)");
  }
  sync_to_disk(dir / "state.json");
  sync_to_disk(dir);
  if (std::filesystem::exists(final_dir)) {
    // Re-saving a step (after a resume): the old folder steps aside until the new one is in.
    const std::filesystem::path old = parent / ("." + leaf + ".old");
    std::filesystem::remove_all(old);
    std::filesystem::rename(final_dir, old);
    std::filesystem::rename(dir, final_dir);
    std::filesystem::remove_all(old);
  } else {
    std::filesystem::rename(dir, final_dir);
  }
  sync_to_disk(parent);
}

namespace {

nlohmann::json read_checkpoint_state(const std::filesystem::path& dir) {
  std::ifstream in(dir / "state.json");
  TB_CHECK(in.good(), "[checkpoint] ", (dir / "state.json").string(), ": cannot open (",
           std::strerror(errno), ")");
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  const std::string file = (dir / "state.json").string();
  TB_CHECK(!state.is_discarded(), "[checkpoint] ", file,
           ": not JSON (cut short, or changed after the save)");
  TB_CHECK(state.is_object() && state.contains("version") && state.contains("config") &&
               state.at("config").is_string(),
           "[checkpoint] ", file, ": not a TrainBench checkpoint state (no version and config)");
  TB_CHECK(state.at("version") == 1, "[checkpoint] ", file, ": checkpoint format version ",
           state.at("version").dump(), "; this build reads version 1");
  return state;
}

}  // namespace

std::string checkpoint_config(const std::filesystem::path& dir) {
  return read_checkpoint_state(dir).at("config").get<std::string>();
}

std::vector<std::string> check_resume_config(const std::filesystem::path& dir,
                                             const std::string& checkpoint_config_toml,
                                             const RunConfig& config) {
  std::vector<std::string> warnings;
  // The config must match, except where the run is placed and how it is logged and saved, which
  // change no value it computes: [binding] (a data-parallel rank's own slot differs from rank
  // 0's, which wrote the checkpoint; a run resumed by a launcher or a sweep gets whatever slot is
  // free then), threads and data.workers (the same bits at every count with the default GEMM
  // backend), checkpoint.interval and keep (not its folder: an abandoned continuation's
  // checkpoints there would be left unpruned), the run's name, tags, log interval and init_from
  // (a resume loads the checkpoint instead), and amp.tf32 off CUDA. Paths compare absolute (a
  // config file's relative ones from this folder, as a new run's are stored).
  auto same_run = [](RunConfig c) {
    make_paths_absolute(c);
    c.binding = BindingSection{};
    c.threads = 0;
    c.data.workers = 0;
    c.checkpoint.interval = 0;
    c.checkpoint.keep = 3;
    c.run.name = "run";
    c.run.tags.clear();
    c.run.log_interval = 1;
    c.run.init_from.clear();
    c.eval.at_start = false;  // step 0's evaluation changes nothing after it
    if (c.run.device.rfind("cuda", 0) != 0) c.amp.tf32 = false;
    // Where the data is (a store moved to another machine finds it elsewhere): the loader's
    // state checks the sample count, and the run warns that the rest is taken on trust.
    for (const std::string& k : data_path_keys(c))
      set_data_path(c, k, "");
    return to_toml(c);
  };
  bool same = checkpoint_config_toml == to_toml(config);
  // The differences named are those that matter: a threads or log_interval that changed too is
  // allowed, so it is left out of the list.
  std::string then = checkpoint_config_toml, now = to_toml(config);
  if (!same) {
    try {
      const RunConfig was = parse_run_config(then, "checkpoint");
      then = same_run(was);
      now = same_run(config);
      same = then == now;
      if (same) {
        RunConfig now_abs = config;
        make_paths_absolute(now_abs);
        RunConfig was_abs = was;
        make_paths_absolute(was_abs);
        for (const std::string& k : data_path_keys(now_abs)) {
          const std::string a = data_path(was_abs, k), b = data_path(now_abs, k);
          if (a != b)
            warnings.push_back(
                k + " is " + (b.empty() ? std::string("\"\" (the default)") : b) +
                " where the checkpoint's run read " + (a.empty() ? "\"\" (the default)" : a) +
                ": the run continues on it, bit for bit only if it holds the same data");
        }
      }
    } catch (const ValueError&) {  // not a config this build reads: not the same run
    }
  }
  if (!same) {
    const std::string diff = config_differences(then, now);
    throw ValueError("[checkpoint] " + dir.string() + " was written by a run with another config" +
                     (diff.empty() ? "" : " (" + diff + ")") +
                     "; resume with that config (only where the run is placed and how it is "
                     "logged and saved may change: binding, threads, data.workers, "
                     "checkpoint.interval, checkpoint.keep, run.name, run.tags, "
                     "run.log_interval, eval.at_start, and where the data is: data.path, "
                     "data.val_path, "
                     "data.tokenizer_model)");
  }
  return warnings;
}

namespace {

// Weights that hold a NaN or inf (a file changed after it was saved) are refused with the tensor's
// name: training from them would only diverge. x * 0 sums to NaN exactly when some x is not finite.
void require_finite(const SafetensorsFile& f, const std::filesystem::path& file) {
  for (const auto& [name, t] : f.tensors) {
    if (!core::is_floating_point(t.dtype()) || t.numel() == 0) continue;
    autograd::NoGradGuard no_grad;
    const double probe = ops::sum(ops::mul(t.to(core::ScalarType::Float64), 0.0)).item();
    TB_CHECK(!std::isnan(probe), "[checkpoint] ", file.string(), ": ", name,
             " holds NaN or infinite values");
  }
}

// The step a checkpoint folder is named for ("step-00000010": 10), or nullopt.
std::optional<std::int64_t> folder_step(const std::filesystem::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  if (ec != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return step;
}

}  // namespace

void Trainer::resume_from(const std::filesystem::path& dir) {
  // Whatever in the folder is wrong is said with the folder (a state.json or weights file changed
  // after the save, a file of another model): "[checkpoint] DIR: ...". A refused resume leaves
  // the run as it was.
  try {
    load_checkpoint(dir);
  } catch (const ValueError& e) {
    const std::string what = e.what();
    if (what.find(dir.string()) != std::string::npos) throw;
    throw ValueError("[checkpoint] " + dir.string() + ": " + what);
  } catch (const nlohmann::json::exception& e) {
    throw ValueError("[checkpoint] " + (dir / "state.json").string() +
                     ": not a state this build wrote (" + e.what() + ")");
  }
}

void Trainer::load_checkpoint(const std::filesystem::path& dir) {
  State& s = *s_;
  const nlohmann::json state = read_checkpoint_state(dir);
  // Its step: the one the folder is named for, within the run. A state.json whose step was
  // changed would resume at the wrong place, and the store drop what it held after that step.
  const auto& step = state.contains("step") ? state.at("step") : nlohmann::json();
  TB_CHECK(step.is_number_integer() && step.get<std::int64_t>() >= 0 &&
               folder_step(dir).value_or(step.get<std::int64_t>()) == step.get<std::int64_t>(),
           "[checkpoint] ", (dir / "state.json").string(), ": step ", step.dump(),
           " is not this checkpoint's (",
           folder_step(dir) ? "the folder is step " + std::to_string(*folder_step(dir))
                            : std::string("a step >= 0"),
           "): the file was changed after it was saved; resume from another checkpoint "
           "(run --resume N --from-checkpoint DIR)");
  if (state.contains("owner") && state.at("owner").is_object()) {
    const std::string key = state.at("owner").value("key", std::string());
    // Keys are "<store id>/<run id>": another run of this same store is resumed by its own id,
    // another store's run from that store.
    const auto store_of = [](const std::string& k) { return k.substr(0, k.rfind('/')); };
    const bool same_store = key.find('/') != std::string::npos &&
                            owner_key_.find('/') != std::string::npos &&
                            store_of(key) == store_of(owner_key_);
    TB_CHECK(key.empty() || owner_key_.empty() || key == owner_key_, "[checkpoint] ", dir.string(),
             " belongs to ", state.at("owner").value("description", key), ", not to ",
             owner_description_.empty() ? owner_key_ : owner_description_,
             same_store
                 ? "; it continues run " + key.substr(key.rfind('/') + 1) + " only (run --resume " +
                       key.substr(key.rfind('/') + 1) + ", if that run is not finished)"
                 : std::string("; it continues that run only, from its own store"));
  }
  for (auto& w : check_resume_config(dir, state.at("config").get<std::string>(), config_))
    s.setup_warnings.push_back(std::move(w));
  // The same config, yet past the run's end: a run counted in epochs over data that shrank.
  TB_CHECK(step.get<std::int64_t>() <= total_steps_, "[checkpoint] ", dir.string(), " is at step ",
           step.get<std::int64_t>(), ", after this run's last step (", total_steps_,
           "): the data it reads now has fewer batches than the run's");
  const auto model_file = load_safetensors(dir / "model.safetensors");
  require_finite(model_file, dir / "model.safetensors");
  s.model->load_state_dict(nn::NamedTensors(model_file.tensors.begin(), model_file.tensors.end()));
  const auto opt_file = load_safetensors(dir / "optimizer.safetensors");
  std::map<std::string, Tensor> opt_tensors(opt_file.tensors.begin(), opt_file.tensors.end());
  const auto& opts = state.at("optimizers");
  TB_CHECK(opts.size() == s.opts.size(), "[checkpoint] ", dir.string(), ": ", opts.size(),
           " optimizers saved, this run has ", s.opts.size());
  for (std::size_t i = 0; i < s.opts.size(); ++i) {
    optim::OptimizerStateDict sd;
    const auto current = s.opts[i]->state_dict();
    std::size_t gi = 0;
    for (const auto& gj : opts[i].at("param_groups")) {
      optim::OptimizerStateDict::Group g;
      for (auto it = gj.at("options").begin(); it != gj.at("options").end(); ++it) {
        const auto& cur = current.param_groups.at(gi).options;
        auto c = cur.find(it.key());
        g.options[it.key()] =
            hyper_from_json(it.value(), c == cur.end() ? optim::HyperValue(0.0) : c->second,
                            it.key(), c != cur.end());
      }
      g.params = gj.at("params").get<std::vector<std::int64_t>>();
      sd.param_groups.push_back(std::move(g));
      ++gi;
    }
    for (const auto& e : opts[i].at("state_ids")) {
      const auto id = e.at("id").get<std::int64_t>();
      for (const auto& k : e.at("keys")) {
        const std::string name =
            std::to_string(i) + "." + std::to_string(id) + "." + k.get<std::string>();
        auto it = opt_tensors.find(name);
        TB_CHECK(it != opt_tensors.end(), "[checkpoint] ", dir.string(),
                 ": optimizer.safetensors lacks ", name);
        sd.state[id][k.get<std::string>()] = it->second;
      }
    }
    s.opts[i]->load_state_dict(sd);
    if (i < s.scheds.size()) s.scheds[i]->load_state_dict(opts[i].at("scheduler"));
  }
  if (s.scaler && state.contains("scaler")) {
    const auto& sj = state.at("scaler");
    amp::GradScalerState ss;
    ss.scale = sj.at("scale").get<double>();
    ss.growth_factor = sj.at("growth_factor").get<double>();
    ss.backoff_factor = sj.at("backoff_factor").get<double>();
    ss.growth_interval = sj.at("growth_interval").get<std::int64_t>();
    ss.growth_tracker = sj.at("growth_tracker").get<std::int64_t>();
    s.scaler->load_state_dict(ss);
  }
  if (s.average) {
    const auto avg_file = load_safetensors(dir / "average.safetensors");
    require_finite(avg_file, dir / "average.safetensors");
    s.average->load_state_dict(nn::NamedTensors(avg_file.tensors.begin(), avg_file.tensors.end()));
  }
  s.scaler_skipped =
      state.contains("scaler_skipped") ? state.at("scaler_skipped").get<std::int64_t>() : 0;
  s.loader->load_state(state.at("loader").get<data::DataLoaderState>());
  s.gen.set_state(unhex(state.at("generator").get<std::string>()));
  s.step = state.at("step").get<std::int64_t>();
  s.skipped = state.at("skipped").get<std::int64_t>();
  s.nonfinite_in_row = state.at("nonfinite_in_row").get<std::int64_t>();
  if (s.ddp) release_unowned_state();  // distributed Muon keeps its own matrices' momentum only
  resumed_numerics_ = state.contains("numerics") && state.at("numerics").is_string()
                          ? state.at("numerics").get<std::string>()
                          : std::string();
  emit_event("info", "resumed from " + dir.string() + " at step " + std::to_string(s.step));
}

}  // namespace tb::train
