#include "engine/api/launch_api.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/api/api_detail.h"
#include "engine/api/run_api.h"
#include "engine/core/error.h"
#include "engine/numa/affinity.h"
#include "engine/numa/binding.h"
#include "engine/numa/topology_hwloc.h"
#include "engine/store/process_info.h"
#include "engine/store/run_store.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

extern char** environ;

namespace tb::api {

std::string process_cpus_allowed(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      std::string v = line.substr(18);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

namespace {

std::string quote(const std::string& s) {
  if (s.find_first_of(" \t\"'$`\\") == std::string::npos && !s.empty()) return s;
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Waits for `pid` to end; `on_exited` (if set) hears of it while the process is still a zombie,
// so its pid is not yet free for the system to hand to another process: a signal handler that
// passes signals on to it stops doing so there, never signalling a stranger that got the pid.
int wait_for(int pid, const std::function<void(int)>& on_exited = {}) {
  if (on_exited) {
    // Until it has ended, without reaping it: poll(2) on a pidfd, which becomes readable then
    // (Linux 5.3; ThreadSanitizer runs this process's signal handlers while it blocks there,
    // whereas a blocking waitid held them back until a child ended, so a sweep never passed its
    // stop on), else waitid(2) with WNOWAIT.
    bool ended = false;
#ifdef SYS_pidfd_open
    if (const long fd = syscall(SYS_pidfd_open, pid, 0); fd >= 0) {
      pollfd ready{static_cast<int>(fd), POLLIN, 0};
      int polled = 0;
      while ((polled = poll(&ready, 1, -1)) < 0 && errno == EINTR) {
      }
      close(static_cast<int>(fd));
      ended = polled > 0;
    }
#endif
    siginfo_t info{};
    while (!ended && waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0) {
      if (errno != EINTR) break;
    }
    on_exited(pid);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The read ends of the children's output pipes, relayed line by line until each closes.
struct OutputPipe {
  int fd = -1;
  int slot = 0;
  std::string pending;  ///< a line not ended yet
};

void relay_output(std::vector<OutputPipe>& pipes,
                  const std::function<void(int, const std::string&)>& on_output) {
  const auto hand_on = [&](OutputPipe& p, bool all) {
    std::size_t start = 0;
    for (std::size_t i = 0; i < p.pending.size(); ++i) {
      if (p.pending[i] != '\n' && p.pending[i] != '\r') continue;
      if (i > start) on_output(p.slot, p.pending.substr(start, i - start));
      start = i + 1;
    }
    p.pending.erase(0, start);
    if (all && !p.pending.empty()) on_output(p.slot, p.pending);
    if (all) p.pending.clear();
  };
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    for (const auto& p : pipes)
      if (p.fd >= 0) fds.push_back({p.fd, POLLIN, 0});
    if (fds.empty()) return;
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;  // a signal the caller handles; the children go on
      break;
    }
    for (const auto& f : fds) {
      if (f.revents == 0) continue;
      auto& p = *std::find_if(pipes.begin(), pipes.end(),
                              [&](const OutputPipe& q) { return q.fd == f.fd; });
      char buf[4096];
      const ssize_t n = read(p.fd, buf, sizeof buf);
      if (n > 0) {
        p.pending.append(buf, static_cast<std::size_t>(n));
        hand_on(p, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        hand_on(p, true);
        close(p.fd);
        p.fd = -1;
      }
    }
  }
  for (auto& p : pipes)  // poll failed: stop relaying, but let the children write on
    if (p.fd >= 0) {
      close(p.fd);
      p.fd = -1;
    }
}

}  // namespace

std::vector<LaunchedProcess> launch_runs(
    const LaunchRequest& req, const std::function<void(const LaunchedProcess&)>& on_started) {
  TB_CHECK(req.nproc >= 1, "[launch] --nproc must be >= 1, got ", req.nproc);
  const bool all_resumed = req.resume_runs.size() >= static_cast<std::size_t>(req.nproc) &&
                           std::all_of(req.resume_runs.begin(), req.resume_runs.begin() + req.nproc,
                                       [](std::int64_t id) { return id > 0; });
  TB_CHECK(!req.configs.empty() || all_resumed, "[launch] give at least one run config");
  TB_CHECK(req.configs.size() <= static_cast<std::size_t>(req.nproc), "[launch] ",
           req.configs.size(), " configs but --nproc ", req.nproc, ": process k runs config k, so ",
           req.configs.size() - static_cast<std::size_t>(req.nproc),
           " of them would never run; give --nproc ", req.configs.size(),
           " or more (or leave it out: one process per config)");
  TB_CHECK(!req.program.empty(), "[launch] no program to run");
  // Every config is checked before a process starts: a mistake in the last one would otherwise
  // show only after the others had started training.
  std::vector<std::string> checked;
  const bool bo_mode_none = numa::parse_binding_mode(req.binding) == numa::BindingMode::kNone;
  for (int k = 0; k < req.nproc; ++k) {
    if (static_cast<std::size_t>(k) < req.resume_runs.size() &&
        req.resume_runs[static_cast<std::size_t>(k)] > 0)
      continue;
    const std::string& path = req.configs[static_cast<std::size_t>(k) % req.configs.size()];
    if (std::find(checked.begin(), checked.end(), path) != checked.end()) continue;
    checked.push_back(path);
    // As `run` checks a new run's files and device: the children start in this folder.
    train::RunConfig c = train::load_run_config(path, req.overrides);
    train::make_paths_absolute(c);
    // The launcher's --binding, when it binds, places each process (binding.cpus of its slot).
    detail::check_new_run(c, path, req.overrides, {.here = true, .own_binding = bo_mode_none});
  }
  numa::BindingOptions bo;
  bo.mode = numa::parse_binding_mode(req.binding);
  bo.fallback = req.fallback;
  std::vector<numa::SlotBinding> plan;
  if (bo.mode != numa::BindingMode::kNone) {
    const numa::Topology topo = numa::load_machine_topology();
    plan = numa::plan_slots(topo, bo, numa::SlotKind::kCpuWorker, req.nproc);
  }
  std::vector<LaunchedProcess> procs;
  std::vector<OutputPipe> pipes;
  std::string spawn_error;
  for (int k = 0; k < req.nproc; ++k) {
    if (k > 0 && req.stop_requested && req.stop_requested()) break;
    LaunchedProcess p;
    p.slot = k;
    const std::int64_t resume_id = static_cast<std::size_t>(k) < req.resume_runs.size()
                                       ? req.resume_runs[static_cast<std::size_t>(k)]
                                       : 0;
    p.config = resume_id > 0 ? "run " + std::to_string(resume_id) + " (resumed)"
                             : req.configs[static_cast<std::size_t>(k) % req.configs.size()];
    std::vector<std::string> args = {req.program};
    args.insert(args.end(), req.program_options.begin(), req.program_options.end());
    if (!req.db_path.empty()) {
      args.push_back("--db");
      args.push_back(req.db_path);
    }
    args.push_back("run");
    if (resume_id > 0) {
      args.push_back("--resume");
      args.push_back(std::to_string(resume_id));
    } else {
      args.push_back(p.config);
    }
    // The child's run pins its own threads to the same CPUs (and records it). The CPU list is
    // passed explicitly: inside the child, with its mask already narrowed to the slot, planning
    // the slot again would see only those CPUs.
    const bool bound = !plan.empty() && plan[static_cast<std::size_t>(k)].bound;
    std::vector<std::string> sets = {"binding.mode=\"" + req.binding + "\"",
                                     "binding.slot=" + std::to_string(k),
                                     "binding.slots=" + std::to_string(req.nproc)};
    if (bound)
      sets.push_back("binding.cpus=\"" + plan[static_cast<std::size_t>(k)].cpus.to_string() + "\"");
    else
      sets.push_back("binding.mode=\"none\"");  // unbound slot (mode none, or fallback)
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    for (const auto& o : req.overrides) {
      args.push_back("--set");
      args.push_back(o);
    }
    if (static_cast<std::size_t>(k) < req.run_args.size())
      for (const auto& a : req.run_args[static_cast<std::size_t>(k)])
        args.push_back(a);
    for (const auto& a : args)
      p.command_line += (p.command_line.empty() ? "" : " ") + quote(a);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int pid = 0;
    int rc = 0;
    int out[2] = {-1, -1};  // the pipe of a relayed output
    {
      // Parent-side scoped affinity: the child inherits the slot's mask; ours is restored when
      // this scope ends, also when the spawn fails.
      std::optional<numa::ScopedAffinity> affinity;
      if (!plan.empty() && plan[static_cast<std::size_t>(k)].bound) {
        p.cpus = plan[static_cast<std::size_t>(k)].cpus.to_string();
        affinity.emplace(plan[static_cast<std::size_t>(k)].cpus);
      }
      if (!plan.empty()) p.warning = plan[static_cast<std::size_t>(k)].warning;
      // The process's output to its log file (appended), when one is asked for.
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      if (static_cast<std::size_t>(k) < req.log_files.size() &&
          !req.log_files[static_cast<std::size_t>(k)].empty()) {
        const std::string& log = req.log_files[static_cast<std::size_t>(k)];
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
      } else if (req.on_output) {
        if (pipe2(out, O_CLOEXEC) != 0) {
          spawn_error = std::string("[launch] cannot make a pipe for the output of slot ") +
                        std::to_string(k) + ": " + std::strerror(errno);
          posix_spawn_file_actions_destroy(&actions);
          break;
        }
        posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
      }
      rc = posix_spawn(&pid, req.program.c_str(), &actions, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&actions);
    }
    if (out[1] >= 0) close(out[1]);
    if (out[0] >= 0) {
      if (rc == 0) {
        pipes.push_back({out[0], k, {}});
      } else {
        close(out[0]);
      }
    }
    if (rc != 0) {
      spawn_error = "[launch] cannot start " + req.program + ": " + std::strerror(rc);
      break;
    }
    p.pid = pid;
    p.child_mask = process_cpus_allowed(pid);
    if (on_started) on_started(p);
    procs.push_back(std::move(p));
  }
  if (!pipes.empty()) relay_output(pipes, req.on_output);
  for (auto& p : procs)
    p.exit_code = wait_for(p.pid, req.on_exited);
  if (!spawn_error.empty()) throw ValueError(spawn_error);
  return procs;
}

namespace {

// Whether the user chose how mpirun reaches other hosts: plm_rsh_agent or plm_rsh_args in the
// environment or in one of Open MPI's parameter files (theirs, the system's, or those
// OMPI_MCA_mca_base_param_files names). An OMPI_MCA_ variable set here would override a file's
// value (a port, a key) rather than add to it.
bool user_sets_ssh() {
  if (std::getenv("OMPI_MCA_plm_rsh_agent") != nullptr ||
      std::getenv("OMPI_MCA_plm_rsh_args") != nullptr)
    return true;
  std::vector<std::string> files = {"/etc/openmpi/openmpi-mca-params.conf"};
  if (const char* home = std::getenv("HOME"))
    files.push_back(std::string(home) + "/.openmpi/mca-params.conf");
  if (const char* named = std::getenv("OMPI_MCA_mca_base_param_files")) {
    std::string list = named;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t end = std::min(list.find(':', at), list.size());
      if (end > at) files.push_back(list.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      const auto first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      if (line.compare(first, 13, "plm_rsh_agent") == 0 ||
          line.compare(first, 12, "plm_rsh_args") == 0)
        return true;
    }
  }
  return false;
}

}  // namespace

DdpLaunch plan_ddp_launch(const LaunchRequest& req) {
  int nproc = req.nproc;  // 0 with resume: the stored run's number of ranks
  // The ranks' distributed.world_size: --nproc, or a resumed run's own 0 (its ranks took their
  // number from the environment, and a resume must not change its config).
  std::int64_t world_size = -1;
  TB_CHECK(nproc >= 0, "[launch] --nproc must be >= 1, got ", nproc);
  std::string ranks_note;
  // A new run without --nproc (0): the config's distributed.world_size, else one rank, said.
  if (nproc == 0 && req.resume == 0 && req.configs.size() == 1) {
    std::int64_t configured = 0;
    try {
      configured =
          train::load_run_config(req.configs.front(), req.overrides).distributed.world_size;
    } catch (const std::exception&) {  // check_ddp_start says what is wrong with it
    }
    nproc = configured > 0 ? static_cast<int>(configured) : 1;
    ranks_note = configured > 0 ? "--nproc not given: " + std::to_string(nproc) +
                                      " ranks, the config's distributed.world_size"
                                : std::string(
                                      "--nproc not given and no distributed.world_size in the "
                                      "config: 1 rank (give --nproc N for N ranks)");
  }
  TB_CHECK(req.configs.size() == 1 || (req.resume > 0 && req.configs.empty()),
           "[launch] --ddp runs one config over its ranks, got ", req.configs.size());
  TB_CHECK(!req.program.empty(), "[launch] no program to run");
  TB_CHECK(req.hosts.empty() || req.hostfile.empty(),
           "[launch] give --hosts or --hostfile, not both");
  (void)numa::parse_binding_mode(req.binding);  // a bad mode fails here, not in every rank
  // A resume continues a data-parallel run on as many ranks as it had: said here, once, rather
  // than by every rank refusing the changed config under mpirun's abort banner.
  if (req.resume > 0) {
    auto st = detail::existing_store(req.db_path);
    detail::require_run(st, req.resume);
    const store::RunDetails run = st.get_run(req.resume, store::RunStore::Metrics::kNone);
    const train::RunConfig c = train::parse_run_config(
        run.config, "run " + std::to_string(req.resume) + "'s stored config");
    TB_CHECK(c.distributed.backend != "none", "[launch] run ", req.resume,
             " is not a data-parallel run (it ran as one process): continue it with "
             "trainbench-cli run --resume ",
             req.resume);
    // The launcher stores the world size; ranks started from a torchrun-style environment store
    // 0, and their per-rank metrics (rank<r>/...) say how many there were.
    std::int64_t ranks = c.distributed.world_size;
    if (ranks == 0) world_size = 0;
    if (ranks == 0) ranks = detail::ranks_in_metrics(st.metric_keys(req.resume));
    if (ranks > 0 && nproc == 0) nproc = static_cast<int>(ranks);
    TB_CHECK(nproc > 0, "[launch] run ", req.resume,
             "'s number of ranks is not stored: give --nproc, as many as it ran on");
    TB_CHECK(ranks == 0 || ranks == nproc, "[launch] run ", req.resume, " ran on ", ranks,
             " ranks, and --ddp --resume continues it on as many: --nproc ", ranks, " (got ", nproc,
             ")");
  }
  DdpLaunch p;
  if (!ranks_note.empty()) p.notes.push_back(ranks_note);
  p.argv = {req.mpirun, "-np", std::to_string(nproc), "--bind-to", "none"};
  const bool remote = !req.hosts.empty() || !req.hostfile.empty();
  if (!req.hosts.empty()) {
    std::string list;
    for (const auto& h : req.hosts)
      list += (list.empty() ? "" : ",") + h;
    p.argv.insert(p.argv.end(), {"--host", list});
  } else if (!req.hostfile.empty()) {
    p.argv.insert(p.argv.end(), {"--hostfile", req.hostfile});
  } else {
    // One machine: ranks may outnumber its CPUs (mpirun counts one slot per core), and no
    // socket listens beyond loopback.
    p.argv.push_back("--oversubscribe");
    p.argv.insert(p.argv.end(),
                  {"--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"});
    p.notes.push_back("one machine: Open MPI's sockets on loopback only");
  }
  // When a rank fails, mpirun stops the others: SIGTERM, then SIGKILL after this many seconds
  // (Open MPI's default of 1 s is short for a rank recording the failure in the store).
  if (std::getenv("OMPI_MCA_odls_base_sigkill_timeout") == nullptr)
    p.env.emplace_back("OMPI_MCA_odls_base_sigkill_timeout=2");
  // The job's name, which rank 0 records with its run: host, launcher pid and start time (a pid
  // comes back), and a count. The ranks of this host inherit mpirun's environment; those of
  // other hosts get it with -x.
  static std::atomic<int> launches{0};
  const store::ProcessIdentity me = store::current_process();
  p.job = store::host_name() + ":" + std::to_string(static_cast<long>(::getpid())) + ":" +
          std::to_string(me.start_time) + ":" + std::to_string(launches.fetch_add(1) + 1);
  p.env.push_back(std::string(kLaunchJobVariable) + "=" + p.job);
  if (remote) p.argv.insert(p.argv.end(), {"-x", kLaunchJobVariable});
  // mpirun starts its daemons on the other hosts with ssh, from a process group of its own
  // (spawn_ddp): an ssh that asked for a password or about a new host key would wait unseen.
  // BatchMode makes it fail instead, with its reason in mpirun's error. A host that does not
  // answer held mpirun for the system's TCP timeout (two minutes and more), a stop included:
  // mpirun waits for its ssh before it ends.
  if (remote && !user_sets_ssh()) {
    p.env.emplace_back("OMPI_MCA_plm_rsh_args=-o BatchMode=yes -o ConnectTimeout=20");
    p.notes.push_back(
        "several hosts: ssh runs with -o BatchMode=yes -o ConnectTimeout=20 (it cannot ask for "
        "a password or a host key here; `ssh -o BatchMode=yes HOST true` checks a host)");
  }
  if (geteuid() == 0) {
    p.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    p.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    p.notes.push_back(
        "running as root: OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set for "
        "mpirun (Open MPI refuses root otherwise)");
  }
  p.argv.push_back(req.program);
  p.argv.insert(p.argv.end(), req.program_options.begin(), req.program_options.end());
  if (!req.db_path.empty()) p.argv.insert(p.argv.end(), {"--db", req.db_path});
  p.argv.push_back("run");
  if (req.resume > 0) p.argv.insert(p.argv.end(), {"--resume", std::to_string(req.resume)});
  if (!req.configs.empty()) p.argv.push_back(req.configs.front());
  // The config's backend when it asks for NCCL (GPUs), else Open MPI's.
  // (A resumed run without a config file: the stored config's.)
  std::string backend = "mpi";
  try {
    if (!req.configs.empty()) {
      if (train::load_run_config(req.configs.front(), req.overrides).distributed.backend == "nccl")
        backend = "nccl";
    } else if (req.resume > 0) {
      const std::string db = req.db_path.empty() ? default_store_path() : req.db_path;
      auto st = store::RunStore::open(db);
      if (st.has_run(req.resume) &&
          train::parse_run_config(st.get_run(req.resume, store::RunStore::Metrics::kNone).config,
                                  "the stored config", req.overrides)
                  .distributed.backend == "nccl")
        backend = "nccl";
    }
  } catch (const std::exception&) {  // the ranks report what is wrong with the config or store
  }
  std::vector<std::string> sets = {
      "distributed.backend=\"" + backend + "\"",
      "distributed.world_size=" + std::to_string(world_size < 0 ? nproc : world_size),
      "binding.mode=\"" + req.binding + "\""};
  if (req.fallback) sets.emplace_back("binding.fallback=true");
  sets.insert(sets.end(), req.overrides.begin(), req.overrides.end());
  for (const auto& s : sets)
    p.argv.insert(p.argv.end(), {"--set", s});
  if (remote)
    p.notes.push_back(
        "several hosts: every host needs this program, the config and the data "
        "at the same paths; rank 0 (the first host) writes the store");
  return p;
}

int spawn_ddp(const DdpLaunch& plan, int output_fd) {
  TB_CHECK(!plan.argv.empty(), "[launch] no program to run");
  // This process's environment, less the names the plan sets (a TB_LAUNCH_JOB inherited from
  // an outer job would otherwise come first, and be the one the ranks read).
  std::vector<std::string> env_strings;
  auto name_of = [](const std::string& e) { return e.substr(0, e.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const bool replaced = std::any_of(plan.env.begin(), plan.env.end(), [&](const std::string& v) {
      return name_of(v) == name_of(entry);
    });
    if (!replaced) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), plan.env.begin(), plan.env.end());
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = plan.argv;
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Not in the terminal's foreground group (below), mpirun would be stopped (SIGTTIN) reading
  // the terminal to pass it on to rank 0; no rank reads its input.
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (output_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, output_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, output_fd, STDERR_FILENO);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigset_t defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGPIPE, SIGCHLD})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // mpirun leads a process group of its own, so a signal reaches it once, from whoever started
  // it. In the caller's group, a Ctrl-C or a signal to the group (GNU timeout, kill -- -PGID)
  // reached it directly and again as passed on by the launcher, and Open MPI's mpirun takes a
  // second SIGINT/SIGTERM/SIGHUP as "quit at once": it exited leaving the ranks running. (The
  // ranks are in groups of their own anyway: mpirun puts each rank in one.)
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  // Its output still goes to the terminal, which, set to `stty tostop`, stops a writer outside
  // its foreground group with SIGTTOU: mpirun starts ignoring that signal (a disposition an exec
  // keeps), so it writes.
  struct sigaction ignore = {};
  struct sigaction ttou = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGTTOU, &ignore, &ttou);
  int pid = 0;
  const int rc =
      posix_spawnp(&pid, args.front().c_str(), &actions, &attr, argv.data(), envp.data());
  sigaction(SIGTTOU, &ttou, nullptr);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  TB_CHECK(rc == 0, "[launch] cannot start ", args.front(), ": ", std::strerror(rc),
           rc == ENOENT ? " (install Debian's openmpi-bin)" : "");
  return pid;
}

// `launch --ddp`: what each rank would refuse under mpirun's abort banner, said once before
// mpirun starts.
void check_ddp_start(const LaunchRequest& req) {
  if (req.resume == 0) {
    TB_CHECK(!req.configs.empty(), "[launch] give a run config");
    // The ranks start in this folder with this config and --set (the launcher's own settings,
    // backend, world size and binding, are valid by construction).
    train::RunConfig c = train::load_run_config(req.configs.front(), req.overrides);
    train::make_paths_absolute(c);
    // Ranks on other hosts: their devices, CPUs and files are theirs (the config alone is
    // checked here). Each rank places itself on its host (--binding, its local rank).
    const bool remote = !req.hosts.empty() || !req.hostfile.empty();
    detail::check_new_run(c, req.configs.front(), req.overrides,
                          {.here = !remote, .own_binding = false});
    return;
  }
  auto st = detail::existing_store(req.db_path);
  detail::require_run(st, req.resume);
  const store::RunDetails run = st.get_run(req.resume, store::RunStore::Metrics::kNone);
  detail::require_resumable(run, req.resume, "[launch]", st.recovery_error());
  // The config the ranks would continue with (the stored one and --set) against the
  // checkpoint they would read.
  train::RunConfig now = train::parse_run_config(
      run.config, "run " + std::to_string(req.resume) + "'s stored config", req.overrides);
  train::make_paths_absolute(now);
  const store::Checkpoint newest = detail::newest_checkpoint(
      st, req.resume, "[launch]",
      now.checkpoint.interval > 0
          ? "has no checkpoint to resume from"
          : "has no checkpoint to resume from (checkpoint.interval = 0 saves one only at the "
            "end; set checkpoint.interval = N to save every N steps, so that a run cut short "
            "can continue)");
  (void)train::check_resume_config(newest.path, train::checkpoint_config(newest.path), now);
}

std::vector<std::string> close_ddp_job(const std::string& db_path, const DdpLaunch& plan,
                                       bool stopped) {
  std::vector<std::string> lines;
  try {
    if (plan.job.empty() || !detail::store_exists(db_path)) return lines;
    store::StoreOptions options;
    options.recover_crashed = false;  // this job's run is closed here, with what happened
    auto st = store::RunStore::open(detail::store_path(db_path), options);
    // The job's run: the newest one whose events name this job (rank 0 recorded it on start).
    const std::string mark = std::string(kLaunchJobEvent) + plan.job;
    std::optional<store::RunSummary> mine;
    for (const store::RunSummary& r : st.list_runs()) {  // newest first
      for (const auto& e : st.events(r.id))
        if (e.text == mark) mine = r;
      if (mine) break;
    }
    if (!mine) return lines;  // rank 0 never started the run (its ranks said why)
    // A run still running lost rank 0 before it could close it.
    // Its writer, rank 0, must be gone from this host (mpirun killed by SIGKILL leaves ranks
    // running; a rank 0 on another host is left to the store's recovery).
    const store::RunDetails details = st.get_run(mine->id, store::RunStore::Metrics::kNone);
    store::ProcessIdentity writer;
    writer.host = details.writer_host;
    writer.pid = details.writer_pid.value_or(0);
    writer.start_time = details.writer_start_time.value_or(0);
    const bool writer_gone =
        details.writer_pid && writer.host == store::host_name() && !store::process_alive(writer);
    if (mine->status == store::RunStatus::kRunning && writer_gone) {
      const std::string last =
          mine->last_step ? " (last step " + std::to_string(*mine->last_step) + ")" : "";
      if (stopped)
        st.set_status(mine->id, store::RunStatus::kFailed,
                      "the job was stopped (a signal to mpirun or to launch --ddp) before rank "
                      "0, which writes the store, could record it; every committed step is "
                      "kept" +
                          last);
      else
        st.set_status(mine->id, store::RunStatus::kCrashed,
                      "rank 0, the process that writes the store, ended without closing the "
                      "run (killed, or out of memory); every committed step is kept" +
                          last);
      mine = st.get_run(mine->id, store::RunStore::Metrics::kNone).summary;
    }
    if (mine->status != store::RunStatus::kFailed && mine->status != store::RunStatus::kCrashed)
      return lines;
    const std::string id = std::to_string(mine->id);
    lines.push_back("run " + id + " " + std::string(store::to_string(mine->status)) + ": " +
                    mine->message);
    bool resumable = true;
    try {
      (void)detail::newest_checkpoint(st, mine->id, "", "");
    } catch (const std::exception&) {
      resumable = false;
    }
    const std::string db = db_path.empty() ? "" : "--db " + db_path + " ";
    lines.push_back(resumable
                        ? "continue it with: trainbench-cli " + db + "launch --ddp --resume " + id
                        : "run " + id +
                              " has no checkpoint to continue from (checkpoint.interval "
                              "= N saves one every N steps)");
  } catch (const std::exception&) {  // best effort: the job's own output said what failed
  }
  return lines;
}

int launch_ddp(const LaunchRequest& req,
               const std::function<void(int pid, const DdpLaunch& plan)>& on_started,
               std::vector<std::string>* after) {
  const DdpLaunch plan = plan_ddp_launch(req);
  check_ddp_start(req);
  TB_CHECK(!(req.stop_requested && req.stop_requested()),
           "[launch] stopped before mpirun started: no rank ran");
  const int pid = spawn_ddp(plan);
  if (on_started) on_started(pid, plan);
  const int rc = wait_for(pid, req.on_exited);
  if (rc != 0 && after != nullptr)
    *after = close_ddp_job(req.db_path, plan, req.stop_requested && req.stop_requested());
  return rc;
}

}  // namespace tb::api
