#pragma once
// A key-value store the ranks of a process group meet through (PyTorch's c10d::Store): each rank
// publishes where it listens and reads where the others do. TCPStore is hosted by one process
// (rank 0, at MASTER_ADDR:MASTER_PORT) and reached over TCP by all, as torchrun's rendezvous.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::distributed {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits until `key` is set (or the store's timeout passes: kiln::Error naming the key).
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (0 when unset) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  void set(const std::string& key, const std::string& value) {
    set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    auto v = get(key);
    return std::string(v.begin(), v.end());
  }
};

class TCPStore final : public Store {
 public:
  // The server (is_server) listens on `port` (0: a free port, see port()) of every interface and
  // also serves this process as a client; clients connect to host:port, retrying until `timeout`.
  TCPStore(std::string host, int port, bool is_server,
           std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::chrono::milliseconds timeout() const override { return timeout_; }
  using Store::set;

  int port() const { return port_; }
  // The local address of this client's connection: the interface that reaches the server, which
  // the other ranks can reach too.
  std::string local_address() const;

 private:
  struct Server;
  struct Client;
  void stop_server();
  std::chrono::milliseconds timeout_;
  int port_ = 0;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace kiln::distributed
