// trainbench-cli's commands that print what the engine or the store holds: dispatch, devices,
// topo, schedule, runs, sweeps, sample.
#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/api/config_api.h"
#include "engine/api/engine_api.h"
#include "engine/api/model_api.h"
#include "engine/api/schedule_api.h"

namespace tb::cli {

// "1, 2,3" -> {"1", "2", "3"} (empty parts dropped).
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : text + ",") {
    if (c == ',') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return parts;
}

// "a, b or c" of the kinds of a config family, from the engine's registries.
std::string kinds_of(const std::string& family) {
  std::string s;
  const auto kinds = tb::api::list_kinds(family);
  for (std::size_t i = 0; i < kinds.size(); ++i)
    s += (i == 0 ? "" : i + 1 == kinds.size() ? " or " : ", ") + kinds[i].name;
  return s;
}

// One device's view of the table: which ops run a kernel of the backend's own ("native"), which
// go through the key's fallback (openreg: the CPU fallback), which have none.
int cmd_dispatch_device(const std::string& device, const std::string& op_filter) {
  const std::string key = tb::api::dispatch_key_of(device);
  std::size_t native = 0;
  std::size_t fallback = 0;
  std::size_t missing = 0;
  std::cout << std::left << std::setw(44) << "op"
            << "on " << device << " (key " << key << ")\n";
  for (const auto& r : tb::api::dispatch_table()) {
    if (r.key != key) continue;
    if (!op_filter.empty() && r.op.find(op_filter) == std::string::npos) continue;
    const char* what = r.source == "kernel"     ? "native"
                       : r.source == "fallback" ? "fallback"
                                                : "missing";
    (r.source == "kernel" ? native : r.source == "fallback" ? fallback : missing)++;
    std::cout << std::setw(44) << r.op << std::setw(10) << what << r.where << "\n";
  }
  std::cout << native << " native, " << fallback << " through the fallback, " << missing
            << " missing\n";
  return 0;
}

int cmd_dispatch(const std::string& op_filter, bool all, bool matrix) {
  const auto rows = tb::api::dispatch_table();
  if (matrix) {
    const std::vector<std::string> keys = {"Autocast", "Autograd", "CPU", "CUDA", "PrivateUse1"};
    std::map<std::string, std::map<std::string, std::string>> m;
    for (const auto& r : rows) {
      if (!op_filter.empty() && r.op.find(op_filter) == std::string::npos) continue;
      m[r.op][r.key] = r.source == "missing" ? "-" : r.source == "fallthrough" ? "." : r.source;
    }
    int w_op = 4;  // the longest op name, so that no name runs into its first column
    for (const auto& [op, byk] : m)
      w_op = std::max(w_op, static_cast<int>(op.size()) + 2);
    std::cout << std::left << std::setw(w_op) << "op";
    for (const auto& k : keys)
      std::cout << std::setw(13) << k;
    std::cout << "\n";
    for (const auto& [op, byk] : m) {
      std::cout << std::setw(w_op) << op;
      for (const auto& k : keys)
        std::cout << std::setw(13) << byk.at(k);
      std::cout << "\n";
    }
    std::cout << "(kernel = registered for the key, fallback = the key's fallback, . = falls "
                 "through, - = missing; PrivateUse1 is "
              << tb::api::privateuse1_name() << ")\n";
    return 0;
  }
  std::size_t w_op = 2;
  for (const auto& r : rows)
    w_op = std::max(w_op, r.op.size());
  std::cout << std::left << std::setw(static_cast<int>(w_op) + 2) << "op" << std::setw(13) << "key"
            << std::setw(12) << "source"
            << "registered at\n";
  std::size_t shown = 0;
  for (const auto& r : rows) {
    if (!op_filter.empty() && r.op.find(op_filter) == std::string::npos) continue;
    if (!all && (r.source == "missing" || r.source == "fallthrough")) continue;
    std::cout << std::setw(static_cast<int>(w_op) + 2) << r.op << std::setw(13) << r.key
              << std::setw(12) << r.source << r.where << "\n";
    ++shown;
  }
  if (shown == 0 && !op_filter.empty()) {
    bool named = false;  // an op of that name, all of whose entries are missing or fall through
    for (const auto& r : rows)
      named = named || r.op.find(op_filter) != std::string::npos;
    if (!named) {
      std::cout << "no operator's name contains '" << op_filter
                << "' (dispatch without --op lists them all)\n";
      return 0;
    }
  }
  std::cout << shown << " entries"
            << (all ? "" : " (use --all to include missing and fall-through keys)") << "\n";
  return 0;
}

