#pragma once
// Runs the ranks of a process group as threads of this process, each with its own group over
// TCP on the loopback interface (the multi-process path is examples/distributed).

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distributed.h"

namespace test {

// The message of the kiln::Error f throws, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline void run_ranks(
    int world_size,
    const std::function<void(const std::shared_ptr<kiln::distributed::ProcessGroup>&)>& body,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  using namespace kiln::distributed;
  auto server = std::make_shared<TCPStore>("", 0, /*is_server=*/true, timeout);
  const int port = server->port();
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<Store> store =
            r == 0 ? std::shared_ptr<Store>(server)
                   : std::make_shared<TCPStore>("127.0.0.1", port, false, timeout);
        ProcessGroupOptions options;
        options.timeout = timeout;
        auto group = std::make_shared<ProcessGroup>(store, r, world_size, options);
        body(group);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace test
