// Facade for the GUI workbench (ui/): run configs as TOML text (check, fields, parameter split,
// LR preview), runs started in-process with live metrics and cancel/pause, and the run store read
// live (runs with their key facts, metric series, config diff) and edited (rename, tags, delete).
// Plain structs only: no Tensor, no store or trainer types cross this line.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/api/run_api.h"
#include "engine/api/schedule_api.h"
#include "engine/api/sweep_api.h"

namespace tb::api {

// ---- run configs as text ------------------------------------------------------------------------

/// The result of checking a TOML run config. A problem comes as data (key path, line, column
/// and message, from the reader's tb::ConfigError), besides the full message the CLI prints.
struct ConfigCheck {
  bool ok = false;             ///< the config is valid
  std::string error;           ///< the validation message (as the CLI prints it) when not ok
  std::string key_path;        ///< the key the error names ("optimizer.lr"), "" when none
  int line = 0;                ///< 1-based line of that key (or of a syntax error), 0 = unknown
  int column = 0;              ///< 1-based column, 0 = unknown
  std::string message;         ///< the problem alone ("expected a number, found ...")
  std::string effective_toml;  ///< the effective config (defaults filled in) when ok
};

/// A config text parsed once: the check's result and, when it is ok, the parsed config that
/// config_fields(), parameter_split() and preview_config() read — one parse per edit (the GUI
/// keeps one per edit of its form). Cheap to copy.
class ParsedConfig {
 public:
  /// An empty, failed check.
  ParsedConfig();
  /// Destroys the handle.
  ~ParsedConfig();
  /// Copies the handle (the parsed config is shared, immutable).
  ParsedConfig(const ParsedConfig&);
  /// Copies the handle.
  ParsedConfig& operator=(const ParsedConfig&);
  /// The check (ok, or the problem as data).
  const ConfigCheck& check() const { return check_; }
  /// Whether it parsed and checked.
  bool ok() const { return check_.ok; }

  struct Impl;                  ///< (internal) the parsed config
  std::shared_ptr<Impl> impl_;  ///< (internal) null when not ok

