// RunConfig from TOML (toml++): a reader per section that records the keys it knows, so that any
// key left over is reported with the nearest valid one; overrides are applied to the parsed tree
// before reading, and remembered so that messages can say a value came from --set. to_toml()
// writes every key by hand (shortest round-trip numbers, escaped strings) so that
// parse_run_config(to_toml(c)) reads the same values back.
#include "engine/train/run_config.h"

#include "engine/train/config_reader.h"
#include "engine/train/config_schema.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/fields.h"
#include "engine/core/thread_pool.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/numa/cpu_set.h"
#include "engine/optim/registry.h"
#include "engine/sched/lr_scheduler.h"

namespace tb::train {

namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): the reader's internals

// ---------------------------------------------------------------------------------------------
// Sections.

const std::vector<std::string> kSections = {"run",        "model",   "data",        "optimizer",
                                            "scheduler",  "amp",     "swa",         "eval",
                                            "checkpoint", "binding", "distributed", "threads"};
const std::vector<std::string> kBindingModes = {"none", "node", "socket", "exclusive",
                                                "core-complex"};

void read_run(Section& s, RunSection& r) {
  s.read("name", r.name);
  if (r.name.empty()) s.ctx().fail(s.path("name"), "expected a non-empty string, found \"\"");
  s.read("tags", r.tags);
  s.read("seed", r.seed);
  if (s.read("device", r.device)) {
    try {
      (void)core::Device::parse(r.device);
    } catch (const Error&) {
      s.ctx().fail(s.path("device"),
                   "expected \"cpu\", \"cuda[:N]\" or \"openreg[:N]\", found " + quote(r.device));
    }
  }
  s.read("steps", r.steps);
  s.check_min("steps", r.steps, 0);
  s.read("epochs", r.epochs);
  s.check_min("epochs", r.epochs, 0);
  if (r.steps == 0 && r.epochs == 0)
    s.ctx().fail(s.path("steps"),
                 "expected run.steps > 0 or run.epochs > 0, found steps = 0 and epochs = 0");
  s.read("log_interval", r.log_interval);
  s.check_min("log_interval", r.log_interval, 1);
  s.read("max_nonfinite", r.max_nonfinite);
  s.check_min("max_nonfinite", r.max_nonfinite, 1);
  s.read("grad_clip", r.grad_clip);
  s.check_min("grad_clip", r.grad_clip, 0.0);
  s.read("gradient_accumulation_steps", r.gradient_accumulation_steps);
  s.check_min("gradient_accumulation_steps", r.gradient_accumulation_steps, 1);
  s.check_max("gradient_accumulation_steps", r.gradient_accumulation_steps, 1 << 20);
  s.read("init_from", r.init_from);
  s.finish();
}

// [model]: kind and its fields (type, range and choice checks from the kind's field specs), then
// nn::model_config_from_json (the kind's own checks, "model: mlp: ...").
nn::ModelConfig read_model(Section& s) {
  std::string kind = "mlp";
  s.read("kind", kind);
  s.check_enum("kind", kind, nn::model_registry().names());
  const auto entry = nn::model_registry().at(kind);
  json j = json::object();
  j["kind"] = kind;
  for (const auto& f : entry->fields)
    s.read_field(f, j);
  s.finish();
  try {
    return nn::model_config_from_json(j);
  } catch (const Error& e) {
    s.ctx().fail_kind(s.path(), e);
  }
}

