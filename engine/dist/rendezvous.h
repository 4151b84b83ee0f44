// The rendezvous of ranks started by a torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) rather than by mpirun: rank 0 listens on MASTER_ADDR:MASTER_PORT, every other
// rank connects to it, and they exchange the few lines Open MPI needs to join the processes into
// one communicator (the address of an ompi-server, an MPI port name). It carries no tensor
// data — the collectives run over Open MPI — as PyTorch's TCPStore only bootstraps its process
// groups (torch/csrc/distributed/c10d/TCPStore.hpp).
//
// The protocol is lines of text. A rank other than 0 opens with
//   "trainbench-rendezvous 1 RANK WORLD_SIZE\n"
// and rank 0 checks the version, the world size, that the rank is in range and not taken. After
// that each side sends and receives lines in the order the caller agrees on. Every wait has the
// deadline given at construction; a rank that does not come, or goes, is named in the error.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tb::dist {

/// "localhost", 127.x.x.x or ::1.
bool is_loopback_address(const std::string& address);

/// Rank 0's side: listens on `port` — of `address` when it is a loopback address (one machine:
/// nothing listens beyond loopback), else on every interface, as PyTorch's TCPStore does (a
/// host name may resolve to 127.0.1.1 on the host itself while the others reach it by another
/// address).
class RendezvousServer {
 public:
  using Clock = std::chrono::steady_clock;
  /// Throws tb::DistError when the address does not resolve or the port cannot be bound
  /// ("is it in use?").
  RendezvousServer(const std::string& address, int port, int world_size,
                   Clock::time_point deadline);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  /// The port it listens on (the one asked for, or the kernel's pick for port 0).
  int port() const { return port_; }
  /// Waits until ranks 1..world_size-1 have all connected and said hello. A connection whose
  /// hello is wrong (another program, another world size, a rank out of range or taken) is
  /// refused with the reason and does not count. At the deadline: DistError listing the ranks
  /// that did not come.
  void gather();
  /// Sends one line (no newline inside) to `rank`.
  void send(int rank, const std::string& line);
  /// The next line from `rank` (waits until the deadline; DistError if it hangs up).
  std::string receive(int rank);
  /// Sends "error: `reason`" to every connected rank (best effort), so that they fail with
  /// rank 0's reason rather than a hang-up.
  void fail_all(const std::string& reason) noexcept;

 private:
  std::string where() const;
  int listen_fd_ = -1;
  int port_ = 0;
  int world_size_;
  std::string address_;
  Clock::time_point deadline_;
  std::vector<int> fds_;          // by rank; -1 = not connected (rank 0 is this process)
  std::vector<std::string> buf_;  // bytes read past the last line, by rank
};

/// A rank other than 0: connects to rank 0 (retrying until the deadline while rank 0 is not yet
/// listening) and says hello.
class RendezvousClient {
 public:
  using Clock = std::chrono::steady_clock;
  RendezvousClient(const std::string& address, int port, int rank, int world_size,
                   Clock::time_point deadline);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  void send(const std::string& line);
  /// The next line from rank 0. A line "error: ..." from rank 0 (it refused this rank, or it
  /// failed) is thrown as a DistError with that text.
  std::string receive();

 private:
  std::string where() const;
  int fd_ = -1;
  std::string address_;
  int port_;
  Clock::time_point deadline_;
  std::string buf_;
};

}  // namespace tb::dist
