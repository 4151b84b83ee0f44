// TCP rendezvous for torchrun-style launches: POSIX sockets, poll() against one deadline.
#include "engine/dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "engine/dist/process_group.h"

namespace tb::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kHello = "trainbench-rendezvous";
constexpr int kVersion = 1;
constexpr std::size_t kMaxLine = 64 * 1024;

std::string errno_text(int e) {
  return std::strerror(e);
}

int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

struct AddrList {
  addrinfo* head = nullptr;
  ~AddrList() {
    if (head != nullptr) freeaddrinfo(head);
  }
};

// Resolves `node` (null: every interface, for a server). Returns gai's error text, "" on
// success.
std::string resolve(const char* node, int port, bool passive, AddrList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(node, service.c_str(), &hints, &out.head);
  return rc == 0 ? std::string() : std::string(gai_strerror(rc));
}

// Connects `fd` to `addr` within `deadline` (a non-blocking connect and poll: a peer that drops
// the handshake does not hold the caller past it). Returns "" or the error.
std::string connect_within(int fd, const addrinfo* addr, Clock::time_point deadline) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  std::string error;
  if (::connect(fd, addr->ai_addr, addr->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      error = errno_text(errno);
    } else {
      pollfd p{fd, POLLOUT, 0};
      int rc = 0;
      do {
        rc = poll(&p, 1, ms_left(deadline));
      } while (rc < 0 && errno == EINTR);
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (rc <= 0)
        error = rc == 0 ? "timed out" : errno_text(errno);
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0)
        error = errno_text(so_error != 0 ? so_error : errno);
    }
  }
  fcntl(fd, F_SETFL, flags);
  return error;
}

void write_all(int fd, const std::string& data, const std::string& who) {
  std::size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw DistError("[dist] rendezvous: sending to " + who + ": " + errno_text(errno), -1);
    at += static_cast<std::size_t>(n);
  }
}

// Reads until `buf` holds a line; returns it (without the newline). Throws on hang-up, on a line
// longer than kMaxLine and at the deadline.
std::string read_line(int fd, std::string& buf, Clock::time_point deadline, const std::string& who,
                      int culprit) {
  for (;;) {
    if (const auto nl = buf.find('\n'); nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    if (buf.size() > kMaxLine)
      throw DistError("[dist] rendezvous: " + who + " sent a line of over 64 KiB", culprit);
    if (Clock::now() >= deadline)
      throw DistError("[dist] rendezvous: timed out waiting for " + who, culprit);
    pollfd p{fd, POLLIN, 0};
    const int rc = poll(&p, 1, ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw DistError("[dist] rendezvous: poll: " + errno_text(errno), culprit);
    if (rc == 0) continue;
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0)
      throw DistError("[dist] rendezvous: " + who + " hung up" +
                          (n < 0 ? ": " + errno_text(errno) : std::string()),
                      culprit);
    buf.append(chunk, static_cast<std::size_t>(n));
  }
}

void check_line(const std::string& line) {
  TB_CHECK(line.find('\n') == std::string::npos, "[dist] rendezvous: a line with a newline");
}

}  // namespace

