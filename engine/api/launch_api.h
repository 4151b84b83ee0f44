// Facade for launching runs as separate processes bound to CPU slots (`trainbench-cli launch`):
// N processes, process k bound to slot k of N by a parent-side scoped affinity, as in PyTorch
// PR 161183's torchrun NUMA binding (save the calling thread's mask, set the slot's with
// sched_setaffinity(2), spawn, restore — also on failure), so the
// child starts on its slot's CPUs; the child's run applies the same binding to its own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tb::api {

/// What to launch.
struct LaunchRequest {
  std::string program;               ///< the trainbench-cli executable to run
  std::vector<std::string> configs;  ///< run configs; process k runs configs[k % size]
  /// Processes (= slots), >= 1; for plan_ddp_launch with `resume`, 0 = the stored run's ranks.
  int nproc = 1;
  std::string binding = "none";  ///< none, node, socket, exclusive, core-complex
  bool fallback = false;         ///< an unsatisfiable binding: unbound + warning
  std::string db_path;           ///< the store every process writes ("" = default)
  /// Program options every process gets before its command: the launching command's own
  /// (e.g. "--threads", "2", "--gemm-backend", "openblas"), which a child would not know.
  std::vector<std::string> program_options;
  std::vector<std::string> overrides;  ///< "key.path=value", for every process
  bool ddp = false;                    ///< one data-parallel run over nproc ranks (mpirun)
  std::vector<std::string> hosts;      ///< ddp: "host" or "host:slots" (none = this machine)
  std::string hostfile;                ///< ddp: an Open MPI hostfile instead of hosts
  std::string mpirun = "mpirun";       ///< ddp: the launcher program
  std::int64_t resume = 0;             ///< ddp: continue this stored run (0 = a new run)
  /// Not ddp: process k continues stored run resume_runs[k] from its newest checkpoint
  /// (`run --resume ID`) instead of starting configs[k % size], where given and > 0.
  std::vector<std::int64_t> resume_runs;
  /// Not ddp: more `run` options for process k (`--sweep-trial 3:7`, `--stop-at 200`).
  std::vector<std::vector<std::string>> run_args;
  /// Not ddp: process k's stdout and stderr go to log_files[k] (appended; "" or absent: this
  /// process's).
  std::vector<std::string> log_files;
  /// Not ddp: where given, each process without a log file writes its stdout and stderr into a
  /// pipe, and launch_runs hands on every line (without its end; a carriage return also ends one)
  /// with the process's slot while it waits, so the output of several runs can be told apart.
  std::function<void(int slot, const std::string& line)> on_output;
  /// Not ddp: asked before each process after the first is started; once it says true, no
  /// further process starts (those already started are waited for). A stop asked for while a
  /// group starts (a sweep's Ctrl-C) would otherwise start processes only to signal them.
  /// ddp: whether the job was stopped on purpose (a signal passed on to mpirun), asked once it
  /// has failed.
  std::function<bool()> stop_requested;
  /// Each process started (ddp: mpirun), once it has ended and before it is reaped: until then
  /// its pid cannot be given to another process. A signal handler that passes signals on to the
  /// pid forgets it here, so a late signal never reaches a stranger that was given the pid.
  std::function<void(int pid)> on_exited;
};

/// The environment variable naming a data-parallel job to its ranks, and the start of the event
/// rank 0 records with it ("started by data-parallel job JOB"): after the job its launcher finds
/// its own run by it.
inline constexpr const char* kLaunchJobVariable = "TB_LAUNCH_JOB";
inline constexpr const char* kLaunchJobEvent = "started by data-parallel job ";

/// A data-parallel launch: the mpirun command line and what the launcher set up for it.
struct DdpLaunch {
  std::vector<std::string> argv;   ///< mpirun and its arguments
  std::vector<std::string> env;    ///< NAME=value added to mpirun's environment
  std::vector<std::string> notes;  ///< what was set and why (running as root, loopback only)
  std::string job;  ///< this launch's name (kLaunchJobVariable in env): host, pid, a count
};