 private:
  friend ParsedConfig parse_config(const std::string&, const std::string&,
                                   const std::vector<std::string>&);
  ConfigCheck check_;
};

/// Parses and checks a config text once (as check_config_text does); never throws for a bad
/// config.
ParsedConfig parse_config(const std::string& toml_text, const std::string& source = "<editor>",
                          const std::vector<std::string>& overrides = {});

/// Parses and validates `toml_text` with `overrides` ("key.path=value"), including that
/// run.device can be used on this machine; never throws for a bad config (the message is in the
/// result). `source` names the text in messages.
ConfigCheck check_config_text(const std::string& toml_text, const std::string& source = "<editor>",
                              const std::vector<std::string>& overrides = {});

/// The effective config of an empty TOML (every default), as the GUI's "new run" starts from.
std::string default_config_toml();

/// One key of an effective config, flattened.
struct ConfigField {
  std::string key;                   ///< dotted path, "run.seed", "optimizer.muon.lr", "threads"
  std::string section;               ///< "run", "optimizer.muon", "" for top-level keys
  std::string type;                  ///< "bool", "int", "float", "string", "array", "table"
  std::string value_toml;            ///< the value as TOML text: 5, 1e-3, "cpu", [1, 2], {...}
  std::vector<std::string> choices;  ///< the allowed strings of an enumerated string key
  std::string help;                  ///< one line: what it means (from the config reference)
  /// Why it has no effect with the rest of this config ("amp.enabled is false"); "" when it has.
  std::string idle;
};

/// The keys of the effective config of a valid config text (every key, defaults filled in), in
/// the effective config's order (top-level keys, then the sections as to_toml() writes them).
/// Throws tb::ValueError when `toml_text` does not check.
std::vector<ConfigField> config_fields(const std::string& toml_text);
/// The same of a parsed config (tb::ValueError when it did not check).
std::vector<ConfigField> config_fields(const ParsedConfig& config);

/// One parameter of the model and the optimizer it goes to.
struct SplitRow {
  std::string name;        ///< dotted parameter name
  std::string shape;       ///< "[256, 784]"
  std::int64_t numel = 0;  ///< elements
  std::string optimizer;   ///< "muon", "adamw", "sgd", ...
  std::string reason;      ///< why (Muon split: "2-D hidden matrix", "embedding", "1-D", glob ...)
};

/// The model's parameters and their optimizer for a config text (builds the model on the CPU).
/// Throws tb::ValueError when `toml_text` does not check.
std::vector<SplitRow> parameter_split(const std::string& toml_text);
/// The same of a parsed config (tb::ValueError when it did not check).
std::vector<SplitRow> parameter_split(const ParsedConfig& config);

/// The LR schedule of a config text: `steps` (0 = the run's length, as preview_run_config) rows,
/// one column per optimizer ("lr.muon", "lr.adamw" / "lr.<kind>") named in `group_names`. Equals
/// preview_run_config() of the same text saved to a file. Throws tb::ValueError.
ScheduleTable preview_config_text(const std::string& toml_text, int steps,
                                  std::vector<std::string>& group_names);
/// The same of a parsed config (tb::ValueError when it did not check).
ScheduleTable preview_config(const ParsedConfig& config, int steps,
                             std::vector<std::string>& group_names);

// ---- runs started in-process --------------------------------------------------------------------

/// What the GUI starts: a config text (the editor's), where to store it, how to control it.
struct TrainRequest {
  std::string config_text;              ///< TOML
  std::string source = "<editor>";      ///< names the text in messages (a file name, "queue #2")
  std::vector<std::string> overrides;   ///< "key.path=value"
  std::string db_path;                  ///< "" = the default store
  std::shared_ptr<RunControl> control;  ///< optional
  /// Continue this stored run (crashed, cancelled, ...) from its newest checkpoint; with an
  /// empty config_text its stored config is used.
  std::optional<std::int64_t> resume;
  /// Each warning of an in-process run as it happens, on the run thread (also stored as an
  /// event): a schedule shorter than the run, a binding that fell back, a skipped step.
  std::function<void(const std::string&)> on_warning;
};

/// execute_run() of a config text, on the calling thread (the GUI calls it on a worker thread):
/// validates, creates (or, with `resume`, continues) the run in the store, trains, ends the run
/// with its status. A failure after the run exists (e.g. a missing dataset) returns status
/// "failed" (a created run is marked failed); a bad config throws tb::ValueError before anything
/// is stored. `on_start` gets the run id and the parameter table (not called when the run fails
/// before its trainer is built); `on_metrics` every logged step's metrics (called on the run
/// thread: queue, do not block). `request.control` is bound to the run while it trains.
RunOutcomeInfo start_training(const TrainRequest& request,
                              const std::function<void(std::int64_t, const std::string&)>& on_start,
                              const std::function<void(const StepMetrics&)>& on_metrics);

// ---- the store, read live -----------------------------------------------------------------------

/// A run with the facts the runs table shows.
struct RunInfo {
  std::int64_t id = 0;                      ///< run id
  std::string name;                         ///< name
  std::vector<std::string> tags;            ///< tags
  std::string status;                       ///< queued, running, finished, failed, ...
  double created_at = 0;                    ///< Unix seconds
  std::optional<double> started_at;         ///< Unix seconds
  std::optional<double> ended_at;           ///< Unix seconds
  double paused_seconds = 0;                ///< ended before a resume: not part of its duration
  std::optional<std::int64_t> last_step;    ///< newest committed step
  std::string message;                      ///< why it ended
  std::string model;                        ///< model.kind from the stored config ("mlp")
  std::string optimizer;                    ///< optimizer.kind ("muon", "adamw", ...)
  std::string scheduler;                    ///< scheduler.kind, "none" when absent
  std::string dataset;                      ///< data.kind
  int world_size = 1;                       ///< ranks of a data-parallel run (1: one process)
  std::string dist_backend;                 ///< distributed.backend of such a run ("mpi", "nccl")
  std::optional<double> final_loss;         ///< last "loss"
  std::optional<double> best_eval_loss;     ///< min "eval.loss"
  std::optional<double> best_accuracy;      ///< max "eval.accuracy"
  std::optional<double> best_perplexity;    ///< min "eval.perplexity"
  std::string sweep;                        ///< the sweep it is a trial of ("" = none)
  std::optional<std::int64_t> sweep_point;  ///< its point in that sweep
};

/// One metric series: parallel arrays, by increasing step.
struct Series {
  std::vector<double> step;    ///< step
  std::vector<double> wall_s;  ///< seconds since the run's first point (stored wall times)
  std::vector<double> value;   ///< value
  double origin = 0;           ///< the Unix time wall_s counts from
};

/// A config difference: the key and its value text in each compared config ("-" = absent).
struct ConfigDiffRow {
  std::string key;                  ///< dotted key
  std::vector<std::string> values;  ///< one per config, in the order given ("-": not in it)
  /// Some configs lack the key and those that have it agree: another kind's own setting (Muon's
  /// [optimizer.muon] beside AdamW's [optimizer]), which views fold apart from the keys the runs
  /// differ on. A key the configs that have it disagree on is not folded.
  bool only_some = false;
};

/// Only the keys whose values differ between the TOML texts (flattened like `compare`).
std::vector<ConfigDiffRow> config_diff(const std::vector<std::string>& toml_texts);

/// An open run store for a GUI: cheap repeated reads (one connection), edits, and a change
/// counter for polling. Opening recovers crashed runs like every open; a corrupted or foreign
/// file throws tb::Error naming it (never overwritten). Not thread-safe: one per thread.
class StoreReader {
 public:
  /// Opens `db_path` ("" = the default store), creating it when absent.
  explicit StoreReader(const std::string& db_path = "");
  /// Opens `db_path` ("" = the default store) only when a run store is there: a mistyped path
  /// throws tb::ValueError ("[store] PATH: no run store there ...") and creates nothing.
  static StoreReader existing(const std::string& db_path);
  /// Closes the connection.
  ~StoreReader();
  /// Takes over `other`'s connection.
  StoreReader(StoreReader&& other) noexcept;
  /// Closes this connection and takes over `other`'s.
  StoreReader& operator=(StoreReader&& other) noexcept;

