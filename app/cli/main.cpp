// trainbench-cli: headless front end of the engine (no Qt): run, runs, show, export (the run
// store), compare, demo, dispatch, devices, topo, launch, model, schedule, reference.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/cli/reference.h"
#include "engine/api/config_api.h"
#include "engine/api/engine_api.h"
#include "engine/api/launch_api.h"
#include "engine/api/model_api.h"
#include "engine/api/run_api.h"
#include "engine/api/schedule_api.h"
#include "engine/api/sweep_api.h"
#include "engine/api/tokenizer_api.h"
#include "engine/api/topology_api.h"

namespace {

// A number > 0 (or >= 0, `inclusive`), said plainly when it is not: CLI11's PositiveNumber says
// "Value 0 not in range 0.000000 to 1797693...", and the same for "abc".
CLI::Validator number_above_zero(bool inclusive) {
  const std::string want = inclusive ? ">= 0" : "> 0";
  return CLI::Validator(
      [inclusive, want](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0')
          return "expected a number, got '" + text + "'";
        if (inclusive ? !(v >= 0) : !(v > 0)) return "must be " + want + ", got " + text;
        return {};
      },
      want);
}
const CLI::Validator kPositive = number_above_zero(false);
const CLI::Validator kNonNegative = number_above_zero(true);

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

std::string gib(std::uint64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1024.0 * 1024 * 1024)
     << " GiB";
  return os.str();
}

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

// `run`: a progress bar on a terminal, one plain line per report when piped.
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

// Nanoseconds of CLOCK_MONOTONIC; async-signal-safe (the stop handlers call it).
long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// A stop signal within this of the first is that one again: GNU timeout and other supervisors
// signal the process and then its process group, within microseconds.
constexpr long long kRepeatWindowNs = 500'000'000;

int cmd_run(tb::api::RunRequest req) {
  const std::string db = req.db_path;
  const std::int64_t resume = req.resume.value_or(0);
  // A rank's stdout is mpirun's pseudo-terminal whatever the job's output goes to (a file, a
  // pipe): ranks write progress as lines, never a bar redrawn with carriage returns.
  const int rank_number = tb::api::launch_rank();
  const bool tty = rank_number < 0 && isatty(STDOUT_FILENO) != 0;
  std::int64_t last_line_step = 0;
  auto on_start = [&](std::int64_t id, const std::string& table) {
    std::cout << (resume > 0 ? "resuming run " : "run ") << id << " (store "
              << (db.empty() ? tb::api::default_store_path() : db) << ")\n"
              << table << std::flush;
  };
  auto on_progress = [&](const tb::api::RunProgressInfo& p) {
    const double eta =
        p.steps_per_s > 0 ? static_cast<double>(p.total - p.step) / p.steps_per_s : 0.0;
    std::ostringstream line;
    line << "step " << p.step << "/" << p.total << "  loss " << std::setprecision(4) << p.loss;
    // (A step whose loss was not finite, and the last step of a cancelled or diverged run, may
    // be logged with its loss alone: "lr -" keeps the columns where they were.)
    if (std::isnan(p.lr))
      line << "  lr -";
    else
      line << "  lr " << std::setprecision(3) << p.lr;
    line << "  " << std::fixed << std::setprecision(1);
    // The first report has no rate yet: no "0.0 it/s  ETA 0 s". A long ETA in minutes or hours.
    if (p.steps_per_s <= 0)
      line << "- it/s  ETA -";
    else if (eta >= 7200)
      line << p.steps_per_s << " it/s  ETA " << eta / 3600 << " h";
    else if (eta >= 120)
      line << p.steps_per_s << " it/s  ETA " << static_cast<std::int64_t>(eta / 60) << " min";
    else
      line << p.steps_per_s << " it/s  ETA " << static_cast<std::int64_t>(std::ceil(eta)) << " s";
    // Four significant digits as the loss has them (0.834, 1, 2.784), whole numbers from 10^4 on
    // (a perplexity of 52360, not 5.236e+04).
    for (const auto& [k, v] : p.eval) {
      line << "  " << k << " ";
      if (std::isfinite(v) && std::fabs(v) >= 1e4)
        line << std::fixed << std::setprecision(0) << v;
      else
        line << std::defaultfloat << std::setprecision(4) << v;
    }
    if (tty) {
      const int width = 30;
      const auto filled = static_cast<int>(width * p.step / std::max<std::int64_t>(1, p.total));
      std::cout << "\r[" << std::string(static_cast<std::size_t>(filled), '#')
                << std::string(static_cast<std::size_t>(width - filled), ' ') << "] " << line.str()
                << "   " << std::flush;
      if (!p.eval.empty()) std::cout << "\n";
    } else if (!p.eval.empty() ||
               p.step - last_line_step >= std::max<std::int64_t>(1, p.total / 20) ||
               p.step == p.total) {
      std::cout << line.str() << "\n" << std::flush;
      last_line_step = p.step;
    }
  };
  // Warnings as they happen, on stderr; on a terminal after the progress bar's line.
  req.on_warning = [tty](const std::string& text) {
    if (tty) std::cout << "\n" << std::flush;
    std::cerr << "warning: " + text + "\n" << std::flush;
  };
  // A rank of a distributed run: a termination request (mpirun stops the job when a rank
  // fails) makes the waiting collective fail, so the run is recorded as failed with the reason;
  // a rank that fails stops the others instead of leaving them waiting.
  const bool rank = tb::api::started_as_rank();
  if (rank) {
    std::signal(SIGTERM, [](int sig) { tb::api::notify_termination(sig); });
    std::signal(SIGINT, [](int sig) { tb::api::notify_termination(sig); });
  }
  // SIGUSR1 asks the run to stop after its current step (status cancelled). mpirun forwards it to
  // every rank, and the ranks agree on it in the step's exchange: `kill -USR1 <mpirun pid>` ends
  // a distributed run cleanly. The handler only sets a flag; a watcher thread acts on it.
  // SIGUSR2 toggles a pause (held before the next step; a distributed run's ranks hold
  // together).
  static std::atomic<bool> cancel_requested{false};
  static std::atomic<int> pause_toggles{0};
  std::signal(SIGUSR1, [](int) { cancel_requested.store(true); });
  std::signal(SIGUSR2, [](int) { pause_toggles.fetch_add(1); });
  // A run of its own: the first Ctrl-C (or SIGTERM) cancels it after the current step, with a
  // checkpoint to resume from and the run closed in the store. The same request may arrive
  // twice within microseconds — GNU timeout and other supervisors signal the process and then
  // its process group — so a signal within kRepeatWindowNs of the first is that one again; a
  // later one ends the process at once (the run is then found crashed, its committed steps
  // kept). A signal the process was started ignoring (a job started with & from a
  // non-interactive shell ignores SIGINT) stays ignored. SA_RESTART: output interrupted by it
  // is not lost.
  if (!rank) {
    static std::atomic<long long> first_stop_ns{0};
    static_assert(std::atomic<long long>::is_always_lock_free);  // used in a signal handler
    struct sigaction sa = {};
    sa.sa_handler = [](int sig) {
      const int saved_errno = errno;
      const long long ns = monotonic_ns();
      long long first = 0;
      if (first_stop_ns.compare_exchange_strong(first, ns)) {
        cancel_requested.store(true);
        static const char said[] =
            "\nstopping after this step, with a checkpoint (the same signal again quits at once)\n";
        (void)!write(STDERR_FILENO, said, sizeof said - 1);
      } else if (ns - first >= kRepeatWindowNs) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);  // delivered when this handler returns: the default action
      } else {
        static const char again[] = "(already stopping after this step)\n";
        (void)!write(STDERR_FILENO, again, sizeof again - 1);
      }
      errno = saved_errno;
    };
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);  // the one handler runs for either, never nested
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old = {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      sigaction(sig, &sa, nullptr);
    }
  }
  // The handlers run on the watcher thread alone: this thread, which trains, and every thread it
  // starts (kernel workers, data loader, store writer) block these signals. A handler run on a
  // thread inside a oneDNN kernel corrupted the heap (oneDNN 2.6, "corrupted size vs. prev_size"
  // a few steps after a Ctrl-C or SIGUSR2). The watcher unblocks them (a launcher may also have
  // left them blocked).
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT})
    sigaddset(&handled, sig);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  req.control = std::make_shared<tb::api::RunControl>();
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
    while (!done.load()) {
      if (cancel_requested.exchange(false)) req.control->cancel();
      for (int n = pause_toggles.exchange(0); n > 0; --n) {
        if (req.control->paused()) {
          req.control->resume();
        } else {
          req.control->pause();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done.store(true);
      t.join();
    }
  } join{done, watcher};
  tb::api::RunOutcomeInfo out;
  try {
    out = tb::api::run_training(req, on_start, on_progress);
  } catch (const std::exception& e) {
    if (!rank) throw;
    // Said before the job is ended: MPI_Abort does not return when other ranks run.
    std::cerr << "error: " + tb::api::error_text(e) + "\n" << std::flush;  // one write per line
    tb::api::end_distributed(true);
    return 1;
  }
  if (tty) std::cout << "\n";
  // "run 1 finished 30 steps, ...", "run 2 diverged: 3 non-finite losses ...": the status is
  // said once, whether or not the message starts with it.
  const std::string said = out.message.rfind(out.status, 0) == 0
                               ? out.message
                               : out.status + (out.message.empty() ? "" : ": " + out.message);
  // Every rank says how the run ended (they agree, or one names the rank that failed); the
  // others than rank 0 say who they are, so the job's output does not read as two runs.
  std::cout << (rank_number > 0 ? "rank " + std::to_string(rank_number) + ": " : std::string())
            << "run " << out.run_id << " " << said << "\n"
            << std::flush;
  // How to go on from the checkpoint (once, from the process that writes the store), after a
  // Ctrl-C; a stop at --stop-at's step was asked for (a sweep's rung: the sweep goes on).
  if (out.status == "cancelled" && !out.stopped_as_asked && rank_number <= 0 &&
      out.message.find("with a checkpoint to continue from") != std::string::npos)
    std::cout << "continue it with: trainbench-cli " << (db.empty() ? "" : "--db " + db + " ")
              << "run --resume " << out.run_id << "\n"
              << std::flush;
  if (rank) tb::api::end_distributed(out.status == "failed");
  return out.status == "finished" || out.stopped_as_asked ? 0 : 2;
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

// This executable's path, for the processes `launch` and `sweep` start ("[who] cannot find this
// program" when /proc/self/exe cannot be read).
std::string this_program(const char* who) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    throw std::runtime_error(std::string("[") + who +
                             "] cannot find this program (/proc/self/exe)");
  exe[n] = '\0';
  return exe;
}