void read_data(Section& s, DataSection& d) {
  s.read("kind", d.kind);
  s.check_enum("kind", d.kind, data::dataset_registry().names());
  s.read("path", d.path);
  s.read("batch_size", d.batch_size);
  s.check_min("batch_size", d.batch_size, 1);
  s.read("workers", d.workers);
  s.check_min("workers", d.workers, 0);
  s.check_max("workers", d.workers, 256);
  s.read("shuffle", d.shuffle);
  s.read("drop_last", d.drop_last);
  s.read("context_length", d.context_length);
  s.check_min("context_length", d.context_length, 1);
  s.read("val_fraction", d.val_fraction);
  s.check_range("val_fraction", d.val_fraction, 0.0, 1.0, true, true);
  s.read("normalize", d.normalize);
  const auto entry = data::dataset_registry().at(d.kind);
  if (d.path.empty() && !entry->path_required.empty())
    s.ctx().fail(s.path("path"),
                 "is required for data.kind = \"" + d.kind + "\": " + entry->path_required);
  d.extra = core::default_values(entry->fields);
  for (const auto& f : entry->fields)
    s.read_field(f, d.extra);
  if (entry->validate) {
    nlohmann::json settings = d.extra;  // its own keys and the path (an image folder checks it)
    settings["path"] = d.path;
    if (const auto problem = entry->validate(settings))
      s.ctx().fail(s.path(problem->key), problem->message);
  }
  s.finish();
}

// Reads the settings of o.kind (its fields, then its own checks); a key that only another kind
// has gets a message naming the kind and its keys.
void read_settings(Section& s, OptimizerSettings& o) {
  const auto kind = optim::optimizer_registry().at(o.kind);
  for (const auto& f : kind->fields)
    s.read_field(f, o.values);
  if (kind->validate) {
    if (const auto problem = kind->validate(o.values))
      s.ctx().fail(s.path(problem->key), problem->message);
  }
  const auto mine = core::field_keys(kind->fields);
  for (const auto& other : optim::optimizer_registry().entries()) {
    for (const auto& f : other->fields) {
      if (std::find(mine.begin(), mine.end(), f.key) != mine.end() || !s.peek(f.key)) continue;
      // A kind set by --set keeps the file's keys of the old kind: said, as for other tables.
      const std::string from = s.ctx().origin(s.path(f.key));
      s.ctx().fail_at(s.path(f.key), "unknown key '" + s.path(f.key) + "' for optimizer kind " +
                                         quote(o.kind) + " (its keys: " + join(mine, ", ") + ")" +
                                         (from.empty() ? s.ctx().kind_hint(s.path(f.key)) : from));
    }
  }
}

// The kinds that take only the 2-D hidden matrices (Muon), for messages.
std::vector<std::string> matrix_kinds() {
  std::vector<std::string> out;
  for (const auto& e : optim::optimizer_registry().entries())
    if (!e->rest_kind.empty()) out.push_back(e->name);
  return out;
}

std::string kind_eq_list(const std::vector<std::string>& kinds) {
  std::vector<std::string> q;
  for (const auto& k : kinds)
    q.push_back("optimizer.kind = " + quote(k));
  return core::join_or(q);
}

// " (from --set K=V)" for a key an override set, else the hint for a key the file gave under a
// kind an override changed.
std::string origin_or_kind(const Ctx& ctx, const std::string& path) {
  const std::string from = ctx.origin(path);
  return from.empty() ? ctx.kind_hint(path) : from;
}

void read_decay_params(Section& s, OptimizerSection& o) {
  s.read("weight_decay_params", o.weight_decay_params);
  s.check_enum("weight_decay_params", o.weight_decay_params, {"all", "matrices"});
}

