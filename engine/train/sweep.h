// Sweeps: one run config with a [sweep] table becomes many runs — a grid or random sample over
// any config keys (optimizer.kind and per-group keys such as optimizer.muon.lr included), each
// point replicated over seeds — the question "is Muon better than AdamW here, at its best
// learning rate, across seeds?" as one config. This part plans the trials; trainbench-cli sweep
// runs them.
//
//   [sweep]
//   name = "muon-vs-adamw"     # tags every run "sweep:<name>"
//   method = "grid"            # grid: every combination of the values; random: `trials` draws
//   trials = 16                # random only
//   seeds = [1, 2]             # run.seed of each point's replicates (default: the config's)
//   metric = "eval.accuracy"   # what the sweep compares, and whether higher is better
//   goal = "max"
//   sampler_seed = 0           # random: the draws' seed
//   [sweep.early_stopping]     # optional
//   method = "successive_halving"   # or "median"
//   steps = [200, 400]              # rungs: where the points are compared (the metric is
//   reduction_factor = 2            #   evaluated there); keep the best 1/2 at each
//   [sweep.parameters]
//   "optimizer.kind" = ["muon", "adamw"]                                 # values (grid, choice)
//   "optimizer.muon.lr" = [0.01, 0.02]
//   "optimizer.lr" = { distribution = "log_uniform", min = 1e-4, max = 1e-2 }   # random only
//
// A key that does not apply to a point (optimizer.muon.lr when optimizer.kind = "adamw": the
// config reader refuses it there as unknown for that kind) is left out of that point, as are
// keys of the config that the point's values make inapplicable (the config's optimizer.lr in a
// point with optimizer.kind = "muon"); points that become equal are run once; a swept key that
// applies to no point is an error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tb::train {

/// One swept key.
struct SweepParameter {
  std::string key;                  ///< dotted config key ("optimizer.muon.lr")
  std::string distribution;         ///< "values", "uniform", "log_uniform" or "int_uniform"
  std::vector<std::string> values;  ///< "values": each a TOML value as text ("0.01", "\"muon\"")
  double min = 0;                   ///< the continuous distributions' range
  double max = 0;                   ///< (inclusive of min; int_uniform also of max)
};

/// [sweep.early_stopping]: compare the points at given steps and stop the worse ones there
/// (synchronously: every live trial runs to a rung, pauses with a checkpoint, the points are
/// ranked by their seeds' mean metric at that step, and only the kept ones continue).
struct EarlyStopping {
  /// "none"; "successive_halving" (Jamieson & Talwalkar, AISTATS 2016: keep the best
  /// ceil(n / reduction_factor) points); or "median" (stop a point worse than the median of the
  /// points at that rung, after Golovin et al., "Google Vizier", KDD 2017).
  std::string method = "none";
  std::vector<std::int64_t> steps;  ///< the rungs, increasing
  double reduction_factor = 2;      ///< successive_halving: > 1
};

/// The [sweep] table.
struct SweepSpec {
  std::string name;                        ///< sweep name
  std::string method = "grid";             ///< grid or random
  std::int64_t trials = 0;                 ///< random: points drawn
  std::vector<std::int64_t> seeds;         ///< replicates (run.seed); empty = the config's seed
  std::string metric = "eval.loss";        ///< compared metric
  std::string goal = "min";                ///< min or max
  std::uint64_t sampler_seed = 0;          ///< random: the draws' seed
  std::vector<SweepParameter> parameters;  ///< in key order
  EarlyStopping early_stopping;            ///< [sweep.early_stopping]
};

/// One run of a sweep.
struct SweepTrial {
  std::int64_t index = 0;  ///< 0-based, in plan order (point-major, then seed)
  std::int64_t point = 0;  ///< 0-based point
  std::int64_t seed = 0;   ///< run.seed
  /// The point's values that apply to it: (key, TOML value text), in key order.
  std::vector<std::pair<std::string, std::string>> assignment;
  /// The --set equivalent: the assignment, run.seed, run.name ("NAME pPOINT sSEED") and
  /// run.tags (the config's plus "sweep:NAME").
  std::vector<std::string> overrides;
  /// The trial's effective run config (TOML, every key): what its run is started with.
  std::string config;
};

/// A sweep's trials.
struct SweepPlan {
  SweepSpec spec;                  ///< the parsed [sweep] table
  std::string base_toml;           ///< the config without [sweep]
  std::vector<SweepTrial> trials;  ///< every run, each checked as a run config
};

/// Plans the sweep of a config text (`source` names it in messages; `overrides` apply to the
/// base config as --set does). Every trial is checked as a run config. Errors are tb::ValueError
/// naming the key ("[sweep] run.toml: sweep.method: 'bayes' is not grid or random"), or the
/// point and its values when that point's config does not check.
SweepPlan plan_sweep(const std::string& toml_text, const std::string& source = "<config>",
                     const std::vector<std::string>& overrides = {});

/// plan_sweep of a file (a missing file names it).
SweepPlan plan_sweep_file(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace tb::train