int cmd_devices() {
  for (const auto& d : tb::api::list_devices()) {
    std::cout << std::left << std::setw(11) << d.name << std::setw(13)
              << (d.available ? "available" : "unavailable") << d.detail << "\n";
  }
  for (const auto& b : tb::api::distributed_backends())
    std::cout << std::left << std::setw(11) << b.name << std::setw(13)
              << (b.built ? "built" : "not built") << b.detail << "\n";
  const tb::api::CpuKernelLevel level = tb::api::cpu_kernel_level();
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v)
      s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::cout << "CPU kernels: " << level.level << " (compiled: " << join(level.compiled)
            << "; this CPU runs: " << join(level.supported) << "; TB_CPU_CAPABILITY chooses one)\n";
  if (const std::string note = tb::api::openblas_note(); !note.empty())
    std::cout << "note: " << note << "\n";
  return 0;
}

namespace {

std::string gib(std::uint64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1024.0 * 1024 * 1024)
     << " GiB";
  return os.str();
}

}  // namespace

int cmd_topo(const tb::api::TopologyRequest& req, const std::string& mode, int slots,
             bool fallback) {
  const auto info = tb::api::describe_topology(req);
  // Planned first: a bad --binding or --slots is an error before any output, not after a page
  // of topology.
  const auto plan = tb::api::plan_binding(req, mode, slots, fallback);
  std::cout << "Topology: " << info.source << "\n"
            << "  " << info.packages.size() << " packages, " << info.nodes.size() << " NUMA nodes, "
            << info.cache_groups.size() << " last-level-cache groups, " << info.cores.size()
            << " physical cores, " << info.n_cpus << " logical CPUs (" << info.cpus << ")\n"
            << "  allowed CPUs: " << info.allowed_cpus << " (" << info.n_allowed << " of "
            << info.n_cpus << ")\n";
  for (const auto& p : info.packages)
    std::cout << "  package " << p.index << ": CPUs " << p.cpus << "\n";
  for (const auto& n : info.nodes) {
    std::cout << "  NUMA node " << n.index << ": CPUs " << (n.cpus.empty() ? "none" : n.cpus)
              << ", allowed " << (n.allowed_cpus.empty() ? "none" : n.allowed_cpus);
    if (n.memory_bytes > 0) std::cout << ", memory " << gib(n.memory_bytes);
    std::cout << "\n";
  }
  for (const auto& g : info.cache_groups)
    std::cout << "  L" << g.level << " cache group: CPUs " << g.cpus << "\n";
  for (std::size_t i = 0; i < info.cores.size(); ++i) {
    const auto& c = info.cores[i];
    std::cout << "  core " << i << ": threads " << c.cpus << " (package " << c.package << ", node "
              << c.node << ")\n";
  }
  if (info.gpus.empty()) {
    std::cout << "  GPUs: none given (--gpu-nodes)\n";
  } else {
    for (const auto& g : info.gpus)
      std::cout << "  GPU " << g.index << ": NUMA node " << g.node << "\n";
  }
  std::cout << "Binding: " << plan.mode << ", " << plan.slots.size() << " "
            << (plan.slot_kind == "gpu" ? "GPU" : "CPU worker") << " slot"
            << (plan.slots.size() == 1 ? "" : "s") << " (" << plan.slot_rule << ")\n";
  for (const auto& r : plan.slots) {
    std::cout << "  slot " << r.slot << ": ";
    if (r.bound) {
      std::cout << "node " << r.node << ", CPUs " << r.cpus << " (" << r.n_cpus << ")\n"
                << "    " << r.numactl << "\n";
    } else {
      std::cout << "unbound\n";
    }
    if (!r.warning.empty()) std::cout << "    warning: " << r.warning << "\n";
  }
  return 0;
}

int cmd_schedule(const std::string& kind, const std::vector<std::string>& settings,
                 const std::vector<double>& lrs, int steps, bool momentum) {
  const auto t = tb::api::preview_schedule(kind, settings, lrs, steps);
  const bool groups = !t.rows.empty() && t.rows[0].lr.size() > 1;
  std::cout << "step";
  const std::size_t n = t.rows.empty() ? 0 : t.rows[0].lr.size();
  for (std::size_t g = 0; g < n; ++g)
    std::cout << " lr" << (groups ? std::to_string(g) : "");
  if (momentum) {
    for (std::size_t g = 0; g < n; ++g)
      std::cout << " " << t.momentum_key << (groups ? std::to_string(g) : "");
  }
  std::cout << "\n" << std::setprecision(12);
  for (const auto& r : t.rows) {
    std::cout << r.step;
    for (double v : r.lr)
      std::cout << " " << v;
    if (momentum) {
      for (double v : r.momentum)
        std::cout << " " << v;
    }
    std::cout << "\n";
  }
  for (const auto& w : t.warnings)
    std::cerr << "warning: " << w << "\n";
  return 0;
}

