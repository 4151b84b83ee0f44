// The effective config: every key of a RunConfig written as TOML (defaults filled in; a kind's
// fields in its registry's order; shortest round-trip numbers, escaped strings), so that
// parse_run_config(to_toml(c)) reads the same values back.
#include "engine/data/registry.h"
#include "engine/optim/registry.h"
#include "engine/train/config_reader.h"
#include "engine/train/run_config.h"

namespace tb::train {

using namespace detail;  // NOLINT(google-build-using-namespace): the reader's formatting helpers

namespace {

// One "key = value" line per call.
class Writer {
 public:
  void header(const std::string& name) {
    out_ << (out_.tellp() > 0 ? "\n" : "") << "[" << name << "]\n";
  }
  void kv(const std::string& k, const std::string& raw) {
    out_ << toml_key(k) << " = " << raw << "\n";
  }
  void str(const std::string& k, const std::string& s) { kv(k, quote(s)); }
  void num(const std::string& k, double v) { kv(k, fmt_double(v)); }
  void integer(const std::string& k, std::int64_t v) { kv(k, std::to_string(v)); }
  void flag(const std::string& k, bool v) { kv(k, v ? "true" : "false"); }
  std::string text() const { return out_.str(); }
  std::ostringstream& os() { return out_; }

 private:
  std::ostringstream out_;
};

// A field's value as TOML: floats always with a point or exponent.
std::string field_toml(const core::FieldSpec& f, const json& v) {
  if (f.type == core::FieldType::kFloat && v.is_number()) return fmt_double(v.get<double>());
  return json_to_toml_value(v);
}

void write_settings(Writer& w, const OptimizerSettings& o) {
  const auto kind = optim::optimizer_registry().at(o.kind);
  for (const auto& f : kind->fields)
    if (o.values.contains(f.key)) w.kv(f.key, field_toml(f, o.values.at(f.key)));
}

}  // namespace

std::string to_toml(const RunConfig& c) {
  Writer w;
  w.os() << kEffectiveHeader << "\n";
  w.integer("threads", c.threads);

  w.header("run");
  w.str("name", c.run.name);
  json tags = c.run.tags;
  w.kv("tags", json_to_toml_value(tags));
  w.kv("seed", std::to_string(c.run.seed));
  w.str("device", c.run.device);
  w.integer("steps", c.run.steps);
  w.integer("epochs", c.run.epochs);
  w.integer("log_interval", c.run.log_interval);
  w.integer("max_nonfinite", c.run.max_nonfinite);
  w.num("grad_clip", c.run.grad_clip);
  w.integer("gradient_accumulation_steps", c.run.gradient_accumulation_steps);
  w.str("init_from", c.run.init_from);

  w.header("model");
  const json m = nn::to_json(c.model);
  w.kv("kind", json_to_toml_value(m.at("kind")));
  for (const auto& [k, v] : m.items())
    if (k != "kind") w.kv(k, json_to_toml_value(v));

  w.header("data");
  w.str("kind", c.data.kind);
  w.str("path", c.data.path);
  w.integer("batch_size", c.data.batch_size);
  w.integer("workers", c.data.workers);
  w.flag("shuffle", c.data.shuffle);
  w.flag("drop_last", c.data.drop_last);
  w.integer("context_length", c.data.context_length);
  w.num("val_fraction", c.data.val_fraction);
  w.flag("normalize", c.data.normalize);
  // The kind's own keys: set, or their defaults (a RunConfig built in code may leave them out).
  for (const auto& f : data::dataset_registry().at(c.data.kind)->fields) {
    if (c.data.extra.contains(f.key))
      w.kv(f.key, field_toml(f, c.data.extra.at(f.key)));
    else if (!f.default_value.is_null())
      w.kv(f.key, field_toml(f, f.default_value));
  }

  w.header("optimizer");
  w.str("kind", c.optimizer.main.kind);
  w.str("weight_decay_params", c.optimizer.weight_decay_params);
  const std::string rest = optim::optimizer_registry().at(c.optimizer.main.kind)->rest_kind;
  if (!rest.empty()) {
    json split = json::array();
    for (const auto& [glob, which] : c.optimizer.split)
      split.push_back({glob, which});
    w.kv("split", json_to_toml_value(split));
    w.header("optimizer." + c.optimizer.main.kind);
    write_settings(w, c.optimizer.main);
    w.header("optimizer." + rest);
    OptimizerSettings a = c.optimizer.adamw.value_or(OptimizerSettings(rest));
    if (a.kind != rest) a = OptimizerSettings(rest);
    write_settings(w, a);
  } else {
    write_settings(w, c.optimizer.main);
  }

  w.header("scheduler");
  const json& sc = c.scheduler.config;
  if (sc.is_null() || !sc.is_object()) {
    w.str("kind", "none");
  } else {
    if (sc.contains("kind")) w.kv("kind", json_to_toml_value(sc.at("kind")));
    for (const auto& [k, v] : sc.items())
      if (k != "kind") w.kv(k, json_to_toml_value(v));
  }

  w.header("amp");
  w.flag("enabled", c.amp.enabled);
  w.str("dtype", c.amp.dtype);
  w.flag("grad_scaler", c.amp.grad_scaler);
  w.flag("tf32", c.amp.tf32);

  w.header("swa");
  w.str("kind", c.swa.kind);
  w.num("ema_decay", c.swa.ema_decay);
  w.integer("start_step", c.swa.start_step);
  w.integer("every", c.swa.every);
  w.flag("use_buffers", c.swa.use_buffers);

  w.header("eval");
  w.integer("interval", c.eval.interval);
  w.integer("batches", c.eval.batches);
  w.integer("samples", c.eval.samples);
  w.integer("sample_tokens", c.eval.sample_tokens);
  w.flag("at_start", c.eval.at_start);

  w.header("checkpoint");
  w.integer("interval", c.checkpoint.interval);
  w.integer("keep", c.checkpoint.keep);
  w.str("dir", c.checkpoint.dir);

  w.header("binding");
  w.str("mode", c.binding.mode);
  w.integer("slot", c.binding.slot);
  w.integer("slots", c.binding.slots);
  w.flag("fallback", c.binding.fallback);
  w.str("cpus", c.binding.cpus);

  w.header("distributed");
  w.str("backend", c.distributed.backend);
  w.integer("world_size", c.distributed.world_size);
  w.num("timeout_s", c.distributed.timeout_s);
  w.num("bucket_mb", c.distributed.bucket_mb);
  w.flag("check_replicas", c.distributed.check_replicas);
  w.flag("broadcast_buffers", c.distributed.broadcast_buffers);
  w.str("muon", c.distributed.muon);
  return w.text();
}

}  // namespace tb::train
