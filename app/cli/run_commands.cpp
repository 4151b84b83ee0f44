// trainbench-cli's commands that train: run (progress, Ctrl-C), launch (processes in CPU
// slots, or one data-parallel job under mpirun) and sweep (its trials, early stopping, Ctrl-C).
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/cli/commands.h"
#include "engine/api/engine_api.h"

namespace tb::cli {

namespace {

// A model's parameter table as a run starts: whole for a small model, else its first rows and
// its totals (GPT-2 small has 148 tensors; `trainbench-cli model CONFIG` lists them all).
std::string condensed_table(const std::string& table) {
  constexpr int kShown = 8;
  std::istringstream in(table);
  std::vector<std::string> rows, totals;
  for (std::string line; std::getline(in, line);)
    (line.find('[') != std::string::npos ? rows : totals).push_back(line);
  if (rows.size() <= 3 * kShown) return table;
  std::string out;
  for (int i = 0; i < kShown; ++i)
    out += rows[static_cast<std::size_t>(i)] + "\n";
  out += "... and " + std::to_string(rows.size() - kShown) +
         " more tensors (trainbench-cli model CONFIG lists each)\n";
  for (const auto& t : totals)
    out += t + "\n";
  return out;
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

// `launch --ddp`'s mpirun, for its signal handler.
std::atomic<int> ddp_mpirun_pid{0};

// The trial processes a sweep runs now (0: a free place), for its signal handler.
std::array<std::atomic<int>, 256> sweep_trial_pids{};

// The processes `launch` started, for its SIGTERM handler to pass the signal on to (0: ended,
// or not started yet). Never freed: the handler may run while the program exits.
std::atomic<int>* launched_pids = nullptr;
std::atomic<std::size_t> launched_count{0};
std::atomic<bool> launch_terminated{false};  // `launch` got SIGTERM: start no further run

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

// Installs `sa`'s handler for SIGINT, SIGTERM and SIGHUP (the terminal closed: an ssh session
// lost stops a run as Ctrl-C does, with a checkpoint, instead of killing it): the one handler
// runs for any, never nested, with SA_RESTART (output interrupted by it is not lost). A signal
// this process was started ignoring (a job started with & from a non-interactive shell ignores
// SIGINT, nohup SIGHUP) stays ignored.
void on_stop_signals(struct sigaction sa) {
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&sa.sa_mask, sig);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

// `run`: a progress bar on a terminal, one plain line per report when piped.
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
              << condensed_table(table) << std::flush;
  };
  auto on_progress = [&](const tb::api::RunProgressInfo& p) {
    const double eta =
        p.steps_per_s > 0 ? static_cast<double>(p.total - p.step) / p.steps_per_s : 0.0;
    std::ostringstream line;
    line << "step " << p.step << "/" << p.total << "  loss ";
    if (std::isnan(p.loss))
      line << "-";
    else
      line << std::setprecision(4) << p.loss;
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
    else if (eta > 0 && eta < 1)  // a few fast steps left: not "1 s"
      line << p.steps_per_s << " it/s  ETA <1 s";
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
    on_stop_signals(sa);
  }
  // The handlers run on the watcher thread alone: this thread, which trains, and every thread it
  // starts (kernel workers, data loader, store writer) block these signals. A handler run on a
  // thread inside a oneDNN kernel corrupted the heap (oneDNN 2.6, "corrupted size vs. prev_size"
  // a few steps after a Ctrl-C or SIGUSR2). The watcher unblocks them (a launcher may also have
  // left them blocked).
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP})
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
  // others than rank 0 say who they are, so the job's output does not read as two runs. A run
  // that failed, diverged or crashed says so on standard error, where a script that keeps only
  // the errors (or a terminal whose standard output goes to a full disk) still sees why.
  const bool ended_well = out.status == "finished" || out.status == "cancelled";
  std::ostream& say = ended_well ? std::cout : std::cerr;
  std::cout << std::flush;
  say << (rank_number > 0 ? "rank " + std::to_string(rank_number) + ": " : std::string()) << "run "
      << out.run_id << " " << said << "\n"
      << std::flush;
  // How to go on from the checkpoint (once, from the process that writes the store), after a
  // Ctrl-C or a --stop-at of the user's; not after a sweep's rung (the sweep goes on).
  if (out.status == "cancelled" && !(out.stopped_as_asked && out.sweep_trial) && rank_number <= 0 &&
      out.message.find("with a checkpoint to continue from") != std::string::npos)
    std::cout << "continue it with: trainbench-cli " << (db.empty() ? "" : "--db " + db + " ")
              << (rank ? "launch --ddp --resume " : "run --resume ") << out.run_id << "\n"
              << std::flush;
  if (rank) tb::api::end_distributed(out.status == "failed");
  return out.status == "finished" || out.stopped_as_asked ? 0 : 2;
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

