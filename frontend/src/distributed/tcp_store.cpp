// TCPStore: the server is one thread polling its clients. Requests are
// [u8 command][u32 key length][key] then, for set, [u64 length][value] and, for add, [i64 delta];
// a get whose key is missing is parked until a set provides it. Every length read from the wire
// is bounds-checked. The server never blocks on one client: it reads what each socket holds into
// that client's buffer and answers the requests completed there, and queues replies, sending what
// each socket takes; so a client that stalls mid-request, or stops reading a large value, holds up
// no one else.

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/distributed/store.h"
#include "kiln/runtime/error.h"
#include "socket.h"

namespace kiln::distributed {

using detail::Clock;
using detail::Socket;

namespace {

enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
constexpr uint32_t kMaxKey = 4096;
constexpr uint64_t kMaxValue = uint64_t{1} << 30;
// Bytes read from one connection per wake-up: a client streaming a large value takes turns with
// the others instead of keeping the thread for the whole transfer.
constexpr size_t kReadPerTurn = size_t{1} << 20;
// A buffer that held a large value and is empty again gives its memory back above this.
constexpr size_t kKeptCapacity = size_t{1} << 20;

template <typename T>
T read_at(const std::vector<uint8_t>& bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

}  // namespace

struct TCPStore::Server {
  // One client connection: the bytes received and not yet parsed, the replies not yet sent.
  struct Connection {
    Socket socket;
    std::vector<uint8_t> in, out;
    size_t out_at = 0;    // bytes of `out` already sent
    bool ended = false;   // the client closed its side: answer what arrived, send, then drop
    bool closed = false;  // to be dropped
  };

  Socket listener;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::map<std::string, std::vector<uint8_t>> values;
  std::map<int, Connection> clients;        // by file descriptor
  std::multimap<std::string, int> waiting;  // key -> the fd of a client whose get waits for it

