// TCPStore: the server is one thread polling its clients. Requests are
// [u8 command][u32 key length][key] then, for set, [u64 length][value] and, for add, [i64 delta];
// a get whose key is missing is parked until a set provides it. Every length read from the wire
// is bounds-checked.

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

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
// A request's bytes arrive together; a client that stalls mid-request is dropped after this.
constexpr auto kRequestDeadline = std::chrono::seconds(30);

}  // namespace

struct TCPStore::Server {
  Socket listener;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::map<std::string, std::vector<uint8_t>> values;
  std::vector<Socket> clients;
  std::multimap<std::string, int> waiting;  // key -> the fd of a client whose get waits for it

  void run() {
    for (;;) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listener.fd(), POLLIN, 0}};
      for (const Socket& c : clients) fds.push_back({c.fd(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents) return;
      if (fds[1].revents) {
        try {
          clients.push_back(listener.accept(Clock::now() + kRequestDeadline, "TCPStore"));
        } catch (const Error&) {
        }
      }
      std::vector<int> dropped;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        const Socket& c = clients[i - 2];
        try {
          serve(c);
        } catch (const Error&) {
          dropped.push_back(c.fd());
        }
      }
      for (int fd : dropped) {
        std::erase_if(waiting, [&](const auto& w) { return w.second == fd; });
        std::erase_if(clients, [&](const Socket& c) { return c.fd() == fd; });
      }
    }
  }

  void serve(const Socket& c) {
    const auto deadline = Clock::now() + kRequestDeadline;
    uint8_t command = 0;
    uint32_t key_size = 0;
    c.recv_all(&command, 1, deadline, "TCPStore", "a client");
    c.recv_all(&key_size, 4, deadline, "TCPStore", "a client");
    KILN_CHECK(key_size <= kMaxKey, "TCPStore", "key of ", key_size,
               " bytes, expected <= ", kMaxKey);
    std::string key(key_size, '\0');
    c.recv_all(key.data(), key_size, deadline, "TCPStore", "a client");
    if (command == kSet) {
      uint64_t size = 0;
      c.recv_all(&size, 8, deadline, "TCPStore", "a client");
      KILN_CHECK(size <= kMaxValue, "TCPStore", "value of ", size,
                 " bytes, expected <= ", kMaxValue);
      std::vector<uint8_t> value(size);
      c.recv_all(value.data(), size, deadline, "TCPStore", "a client");
      values[key] = std::move(value);
      const uint8_t ok = 1;
      c.send_all(&ok, 1, deadline, "TCPStore", "a client");
      auto [first, last] = waiting.equal_range(key);
      for (auto it = first; it != last; ++it) {
        for (const Socket& w : clients) {
          if (w.fd() == it->second) reply_value(w, key);
        }
      }
      waiting.erase(first, last);
    } else if (command == kGet) {
      if (values.count(key)) {
        reply_value(c, key);
      } else {
        waiting.emplace(key, c.fd());
      }
    } else if (command == kAdd) {
      int64_t delta = 0;
      c.recv_all(&delta, 8, deadline, "TCPStore", "a client");
      auto& v = values[key];
      int64_t current = 0;
      if (v.size() == 8) std::memcpy(&current, v.data(), 8);
      current += delta;
      v.resize(8);
      std::memcpy(v.data(), &current, 8);
      c.send_all(&current, 8, deadline, "TCPStore", "a client");
    } else {
      fail("TCPStore", "unknown command ", int(command));
    }
  }

  void reply_value(const Socket& c, const std::string& key) {
    const auto deadline = Clock::now() + kRequestDeadline;
    const auto& v = values[key];
    const uint64_t size = v.size();
    try {
      c.send_all(&size, 8, deadline, "TCPStore", "a client");
      c.send_all(v.data(), size, deadline, "TCPStore", "a client");
    } catch (const Error&) {
      // The waiting client went away; its poll slot reports it next round.
    }
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
