#pragma once
// TCP sockets for the process group's store and ring: blocking file descriptors driven by poll()
// so every wait has a deadline, and a send and a receive can progress together (a ring step sends
// to the next rank while receiving from the previous one; two blocking calls would deadlock once
// both kernels' buffers filled).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace kiln::distributed::detail {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();
  // Wakes whoever blocks on this socket here or at the peer (reads see end of stream).
  void shutdown();

  // A listening socket on `host` (empty: every interface) and `port` (0: one the kernel picks).
  static Socket listen(const std::string& host, int port, const char* op);
  // Connects to host:port, retrying while nobody listens yet, until `deadline`. `check` (if set)
  // runs between attempts and may throw to give up early.
  static Socket connect(const std::string& host, int port, Clock::time_point deadline,
                        const char* op, const std::function<void()>& check = {});
  // Waits for one connection until `deadline`; `check` (if set) runs every kCheckInterval of the
  // wait and may throw to give up early.
  Socket accept(Clock::time_point deadline, const char* op,
                const std::function<void()>& check = {}) const;
  static constexpr std::chrono::milliseconds kCheckInterval{200};

  int local_port() const;
  // The local address this connected socket uses: the interface that reaches its peer.
  std::string local_address() const;

  // Send or receive exactly n bytes before `deadline`; `peer` names the other end in errors.
  void send_all(const void* data, size_t n, Clock::time_point deadline, const char* op,
                const std::string& peer) const;
  void recv_all(void* data, size_t n, Clock::time_point deadline, const char* op,
                const std::string& peer) const;

 private:
  int fd_ = -1;
};

// Sends `send_n` bytes on `to` while receiving `recv_n` bytes from `from` (either may be 0).
void send_recv(const Socket& to, const void* send_data, size_t send_n, const std::string& to_name,
               const Socket& from, void* recv_data, size_t recv_n, const std::string& from_name,
               Clock::time_point deadline, const char* op);

}  // namespace kiln::distributed::detail