  /// The database file.
  std::string path() const;
  /// Every run, newest first, with its key facts.
  std::vector<RunInfo> runs() const;
  /// A fingerprint of (run ids, statuses, newest steps, names, tags): changes whenever runs()
  /// would — a cheap poll.
  std::string fingerprint() const;
  /// The metric names of a run, sorted.
  std::vector<std::string> metric_keys(std::int64_t run) const;
  /// The points of `key` with step >= from_step (all by default).
  Series series(std::int64_t run, const std::string& key, std::int64_t from_step = 0) const;
  /// How long `run` had trained at Unix time `when`: from its start, less the time it spent ended
  /// before a resume (from its status events; a crash's pause counts from when it was found).
  /// A sweep trial's time to a target then leaves out its waits at the rungs.
  double trained_seconds(std::int64_t run, double when) const;
  /// The run's effective config (TOML).
  std::string config_text(std::int64_t run) const;
  /// The run's events as "level: text" lines, oldest first.
  std::vector<std::string> events(std::int64_t run) const;
  /// Renames a run (non-empty name, else tb::ValueError).
  void rename_run(std::int64_t run, const std::string& name);
  /// Marks run `run` failed with `message` if it is still running with this process as its
  /// writer, although this process's run of it has ended (its last store writes failed, e.g. a
  /// full disk; a later try may succeed). Returns whether it changed the run.
  bool close_own_run_left_running(std::int64_t run, const std::string& message);
  /// Replaces a run's tags.
  void set_tags(std::int64_t run, const std::vector<std::string>& tags);
  /// Deletes a run and its metrics, events and checkpoint records (not a running one: error).
  void delete_run(std::int64_t run);
  /// The store's sweeps, newest first.
  std::vector<SweepRow> sweeps() const;
  /// Sweep `name`'s table with every trial's result (an unknown name: tb::ValueError).
  SweepResult sweep(const std::string& name) const;

 private:
  struct Impl;
  explicit StoreReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tb::api
