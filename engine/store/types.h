// Plain structs the run store reads and writes: what a run is created with, run summaries and
// details, metric points, events and checkpoints. No SQLite, no tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/store/status.h"

namespace tb::store {

/// What a new run is created with (RunStore::create_run). Host and CPU description are filled in
/// from this machine when left empty.
struct NewRun {
  std::string name;                    ///< display name (need not be unique)
  std::vector<std::string> tags;       ///< free-form labels
  std::string config;                  ///< the effective config text; opaque to the store
  std::string config_format = "toml";  ///< "toml" or "json" (how to read `config`)
  std::optional<std::uint64_t> seed;   ///< the run's seed (stored bit-cast to a signed integer)
  std::string host;                    ///< machine the run is for ("" = this one)
  std::string cpu_info;                ///< CPU description ("" = this machine's)
  std::string gpu_info;                ///< GPU description ("" = none/unknown)
  std::string engine_version;          ///< engine version ("" = this build's)
  /// The sweep trial the run is made for: sweep id and trial index (its point is read from the
  /// sweep's trial). A sweep or trial that does not exist is an error.
  std::optional<std::pair<std::int64_t, std::int64_t>> sweep_trial;
};

/// One row of the runs list.
struct RunSummary {
  std::int64_t id = 0;                    ///< run id (1, 2, ...; never reused while the row exists)
  std::string name;                       ///< display name
  std::vector<std::string> tags;          ///< labels
  RunStatus status = RunStatus::kQueued;  ///< lifecycle state
  double created_at = 0;                  ///< Unix seconds
  std::optional<double> started_at;       ///< first time a writer started it
  std::optional<double> ended_at;         ///< when it reached its terminal status
  std::optional<std::int64_t> last_step;  ///< largest committed metric step, if any
  std::string host;                       ///< machine it ran on
  std::string message;                    ///< why it ended (failure, divergence, crash), or ""
  std::optional<std::int64_t> sweep_id;   ///< the sweep it is a trial of, if any
  std::optional<std::int64_t> sweep_trial;  ///< its trial index in that sweep
  std::optional<std::int64_t> sweep_point;  ///< its point in that sweep
  /// Time it spent ended before a resume (seconds): its duration is ended_at - started_at less
  /// this (see duration_seconds()).
  double paused_seconds = 0;
  /// How long it trained: from its first start to its end (now while it runs) less the time it
  /// spent ended before a resume; nullopt before it started.
  std::optional<double> duration_seconds(double now) const {
    if (!started_at) return std::nullopt;
    return std::max(0.0, (ended_at ? *ended_at : now) - *started_at - paused_seconds);
  }
};

/// Final and extreme values of one metric of a run ("best" is min or max, depending on the
/// metric: the caller knows which).
struct MetricSummary {
  std::string key;             ///< metric name, e.g. "train/loss"
  std::int64_t count = 0;      ///< points stored
  std::int64_t last_step = 0;  ///< step of the final point
  double last_value = 0;       ///< final value (NaN when the final point was NaN)
  double min_value = 0;        ///< smallest non-NaN value (NaN when all are NaN)
  std::int64_t min_step = 0;   ///< first step at which min_value occurs
  double max_value = 0;        ///< largest non-NaN value (NaN when all are NaN)
  std::int64_t max_step = 0;   ///< first step at which max_value occurs
};

/// Everything stored about a run except its series, events and checkpoints.
struct RunDetails {
  RunSummary summary;                             ///< the runs-list fields
  std::string config;                             ///< effective config text
  std::string config_format;                      ///< "toml" or "json"
  std::optional<std::uint64_t> seed;              ///< seed
  std::string cpu_info;                           ///< CPU description
  std::string gpu_info;                           ///< GPU description
  std::string engine_version;                     ///< engine version that ran it
  std::optional<std::int64_t> writer_pid;         ///< pid of the (last) writing process
  std::string writer_host;                        ///< host of the (last) writing process
  std::optional<std::int64_t> writer_start_time;  ///< its start time (/proc stat field 22)
  std::vector<MetricSummary> metrics;             ///< per metric key, ordered by key
};

/// One point of a metric series.
struct SeriesPoint {
  std::int64_t step = 0;  ///< training step
  double value = 0;       ///< value (NaN allowed)
  double time = 0;        ///< wall time it was logged, Unix seconds
};

/// One event (log line) of a run.
struct Event {
  std::int64_t id = 0;                   ///< increasing; poll with events(run, after_id)
  double time = 0;                       ///< Unix seconds
  EventLevel level = EventLevel::kInfo;  ///< severity
  std::string text;                      ///< the message
};

/// One checkpoint written by a run.
struct Checkpoint {
  std::int64_t id = 0;    ///< row id
  std::int64_t step = 0;  ///< step it was taken at
  std::string path;       ///< where its files are
  double created_at = 0;  ///< Unix seconds
  std::string metadata;   ///< JSON object text (opaque to the store)
};

/// The newest committed step of a run (for polling many runs at once).
struct RunProgress {
  std::int64_t id = 0;                    ///< run id
  RunStatus status = RunStatus::kQueued;  ///< current status
  std::optional<std::int64_t> last_step;  ///< largest committed step, if any
};

}  // namespace tb::store