// The table, after a blank line that sets it off from the trials' lines above it (none for
// `sweep --show`, which prints the table alone).
void print_sweep_table(const tb::api::SweepResult& r, bool after_trials = true) {
  std::cout << (after_trials ? "\n" : "") << "sweep " << r.plan.name << " (" << r.status
            << "): " << r.plan.metric << " (best of each run, "
            << (r.plan.goal == "max" ? "higher" : "lower") << " is better; mean ± sd over seeds)\n";
  // "±" is two bytes and one cell: the columns are padded by cells, not bytes (std::setw).
  std::cout << std::left << std::setw(7) << "point" << tb::api::pad_right("mean ± sd", 27)
            << std::setw(10) << "finished" << std::setw(14) << "runs"
            << "values\n";
  bool first = true;
  for (const auto& p : r.points) {
    std::ostringstream stat, ids;
    if (p.mean) {
      stat << std::setprecision(6) << *p.mean;
      if (p.stddev) stat << " ± " << std::setprecision(3) << *p.stddev;
    } else if (p.stopped) {
      stat << "stopped @" << *p.stopped;
      if (p.stopped_value) stat << " (" << std::setprecision(4) << *p.stopped_value << ")";
    } else {
      stat << "-";
    }
    std::vector<std::int64_t> run_ids = p.run_ids;  // in trial order; listed in id order
    std::sort(run_ids.begin(), run_ids.end());
    for (std::size_t i = 0; i < run_ids.size(); ++i)
      ids << (i ? "," : "") << run_ids[i];
    std::cout << std::left << std::setw(7) << ("p" + std::to_string(p.point))
              << tb::api::pad_right(stat.str(), 27) << std::setw(10)
              << (std::to_string(p.finished) + "/" + std::to_string(p.runs)) << std::setw(14)
              << ids.str() << p.values << (first && p.mean ? "   <- best" : "") << "\n";
    first = false;
  }
}

// `launch --ddp`'s mpirun, for its signal handler.
std::atomic<int> ddp_mpirun_pid{0};

// The trial processes a sweep runs now (0: a free place), for its signal handler.
std::array<std::atomic<int>, 256> sweep_trial_pids{};

// The processes `launch` started, for its SIGTERM handler to pass the signal on to.
std::vector<int> launched_pids;
std::atomic<std::size_t> launched_count{0};