void read_optimizer(Section& s, OptimizerSection& o) {
  std::string kind = "adamw";
  s.read("kind", kind);
  s.check_enum("kind", kind, optim::optimizer_registry().names());
  const auto entry = optim::optimizer_registry().at(kind);
  o = OptimizerSection{};
  o.main = OptimizerSettings(kind);
  if (entry->rest_kind.empty()) {
    for (const auto& mk : matrix_kinds()) {
      const std::string rest = optim::optimizer_registry().at(mk)->rest_kind;
      for (const std::string& sub : {mk, rest}) {
        if (s.peek(sub) && s.peek(sub)->is_table())
          s.ctx().fail(s.path(sub), "the [optimizer." + mk + "] and [optimizer." + rest +
                                        "] sub-tables are only read with optimizer.kind = " +
                                        quote(mk) + ", found kind = " + quote(kind));
      }
    }
    if (s.peek("split"))
      s.ctx().fail(s.path("split"), "only read with " + kind_eq_list(matrix_kinds()) +
                                        ", found kind = " + quote(kind));
    read_decay_params(s, o);
    read_settings(s, o.main);
    s.finish();
    return;
  }
  read_decay_params(s, o);
  // A matrix kind: its settings in [optimizer.<kind>], the rest's (defaults when absent) in
  // [optimizer.<rest_kind>].
  const std::string rest = entry->rest_kind;
  const auto rest_entry = optim::optimizer_registry().at(rest);
  for (const auto& k : core::field_keys(entry->fields)) {
    if (s.peek(k))
      s.ctx().fail_at(s.path(k),
                      "unknown key '" + s.path(k) + "' with optimizer.kind = " + quote(kind) +
                          "; did you mean 'optimizer." + kind + "." + k + "' (or 'optimizer." +
                          rest + "." + k + "')?" + origin_or_kind(s.ctx(), s.path(k)));
  }
  for (const auto& k : core::field_keys(rest_entry->fields)) {
    if (s.peek(k))
      s.ctx().fail_at(s.path(k), "unknown key '" + s.path(k) + "' with optimizer.kind = " +
                                     quote(kind) + "; did you mean 'optimizer." + rest + "." + k +
                                     "'?" + origin_or_kind(s.ctx(), s.path(k)));
  }
  Section main(s.ctx(), s.table(kind), s.path(kind));
  read_settings(main, o.main);
  main.finish();
  o.adamw = OptimizerSettings(rest);
  Section rest_section(s.ctx(), s.table(rest), s.path(rest));
  read_settings(rest_section, *o.adamw);
  rest_section.finish();
  if (const auto* n = s.get("split")) {
    const std::string expected = "an array of [glob, " + quote(kind) + " | " + quote(rest) +
                                 "] pairs, e.g. [[\"*.mlp.*\", " + quote(rest) + "]]";
    const auto* a = n->as_array();
    if (!a) s.type_error("split", expected, *n);
    std::size_t i = 0;
    for (const toml::node& elem : *a) {
      const std::string p = s.path("split") + "[" + std::to_string(i++) + "]";
      const auto* pair = elem.as_array();
      if (!pair || pair->size() != 2 || !(*pair)[0].is_string() || !(*pair)[1].is_string())
        s.ctx().fail(p, "expected " + expected + ", found " + describe(elem));
      const std::string glob = (*pair)[0].as_string()->get();
      const std::string which = (*pair)[1].as_string()->get();
      if (glob.empty()) s.ctx().fail(p, "expected a non-empty glob, found \"\"");
      if (which != kind && which != rest)
        s.ctx().fail(p, "expected " + quote(kind) + " or " + quote(rest) +
                            " as the second element, found " + quote(which));
      o.split.emplace_back(glob, which);
    }
  }
  s.finish();
}

const std::vector<std::string> kSchedulerPreviewOnly = {"lr", "optimizer", "metrics"};

json read_scheduler(const Ctx& ctx, const toml::node* n) {
  if (!n) return nullptr;
  if (!n->is_table()) ctx.fail("scheduler", "expected a table, found " + describe(*n));
  json j = toml_to_json(ctx, "scheduler", *n);
  if (j.empty()) return nullptr;
  if (!j.contains("kind") || !j.at("kind").is_string())
    ctx.fail("scheduler.kind",
             "expected a string (a scheduler kind such as \"cosine\", or \"none\"), found " +
                 (j.contains("kind") ? describe(*n->as_table()->get("kind")) : "nothing"));
  if (j.at("kind") == "none") {
    // `--set scheduler.kind=none` turns off the file's schedule: the file's other keys go with
    // it (a key of the file is a mistake only when the file itself says "none").
    const bool kind_set = !ctx.origin("scheduler.kind").empty();
    if (j.size() > 1) {
      for (const auto& [k, v] : j.items())
        if (k != "kind" && !(kind_set && ctx.origin("scheduler." + k).empty()))
          ctx.fail_at("scheduler." + k, "unknown key 'scheduler." + k +
                                            "' with scheduler.kind = \"none\"" +
                                            ctx.origin("scheduler." + k));
    }
    return nullptr;
  }
  for (const auto& k : kSchedulerPreviewOnly) {
    if (j.contains(k))
      ctx.fail("scheduler." + k,
               "is a preview-only field, not read in a run config (the base LR is optimizer.lr)");
  }
  try {
    (void)sched::preview(j, 1);
  } catch (const Error& e) {
    // The scheduler's own checks: a field's error points at scheduler.<field>.
    ctx.fail_kind("scheduler", e);
  }
  return j;
}

