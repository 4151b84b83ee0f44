// A distributed run started from a process that is not a rank (the workbench's Start button):
// `trainbench-cli launch --ddp` runs the ranks through mpirun, and this process follows the run
// rank 0 writes — its id from rank 0's first line, its metrics from the store — reporting both
// through the observer as an in-process run would. Cancel and pause reach the ranks as SIGUSR1
// and SIGUSR2 to mpirun (forwarded to every rank; they agree in the step's exchange, so all stop
// or hold after the same step).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>

#include "engine/api/api_detail.h"
#include "engine/api/launch_api.h"
#include "engine/api/workbench_api.h"
#include "engine/core/error.h"

namespace tb::api::detail {

namespace {

// What runs the ranks: $TB_CLI, else trainbench-cli beside this program (installed: bin/; the
// build tree: app/gui -> app/cli), else on the PATH.
std::string find_cli() {
  if (const char* env = std::getenv("TB_CLI"); env != nullptr && *env != '\0') {
    TB_CHECK(executable(env), "[run] TB_CLI='", env, "' is not an executable");
    return env;
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& c : {self.parent_path() / "trainbench-cli",
                          self.parent_path().parent_path() / "cli" / "trainbench-cli"})
      if (executable(c)) return c.string();
  }
  if (std::string c = find_on_path("trainbench-cli"); !c.empty()) return c;
  throw ValueError(
      "[run] a distributed run needs trainbench-cli to start its ranks; it is neither beside "
      "this program nor on the PATH (set TB_CLI to its path)");
}

// The launcher's output, read on a thread: rank 0's "run N (store ...)" line names the run.
class OutputReader {
 public:
  explicit OutputReader(int fd) : fd_(fd), thread_([this] { read_all(); }) {}
  ~OutputReader() {
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  OutputReader(const OutputReader&) = delete;
  OutputReader& operator=(const OutputReader&) = delete;
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::int64_t run_id() const { return run_id_.load(); }
  /// The run's total steps from rank 0's progress lines ("step 12/2345"), 0 until one came.
  std::int64_t total() const { return total_.load(); }
  std::string description() {
    std::lock_guard<std::mutex> lock(mutex_);
    return description_;
  }
  std::string tail() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (const auto& l : last_)
      out += (out.empty() ? "" : "\n") + l;
    return out;
  }

 private:
  // The longest line kept, and the most of the run's description: what is past them is
  // neither a progress line nor rank 0's table (a stray binary write, a runaway log).
  static constexpr std::size_t kLongestLine = 64 * 1024;
  static constexpr std::size_t kLongestDescription = 64 * 1024;

  // Reads to the end: the launcher must never block on a full pipe, and nothing may escape this
  // thread (std::terminate would end the workbench). After a failure (no memory) the rest is
  // read and dropped.
  void read_all() {
    char buf[4096];
    std::string pending;
    bool in_table = false;
    bool parsing = true;
    for (;;) {
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (!parsing) continue;
      try {
        pending.append(buf, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = pending.find_first_of("\n\r")) != std::string::npos;) {
          const std::string line = pending.substr(0, nl);
          pending.erase(0, nl + 1);
          if (!line.empty()) take_line(line, in_table);
        }
        if (pending.size() > kLongestLine) pending.clear();  // no line of ours is this long
      } catch (...) {
        parsing = false;
      }
    }
  }

  // A whole number from a run of digits; nullopt when it does not fit (a stray line's).
  static std::optional<std::int64_t> whole(const std::string& digits) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return v;
  }

  void take_line(const std::string& line, bool& in_table) {
    static const std::regex kRunLine(R"(^(resuming )?run (\d+) \(store .*\)$)");
    static const std::regex kStepLine(R"(step \d+/(\d+) )");
    std::smatch m;
    if (std::regex_search(line, m, kStepLine))
      if (const auto t = whole(m[1].str())) total_.store(*t);
    std::lock_guard<std::mutex> lock(mutex_);
    if (run_id_.load() == 0 && std::regex_match(line, m, kRunLine)) {
      if (const auto id = whole(m[2].str())) {
        in_table = true;
        run_id_.store(*id);
        return;
      }
    }
    if (in_table) {
      if (line.rfind("[", 0) == 0 || line.rfind("step ", 0) == 0) {
        in_table = false;
      } else if (line.rfind("warning: ", 0) != 0 &&  // a warning is not part of the table
                 description_.size() + line.size() < kLongestDescription) {
        description_ += line + "\n";
      }
    }
    if (line.rfind("[", 0) == 0 || line.rfind("step ", 0) == 0) return;  // progress
    last_.push_back(line.size() > 1024 ? line.substr(0, 1024) + "..." : line);
    if (last_.size() > 12) last_.pop_front();
  }

  int fd_;
  std::atomic<std::int64_t> run_id_{0};
  std::atomic<std::int64_t> total_{0};
  std::mutex mutex_;
  std::string description_;
  std::deque<std::string> last_;
  std::thread thread_;
};