// launch (not --ddp): N runs as processes of their own. Their output comes back through pipes,
// each line tagged with its slot, so several runs' progress can be told apart. Ctrl-C reaches
// the runs from the terminal (each stops after its step, with a checkpoint) and this process
// stays to relay what they say and report their exit; SIGTERM sent to this process alone is
// passed on to them.
int cmd_launch(tb::api::LaunchRequest req) {
  launched_pids.assign(static_cast<std::size_t>(std::max(req.nproc, 0)), 0);
  launched_count.store(0);
  {
    struct sigaction sa = {};
    sa.sa_handler = [](int) {};  // stay to relay; the runs got the terminal's signal
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sa.sa_handler = [](int sig) {
      const std::size_t n = launched_count.load();
      for (std::size_t i = 0; i < n; ++i)
        if (launched_pids[i] > 0) kill(launched_pids[i], sig);
    };
    sigaction(SIGTERM, &sa, nullptr);
    // A run whose reader is gone (this process killed) goes on training and recording without
    // its output rather than dying of SIGPIPE; ignoring a signal is inherited across exec.
    std::signal(SIGPIPE, SIG_IGN);
  }
  // Each run's last word ("run 7 cancelled: ...", as `run` ends): a run that exits with 2 was
  // cancelled, failed or diverged, and the summary says which.
  std::vector<std::string> ended(static_cast<std::size_t>(std::max(req.nproc, 0)));
  req.on_output = [&ended](int slot, const std::string& line) {
    std::cout << "slot " << slot << " | " << line << "\n" << std::flush;
    static const std::regex last(R"(^run (\d+) (finished|cancelled|failed|diverged)\b)");
    std::smatch m;
    if (slot >= 0 && static_cast<std::size_t>(slot) < ended.size() &&
        std::regex_search(line, m, last)) {
      // A run cancelled before its first step, or whose checkpoint could not be written, has
      // none to continue from: said as "cancelled, no checkpoint".
      const bool kept = line.find("with a checkpoint") != std::string::npos;
      ended[static_cast<std::size_t>(slot)] =
          "run " + m[1].str() + " " + m[2].str() +
          (m[2].str() == "cancelled" && !kept ? ", no checkpoint" : "");
    }
  };
  const auto procs = tb::api::launch_runs(req, [](const tb::api::LaunchedProcess& p) {
    const std::size_t i = launched_count.load();
    if (i < launched_pids.size()) {
      launched_pids[i] = p.pid;
      launched_count.store(i + 1);
    }
    std::cout << "slot " << p.slot << ": pid " << p.pid << " "
              << (p.cpus.empty() ? std::string("unbound") : "CPUs " + p.cpus)
              << ", child Cpus_allowed_list " << p.child_mask << ", " << p.config << "\n";
    if (!p.warning.empty()) std::cout << "  warning: " << p.warning << "\n";
    std::cout.flush();
  });
  int unfinished = 0, cancelled = 0, without_checkpoint = 0;
  for (const auto& p : procs) {
    const std::string said = p.slot >= 0 && static_cast<std::size_t>(p.slot) < ended.size()
                                 ? ended[static_cast<std::size_t>(p.slot)]
                                 : std::string();
    std::cout << "slot " << p.slot << ": pid " << p.pid << " exited with " << p.exit_code
              << (said.empty() ? "" : " (" + said + ")") << "\n";
    if (p.exit_code == 0) continue;
    ++unfinished;
    if (said.find(" cancelled") != std::string::npos) ++cancelled;
    if (said.find(" cancelled, no checkpoint") != std::string::npos) ++without_checkpoint;
  }
  // Ctrl-C stops every run with a checkpoint: that is not "failed", and --resume continues each.
  if (unfinished > 0 && cancelled == unfinished && without_checkpoint == 0)
    std::cerr << cancelled << " of " << procs.size()
              << " runs were cancelled, each with a checkpoint (run --resume ID continues it)\n";
  else if (unfinished > 0 && cancelled == unfinished)
    std::cerr << cancelled << " of " << procs.size() << " runs were cancelled, "
              << without_checkpoint << " of them without a checkpoint to continue from\n";
  else if (unfinished > 0)
    std::cerr << "error: " << unfinished << " of " << procs.size() << " runs did not finish"
              << (cancelled > 0 ? " (" + std::to_string(cancelled) + " cancelled)" : "") << "\n";
  return unfinished > 0 ? 2 : 0;
}