/// The mpirun command of a --ddp request (no process is started): `nproc` ranks of
/// `program [--db DB] run CONFIG|--resume RUN [CONFIG] --set distributed.backend="mpi" --set
/// distributed.world_size=N --set binding.mode=MODE ...`, mpirun's own binding off (each rank
/// binds itself to its local slot), Open MPI's TCP traffic on loopback unless hosts are given,
/// and the settings Open MPI needs to run as root when the caller is root.
DdpLaunch plan_ddp_launch(const LaunchRequest& request);
/// Starts `plan`'s mpirun: this process's environment plus plan.env, no blocked signals and
/// default dispositions for the ones the ranks handle (a GUI thread may block some; mpirun must
/// forward SIGUSR1/SIGUSR2 to the ranks' handlers), its stdout and stderr on `output_fd` (-1: this
/// process's), its input /dev/null, in a process group of its own: the terminal's Ctrl-C and
/// signals to the caller's group do not reach it, and the caller passes on what it should get
/// (once: Open MPI's mpirun takes a second SIGINT or SIGTERM as "quit at once, leaving the
/// ranks"). Returns its pid; a failed start is a tb::ValueError naming the program.
int spawn_ddp(const DdpLaunch& plan, int output_fd = -1);
/// `launch --ddp`: what each rank would refuse, as a tb::ValueError before mpirun starts. A new
/// run: its config with `request.overrides`, checked as `run` checks it (keys, files, device). A
/// resume: a run finished or running elsewhere, no checkpoint, a config (stored, with
/// `request.overrides`) that differs from its newest checkpoint's.
void check_ddp_start(const LaunchRequest& request);

/// After a failed job (`plan.job`, over the store at `db_path`): its run, if rank 0 (which
/// writes the store) ended before it could close it, is closed — failed when `stopped` (the job
/// was stopped on purpose, a signal), else crashed — saying so. Returns, when the job's run
/// ended failed or crashed, its status and message and the command that continues it (or that
/// it has no checkpoint). Best effort: empty when the store cannot be read.
std::vector<std::string> close_ddp_job(const std::string& db_path, const DdpLaunch& plan,
                                       bool stopped);

/// Runs plan_ddp_launch's command, printing nothing itself; returns mpirun's exit status
/// (128 + signal when it was killed). With `request.resume`, what every rank would refuse is a
/// tb::ValueError before mpirun starts: a run finished or running elsewhere, no checkpoint, a
/// config (stored, with `overrides`) that differs from its newest checkpoint's.
/// `on_started` gets mpirun's pid and command line. When the
/// job fails, a run it left "running" (rank 0, which writes the store, ended before it could
/// say why) is closed: failed when `request.stop_requested` says the job was stopped (a
/// signal), else crashed, with that said; and `after` (if given) gets, per data-parallel run of
/// the store that ended failed or crashed while the job ran, its status and message and the
/// command that continues it from its newest checkpoint.
int launch_ddp(const LaunchRequest& request,
               const std::function<void(int pid, const DdpLaunch& plan)>& on_started,
               std::vector<std::string>* after = nullptr);

/// One launched process.
struct LaunchedProcess {
  int slot = 0;              ///< its slot
  int pid = 0;               ///< process id
  std::string config;        ///< the config it runs
  std::string cpus;          ///< the slot's CPUs ("" = unbound)
  std::string child_mask;    ///< Cpus_allowed_list of the child right after the spawn
  std::string warning;       ///< why the slot is unbound after a failure (fallback)
  std::string command_line;  ///< what was run (numactl-equivalent binding shown separately)
  int exit_code = -1;        ///< after waiting: the exit status (128 + signal when killed)
};

/// Plans the slots (errors name the binding problem unless `fallback`), spawns the processes,
/// calls `on_started` for each right after its spawn, relays their output to
/// `request.on_output` when given, waits for all and returns them with their exit codes (fewer
/// than nproc when `request.stop_requested` said stop before the rest started). Throws
/// tb::ValueError for a bad request or when a spawn fails (processes already started are still
/// waited for).
std::vector<LaunchedProcess> launch_runs(
    const LaunchRequest& request, const std::function<void(const LaunchedProcess&)>& on_started);

/// The Cpus_allowed_list line of /proc/<pid>/status ("" when unreadable).
std::string process_cpus_allowed(int pid);

}  // namespace tb::api
