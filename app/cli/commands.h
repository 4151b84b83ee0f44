// The commands of trainbench-cli, one function each: main.cpp parses the command line and calls
// them. run_commands.cpp has those that train (run, launch, sweep: processes, signals, progress),
// info_commands.cpp those that print what the engine or the store holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/api/launch_api.h"
#include "engine/api/run_api.h"
#include "engine/api/sweep_api.h"
#include "engine/api/topology_api.h"

namespace tb::cli {

// --- run_commands.cpp ---
int cmd_run(tb::api::RunRequest req);
/// `launch` (not --ddp): N runs as processes of their own, their output tagged with the slot.
int cmd_launch(tb::api::LaunchRequest req);
/// `launch --ddp`: one data-parallel run, its ranks started by mpirun.
int cmd_launch_ddp(const tb::api::LaunchRequest& req);
int cmd_sweep(tb::api::SweepRequest req, bool dry_run, const std::string& show,
              const std::string& db_path);
/// This executable's path, for the processes `launch` and `sweep` start ("[who] cannot find this
/// program" when /proc/self/exe cannot be read).
std::string this_program(const char* who);

// --- info_commands.cpp ---
/// "a, b or c" of the kinds of a config family, from the engine's registries.
std::string kinds_of(const std::string& family);
int cmd_dispatch_device(const std::string& device, const std::string& op_filter);
int cmd_dispatch(const std::string& op_filter, bool all, bool matrix);
int cmd_devices();
int cmd_topo(const tb::api::TopologyRequest& req, const std::string& mode, int slots,
             bool fallback);
int cmd_schedule(const std::string& kind, const std::vector<std::string>& settings,
                 const std::vector<double>& lrs, int steps, bool momentum);
/// `schedule CONFIG.toml`: the run's LR per step and optimizer as CSV.
int cmd_schedule_config(const std::string& path, const std::vector<std::string>& overrides,
                        int steps);
int cmd_runs(const std::string& db_path, const std::string& sweep);
int cmd_sweeps(const std::string& db_path);
/// `sample`: `prompt_tokens` is --prompt-tokens' comma-separated ids.
int cmd_sample(tb::api::SampleRequest req, const std::string& prompt_tokens);

/// "1, 2,3" -> {"1", "2", "3"} (spaces and empty parts dropped).
std::vector<std::string> split_commas(const std::string& text);

}  // namespace tb::cli