int cmd_sweep(tb::api::SweepRequest req, bool dry_run, const std::string& show,
              const std::string& db_path) {
  if (!show.empty()) {
    if (!req.config_path.empty() || !req.resume.empty() || dry_run) {
      std::cerr << "error: [sweep] --show NAME prints a stored sweep's table; it takes no CONFIG, "
                   "--resume or --dry-run\n";
      return 1;
    }
    const auto result = tb::api::sweep_table(show, db_path);
    print_sweep_table(result, false);
    std::cout << "trial configs: " << result.trial_dir << "\n";
    return 0;
  }
  if (req.config_path.empty() == req.resume.empty()) {
    std::cerr
        << "error: [sweep] give a CONFIG with a [sweep] table, --resume NAME or --show NAME\n";
    return 1;
  }
  if (dry_run && !req.resume.empty()) {
    std::cerr << "error: [sweep] --dry-run plans a CONFIG; --resume continues a stored sweep\n";
    return 1;
  }
  if (dry_run) {
    tb::api::check_sweep_request(req);
    const auto plan = tb::api::preview_sweep(req.config_path, req.overrides);
    std::cout << "sweep " << plan.name << " (" << plan.method << "): " << plan.trials.size()
              << " runs; " << plan.goal << " " << plan.metric << "\n";
    if (plan.stopping != "none") {
      std::cout << "early stopping: " << plan.stopping << " at steps";
      for (std::size_t i = 0; i < plan.rungs.size(); ++i)
        std::cout << (i ? ", " : " ") << plan.rungs[i];
      if (plan.stopping == "successive_halving")
        std::cout << " (keep the best 1/" << plan.reduction_factor << " of the points at each)";
      std::cout << "\n";
    }
    // Columns: the index right-aligned, the names padded to the longest.
    const int index_width = static_cast<int>(std::to_string(plan.trials.size()).size());
    std::size_t name_width = 0;
    for (const auto& t : plan.trials)
      name_width = std::max(name_width, tb::api::display_width(t.name));
    for (const auto& t : plan.trials)
      std::cout << "  " << std::right << std::setw(index_width) << t.index << "  "
                << tb::api::pad_right(t.name, name_width) << "  " << t.values << "\n";
    // The run itself would be refused: say so now, with what to do instead.
    std::vector<tb::api::SweepRow> stored;
    try {
      stored = tb::api::list_sweeps(db_path);
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): no store yet, no clash
    }
    for (const auto& row : stored)
      if (row.name == plan.name)
        std::cout << "note: the store already has a sweep '" << plan.name << "' (" << row.status
                  << ", " << row.finished << " of " << row.trials
                  << " trials finished): running this config would be refused; continue that one "
                     "with --resume "
                  << plan.name << ", or give this one another sweep.name\n";
    return 0;
  }
  req.program = this_program("sweep");
  req.db_path = db_path;
  // The first Ctrl-C (or SIGTERM) stops the sweep: it is passed on to the trials running (sent
  // to this process alone — kill PID, a supervisor — they would train on unsupervised to their
  // end; from the terminal they got it too, and a run takes a repeat within half a second as the
  // same request), which stop after their step with a checkpoint; no further trial starts, and
  // the sweep waits for them and says how to continue it. A repeat within kRepeatWindowNs is
  // that one again (supervisors signal the process, then its group); a later one is passed on
  // (the trials quit at once) and ends this process at once.
  static std::atomic<int> stop_signal{0};
  static_assert(std::atomic<int>::is_always_lock_free);  // used in a signal handler
  {
    const std::string name = req.resume.empty()
                                 ? tb::api::preview_sweep(req.config_path, req.overrides).name
                                 : req.resume;
    static char said[640];
    std::snprintf(said, sizeof said,
                  "\nsweep %s stopping: its trials stop after their current step, with a "
                  "checkpoint (the same signal again quits at once); trainbench-cli sweep "
                  "--resume %s continues it\n",
                  name.c_str(), name.c_str());
    static std::atomic<long long> first_stop_ns{0};
    struct sigaction sa = {};
    sa.sa_handler = [](int sig) {
      const int saved_errno = errno;
      const long long ns = monotonic_ns();
      long long first = 0;
      const bool first_time = first_stop_ns.compare_exchange_strong(first, ns);
      // Set before the trials are told: a trial whose pid is being stored now then sees it (its
      // start event sends the signal), or its pid is seen here.
      if (first_time) stop_signal.store(sig);
      if (first_time || ns - first >= kRepeatWindowNs) {
        for (auto& pid : sweep_trial_pids)
          if (const int p = pid.load(); p > 0) kill(p, sig);
      }
      if (first_time) {
        (void)!write(STDERR_FILENO, said, std::strlen(said));
      } else if (ns - first >= kRepeatWindowNs) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);  // the default action: the exit status says which signal
      }
      errno = saved_errno;
    };
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);  // the one handler runs for either, never nested
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old = {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      sigaction(sig, &sa, nullptr);
    }
  }
  req.stop_requested = [] { return stop_signal.load() != 0; };
  const auto result = tb::api::run_sweep(
      req,
      [](const tb::api::SweepTrialEvent& e) {
        const auto& t = e.trial;
        // The trials running now, for the signal handler above.
        for (auto& pid : sweep_trial_pids) {
          int expected = e.exit_code ? e.pid : 0;
          if (pid.compare_exchange_strong(expected, e.exit_code ? 0 : e.pid)) break;
        }
        // Started after the stop was asked for (while the group's configs were checked, before
        // its pid was known here): told now, as the handler told the others.
        if (!e.exit_code && stop_signal.load() != 0) kill(e.pid, stop_signal.load());
        if (!e.exit_code) {
          std::cout << "trial " << t.index << " (" << t.name << "): pid " << e.pid << ", "
                    << (e.cpus.empty() ? std::string("unbound") : "CPUs " + e.cpus) << ", "
                    << (e.resumed_run > 0 ? "resumed run " + std::to_string(e.resumed_run) + ", "
                                          : "")
                    << (e.stop_at > 0 ? "to step " + std::to_string(e.stop_at) + ", " : "")
                    << t.values << "\n";
        } else {
          std::cout << "trial " << t.index << " (" << t.name << "): " << e.outcome() << "\n";
        }
        std::cout.flush();
      },
      [](const std::string& note) {
        std::cout << "early stopping at " << note << "\n" << std::flush;
      });
  print_sweep_table(result);
  std::cout << "trial configs: " << result.trial_dir << "\n";
  if (result.status == "interrupted") {
    std::cerr << "sweep " << result.plan.name << " interrupted: trainbench-cli sweep --resume "
              << result.plan.name << " continues it\n";
    std::cout.flush();
    // Ends as the signal would have ended it: the exit status says which (130 for Ctrl-C).
    const int sig = stop_signal.load();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return 128 + sig;
  }
  if (result.failed > 0) {
    std::cerr << "error: " << result.failed << " trial(s) failed\n";
    return 2;
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

// Whether what the command writes on stdout is its result (a table, CSV, JSON, a reference)
// rather than progress beside work kept elsewhere (`run`, `launch`, `sweep` and `demo` record
// into the store).
bool stdout_is_the_result = true;

int cli_main(int argc, char** argv) {
  CLI::App app{"trainbench-cli: train and inspect neural-network runs without a display"};
  app.require_subcommand(1);
  // The global options (--db, --threads, ...) may also follow the command: `runs --db F` as
  // `--db F runs` (an option a command does not know falls through to the program's).
  app.fallthrough();
  int threads = 0;
  std::string gemm = "auto";
  // 0 = the default, as `threads = 0` in a run config.
  app.add_option("--threads", threads,
                 "kernel and BLAS threads (default, or 0: TB_NUM_THREADS or the CPUs this process "
                 "may use)")
      ->check(CLI::Range(0, 1024));  // the engine's most (tb::core::kMaxNumThreads)
  app.add_option("--gemm-backend", gemm, "auto, onednn, openblas, reference, cublas or cublaslt");
  bool tf32 = false;
  app.add_flag("--tf32", tf32,
               "let float32 products on CUDA devices use TF32 tensor cores (runs: amp.tf32)");
  app.set_version_flag("--version", tb::api::version());

  auto* demo = app.add_subcommand("demo", "run the headless demo and print what it did");
  std::uint64_t seed = 0;
  int steps = 200;
  demo->add_option("--seed", seed, "random seed")->capture_default_str();
  demo->add_option("--steps", steps, "gradient-descent steps")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();

  auto* dispatch = app.add_subcommand("dispatch", "print the dispatcher's kernel table");
  std::string op_filter;
  bool all = false;
  bool matrix = false;
  dispatch->add_option("--op", op_filter, "only ops whose name contains this text");
  dispatch->add_flag("--all", all, "include keys with no kernel (missing or falling through)");
  dispatch->add_flag("--matrix", matrix, "one row per op, one column per dispatch key");
  std::string dispatch_device;
  dispatch->add_option("--device", dispatch_device,
                       "one device's view: which ops run natively and which fall back "
                       "(e.g. openreg, cuda)");

  auto* devices = app.add_subcommand("devices", "list devices and whether they can be used");

  auto* topo = app.add_subcommand(
      "topo", "print the CPU topology and the CPUs each slot gets for a binding mode");
  tb::api::TopologyRequest topo_req;
  std::string binding = "none";
  int slots = 0;
  bool fallback = false;
  topo->add_option("--binding", binding, "none, node, socket, exclusive or core-complex")
      ->capture_default_str();
  topo->add_option("--slots", slots, "number of slots (default: one per GPU given, else 1)")
      ->check(kPositive);
  auto* xml_opt =
      topo->add_option("--topology-xml", topo_req.xml_path, "read an hwloc XML export instead");
  auto* syn_opt = topo->add_option("--synthetic", topo_req.synthetic,
                                   "hwloc synthetic topology, e.g. \"pack:2 numa:2 l3:2 core:4 "
                                   "pu:2\"");
  xml_opt->excludes(syn_opt);
  topo->add_option("--gpu-nodes", topo_req.gpu_nodes,
                   "NUMA node of GPU 0, 1, ... (comma-separated); slots become GPU local ranks")
      ->delimiter(',');
  topo->add_flag("--fallback", fallback, "on a binding error, report the slot unbound and warn");

  auto* launch = app.add_subcommand(
      "launch",
      "run N training processes in parallel, process k bound to CPU slot k (its children inherit "
      "the slot's mask; each run pins its own threads to it)");
  tb::api::LaunchRequest launch_req;
  auto* launch_configs = launch->add_option("configs", launch_req.configs,
                                            "run configs; process k runs config k % count");
  launch
      ->add_option("--nproc", launch_req.nproc,
                   "number of processes (= slots; default: one per config; with --ddp, 1, or "
                   "the resumed run's ranks)")
      ->check(CLI::Range(1, 4096));
  launch
      ->add_option("--binding", launch_req.binding, "none, node, socket, exclusive or core-complex")
      ->capture_default_str();
  launch->add_flag("--fallback", launch_req.fallback,
                   "a slot that cannot be bound runs unbound with a warning");
  launch->add_option("--set", launch_req.overrides, "key.path=value for every process");
  launch->add_flag("--ddp", launch_req.ddp,
                   "one data-parallel run over --nproc ranks started by mpirun (data.batch_size "
                   "is per rank); rank 0 writes the store");
  std::string launch_hosts;
  launch->add_option("--hosts", launch_hosts, "--ddp: hosts (host or host:slots), comma-separated");
  launch->add_option("--hostfile", launch_req.hostfile, "--ddp: an Open MPI hostfile");
  launch
      ->add_option("--resume", launch_req.resume,
                   "--ddp: continue stored run N from its newest checkpoint (same number of ranks)")
      ->check(kPositive);
  launch->callback([&] {
    if (launch_configs->count() == 0 && launch_req.resume == 0)
      throw CLI::RequiredError("configs (or --ddp --resume RUN)");
    if (launch_req.resume > 0 && !launch_req.ddp)
      throw CLI::ValidationError("--resume",
                                 "needs --ddp (without it, resume each run with run --resume)");
    if (!launch_req.ddp && (!launch_hosts.empty() || !launch_req.hostfile.empty()))
      throw CLI::ValidationError(launch_hosts.empty() ? "--hostfile" : "--hosts",
                                 "needs --ddp (without it, the processes run on this machine)");
    // `launch A B C`: one process per config (with --nproc 1, B and C never ran).
    if (!launch_req.ddp && launch->count("--nproc") == 0)
      launch_req.nproc = static_cast<int>(launch_configs->count());
    // `launch --ddp --resume N`: on as many ranks as the run had (0: the stored run's).
    if (launch_req.ddp && launch_req.resume > 0 && launch->count("--nproc") == 0)
      launch_req.nproc = 0;
  });

  auto* model = app.add_subcommand(
      "model",
      "build a model kind from its defaults and settings, or a run config's model; print its "
      "config and parameters");
  std::string model_kind;
  std::vector<std::string> model_settings;
  model
      ->add_option("kind", model_kind,
                   kinds_of("model") +
                       ", or a run config (.toml): its model, and with Muon "
                       "which optimizer takes each parameter")
      ->required();
  model->add_option("--set", model_settings,
                    "field=value over the kind's defaults, e.g. --set d_model=256 --set "
                    "hidden=[512,512]; with a run config key.path=value, as run --set");

  auto* schedule = app.add_subcommand(
      "schedule", "print the learning rate of a scheduler after construction and each step");
  std::string sched_kind;
  std::vector<std::string> sched_settings;
  std::vector<double> sched_lrs;
  int sched_steps = 20;
  bool sched_momentum = false;
  schedule
      ->add_option("kind", sched_kind,
                   kinds_of("scheduler") +
                       "; or a run config (.toml): its [scheduler] on its optimizers' learning "
                       "rates, printed as CSV")
      ->required();
  schedule->add_option("--set", sched_settings,
                       "field=value (PyTorch's argument names), e.g. --set T_max=100 --set "
                       "eta_min=0.01");
  schedule
      ->add_option("--lr", sched_lrs,
                   "base learning rate (default 0.1); repeat for several param groups")
      ->allow_extra_args(false);
  schedule->add_option("--steps", sched_steps, "scheduler steps to print (default 20)")
      ->check(CLI::Range(0, 10000000));
  schedule->add_flag("--momentum", sched_momentum,
                     "also print the momentum (or beta1 with --set optimizer=adam)");

  std::string db_path;
  app.add_option("--db", db_path,
                 "run store database (default: " + tb::api::default_store_path() + ")")
      ->check(CLI::Validator(
          [](std::string& path) -> std::string {
            return path.empty() ? "is empty: give a file (or leave --db out for the default)" : "";
          },
          ""))
      ->type_name("PATH");
  auto* run = app.add_subcommand("run", "train a model from a TOML run config into the store");
  std::string run_config;
  std::vector<std::string> run_overrides;
  std::int64_t resume_run = 0;
  auto* run_config_opt = run->add_option(
      "config", run_config,
      "run config (TOML), e.g. resources/configs/*.toml; with --resume, default: the stored "
      "run's config");
  run->add_option("--set", run_overrides, "key.path=value over the config, e.g. optimizer.lr=3e-3");
  std::string resume_checkpoint;
  auto* resume_opt =
      run->add_option("--resume", resume_run, "continue stored run N from its newest checkpoint")
          ->check(kPositive);
  run->add_option("--from-checkpoint", resume_checkpoint,
                  "with --resume: this checkpoint folder instead of the run's newest")
      ->needs(resume_opt)
      ->check(CLI::ExistingDirectory);
  std::string sweep_trial;
  run->add_option("--sweep-trial", sweep_trial,
                  "SWEEP:TRIAL: the new run is trial TRIAL of stored sweep SWEEP (set by "
                  "`trainbench-cli sweep`)")
      ->excludes(resume_opt);
  std::int64_t stop_at = 0;
  run->add_option(
         "--stop-at", stop_at,
         "stop after step N with a checkpoint (status cancelled, exit 0; --resume continues)")
      ->check(kPositive);
  run->callback([&] {
    if (run_config_opt->count() == 0 && resume_opt->count() == 0)
      throw CLI::RequiredError("config (or --resume RUN)");
  });
  auto* runs = app.add_subcommand("runs", "list the runs of the store");
  std::string runs_sweep;
  runs->add_option("--sweep", runs_sweep, "only the runs of sweep NAME");
  auto* show = app.add_subcommand("show", "a run's status, metrics and config");
  std::int64_t show_id = 0;
  show->add_option("run", show_id, "run id")->required();
  auto* compare = app.add_subcommand("compare", "runs side by side: config differences, summary");
  std::vector<std::int64_t> compare_ids;
  compare->add_option("runs", compare_ids, "two or more run ids")->required()->expected(2, -1);
  bool compare_all = false;
  compare->add_flag("--all", compare_all,
                    "list every differing key, also those only some runs' configs have (counted "
                    "per section otherwise)");
  auto* sweep = app.add_subcommand(
      "sweep", "the runs of a config's [sweep] table, N at a time in CPU slots, then its table");
  tb::api::SweepRequest sweep_req;
  bool sweep_dry = false;
  sweep->add_option("config", sweep_req.config_path, "run config with a [sweep] table");
  auto* sweep_set =
      sweep->add_option("--set", sweep_req.overrides, "key.path=value over the run config");
  sweep->add_option("--parallel", sweep_req.parallel, "trials at a time, one per CPU slot")
      ->capture_default_str();
  sweep
      ->add_option("--binding", sweep_req.binding,
                   "none, node, socket, exclusive or core-complex (the slots' CPUs)")
      ->capture_default_str();
  sweep->add_flag("--dry-run", sweep_dry, "print the trials and run nothing");
  sweep->add_option("--resume", sweep_req.resume,
                    "continue sweep NAME of this store: finished runs kept, interrupted ones "
                    "resumed from their checkpoints, the rest started");
  std::string sweep_show;
  sweep->add_option("--show", sweep_show, "print stored sweep NAME's table and run nothing");
  sweep->callback([&] {
    if (!sweep_req.resume.empty() && sweep_set->count() > 0)
      throw CLI::ValidationError(
          "--set",
          "a resumed sweep keeps the trial configs it was planned with; to change "
          "them, start a new sweep (another [sweep] name) with --set");
  });
  auto* sweeps = app.add_subcommand("sweeps", "list the sweeps of the store");
  auto* exp = app.add_subcommand(
      "export", "a run's metrics as CSV or JSON on stdout, or as a TensorBoard event file in DIR");
  std::int64_t export_id = 0;
  std::string export_format = "csv";
  std::string export_dir;
  exp->add_option("run", export_id, "run id")->required();
  exp->add_option("dir", export_dir, "with --format tensorboard: the log directory to write to");
  exp->add_option("--format", export_format, "csv, json or tensorboard")->capture_default_str();
  auto* sample = app.add_subcommand(
      "sample", "text (or token ids) continued by a language-model run's checkpoint");
  tb::api::SampleRequest sample_req;
  std::string sample_ids;
  sample->add_option("run", sample_req.run_id, "run id (qwen-tiny or gpt)")->required();
  auto* sample_prompt =
      sample->add_option("--prompt", sample_req.prompt,
                         "models of text (bytes, SentencePiece): the text to continue (default: a "
                         "line break / a word start)");
  sample
      ->add_option("--prompt-tokens", sample_ids,
                   "models of token files: comma-separated ids to continue (default: "
                   "<|endoftext|>)")
      ->excludes(sample_prompt);  // one prompt, as text or as ids
  sample->add_option("--tokens", sample_req.tokens, "new tokens")
      ->capture_default_str()
      ->check(kNonNegative);
  sample->add_option("--temperature", sample_req.temperature, "0 = always the most likely token")
      ->capture_default_str()
      ->check(kNonNegative);
  sample->add_option("--top-k", sample_req.top_k, "keep the k most likely tokens (0 = all)")
      ->capture_default_str()
      ->check(kNonNegative);
  sample->add_option("--seed", sample_req.seed, "the draws' seed")->capture_default_str();
  sample
      ->add_option("--from-checkpoint", sample_req.checkpoint,
                   "this checkpoint folder instead of the run's newest")
      ->check(CLI::ExistingDirectory);
  auto* weights = app.add_subcommand(
      "weights", "a run's trained weights as a safetensors file PyTorch loads (load_state_dict)");
  std::int64_t weights_id = 0;
  std::string weights_out;
  std::string weights_layout = "trainbench";
  std::string weights_checkpoint;
  weights->add_option("run", weights_id, "run id")->required();
  weights->add_option("-o,--output", weights_out, "the .safetensors file to write")->required();
  weights
      ->add_option("--layout", weights_layout,
                   "trainbench (the model's own names = torch.nn's) or hf-gpt2 (a gpt run as "
                   "transformers' GPT2LMHeadModel)")
      ->capture_default_str();
  weights
      ->add_option("--checkpoint", weights_checkpoint,
                   "this checkpoint folder instead of the run's newest")
      ->check(CLI::ExistingDirectory);

  auto* tokenizer = app.add_subcommand(
      "tokenizer", "SentencePiece models for [data] tokenizer = \"sentencepiece\"");
  tokenizer->require_subcommand(1);
  auto* tok_train =
      tokenizer->add_subcommand("train", "train a SentencePiece model on a text file or folder");
  tb::api::TokenizerTrainRequest tok_req;
  tok_train->add_option("text", tok_req.text, "text file or folder (default: Debian's fortunes)");
  tok_train
      ->add_option("-o,--output", tok_req.output,
                   "model prefix: writes PREFIX.model and PREFIX.vocab")
      ->required();
  tok_train->add_option("--vocab-size", tok_req.vocab_size, "pieces")->capture_default_str();
  tok_train->add_option("--model-type", tok_req.model_type, "unigram, bpe, char or word")
      ->capture_default_str();
  tok_train
      ->add_option("--character-coverage", tok_req.character_coverage,
                   "characters the pieces cover (0.9995 for languages with large alphabets)")
      ->capture_default_str();
  tok_train->add_option("--max-lines", tok_req.max_lines, "lines sampled from the text (0 = all)")
      ->capture_default_str();
  auto* tok_encode = tokenizer->add_subcommand(
      "encode", "how a SentencePiece model or GPT-2's byte-level BPE splits a text");
  std::string tok_model;
  std::string tok_text;
  tok_encode
      ->add_option("model", tok_model,
                   "a SentencePiece .model file, or GPT-2's vocab.json / encoder.json (with "
                   "merges.txt / vocab.bpe beside it)")
      ->required();
  tok_encode->add_option("text", tok_text, "the text")->required();

  auto* reference = app.add_subcommand(
      "reference",
      "the config reference's tables, generated from the engine's registries (Markdown)");
  std::string reference_check;
  bool reference_update = false;
  auto* reference_check_opt =
      reference->add_option("--check", reference_check,
                            "compare the generated blocks of this file (docs/config-reference.md)");
  reference->add_flag("--update", reference_update, "with --check: rewrite the stale blocks")
      ->needs(reference_check_opt);

  // No command at all (a first try): the commands and options, as git prints its usage.
  if (argc == 1) {
    app.name(argv[0]);
    std::cout << app.help();
    return 1;
  }
  // `--db= runs`: CLI11 reads an empty value after '=' as none and takes the next word as the
  // value (the store became "runs" and the command was lost). An empty value is an error here.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      std::cerr << "error: " << a.substr(0, a.size() - 1)
                << ": empty value (write the value after '=', or leave the option out)\n"
                << "Run with --help for more information.\n";
      return 1;
    }
  }
  // A command's help lists its own options: the program's (--db, --threads, ...) are taken
  // after the command too, and said once at the foot.
  for (CLI::App* sub : app.get_subcommands({}))
    sub->footer(
        "Global options, also after the command: --db PATH, --threads N, --gemm-backend NAME, "
        "--tf32 (trainbench-cli --help says what they do).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A value that is not a number where one is expected: CLI11 says "Could not convert: run =
    // abc"; said as the other commands say it.
    if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
      const std::string what = e.what();
      const std::string tag = "Could not convert: ";
      const auto eq = what.find(" = ");
      if (what.rfind(tag, 0) == 0 && eq != std::string::npos) {
        std::cerr << "error: " << what.substr(tag.size(), eq - tag.size())
                  << ": expected a number, got '" << what.substr(eq + 3) << "'\n"
                  << "Run with --help for more information.\n";
        return e.get_exit_code();
      }
    }
    // A mistyped command: CLI11 says only "A subcommand is required". Name it, and the command
    // it is likely a typo of, or the commands there are.
    if (e.get_exit_code() != 0 && app.get_subcommands().empty()) {
      const auto rest = app.remaining();
      const auto word = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
        return !a.empty() && a.front() != '-';
      });
      if (word != rest.end() && word == rest.begin()) {
        std::vector<std::string> names;
        for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
          names.push_back(sub->get_name());
        const std::string close = tb::api::close_word(*word, names);
        std::cerr << "error: '" << *word << "' is not a trainbench-cli command";
        if (!close.empty()) {
          std::cerr << "; did you mean '" << close << "'?\n";
        } else {
          std::cerr << "; the commands are:";
          for (const auto& n : names)
            std::cerr << " " << n;
          std::cerr << "\n";
        }
        std::cerr << "Run with --help for more information.\n";
        return 1;
      }
    }
    return app.exit(e);
  }

  try {
    // A malformed TB_NUM_THREADS is an error here, before a run is created (it failed the
    // run); commands that only read the store do not need it.
    if (threads > 0) {
      tb::api::set_num_threads(threads);
    } else if (run->parsed() || launch->parsed() || sweep->parsed() || demo->parsed()) {
      (void)tb::api::num_threads();
    }
    const auto choice = tb::api::set_gemm_backend(gemm);
    tb::api::set_allow_tf32(tf32);
    if (tf32) {
      // Runs take it from their config (amp.tf32, stored with the run), so say it there.
      run_overrides.emplace_back("amp.tf32=true");
      launch_req.overrides.emplace_back("amp.tf32=true");
      sweep_req.overrides.emplace_back("amp.tf32=true");
    }
    // The processes launch and sweep start are given this command's threads and GEMM backend.
    std::vector<std::string> child_options;
    if (threads > 0)
      child_options.insert(child_options.end(), {"--threads", std::to_string(threads)});
    if (gemm != "auto") child_options.insert(child_options.end(), {"--gemm-backend", gemm});
    launch_req.program_options = child_options;
    sweep_req.program_options = child_options;
    if (!choice.warning.empty()) std::cerr << "warning: " << choice.warning << "\n";
    if (const auto level = tb::api::cpu_kernel_level(); !level.note.empty())
      std::cerr << "warning: " << level.note << "\n";
    if (const std::string note = tb::api::openblas_note();
        !note.empty() && tb::api::current_gemm_backend() == "openblas")
      std::cerr << "warning: " << note << "\n";
    // (Not for commands that write their result to a file and only say so on stdout: weights,
    // a TensorBoard export, a tokenizer; a sweep's table by --show or --dry-run is its result.)
    const bool sweep_table_only = sweep->parsed() && (sweep_dry || !sweep_show.empty());
    stdout_is_the_result =
        sweep_table_only || !(demo->parsed() || run->parsed() || launch->parsed() ||
                              sweep->parsed() || weights->parsed() || tok_train->parsed() ||
                              (exp->parsed() && export_format == "tensorboard"));
    if (demo->parsed()) return tb::api::run_demo(std::cout, seed, steps);
    if (dispatch->parsed()) {
      if (!dispatch_device.empty()) return cmd_dispatch_device(dispatch_device, op_filter);
      return cmd_dispatch(op_filter, all, matrix);
    }
    if (devices->parsed()) return cmd_devices();
    if (topo->parsed()) return cmd_topo(topo_req, binding, slots, fallback);
    if (launch->parsed()) {
      launch_req.program = this_program("launch");
      launch_req.db_path = db_path;
      for (std::size_t at = 0; at < launch_hosts.size();) {
        const std::size_t comma = std::min(launch_hosts.find(',', at), launch_hosts.size());
        if (comma > at) launch_req.hosts.push_back(launch_hosts.substr(at, comma - at));
        at = comma + 1;
      }
      if (launch_req.ddp) {
        // SIGTERM, SIGUSR1 and SIGUSR2 sent to this process alone are passed on to mpirun, which
        // forwards them to every rank (SIGUSR1 stops after the step, SIGUSR2 pauses, SIGTERM
        // ends the job): by default they ended only this process, and the job ran on. Ctrl-C
        // reaches mpirun from the terminal itself.
        {
          struct sigaction sa = {};
          sa.sa_handler = [](int sig) {
            if (const int pid = ddp_mpirun_pid.load(); pid > 0) kill(pid, sig);
          };
          sigemptyset(&sa.sa_mask);
          for (int sig : {SIGTERM, SIGUSR1, SIGUSR2})
            sigaction(sig, &sa, nullptr);
        }
        const int rc = tb::api::launch_ddp(launch_req, [](int pid, const tb::api::DdpLaunch& plan) {
          ddp_mpirun_pid.store(pid);
          for (const auto& note : plan.notes)
            std::cout << "note: " << note << "\n";
          std::cout << "mpirun pid " << pid << ":";
          for (const auto& a : plan.argv)
            std::cout << " " << a;
          std::cout << "\n" << std::flush;
        });
        std::cout << "the job exited with " << rc << "\n";
        return rc == 0 ? 0 : 2;
      }
      return cmd_launch(launch_req);
    }
    if (model->parsed()) {
      // A run config (a .toml name, or any file) rather than a kind: the model that config runs.
      std::error_code ec;
      // A kind's name wins over a file of that name in the current folder.
      const auto kinds = tb::api::list_kinds("model");
      const bool is_kind = std::any_of(kinds.begin(), kinds.end(),
                                       [&](const auto& k) { return k.name == model_kind; });
      const bool toml =
          model_kind.size() > 5 && model_kind.compare(model_kind.size() - 5, 5, ".toml") == 0;
      const bool config = !is_kind && (toml || std::filesystem::is_regular_file(model_kind, ec));
      const auto m = config ? tb::api::describe_config_model(model_kind, model_settings)
                            : tb::api::describe_model(model_kind, model_settings);
      std::cout << m.config_toml << "\n" << m.table;
      return 0;
    }
    if (run->parsed()) {
      tb::api::RunRequest req;
      req.config_path = run_config;
      req.overrides = run_overrides;
      req.db_path = db_path;
      if (resume_run > 0) req.resume = resume_run;
      req.resume_checkpoint = resume_checkpoint;
      req.stop_at = stop_at;
      if (!sweep_trial.empty()) {
        const auto colon = sweep_trial.find(':');
        std::int64_t sweep_id = 0;
        std::int64_t trial = -1;
        try {
          std::size_t n1 = 0;
          std::size_t n2 = 0;
          sweep_id = std::stoll(sweep_trial.substr(0, colon), &n1);
          trial = std::stoll(sweep_trial.substr(colon + 1), &n2);
          if (n1 != colon || colon + 1 + n2 != sweep_trial.size()) trial = -1;
        } catch (const std::exception&) {
          trial = -1;
        }
        if (colon == std::string::npos || sweep_id <= 0 || trial < 0) {
          std::cerr << "error: [run] --sweep-trial: expected SWEEP:TRIAL (a sweep id and a trial "
                       "index), got '"
                    << sweep_trial << "'\n";
          return 1;
        }
        req.sweep_trial = std::make_pair(sweep_id, trial);
      }
      return cmd_run(std::move(req));
    }
    if (runs->parsed()) {
      const auto rows = tb::api::list_runs(db_path, runs_sweep);  // an error prints no header
      int name_width = 24;  // wider for long names (a sweep's trials), so columns never touch
      for (const auto& r : rows)
        name_width = std::max(name_width, static_cast<int>(tb::api::display_width(r.name)) + 2);
      std::cout << std::left << std::setw(5) << "id" << std::setw(name_width) << "name"
                << std::setw(11) << "status" << std::setw(21) << "created (UTC)" << std::setw(8)
                << "steps"
                << "message\n";
      for (const auto& r : rows) {
        std::cout << std::left << std::setw(5) << r.id
                  << tb::api::pad_right(r.name, static_cast<std::size_t>(name_width))
                  << std::setw(11) << r.status << std::setw(21) << r.created << std::setw(8)
                  << (r.last_step ? std::to_string(*r.last_step) : "-") << r.message;
        if (!r.sweep.empty())
          std::cout << (r.message.empty() ? "" : "  ") << "[sweep " << r.sweep << " p"
                    << r.point.value_or(0) << "]";
        std::cout << "\n";
      }
      // Nothing listed: say where that was looked for (stderr: stdout stays the table).
      if (rows.empty())
        std::cerr << "(no runs" << (runs_sweep.empty() ? std::string() : " of sweep " + runs_sweep)
                  << " in " << (db_path.empty() ? tb::api::default_store_path() : db_path) << ")\n";
      return 0;
    }
    if (show->parsed()) {
      std::cout << tb::api::show_run(db_path, show_id);
      return 0;
    }
    if (compare->parsed()) {
      std::cout << tb::api::compare_runs(db_path, compare_ids, compare_all);
      return 0;
    }
    if (sweep->parsed()) return cmd_sweep(sweep_req, sweep_dry, sweep_show, db_path);
    if (sweeps->parsed()) {
      const auto rows = tb::api::list_sweeps(db_path);
      int name_width = 20;
      for (const auto& r : rows)
        name_width = std::max(name_width, static_cast<int>(tb::api::display_width(r.name)) + 2);
      std::cout << std::left << std::setw(5) << "id" << std::setw(name_width) << "name"
                << std::setw(13) << "status" << std::setw(21) << "created (UTC)" << std::setw(8)
                << "method" << std::setw(18) << "metric"
                << "trials (finished, stopped, failed)\n";
      for (const auto& r : rows) {
        std::cout << std::left << std::setw(5) << r.id
                  << tb::api::pad_right(r.name, static_cast<std::size_t>(name_width))
                  << std::setw(13) << r.status << std::setw(21) << r.created << std::setw(8)
                  << r.method << std::setw(18) << r.metric << r.trials << " (" << r.finished << ", "
                  << r.stopped << ", " << r.failed << ")\n";
      }
      return 0;
    }
    if (exp->parsed()) {
      if (export_format == "tensorboard") {
        const std::string file = tb::api::export_tensorboard(db_path, export_id, export_dir);
        std::cout << "wrote " << file << " (tensorboard --logdir " << export_dir << ")\n";
        return 0;
      }
      if (!export_dir.empty()) {
        std::cerr << "error: [export] DIR is for --format tensorboard; csv and json go to stdout\n";
        return 1;
      }
      std::cout << tb::api::export_run(db_path, export_id, export_format);
      return 0;
    }
    if (sample->parsed()) {
      sample_req.db_path = db_path;
      for (const auto& part : split_commas(sample_ids)) {
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
        sample_req.prompt_tokens.push_back(id);
      }
      const auto r = tb::api::sample_run(sample_req);
      std::cerr << "sampled from " << r.from << "\n";
      if (r.has_text) {
        std::cout << r.text << "\n";
      } else {
        for (std::size_t i = 0; i < r.tokens.size(); ++i)
          std::cout << (i ? "," : "") << r.tokens[i];
        std::cout << "\n";
      }
      return 0;
    }
    if (weights->parsed()) {
      std::cout << tb::api::export_weights(db_path, weights_id, weights_out, weights_layout,
                                           weights_checkpoint);
      return 0;
    }
    if (tok_train->parsed()) {
      std::cout << tb::api::train_tokenizer(tok_req);
      return 0;
    }
    if (tok_encode->parsed()) {
      std::cout << tb::api::encode_text(tok_model, tok_text);
      return 0;
    }
    if (reference->parsed()) {
      if (reference_check.empty()) {
        tb::cli::print_reference(std::cout);
        return 0;
      }
      const int problems = tb::cli::check_reference(reference_check, reference_update, std::cerr);
      return problems == 0 ? 0 : 1;
    }
    if (schedule->parsed()) {
      if (sched_kind.size() > 5 && sched_kind.compare(sched_kind.size() - 5, 5, ".toml") == 0) {
        if (schedule->count("--lr") || sched_momentum) {
          std::cerr
              << "error: [schedule] --lr and --momentum preview a scheduler kind; a run config "
                 "takes its optimizers' LRs (change them with --set optimizer.lr=...)\n";
          return 1;
        }
        return cmd_schedule_config(sched_kind, sched_settings,
                                   schedule->count("--steps") ? sched_steps : 0);
      }
      return cmd_schedule(sched_kind, sched_settings, sched_lrs, sched_steps, sched_momentum);
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << tb::api::error_text(e) << "\n";
    return 1;
  }
  return 0;
}

// A result that could not be written whole (a full disk, a closed pipe with SIGPIPE ignored)
// is an error: `export 7 > metrics.csv` on a full disk exited 0 with an empty file.
int checked_stdout(int rc) {
  std::cout.flush();
  bool failed = !std::cout.good() || std::ferror(stdout) != 0;
  std::clearerr(stdout);  // what is still buffered is written again: errno says why it fails
  errno = 0;
  failed |= std::fflush(stdout) != 0;
  const int why = errno;
  if (!failed || !stdout_is_the_result) return rc;
  std::cerr << "error: cannot write standard output"
            << (why != 0 ? std::string(" (") + std::strerror(why) + ")" : std::string())
            << ": the output is incomplete\n";
  return rc == 0 ? 1 : rc;
}

}  // namespace

int main(int argc, char** argv) {
  return checked_stdout(cli_main(argc, argv));
}