// `schedule CONFIG.toml`: the run's LR per step and optimizer as CSV.
int cmd_schedule_config(const std::string& path, const std::vector<std::string>& overrides,
                        int steps) {
  std::vector<std::string> names;
  const auto t = tb::api::preview_run_config(path, overrides, steps, names);
  std::cout << "step";
  for (const auto& n : names)
    std::cout << "," << n;
  std::cout << "\n" << std::setprecision(12);
  for (const auto& r : t.rows) {
    std::cout << r.step;
    for (double v : r.lr)
      std::cout << "," << v;
    std::cout << "\n";
  }
  for (const auto& w : t.warnings)
    std::cerr << "warning: " << w << "\n";
  return 0;
}

int cmd_runs(const std::string& db_path, const std::string& sweep) {
  std::string unrecovered;
  const auto rows = tb::api::list_runs(db_path, sweep, &unrecovered);  // an error: no header
  // Wider for long names (a sweep's trials), so columns never touch; up to 48 cells, a longer
  // name cut with "..." (show N prints it whole), so one name cannot widen every row.
  constexpr std::size_t kMaxName = 48;
  int name_width = 24;
  for (const auto& r : rows)
    name_width = std::max(name_width,
                          static_cast<int>(std::min(tb::api::display_width(r.name), kMaxName)) + 2);
  std::cout << std::left << std::setw(5) << "id" << std::setw(name_width) << "name" << std::setw(11)
            << "status" << std::setw(21) << "created (UTC)" << std::setw(8) << "steps"
            << "message\n";
  for (const auto& r : rows) {
    std::cout << std::left << std::setw(5) << r.id
              << tb::api::pad_right(tb::api::fit_width(r.name, kMaxName),
                                    static_cast<std::size_t>(name_width))
              << std::setw(11) << r.status << std::setw(21) << r.created << std::setw(8)
              << (r.last_step ? std::to_string(*r.last_step) : "-") << r.message;
    if (!r.sweep.empty())
      std::cout << (r.message.empty() ? "" : "  ") << "[sweep " << r.sweep << " p"
                << r.point.value_or(0) << "]";
    std::cout << "\n";
  }
  if (!unrecovered.empty())  // stderr: stdout stays the table
    std::cerr << "warning: a run whose process is gone may still read running or queued: "
                 "marking it crashed could not be written ("
              << unrecovered << ")\n";
  // Nothing listed: say where that was looked for (stderr: stdout stays the table).
  if (rows.empty())
    std::cerr << "(no runs" << (sweep.empty() ? std::string() : " of sweep " + sweep) << " in "
              << (db_path.empty() ? tb::api::default_store_path() : db_path) << ")\n";
  return 0;
}

int cmd_sweeps(const std::string& db_path) {
  const auto rows = tb::api::list_sweeps(db_path);
  int name_width = 20;
  for (const auto& r : rows)
    name_width = std::max(name_width, static_cast<int>(tb::api::display_width(r.name)) + 2);
  std::cout << std::left << std::setw(5) << "id" << std::setw(name_width) << "name" << std::setw(13)
            << "status" << std::setw(21) << "created (UTC)" << std::setw(8) << "method"
            << std::setw(18) << "metric"
            << "trials (finished, stopped, failed)\n";
  for (const auto& r : rows) {
    std::cout << std::left << std::setw(5) << r.id
              << tb::api::pad_right(r.name, static_cast<std::size_t>(name_width)) << std::setw(13)
              << r.status << std::setw(21) << r.created << std::setw(8) << r.method << std::setw(18)
              << r.metric << r.trials << " (" << r.finished << ", " << r.stopped << ", " << r.failed
              << ")\n";
  }
  return 0;
}

int cmd_sample(tb::api::SampleRequest req, const std::string& prompt_tokens) {
  for (const auto& part : split_commas(prompt_tokens)) {
    std::size_t used = 0;
    std::int64_t id = -1;
    try {
      id = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || id < 0) {
      std::cerr << "error: [sample] --prompt-tokens: '" << part << "' is not a token id\n";
      return 1;
    }
    req.prompt_tokens.push_back(id);
  }
  const auto r = tb::api::sample_run(req);
  std::cerr << "sampled from " << r.from << "\n";
  for (std::size_t s = 0; s < r.all_tokens.size(); ++s) {
    // Several samples: each followed by nanoGPT's sample.py separator line.
    if (r.has_text) {
      std::cout << r.texts[s] << "\n";
    } else {
      for (std::size_t i = 0; i < r.all_tokens[s].size(); ++i)
        std::cout << (i ? "," : "") << r.all_tokens[s][i];
      std::cout << "\n";
    }
    if (r.all_tokens.size() > 1) std::cout << "---------------\n";
  }
  return 0;
}

}  // namespace tb::cli
