#include "socket.h"

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
#include <thread>

#include "kiln/runtime/error.h"

namespace kiln::distributed::detail {
namespace {

int millis_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 60'000 ? 60'000 : static_cast<int>(left.count());
}

std::string errno_text() {
  return std::strerror(errno);
}

// Resolves host (a name or a numeric IPv4/IPv6 address) to its first stream address.
addrinfo* resolve(const std::string& host, int port, bool passive, const char* op) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  KILN_CHECK(rc == 0 && result, op, "cannot resolve the address '", host, "': ", gai_strerror(rc));
  return result;
}

void tune_stream(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Room for a reduce-scatter piece in flight each way, so that a step's send and receive
  // rarely wait for the peer to drain the kernel's buffer (the kernel caps it at its limits).
  int bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

[[noreturn]] void timed_out(const char* op, const char* what, const std::string& peer) {
  fail(op, "timed out ", what, " ", peer,
       " (it may have failed, exited, or be waiting in another collective)");
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Socket Socket::listen(const std::string& host, int port, const char* op) {
  Socket s;
  int rc = -1;
  if (host.empty()) {
    // Every interface, IPv6 and IPv4 alike (a dual-stack socket), so that a peer that reaches
    // this host by either address family gets through; IPv4 alone where IPv6 is off.
    s = Socket(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.valid()) {
      int zero = 0, one = 1;
      setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in6 any{};
      any.sin6_family = AF_INET6;
      any.sin6_addr = in6addr_any;
      any.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&any), sizeof(any));
      if (rc != 0 && errno == EADDRINUSE) {
        fail(op, "cannot listen on *:", port, ": ", errno_text());
      }
    }
  }
  if (rc != 0) {
    addrinfo* info = resolve(host, port, /*passive=*/true, op);
    s = Socket(::socket(info->ai_family, info->ai_socktype | SOCK_CLOEXEC, info->ai_protocol));
    if (!s.valid()) {
      freeaddrinfo(info);
      fail(op, "cannot create a socket: ", errno_text());
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    rc = ::bind(s.fd(), info->ai_addr, info->ai_addrlen);
    freeaddrinfo(info);
  }
  KILN_CHECK(rc == 0, op, "cannot listen on ", host.empty() ? "*" : host, ":", port, ": ",
             errno_text());
  KILN_CHECK(::listen(s.fd(), 128) == 0, op, "listen failed: ", errno_text());
  return s;
}

namespace {

// One connection attempt to `address` that gives up at `deadline`: a non-blocking connect
// waited for with poll (a blocking one would wait for the kernel's own, minutes-long timeout
// when the peer's packets are dropped). Returns an invalid socket and sets `error` on failure.
Socket try_connect(const addrinfo& address, Clock::time_point deadline, std::string& error) {
  Socket s(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    address.ai_protocol));
  if (!s.valid()) {
    error = errno_text();
    return s;
  }
  if (::connect(s.fd(), address.ai_addr, address.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      error = errno_text();
      return Socket();
    }
    for (;;) {
      pollfd p{s.fd(), POLLOUT, 0};
      const int rc = ::poll(&p, 1, millis_until(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) {
        if (rc == 0 && Clock::now() < deadline) continue;
        error = rc == 0 ? "timed out" : errno_text();
        return Socket();
      }
      break;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      error = std::strerror(so_error);
      return Socket();
    }
  }
  const int flags = fcntl(s.fd(), F_GETFL);
  fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
  tune_stream(s.fd());
  return s;
}

}  // namespace

Socket Socket::connect(const std::string& host, int port, Clock::time_point deadline,
                       const char* op, const std::function<void()>& check) {
  std::string last_error;
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    // Every address the name resolves to (IPv6 and IPv4), in the resolver's order.
    addrinfo* info = resolve(host, port, /*passive=*/false, op);
    for (addrinfo* a = info; a; a = a->ai_next) {
      Socket s = try_connect(*a, deadline, last_error);
      if (s.valid()) {
        freeaddrinfo(info);
        return s;
      }
    }
    freeaddrinfo(info);
    // Nobody listens yet (the peer is still starting): retry until the deadline.
    if (Clock::now() + pause > deadline) {
      fail(op, "cannot connect to ", host, ":", port, " before the timeout: ", last_error);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kCheckInterval);
    if (check) check();
  }
}