void read_amp(Section& s, AmpSection& a) {
  s.read("enabled", a.enabled);
  s.read("dtype", a.dtype);
  // float32 is autocast off, not a dtype of it (a near spelling would suggest fp16).
  if (a.dtype == "fp32" || a.dtype == "float32" || a.dtype == "f32")
    s.ctx().fail("amp.dtype", "expected \"bf16\" or \"fp16\", found \"" + a.dtype +
                                  "\"; for float32 throughout, set amp.enabled = false");
  s.check_enum("dtype", a.dtype, {"bf16", "fp16"});
  // fp16 needs loss scaling in practice: grad_scaler defaults to true with fp16.
  a.grad_scaler = a.dtype == "fp16";
  s.read("grad_scaler", a.grad_scaler);
  s.read("tf32", a.tf32);
  s.finish();
}

void read_swa(Section& s, SwaSection& w, bool stored_before_use_buffers) {
  s.read("kind", w.kind);
  s.check_enum("kind", w.kind, {"none", "swa", "ema"});
  s.read("ema_decay", w.ema_decay);
  s.check_range("ema_decay", w.ema_decay, 0.0, 1.0, false, false);
  s.read("start_step", w.start_step);
  s.check_min("start_step", w.start_step, 0);
  s.read("every", w.every);
  s.check_min("every", w.every, 1);
  // An effective config an earlier build stored (a run's, a checkpoint's) has every key but
  // this one: its run copied the live model's buffers, as false does, and goes on so.
  if (stored_before_use_buffers && s.peek("use_buffers") == nullptr) w.use_buffers = false;
  s.read("use_buffers", w.use_buffers);
  s.finish();
}

// Rules between sections: the model solves the data set's task and fits its samples.
void cross_check(const Ctx& ctx, const RunConfig& c) {
  const auto model = nn::model_registry().at(c.model.kind);
  const auto data = data::dataset_registry().at(c.data.kind);
  if (model->task != data->task) {
    std::vector<std::string> fitting;
    for (const auto& d : data::dataset_registry().entries())
      if (d->task == model->task) fitting.push_back(quote(d->name));
    ctx.fail("data.kind", "expected " + core::join_or(fitting) + " for model.kind = " +
                              quote(c.model.kind) + ", found " + quote(c.data.kind));
  }
  if (model->fit) {
    if (const auto problem = model->fit(c.model.fields, data->shape(data_settings(c.data))))
      ctx.fail(problem->key, problem->message);
  }
  // Found here, not at the first evaluation after all the training before it.
  if (c.eval.samples > 0 && model->task != core::kTaskLanguageModel)
    ctx.fail("eval.samples", "a " + quote(c.model.kind) +
                                 " model generates no text: eval.samples needs a language model "
                                 "(qwen-tiny, gpt); set it to 0");
}

}  // namespace

void make_paths_absolute(RunConfig& c) {
  // absolute() only, not lexically_normal(): "link/.." may name another folder than the one
  // the text seems to.
  const auto absolute = [](std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(path, ec);
    if (!ec) path = p.string();
  };
  absolute(c.data.path);
  absolute(c.run.init_from);
  absolute(c.checkpoint.dir);
  if (c.data.extra.is_object()) {
    for (const char* key : {"val_path", "tokenizer_model"}) {
      if (!c.data.extra.contains(key) || !c.data.extra[key].is_string()) continue;
      std::string p = c.data.extra[key].get<std::string>();
      absolute(p);
      c.data.extra[key] = p;
    }
  }
}