bool is_loopback_address(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// ---- rank 0 ------------------------------------------------------------------------------------

RendezvousServer::RendezvousServer(const std::string& address, int port, int world_size,
                                   Clock::time_point deadline)
    : port_(port),
      world_size_(world_size),
      address_(address),
      deadline_(deadline),
      fds_(static_cast<std::size_t>(world_size), -1),
      buf_(static_cast<std::size_t>(world_size)) {
  TB_CHECK(world_size >= 1, "[dist] rendezvous: world size ", world_size);
  TB_CHECK(port >= 0 && port <= 65535, "[dist] rendezvous: MASTER_PORT ", port,
           " is not a TCP port (0-65535)");
  AddrList addrs;
  const bool local = is_loopback_address(address);
  if (const std::string e = resolve(local ? address.c_str() : nullptr, port, true, addrs);
      !e.empty())
    throw DistError("[dist] rendezvous: cannot listen on " + where() + ": " + e, -1);
  std::string last_error = "no address";
  for (addrinfo* a = addrs.head; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = errno_text(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = errno_text(errno);
    ::close(fd);
  }
  if (listen_fd_ < 0)
    throw DistError("[dist] rendezvous: rank 0 cannot listen on " + where() + ": " + last_error +
                        " (is the port in use? MASTER_PORT must be free on rank 0's host)",
                    -1);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    if (bound.ss_family == AF_INET)
      port_ = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    else if (bound.ss_family == AF_INET6)
      port_ = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
}

RendezvousServer::~RendezvousServer() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string RendezvousServer::where() const {
  return address_ + ":" + std::to_string(port_);
}

void RendezvousServer::gather() {
  auto missing = [&] {
    std::vector<int> m;
    for (int r = 1; r < world_size_; ++r)
      if (fds_[static_cast<std::size_t>(r)] < 0) m.push_back(r);
    return m;
  };
  for (std::vector<int> left = missing(); !left.empty(); left = missing()) {
    if (Clock::now() >= deadline_) {
      std::ostringstream os;
      os << "[dist] rendezvous on " << where() << ": rank" << (left.size() > 1 ? "s" : "");
      for (std::size_t i = 0; i < left.size(); ++i)
        os << (i ? ", " : " ") << left[i];
      os << " of " << world_size_ << " did not connect before the deadline (is every rank "
         << "started, with MASTER_ADDR/MASTER_PORT pointing at rank 0?)";
      throw DistError(os.str(), left.front());
    }
    pollfd p{listen_fd_, POLLIN, 0};
    const int rc = poll(&p, 1, ms_left(deadline_));
    if (rc <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // The hello has a short deadline of its own: a stray connection must not hold the others.
    std::string pending;
    std::string refusal;
    int rank = -1;
    try {
      const auto hello_deadline = std::min(deadline_, Clock::now() + std::chrono::seconds(10));
      std::istringstream in(read_line(fd, pending, hello_deadline, "a connecting rank", -1));
      std::string magic;
      int version = 0;
      int size = 0;
      if (!(in >> magic >> version >> rank >> size) || magic != kHello) {
        refusal = "not a TrainBench rendezvous hello";
      } else if (version != kVersion) {
        refusal = "rendezvous version " + std::to_string(version) + ", rank 0 speaks " +
                  std::to_string(kVersion) + " (the same trainbench on every rank?)";
      } else if (size != world_size_) {
        refusal = "rank " + std::to_string(rank) + " says WORLD_SIZE=" + std::to_string(size) +
                  ", rank 0 has WORLD_SIZE=" + std::to_string(world_size_);
      } else if (rank < 1 || rank >= world_size_) {
        refusal =
            "RANK=" + std::to_string(rank) + " is not in 1.." + std::to_string(world_size_ - 1);
      } else if (fds_[static_cast<std::size_t>(rank)] >= 0) {
        refusal = "RANK=" + std::to_string(rank) + " is already taken by another process";
      }
    } catch (const DistError& e) {
      refusal = e.what();
    }
    if (!refusal.empty()) {
      try {
        write_all(fd, "error: " + refusal + "\n", "a refused rank");
      } catch (const DistError&) {  // it is gone already
      }
      ::close(fd);
      continue;
    }
    fds_[static_cast<std::size_t>(rank)] = fd;
    buf_[static_cast<std::size_t>(rank)] = pending;
  }
}

void RendezvousServer::send(int rank, const std::string& line) {
  check_line(line);
  TB_CHECK(rank >= 1 && rank < world_size_ && fds_[static_cast<std::size_t>(rank)] >= 0,
           "[dist] rendezvous: rank ", rank, " is not connected");
  write_all(fds_[static_cast<std::size_t>(rank)], line + "\n", "rank " + std::to_string(rank));
}

std::string RendezvousServer::receive(int rank) {
  TB_CHECK(rank >= 1 && rank < world_size_ && fds_[static_cast<std::size_t>(rank)] >= 0,
           "[dist] rendezvous: rank ", rank, " is not connected");
  return read_line(fds_[static_cast<std::size_t>(rank)], buf_[static_cast<std::size_t>(rank)],
                   deadline_, "rank " + std::to_string(rank), rank);
}

void RendezvousServer::fail_all(const std::string& reason) noexcept {
  std::string line = "error: " + reason;
  std::replace(line.begin(), line.end(), '\n', ' ');
  for (std::size_t r = 1; r < fds_.size(); ++r) {
    if (fds_[r] < 0) continue;
    try {
      write_all(fds_[r], line + "\n", "rank " + std::to_string(r));
    } catch (const std::exception&) {  // it is gone
    }
  }
}

// ---- the other ranks ---------------------------------------------------------------------------

RendezvousClient::RendezvousClient(const std::string& address, int port, int rank, int world_size,
                                   Clock::time_point deadline)
    : address_(address), port_(port), deadline_(deadline) {
  TB_CHECK(port >= 1 && port <= 65535, "[dist] rendezvous: MASTER_PORT ", port,
           " is not a TCP port (1-65535)");
  std::string last_error;
  auto pause = std::chrono::milliseconds(20);
  while (fd_ < 0) {
    // Rank 0 may not listen yet, or its name not resolve yet (a container still starting):
    // try again until the deadline, backing off to half a second.
    AddrList addrs;
    last_error = resolve(address.c_str(), port, false, addrs);
    for (addrinfo* a = addrs.head; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_error = errno_text(errno);
        continue;
      }
      last_error = connect_within(fd, a, deadline_);
      if (last_error.empty())
        fd_ = fd;
      else
        ::close(fd);
    }
    if (fd_ >= 0) break;
    if (Clock::now() + pause >= deadline_)
      throw DistError("[dist] rendezvous: rank " + std::to_string(rank) +
                          " could not reach rank 0 at " + where() +
                          " before the deadline: " + last_error,
                      0);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  try {
    send(std::string(kHello) + " " + std::to_string(kVersion) + " " + std::to_string(rank) + " " +
         std::to_string(world_size));
  } catch (...) {
    ::close(fd_);  // the destructor does not run for a constructor that throws
    fd_ = -1;
    throw;
  }
}

RendezvousClient::~RendezvousClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RendezvousClient::where() const {
  return address_ + ":" + std::to_string(port_);
}

void RendezvousClient::send(const std::string& line) {
  check_line(line);
  write_all(fd_, line + "\n", "rank 0 at " + where());
}

std::string RendezvousClient::receive() {
  std::string line = read_line(fd_, buf_, deadline_, "rank 0 at " + where(), 0);
  if (line.rfind("error: ", 0) == 0)
    throw DistError("[dist] rendezvous: rank 0 at " + where() + " says: " + line.substr(7), 0);
  return line;
}

}  // namespace tb::dist