int wait_nohang(int pid, bool& exited) {
  int status = 0;
  const int r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return 0;
  exited = true;
  if (r < 0) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

RunOutcomeInfo follow_distributed_run(const RunSpec& spec, const RunObserver& observer,
                                      const train::RunConfig& config) {
  const auto db = store_path(spec.db_path);
  // The ranks read the config from a file of their own.
  static std::atomic<int> counter{0};
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("trainbench-ddp-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1)));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  LaunchRequest req;
  req.program = find_cli();
  req.ddp = true;
  req.nproc = static_cast<int>(config.distributed.world_size);
  req.binding = config.binding.mode;
  req.fallback = config.binding.fallback;
  req.db_path = db.string();
  req.overrides = spec.overrides;
  if (spec.resume) {
    req.resume = *spec.resume;
  } else {
    const auto file = dir / "config.toml";
    std::ofstream(file) << spec.config_text;
    req.configs = {file.string()};
  }
  const DdpLaunch plan = plan_ddp_launch(req);
  check_ddp_start(req);  // said here once, not by each rank

  int pipefd[2];
  TB_CHECK(pipe2(pipefd, O_CLOEXEC) == 0, "[run] pipe: ", std::strerror(errno));
  int pid = 0;
  try {
    pid = spawn_ddp(plan, pipefd[1]);
  } catch (...) {
    close(pipefd[0]);
    close(pipefd[1]);
    throw;
  }
  close(pipefd[1]);
  std::optional<OutputReader> reader;
  try {
    reader.emplace(pipefd[0]);
  } catch (const std::exception& e) {  // no thread to be had: the job is not left unfollowed
    close(pipefd[0]);
    kill(-pid, SIGTERM);  // mpirun leads its own process group
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw ValueError(std::string("[run] the data-parallel job was stopped: no thread to follow "
                                 "it could be started (") +
                     e.what() + ")");
  }
  OutputReader& output = *reader;

  RunOutcomeInfo out;
  std::int64_t run = 0;
  std::int64_t last_step = -1;  // from step 0: eval.at_start's evaluation
  bool cancel_sent = false;
  bool paused = false;
  std::optional<StoreReader> store;
  double first_wall = -1;
  auto poll_metrics = [&] {
    if (run == 0) return;
    if (!store) store.emplace(db.string());
    std::map<std::int64_t, StepMetrics> steps;
    for (const auto& key : store->metric_keys(run)) {
      const Series s = store->series(run, key, last_step + 1);
      for (std::size_t i = 0; i < s.step.size(); ++i) {
        StepMetrics& m = steps[static_cast<std::int64_t>(s.step[i])];
        m.run_id = run;
        m.total = output.total();
        m.step = static_cast<std::int64_t>(s.step[i]);
        m.wall_s = s.wall_s[i];
        m.values.emplace_back(key, s.value[i]);
      }
    }
    for (auto& [step, m] : steps) {
      if (first_wall < 0) first_wall = m.wall_s;
      m.wall_s -= first_wall;
      if (observer.on_metrics) observer.on_metrics(m);
      last_step = step;
    }
  };
  bool exited = false;
  int code = 0;
  while (!exited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    code = wait_nohang(pid, exited);
    // A reaped pid may be another process's by now: nothing is sent to it any more.
    const bool alive = !exited;
    if (run == 0 && output.run_id() != 0) {
      run = output.run_id();
      out.run_id = run;
      out.description = output.description();
      if (observer.on_start) observer.on_start(run, out.description);
    }
    // Only once rank 0 runs: before their handlers are in place SIGUSR1/2 would end the ranks.
    // mpirun forwards both to every rank: SIGUSR1 cancels, SIGUSR2 toggles the pause.
    if (alive && !cancel_sent && run != 0 && spec.control && spec.control->cancelled()) {
      kill(pid, SIGUSR1);
      cancel_sent = true;
    }
    if (alive && !cancel_sent && run != 0 && spec.control && spec.control->paused() != paused) {
      kill(pid, SIGUSR2);
      paused = !paused;
    }
    try {
      poll_metrics();
    } catch (const Error&) {  // the store is busy or not there yet: the next poll reads it
    }
  }
  output.join();
  if (run == 0 && output.run_id() != 0) {
    run = output.run_id();
    out.run_id = run;
    if (observer.on_start) observer.on_start(run, output.description());
  }
  // Nothing ran: an error, as for a run in this process (a resume that cannot start leaves the
  // stored run as it was).
  TB_CHECK(run != 0, "[run] the distributed run did not start (launcher exit ", code,
           "): ", output.tail());
  // A run its rank 0 could not close (killed) is closed as crashed, saying so.
  if (code != 0) (void)close_ddp_job(db.string(), plan, false);
  poll_metrics();
  for (const auto& r : store->runs()) {
    if (r.id != run) continue;
    out.status = r.status;
    out.message = r.message;
  }
  out.resumed = spec.resume.has_value();
  return out;
}

}  // namespace tb::api::detail