// launch (not --ddp): N runs as processes of their own. Their output comes back through pipes,
// each line tagged with its slot, so several runs' progress can be told apart. Ctrl-C reaches
// the runs from the terminal (each stops after its step, with a checkpoint) and this process
// stays to relay what they say and report their exit; SIGTERM or SIGHUP sent to this process
// alone is passed on to them.
int cmd_launch(tb::api::LaunchRequest req) {
  const auto slots = static_cast<std::size_t>(std::max(req.nproc, 0));
  launched_pids = new std::atomic<int>[slots]();  // NOLINT(cppcoreguidelines-owning-memory)
  launched_count.store(0);
  {
    struct sigaction sa = {};
    sa.sa_handler = [](int) {};  // stay to relay; the runs got the terminal's signal
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sa.sa_handler = [](int sig) {
      const int saved_errno = errno;
      launch_terminated.store(true);
      const std::size_t n = launched_count.load();
      for (std::size_t i = 0; i < n; ++i)
        if (const int pid = launched_pids[i].load(); pid > 0) kill(pid, sig);
      errno = saved_errno;
    };
    sigaction(SIGTERM, &sa, nullptr);
    // SIGHUP too (its terminal closed: the runs got it as well, and take the copy that follows
    // within microseconds as the same request); one ignored from the start (nohup) stays so.
    struct sigaction old = {};
    if (sigaction(SIGHUP, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaction(SIGHUP, &sa, nullptr);
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
  // An ended run is forgotten before its pid is freed: a later SIGTERM reaches only live runs.
  req.on_exited = [](int pid) {
    const std::size_t n = launched_count.load();
    for (std::size_t i = 0; i < n; ++i) {
      int expected = pid;
      if (launched_pids[i].compare_exchange_strong(expected, 0)) break;
    }
  };
  // After a SIGTERM no further run starts; one started as it came (its pid not yet seen by the
  // handler) is told here.
  req.stop_requested = [] { return launch_terminated.load(); };
  const auto procs = tb::api::launch_runs(req, [slots](const tb::api::LaunchedProcess& p) {
    const std::size_t i = launched_count.load();
    if (i < slots) {
      launched_pids[i].store(p.pid);
      launched_count.store(i + 1);
    }
    if (launch_terminated.load()) kill(p.pid, SIGTERM);
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

int cmd_launch_ddp(const tb::api::LaunchRequest& req) {
  // mpirun runs in a process group of its own (spawn_ddp): neither the terminal's Ctrl-C nor a
  // signal to this process's group reaches it, and this process passes on what it gets.
  // SIGUSR1 (stop after the step) and SIGUSR2 (pause, or resume) are passed on as they come.
  // SIGINT, SIGTERM and SIGHUP (the job ends: mpirun sends the ranks SIGTERM, then SIGKILL) are
  // passed on once: Open MPI's mpirun takes a second one as "quit at once" and exits leaving the
  // ranks running. A later one says that the job is stopping already, except the same signal
  // again within kRepeatWindowNs (GNU timeout signals this process, then its group). Ctrl-Z
  // stops mpirun with this process, and the shell's fg or bg continues both. A stop passed on is
  // remembered: this process stays to close the run if rank 0 could not, as stopped on purpose.
  static std::atomic<bool> stopped{false};
  static std::atomic<bool> stop_passed_on{false};  // mpirun has been told: never twice
  static std::atomic<bool> started{false};         // mpirun has been started
  static std::array<std::atomic<long long>, 65> last_ns{};
  static_assert(std::atomic<long long>::is_always_lock_free);  // used in a signal handler
  {
    struct sigaction sa = {};
    sa.sa_handler = [](int sig) {
      const int saved_errno = errno;
      const long long ns = monotonic_ns();
      const auto i =
          static_cast<std::size_t>(sig) < last_ns.size() ? static_cast<std::size_t>(sig) : 0;
      const long long before = last_ns[i].exchange(ns);
      const bool repeat = before != 0 && ns - before < kRepeatWindowNs;
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
        if (stopped.exchange(true)) {
          if (!repeat) {
            static const char said[] =
                "launch --ddp: the job is stopping already: mpirun ends every rank within "
                "seconds\n";
            (void)!write(STDERR_FILENO, said, sizeof said - 1);
          }
        } else if (const int pid = ddp_mpirun_pid.load();
                   pid > 0 && !stop_passed_on.exchange(true)) {
          kill(pid, sig);      // else not started yet: told when it starts (below)
          kill(pid, SIGCONT);  // one stopped by Ctrl-Z acts on it
        }
      } else if (const int pid = ddp_mpirun_pid.load(); pid > 0) {
        if (sig == SIGTSTP) {
          kill(pid, SIGSTOP);
          kill(getpid(), SIGSTOP);  // this process too, as the terminal asked
        } else {
          kill(pid, sig);  // SIGUSR1, SIGUSR2; SIGCONT after a Ctrl-Z
        }
      } else if (sig == SIGTSTP) {
        kill(getpid(), SIGSTOP);
      }
      errno = saved_errno;
    };
    sa.sa_flags = SA_RESTART;  // the job's output and the lines after it are not cut
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, SIGTSTP, SIGCONT}) {
      struct sigaction old = {};
      // A launch started ignoring SIGINT (in the background of a script), SIGHUP (nohup) or
      // SIGTSTP keeps ignoring it.
      if (sig != SIGTERM && sig != SIGUSR1 && sig != SIGUSR2 && sig != SIGCONT &&
          sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN)
        continue;
      sigaction(sig, &sa, nullptr);
    }
  }
  tb::api::LaunchRequest launch = req;
  // Stopped on purpose: before mpirun started (it is not started then), or a stop passed on to
  // it — not one that came after it had ended on its own.
  launch.stop_requested = [] {
    return stop_passed_on.load() || (stopped.load() && !started.load());
  };
  // mpirun has ended: signals stop going to its pid before the system may give it to another.
  launch.on_exited = [](int) { ddp_mpirun_pid.store(0); };
  std::vector<std::string> after;
  const int rc = tb::api::launch_ddp(
      launch,
      [](int pid, const tb::api::DdpLaunch& plan) {
        ddp_mpirun_pid.store(pid);
        started.store(true);
        // A Ctrl-C or SIGTERM that came while mpirun was started (its pid not known to the
        // handler yet) stops it now.
        if (stopped.load() && !stop_passed_on.exchange(true)) kill(pid, SIGTERM);
        for (const auto& note : plan.notes)
          std::cout << "note: " << note << "\n";
        std::cout << "mpirun pid " << pid << ":";
        for (const auto& a : plan.argv)
          std::cout << " " << a;
        std::cout << "\n" << std::flush;
      },
      &after);
  std::cout << "the job exited with " << rc << "\n";
  for (const auto& line : after)
    std::cout << line << "\n";
  return rc == 0 ? 0 : 2;
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
                  << " trials finished): running this config would be refused; "
                  << (row.status == "finished" ? "sweep --show " + plan.name + " prints its table"
                                               : "continue that one with --resume " + plan.name)
                  << ", or give this one another sweep.name\n";
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
    on_stop_signals(sa);
  }
  req.stop_requested = [] { return stop_signal.load() != 0; };
  // A trial that has ended is forgotten before its pid is freed (a later signal reaches only
  // live trials).
  req.on_exited = [](int pid) {
    for (auto& slot : sweep_trial_pids) {
      int expected = pid;
      if (slot.compare_exchange_strong(expected, 0)) break;
    }
  };
  const auto result = tb::api::run_sweep(
      req,
      [](const tb::api::SweepTrialEvent& e) {
        const auto& t = e.trial;
        // The trials running now, for the signal handler above (on_exited forgets them).
        if (!e.exit_code)
          for (auto& pid : sweep_trial_pids) {
            int expected = 0;
            if (pid.compare_exchange_strong(expected, e.pid)) break;
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
          if (!e.warning.empty()) std::cout << "  warning: " << e.warning << "\n";
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

}  // namespace tb::cli