  void run() {
    for (;;) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listener.fd(), POLLIN, 0}};
      for (const auto& [fd, c] : clients) {
        const bool pending = c.out_at < c.out.size();
        fds.push_back({fd, short((c.ended ? 0 : POLLIN) | (pending ? POLLOUT : 0)), 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents) return;
      if (fds[1].revents) {
        try {
          // poll() reported a pending connection: accept() returns at once (the deadline only
          // bounds the case where the client already gave up).
          Socket s = listener.accept(Clock::now() + std::chrono::seconds(1), "TCPStore");
          const int fd = s.fd();
          clients[fd].socket = std::move(s);
        } catch (const Error&) {
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = clients.find(fds[i].fd);
        if (it == clients.end()) continue;
        Connection& c = it->second;
        try {
          if (fds[i].revents & (POLLOUT | POLLHUP | POLLERR)) flush(c);
          if (!c.closed && !c.ended && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
            receive(c);
            serve(c);
          }
          // A client that closed its side is dropped once its replies are sent.
          if (c.ended && c.out_at >= c.out.size()) c.closed = true;
        } catch (const std::exception&) {
          // A malformed request (the connection is out of step) or a value this process cannot
          // hold: that client is dropped, the others are served on.
          c.closed = true;
        }
      }
      for (auto it = clients.begin(); it != clients.end();) {
        if (!it->second.closed) {
          ++it;
          continue;
        }
        const int fd = it->first;
        std::erase_if(waiting, [&](const auto& w) { return w.second == fd; });
        it = clients.erase(it);
      }
    }
  }

  // What the socket holds now (up to kReadPerTurn), without waiting.
  static void receive(Connection& c) {
    uint8_t buffer[65536];
    for (size_t got = 0; got < kReadPerTurn;) {
      const ssize_t n = ::recv(c.socket.fd(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) {
        c.in.insert(c.in.end(), buffer, buffer + n);
        got += size_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n == 0)
        c.ended = true;  // requests that arrived before the end are still answered
      else
        c.closed = true;
      return;
    }
  }

  // As much of the queued replies as the socket takes now.
  static void flush(Connection& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t n = ::send(c.socket.fd(), c.out.data() + c.out_at, c.out.size() - c.out_at,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c.out_at += size_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.closed = true;
      return;
    }
    c.out.clear();
    c.out_at = 0;
    if (c.out.capacity() > kKeptCapacity) c.out.shrink_to_fit();
  }

  static void reply(Connection& c, const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    c.out.insert(c.out.end(), p, p + n);
  }

  void reply_value(Connection& c, const std::string& key) {
    const auto& v = values[key];
    const uint64_t size = v.size();
    reply(c, &size, 8);
    reply(c, v.data(), v.size());
    flush(c);
  }

  // Answers every request complete in c.in; a partial one stays for the next bytes.
  void serve(Connection& c) {
    size_t at = 0;
    while (!c.closed) {
      const size_t left = c.in.size() - at;
      if (left < 5) break;
      const uint8_t command = c.in[at];
      const uint32_t key_size = read_at<uint32_t>(c.in, at + 1);
      KILN_CHECK(key_size <= kMaxKey, "TCPStore", "key of ", key_size,
                 " bytes, expected <= ", kMaxKey);
      KILN_CHECK(command == kSet || command == kGet || command == kAdd, "TCPStore",
                 "unknown command ", int(command));
      size_t need = 5 + size_t(key_size) + (command == kGet ? 0 : 8);
      if (left < need) break;
      uint64_t value_size = 0;
      if (command == kSet) {
        value_size = read_at<uint64_t>(c.in, at + 5 + key_size);
        KILN_CHECK(value_size <= kMaxValue, "TCPStore", "value of ", value_size,
                   " bytes, expected <= ", kMaxValue);
        need += value_size;
        if (left < need) {
          c.in.reserve(at + need);  // one allocation for the value still arriving
          break;
        }
      }
      const std::string key(reinterpret_cast<const char*>(c.in.data() + at + 5), key_size);
      const size_t body = at + 5 + key_size;
      if (command == kSet) {
        values[key].assign(c.in.begin() + body + 8, c.in.begin() + body + 8 + value_size);
        const uint8_t ok = 1;
        reply(c, &ok, 1);
        flush(c);
        auto [first, last] = waiting.equal_range(key);
        for (auto it = first; it != last; ++it) {
          auto w = clients.find(it->second);
          if (w != clients.end() && !w->second.closed) reply_value(w->second, key);
        }
        waiting.erase(first, last);
      } else if (command == kGet) {
        if (values.count(key)) {
          reply_value(c, key);
        } else {
          waiting.emplace(key, c.socket.fd());
        }
      } else {
        const int64_t delta = read_at<int64_t>(c.in, body);
        auto& v = values[key];
        int64_t current = 0;
        if (v.size() == 8) std::memcpy(&current, v.data(), 8);
        current += delta;
        v.resize(8);
        std::memcpy(v.data(), &current, 8);
        reply(c, &current, 8);
        flush(c);
      }
      at += need;
    }
    c.in.erase(c.in.begin(), c.in.begin() + at);
    if (c.in.empty() && c.in.capacity() > kKeptCapacity) c.in.shrink_to_fit();
  }
};

struct TCPStore::Client {
  Socket socket;
  std::mutex mu;  // one request at a time on the connection

  // A request that failed midway (a timeout) leaves the connection out of step with the server:
  // it is closed, and later requests say so.
  template <typename F>
  auto request(F&& f) {
    std::lock_guard<std::mutex> lock(mu);
    KILN_CHECK(socket.valid(), "TCPStore", "the connection to the store's server was closed by an ",
               "earlier error");
    try {
      return f(socket);
    } catch (...) {
      socket.close();
      throw;
    }
  }
};

TCPStore::TCPStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  KILN_CHECK(port >= 0 && port <= 65535, "TCPStore", "expected a port in [0, 65535], got ", port);
  KILN_CHECK(is_server || port > 0, "TCPStore", "a client needs the server's port, got 0");
  port_ = port;
  if (is_server) {
    server_ = std::make_unique<Server>();
    server_->listener = Socket::listen("", port, "TCPStore");
    port_ = server_->listener.local_port();
    KILN_CHECK(::pipe2(server_->wake, O_CLOEXEC) == 0, "TCPStore", "pipe failed");
    server_->thread = std::thread([s = server_.get()] { s->run(); });
    if (host.empty()) host = "127.0.0.1";
  }
  client_ = std::make_unique<Client>();
  try {
    client_->socket = Socket::connect(host, port_, Clock::now() + timeout_, "TCPStore");
  } catch (...) {
    stop_server();  // a joinable thread must not outlive the constructor
    throw;
  }
}

void TCPStore::stop_server() {
  if (!server_ || !server_->thread.joinable()) return;
  const char byte = 0;
  [[maybe_unused]] auto n = ::write(server_->wake[1], &byte, 1);
  server_->thread.join();
  ::close(server_->wake[0]);
  ::close(server_->wake[1]);
}

TCPStore::~TCPStore() {
  client_.reset();
  stop_server();
}

std::string TCPStore::local_address() const {
  return client_->socket.local_address();
}

namespace {
void check_key(const std::string& key) {
  KILN_CHECK(key.size() <= kMaxKey, "TCPStore", "key of ", key.size(),
             " bytes, expected <= ", kMaxKey);
}

void send_key(const Socket& s, uint8_t command, const std::string& key,
              Clock::time_point deadline) {
  const uint32_t size = static_cast<uint32_t>(key.size());
  s.send_all(&command, 1, deadline, "TCPStore", "the store's server");
  s.send_all(&size, 4, deadline, "TCPStore", "the store's server");
  s.send_all(key.data(), key.size(), deadline, "TCPStore", "the store's server");
}
}  // namespace

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  check_key(key);
  KILN_CHECK(value.size() <= kMaxValue, "TCPStore", "value of ", value.size(),
             " bytes, expected <= ", kMaxValue);
  client_->request([&](const Socket& s) {
    const auto deadline = Clock::now() + timeout_;
    send_key(s, kSet, key, deadline);
    const uint64_t size = value.size();
    s.send_all(&size, 8, deadline, "TCPStore", "the store's server");
    s.send_all(value.data(), value.size(), deadline, "TCPStore", "the store's server");
    uint8_t ok = 0;
    s.recv_all(&ok, 1, deadline, "TCPStore", "the store's server");
  });
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  check_key(key);
  return client_->request([&](const Socket& s) {
    const auto deadline = Clock::now() + timeout_;
    send_key(s, kGet, key, deadline);
    uint64_t size = 0;
    try {
      s.recv_all(&size, 8, deadline, "TCPStore", "the store's server");
    } catch (const Error& e) {
      fail("TCPStore", "waiting for key '", key, "': ", e.message());
    }
    KILN_CHECK(size <= kMaxValue, "TCPStore", "value of ", size, " bytes, expected <= ", kMaxValue);
    std::vector<uint8_t> value(size);
    s.recv_all(value.data(), size, deadline, "TCPStore", "the store's server");
    return value;
  });
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  check_key(key);
  return client_->request([&](const Socket& s) {
    const auto deadline = Clock::now() + timeout_;
    send_key(s, kAdd, key, deadline);
    s.send_all(&delta, 8, deadline, "TCPStore", "the store's server");
    int64_t value = 0;
    s.recv_all(&value, 8, deadline, "TCPStore", "the store's server");
    return value;
  });
}

}  // namespace kiln::distributed
