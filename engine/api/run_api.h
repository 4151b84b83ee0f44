// Facade for training runs and the run store, used by trainbench-cli: start a run from a config
// file into the store through the one run lifecycle (run_session.h), optionally resuming a stored
// run; list runs, show one, export its metrics, compare runs. Plain structs only.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/api/run_session.h"

namespace tb::api {

/// What `trainbench-cli run` asks for.
struct RunRequest {
  std::string config_path;              ///< the TOML run config
  std::vector<std::string> overrides;   ///< "key.path=value"
  std::string db_path;                  ///< "" = the default store
  std::optional<std::int64_t> resume;   ///< run id to resume from its newest checkpoint
  std::string resume_checkpoint;        ///< with resume: this checkpoint folder instead
  std::shared_ptr<RunControl> control;  ///< optional: cancel / pause the run from elsewhere
  /// A new run for a sweep's trial (sweep id, trial): `run --sweep-trial ID:TRIAL`.
  std::optional<std::pair<std::int64_t, std::int64_t>> sweep_trial;
  std::int64_t stop_at = 0;  ///< stop after this step with a checkpoint (`run --stop-at`)
  /// Each warning of the run as it happens (also stored as an event), on the run thread: a
  /// schedule that does not fit the run, a binding that fell back, a skipped non-finite step.
  std::function<void(const std::string&)> on_warning;
};

/// One progress report (every logged step).
struct RunProgressInfo {
  std::int64_t run_id = 0;  ///< the stored run
  std::int64_t step = 0;    ///< optimizer steps done
  std::int64_t total = 0;   ///< steps in the run
  /// The step's loss (NaN: none logged — the initial evaluation of eval.at_start, step 0).
  double loss = std::numeric_limits<double>::quiet_NaN();
  double lr =
      std::numeric_limits<double>::quiet_NaN();      ///< the first group's LR (NaN: none logged)
  double steps_per_s = 0;                            ///< recent rate
  std::vector<std::pair<std::string, double>> eval;  ///< eval.* metrics when evaluated
};

/// execute_run() of the config file (read here; a missing or unreadable file is a tb::ValueError
/// naming it). `config_path` may be empty with `resume`: the stored run's config is used.
/// `on_start` gets the run id and the parameter table before the first step (a resume's first
/// line says where it continues: "continuing from step N (DIR)"); `on_progress` is
/// called on the run thread after each logged step. A bad config throws (nothing is stored);
/// a failure after the run exists (e.g. a missing data set) returns status "failed".
RunOutcomeInfo run_training(const RunRequest& request,
                            const std::function<void(std::int64_t, const std::string&)>& on_start,
                            const std::function<void(const RunProgressInfo&)>& on_progress);

/// One line of the runs list.
struct RunRow {
  std::int64_t id = 0;                    ///< run id
  std::string name;                       ///< name
  std::string status;                     ///< status
  std::string created;                    ///< creation time, "YYYY-MM-DD HH:MM:SS" UTC
  std::optional<std::int64_t> last_step;  ///< newest step
  std::string message;                    ///< why it ended, one line (show has all of it)
  std::string sweep;                      ///< the sweep it is a trial of ("" = none)
  std::optional<std::int64_t> point;      ///< its point in that sweep
};
/// Every run of the store at `db_path` ("" = default), newest first; with `sweep`, only that
/// sweep's runs (an unknown sweep is an error naming it). `warning`, when given, gets why runs
/// whose process is gone could not be marked crashed ("" when they could: a full disk leaves
/// them reading running or queued).
std::vector<RunRow> list_runs(const std::string& db_path, const std::string& sweep = "",
                              std::string* warning = nullptr);

/// A run for display: status, times, config text, and last/min/max of each metric as text.
std::string show_run(const std::string& db_path, std::int64_t run_id);

/// What `trainbench-cli sample` asks for.
struct SampleRequest {
  std::string db_path;                      ///< the store ("" = default)
  std::int64_t run_id = 0;                  ///< a language-model run with a checkpoint
  std::string checkpoint;                   ///< this checkpoint folder ("" = the run's newest)
  std::string prompt;                       ///< models of text (bytes, SentencePiece): the text
  std::vector<std::int64_t> prompt_tokens;  ///< models of bare token ids: the ids to continue
  std::int64_t tokens = 200;                ///< new tokens
  double temperature = 1.0;                 ///< 0 = greedy
  std::int64_t top_k = 0;                   ///< 0 = every token
  std::uint64_t seed = 0;                   ///< the draws' seed (sample i draws from seed + i)
  std::int64_t num_samples = 1;             ///< texts, each from the same prompt
  /// The tokenizer model file instead of the stored data.tokenizer_model ("" = the stored one):
  /// where it is now, when it moved.
  std::string tokenizer_model;
};
/// Text (or token ids) continued by a run's model.
struct SampleResult {
  bool has_text = false;             ///< the run's data have a tokenizer: `text` is filled
  std::string text;                  ///< prompt + continuation as text (has_text)
  std::string tokenizer;             ///< "bytes", "sentencepiece <model>" or "" (bare ids)
  std::vector<std::int64_t> tokens;  ///< prompt + continuation as ids
  std::string from;                  ///< "run 3, checkpoint of step 1200"
  /// Every sample (the first is `text` / `tokens`): num_samples of them, the model loaded once.
  std::vector<std::string> texts;
  std::vector<std::vector<std::int64_t>> all_tokens;  ///< their ids
};
/// Loads the run's model from its newest checkpoint (or `checkpoint`) and samples from it. A run
/// that is not a language model, has no checkpoint, or a prompt of the wrong form (text for a
/// token model, ids out of range) is a tb::ValueError saying so.
SampleResult sample_run(const SampleRequest& request);

/// The terminal cells UTF-8 `text` takes in a text table: one per character, two for East Asian
/// wide characters and emoji, none for combining marks and joiners (after Markus Kuhn's wcwidth;
/// a byte that is not UTF-8 takes one).
std::size_t display_width(std::string_view text);
/// `text` and spaces up to `width` cells (none when it is as wide already), for the columns of
/// text tables: std::setw counts bytes, so a name with "é" or "名" shifted its row.
std::string pad_right(std::string_view text, std::size_t width);
/// Spaces and then `text`: a right-aligned cell of `width`.
std::string pad_left(std::string_view text, std::size_t width);
/// `text` cut to at most `width` cells at a character boundary, ending in "..." when cut.
std::string fit_width(std::string_view text, std::size_t width);

/// The run's metrics as "csv" or "json" text.
std::string export_run(const std::string& db_path, std::int64_t run_id, const std::string& format);

/// Writes the run as a TensorBoard event file in `dir` (created if needed): a scalar per metric
/// and step with its wall time, the config as text. Returns the file's path; an empty `dir`, an
/// unknown run or a failed write is an error naming it.
std::string export_tensorboard(const std::string& db_path, std::int64_t run_id,
                               const std::string& dir);

/// Writes the weights of stored run `run_id` — its newest checkpoint, or the checkpoint folder
/// `checkpoint` — to the safetensors file `out` in `layout` ("trainbench": the model's own names,
/// which torch.nn modules of the same structure load; "hf-gpt2": a gpt run as transformers'
/// GPT2LMHeadModel). With `average`, the checkpoint's SWA/EMA average (swa.kind) instead of the
/// trained weights. Returns one line saying what was written. Throws tb::ValueError for a run
/// without checkpoints (or without an average), a layout that does not fit, or a file that
/// cannot be written.
std::string export_weights(const std::string& db_path, std::int64_t run_id, const std::string& out,
                           const std::string& layout = "trainbench",
                           const std::string& checkpoint = "", bool average = false);

/// Runs side by side: the config keys whose values differ (from the stored effective configs;
/// keys only some runs have are counted per section, or listed with `all_keys`) and, per run,
/// status, steps, duration, the mean step time and the final value of the main metrics. Needs
/// at least two run ids; an unknown id is an error naming it.
std::string compare_runs(const std::string& db_path, const std::vector<std::int64_t>& run_ids,
                         bool all_keys = false);

/// The store's default path ($XDG_DATA_HOME/trainbench/runs.sqlite).
std::string default_store_path();

}  // namespace tb::api