Socket Socket::accept(Clock::time_point deadline, const char* op,
                      const std::function<void()>& check) const {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int wait = check ? std::min<int>(millis_until(deadline), int(kCheckInterval.count()))
                           : millis_until(deadline);
    const int rc = ::poll(&p, 1, wait);
    if (rc < 0 && errno == EINTR) continue;
    KILN_CHECK(rc >= 0, op, "poll failed: ", errno_text());
    if (rc == 0) {
      if (Clock::now() >= deadline) timed_out(op, "waiting for a connection from", "a peer");
      if (check) check();
      continue;
    }
    Socket s(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!s.valid() && (errno == EINTR || errno == EAGAIN)) continue;
    KILN_CHECK(s.valid(), op, "accept failed: ", errno_text());
    tune_stream(s.fd());
    return s;
  }
}

int Socket::local_port() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

std::string Socket::local_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  } else {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  }
  return text;
}

void Socket::send_all(const void* data, size_t n, Clock::time_point deadline, const char* op,
                      const std::string& peer) const {
  send_recv(*this, data, n, peer, *this, nullptr, 0, peer, deadline, op);
}

void Socket::recv_all(void* data, size_t n, Clock::time_point deadline, const char* op,
                      const std::string& peer) const {
  send_recv(*this, nullptr, 0, peer, *this, data, n, peer, deadline, op);
}

void send_recv(const Socket& to, const void* send_data, size_t send_n, const std::string& to_name,
               const Socket& from, void* recv_data, size_t recv_n, const std::string& from_name,
               Clock::time_point deadline, const char* op) {
  auto* out = static_cast<const char*>(send_data);
  auto* in = static_cast<char*>(recv_data);
  size_t sent = 0, received = 0;
  while (sent < send_n || received < recv_n) {
    pollfd fds[2];
    int count = 0, send_slot = -1, recv_slot = -1;
    if (sent < send_n) {
      KILN_CHECK(to.valid(), op, "the connection to ", to_name, " is closed");
      send_slot = count;
      fds[count++] = {to.fd(), POLLOUT, 0};
    }
    if (received < recv_n) {
      KILN_CHECK(from.valid(), op, "the connection to ", from_name, " is closed");
      recv_slot = count;
      fds[count++] = {from.fd(), POLLIN, 0};
    }
    const int rc = ::poll(fds, count, millis_until(deadline));
    if (rc < 0 && errno == EINTR) continue;
    KILN_CHECK(rc >= 0, op, "poll failed: ", errno_text());
    if (rc == 0) {
      if (Clock::now() < deadline) continue;
      if (recv_slot >= 0) timed_out(op, "waiting for data from", from_name);
      timed_out(op, "sending to", to_name);
    }
    if (send_slot >= 0 && fds[send_slot].revents) {
      const ssize_t k = ::send(to.fd(), out + sent, send_n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += static_cast<size_t>(k);
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail(op, "lost the connection to ", to_name, " (", errno_text(), "): it failed or exited");
      }
    }
    if (recv_slot >= 0 && fds[recv_slot].revents) {
      const ssize_t k = ::recv(from.fd(), in + received, recv_n - received, MSG_DONTWAIT);
      if (k > 0) {
        received += static_cast<size_t>(k);
      } else if (k == 0) {
        fail(op, from_name, " closed the connection: it failed or exited");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail(op, "lost the connection to ", from_name, " (", errno_text(),
             "): it failed or exited");
      }
    }
  }
}

}  // namespace kiln::distributed::detail