OptimizerSettings::OptimizerSettings() : OptimizerSettings("adamw") {}

OptimizerSettings::OptimizerSettings(const std::string& k)
    : kind(k), values(core::default_values(optim::optimizer_registry().at(k)->fields)) {}

bool OptimizerSection::flattens_conv_filters() const {
  const auto it = main.values.find("conv_filters");
  return it != main.values.end() && it->is_string() && it->get<std::string>() == "flatten";
}

double OptimizerSettings::number(const std::string& key) const {
  const auto it = values.find(key);
  TB_CHECK(it != values.end() && it->is_number(), "[config] optimizer kind '", kind,
           "' has no number setting '", key, "'");
  return it->get<double>();
}

OptimizerSettings& OptimizerSettings::set(const std::string& key, json value) {
  const auto entry = optim::optimizer_registry().at(kind);
  TB_CHECK(core::find_field(entry->fields, key) != nullptr, "[config] optimizer kind '", kind,
           "' has no setting '", key,
           "' (its settings: ", join(core::field_keys(entry->fields), ", "), ")");
  values[key] = std::move(value);
  return *this;
}

json data_settings(const DataSection& d) {
  json j = d.extra.is_object() ? d.extra : json::object();
  j["kind"] = d.kind;
  j["path"] = d.path;
  j["batch_size"] = d.batch_size;
  j["workers"] = d.workers;
  j["shuffle"] = d.shuffle;
  j["drop_last"] = d.drop_last;
  j["context_length"] = d.context_length;
  j["val_fraction"] = d.val_fraction;
  j["normalize"] = d.normalize;
  return j;
}

RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  Ctx ctx{source, {}, nullptr};
  toml::table root;
  ctx.root = &root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    std::string why(e.description());
    // toml++'s words for a string left open ("name = \"x" and the line's end).
    if (why.find("Error while parsing string") != std::string::npos &&
        why.find("control characters") != std::string::npos)
      why += " (is a string not closed with its quote before the end of the line?)";
    ConfigProblem p = ctx.problem("", "invalid TOML: " + why);
    p.line = static_cast<int>(b.line);
    p.column = static_cast<int>(b.column);
    throw ConfigError(p, "[config] " + source + ": line " + std::to_string(b.line) + ", column " +
                             std::to_string(b.column) + ": " + p.message);
  }
  for (const auto& o : overrides)
    apply_override(ctx, root, o);

  RunConfig c;
  Section top(ctx, &root, "");
  auto section = [&](const char* name) { return Section(ctx, top.table(name), name); };
  {
    Section s = section("run");
    read_run(s, c.run);
  }
  {
    Section s = section("model");
    c.model = read_model(s);
  }
  {
    Section s = section("data");
    read_data(s, c.data);
  }
  {
    Section s = section("optimizer");
    read_optimizer(s, c.optimizer);
  }
  c.scheduler.config = read_scheduler(ctx, top.get("scheduler"));
  {
    Section s = section("amp");
    read_amp(s, c.amp);
  }
  {
    Section s = section("swa");
    read_swa(s, c.swa, toml_text.rfind(kEffectiveHeader, 0) == 0);
  }
  {
    Section s = section("eval");
    s.read("interval", c.eval.interval);
    s.check_min("interval", c.eval.interval, 0);
    s.read("batches", c.eval.batches);
    s.check_min("batches", c.eval.batches, 0);
    s.read("samples", c.eval.samples);
    s.check_min("samples", c.eval.samples, 0);
    s.read("sample_tokens", c.eval.sample_tokens);
    s.check_min("sample_tokens", c.eval.sample_tokens, 1);
    s.read("at_start", c.eval.at_start);
    s.finish();
  }
  {
    Section s = section("checkpoint");
    s.read("interval", c.checkpoint.interval);
    s.check_min("interval", c.checkpoint.interval, 0);
    s.read("keep", c.checkpoint.keep);
    s.check_min("keep", c.checkpoint.keep, 1);
    s.read("dir", c.checkpoint.dir);
    s.finish();
  }
  {
    Section s = section("binding");
    s.read("mode", c.binding.mode);
    s.check_enum("mode", c.binding.mode, kBindingModes);
    s.read("slots", c.binding.slots);
    s.check_min("slots", c.binding.slots, 1);
    s.read("slot", c.binding.slot);
    s.check_min("slot", c.binding.slot, 0);
    if (c.binding.slot >= c.binding.slots)
      s.ctx().fail("binding.slot", "expected a slot below binding.slots (" +
                                       std::to_string(c.binding.slots) + "), found " +
                                       std::to_string(c.binding.slot));
    s.read("fallback", c.binding.fallback);
    s.read("cpus", c.binding.cpus);
    if (!c.binding.cpus.empty()) {
      // The list's syntax here; whether this process may use those CPUs, when the run binds.
      std::string problem;
      try {
        if (numa::CpuSet::parse(c.binding.cpus).empty()) problem = "no CPU";
      } catch (const ValueError& e) {
        problem = e.what();  // "[numa] malformed CPU list 'LIST': WHY": the why
        if (const auto at = problem.find("': "); at != std::string::npos) problem.erase(0, at + 3);
      }
      if (!problem.empty())
        s.ctx().fail("binding.cpus", "expected a CPU list such as \"0-3,8\", found " +
                                         quote(c.binding.cpus) + " (" + problem + ")");
    }
    s.finish();
  }
  {
    Section s = section("distributed");
    s.read("backend", c.distributed.backend);
    s.check_enum("backend", c.distributed.backend, {"none", "mpi", "nccl"});
    // Said with the config, before a launcher starts ranks that would each fail on it.
    if (c.distributed.backend == "nccl" && c.run.device.rfind("cuda", 0) != 0)
      s.ctx().fail("distributed.backend",
                   "\"nccl\" trains on CUDA devices, and run.device is " + quote(c.run.device) +
                       ": use distributed.backend = \"mpi\" on CPUs, or run.device = \"cuda\"");
    s.read("world_size", c.distributed.world_size);
    s.check_min("world_size", c.distributed.world_size, 0);
    s.read("timeout_s", c.distributed.timeout_s);
    if (!(c.distributed.timeout_s > 0))
      s.ctx().fail("distributed.timeout_s", "expected a number of seconds > 0, found " +
                                                fmt_double(c.distributed.timeout_s));
    s.read("bucket_mb", c.distributed.bucket_mb);
    if (!(c.distributed.bucket_mb > 0))
      s.ctx().fail("distributed.bucket_mb",
                   "expected a size in MiB > 0, found " + std::to_string(c.distributed.bucket_mb));
    s.read("check_replicas", c.distributed.check_replicas);
    s.read("broadcast_buffers", c.distributed.broadcast_buffers);
    s.read("muon", c.distributed.muon);
    s.check_enum("muon", c.distributed.muon, {"distributed", "replicated"});
    s.finish();
  }
  top.read("threads", c.threads);
  top.check_min("threads", c.threads, 0);
  top.check_max("threads", c.threads, core::kMaxNumThreads);
  // Sections known but not asked for through top.get are registered here for suggestions.
  for (const auto& name : kSections)
    (void)top.get(name);
  top.suggest_dotted(dotted_config_keys());
  top.finish();
  cross_check(ctx, c);
  return c;
}

std::string read_config_file(const std::string& path, const std::string& what) {
  const auto fail = [&](const std::string& why) {
    const std::string message = "[" + what + "] " + path + ": " + why;
    if (what == "config") throw ConfigError(ConfigProblem{path, "", 0, 0, why}, message);
    throw ValueError(message);
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("is a folder, not a config file (give a .toml file)");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(std::string("cannot open the file for reading (") + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("error while reading the file");
  return ss.str();
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_run_config(read_config_file(path), path, overrides);
}

std::int64_t steps_per_epoch(const RunConfig& config, std::int64_t batches) {
  const std::int64_t k = std::max<std::int64_t>(1, config.run.gradient_accumulation_steps);
  return (batches + k - 1) / k;
}

}  // namespace tb::train
