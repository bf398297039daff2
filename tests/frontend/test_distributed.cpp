// Process groups: the store, the ring collectives against float64 references computed from every
// rank's inputs, the checks that stop mismatched or failed ranks, and the environment a launcher
// sets. Ranks are threads here (distributed_util.h); examples/distributed runs them as processes.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "distributed_util.h"
#include "kiln/kiln.h"

namespace dist = kiln::distributed;
using namespace std::chrono_literals;
using kiln::DType;
using kiln::Tensor;

namespace {

// Rank r's input: values that differ per rank and element, reproducible by every thread.
std::vector<double> rank_values(int rank, int64_t n) {
  std::mt19937_64 gen(1000 + rank);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

Tensor as_tensor(const std::vector<double>& v, DType dtype) {
  Tensor t = kiln::empty({int64_t(v.size())}, kiln::TensorOptions(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::Float32) t.data_ptr<float>()[i] = float(v[i]);
    if (dtype == DType::Float64) t.data_ptr<double>()[i] = v[i];
  }
  return t;
}

}  // namespace

TEST(TCPStore, SetGetAddAcrossClientsAndGetWaitsForSet) {
  dist::TCPStore server("", 0, true, 10s);
  dist::TCPStore client("127.0.0.1", server.port(), false, 10s);
  server.set("a", std::string("hello"));
  EXPECT_EQ(client.get_string("a"), "hello");
  EXPECT_EQ(client.add("n", 5), 5);
  EXPECT_EQ(server.add("n", -2), 3);
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    server.set("later", std::string("x"));
  });
  EXPECT_EQ(client.get_string("later"), "x");  // blocks until the set
  late.join();
  // Values of any bytes, including an empty one.
  client.set("empty", std::vector<uint8_t>{});
  EXPECT_TRUE(server.get("empty").empty());
}

TEST(TCPStore, MissingKeyTimesOutNamingTheKey) {
  dist::TCPStore server("", 0, true, 200ms);
  const std::string m = test::message_of([&] { server.get("never/set"); });
  EXPECT_NE(m.find("never/set"), std::string::npos) << m;
  EXPECT_NE(m.find("timed out"), std::string::npos) << m;
  // The failed connection says so instead of reading a stale reply.
  const std::string again = test::message_of([&] { server.get("x"); });
  EXPECT_NE(again.find("closed by an earlier error"), std::string::npos) << again;
}

TEST(TCPStore, NoServerIsAConnectError) {
  // A port held by a socket that is bound but not listening: connections to it are refused.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::string m = test::message_of([&] { dist::TCPStore("127.0.0.1", port, false, 300ms); });
  ::close(fd);
  EXPECT_NE(m.find("cannot connect to 127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
  // A server whose own client cannot connect fails cleanly (its thread stopped), not abort().
  const std::string unresolved =
      test::message_of([&] { dist::TCPStore("no-such-host.invalid", 0, true, 300ms); });
  EXPECT_NE(unresolved.find("no-such-host.invalid"), std::string::npos) << unresolved;
}

TEST(TCPStore, AnOversizedKeyIsRefusedWithoutClosingTheConnection) {
  dist::TCPStore server("", 0, true, 10s);
  EXPECT_NE(test::message_of([&] {
              server.set(std::string(5000, 'k'), std::string("v"));
            }).find("key of 5000 bytes"),
            std::string::npos);
  server.set("fine", std::string("ok"));
  EXPECT_EQ(server.get_string("fine"), "ok");
}

namespace {

// A raw connection to a store's server on the loopback interface, closed with the scope.
struct RawConnection {
  int fd;
  ~RawConnection() {
    if (fd >= 0) ::close(fd);
  }
};

int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// One client stops halfway through a request, another asks for a large value and never reads
// it: the server answers everyone else at once (it used to wait up to 30 s on each).
TEST(TCPStore, AStalledClientHoldsUpNoOtherClient) {
  dist::TCPStore server("", 0, true, 10s);
  const std::vector<uint8_t> large(64 << 20, 7);  // far beyond the sockets' buffers
  server.set("large", large);
  const RawConnection half_connection{connect_raw(server.port())};
  const RawConnection reader_connection{connect_raw(server.port())};
  const int half = half_connection.fd, reader = reader_connection.fd;
  ASSERT_GE(half, 0);
  ASSERT_GE(reader, 0);
  const uint8_t partial[3] = {1, 4, 0};  // a set whose key length is cut short
  ASSERT_EQ(::send(half, partial, sizeof partial, MSG_NOSIGNAL), ssize_t(sizeof partial));
  const uint8_t get_large[10] = {2, 5, 0, 0, 0, 'l', 'a', 'r', 'g', 'e'};
  ASSERT_EQ(::send(reader, get_large, sizeof get_large, MSG_NOSIGNAL), ssize_t(sizeof get_large));
  std::this_thread::sleep_for(100ms);  // both requests reach the server first
  const auto start = std::chrono::steady_clock::now();
  dist::TCPStore client("127.0.0.1", server.port(), false, 10s);
  client.set("k", std::string("v"));
  EXPECT_EQ(server.get_string("k"), "v");
  EXPECT_EQ(client.add("n", 3), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  // The stalled reader still gets its whole value when it reads.
  uint64_t size = 0;
  ASSERT_EQ(::recv(reader, &size, 8, MSG_WAITALL), 8);
  EXPECT_EQ(size, large.size());
  std::vector<uint8_t> got(size);
  ASSERT_EQ(::recv(reader, got.data(), size, MSG_WAITALL), ssize_t(size));
  EXPECT_EQ(got, large);
}

TEST(ProcessGroup, AllReduceSumMatchesFloat64ReferenceOnEveryRankCount) {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{300007}}) {
      std::vector<std::vector<float>> results(n);
      test::run_ranks(n, [&](const auto& group) {
        Tensor t = as_tensor(rank_values(group->rank(), numel), DType::Float32);
        group->all_reduce(t);
        results[group->rank()].assign(t.data_ptr<float>(), t.data_ptr<float>() + numel);
      });
      std::vector<double> expected(numel, 0.0);
      for (int r = 0; r < n; ++r) {
        const auto v = rank_values(r, numel);
        for (int64_t i = 0; i < numel; ++i) expected[i] += double(float(v[i]));
      }
      for (int64_t i = 0; i < numel; ++i) {
        ASSERT_NEAR(results[0][i], expected[i], 1e-5 * (1 + std::abs(expected[i])))
            << n << " ranks, " << numel << " elements, element " << i;
      }
      // Every rank holds the same bytes.
      for (int r = 1; r < n; ++r) EXPECT_EQ(results[r], results[0]) << n << " ranks, rank " << r;
    }
  }
}

TEST(ProcessGroup, AllReduceOpsAndDtypes) {
  test::run_ranks(3, [&](const auto& group) {
    const int r = group->rank();
    // int64: exact sums, products, extremes.
    Tensor s = kiln::full({4}, double(r + 1), kiln::TensorOptions(DType::Int64));
    group->all_reduce(s, dist::ReduceOp::Sum);
    EXPECT_EQ(s.data_ptr<int64_t>()[3], 6);
    Tensor p = kiln::full({5}, double(r + 2), kiln::TensorOptions(DType::Int64));
    group->all_reduce(p, dist::ReduceOp::Product);
    EXPECT_EQ(p.data_ptr<int64_t>()[0], 2 * 3 * 4);
    Tensor lo = kiln::full({2}, double(10 - r), kiln::TensorOptions(DType::Int32));
    group->all_reduce(lo, dist::ReduceOp::Min);
    EXPECT_EQ(lo.data_ptr<int32_t>()[1], 8);
    Tensor hi = kiln::full({7}, double(r) - 5, kiln::TensorOptions(DType::Float64));
    group->all_reduce(hi, dist::ReduceOp::Max);
    EXPECT_EQ(hi.data_ptr<double>()[6], -3.0);
    // Avg divides the sum by the rank count.
    Tensor a = kiln::full({3}, double(r), kiln::TensorOptions(DType::Float64));
    group->all_reduce(a, dist::ReduceOp::Avg);
    EXPECT_EQ(a.data_ptr<double>()[0], 1.0);
    // Avg on integers and unsupported dtypes are refused before anything is sent.
    Tensor i = kiln::zeros({2}, kiln::TensorOptions(DType::Int32));
    EXPECT_NE(test::message_of([&] {
                group->all_reduce(i, dist::ReduceOp::Avg);
              }).find("avg needs a floating-point tensor, got int32"),
              std::string::npos);
    Tensor h = kiln::zeros({2}, kiln::TensorOptions(DType::Float16));
    EXPECT_NE(test::message_of([&] { group->all_reduce(h); }).find("got float16"),
              std::string::npos);
    // The group still works.
    group->barrier();
  });
}

TEST(ProcessGroup, NonContiguousTensorsAreReducedAndWrittenBackInPlace) {
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    Tensor base = kiln::arange(0, 12).to(DType::Float32).view({3, 4}).add_(double(10 * r));
    Tensor view = base.t();  // [4, 3], strided
    group->all_reduce(view);
    // base[i][j] = 2 * (4i + j) + 10 on both ranks.
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_EQ(base.data_ptr<float>()[i * 4 + j], 2.0f * (4 * i + j) + 10);
      }
    }
  });
}

TEST(ProcessGroup, BroadcastFromAnyRootInPieces) {
  const int64_t numel = (int64_t{3} << 20) / 4 + 5;  // 3 MiB: several of the chain's pieces
  test::run_ranks(3, [&](const auto& group) {
    const int r = group->rank();
    Tensor t = as_tensor(rank_values(r, numel), DType::Float64);
    group->broadcast(t, /*root=*/1);
    const auto expected = rank_values(1, numel);
    for (int64_t i = 0; i < numel; i += 997) ASSERT_EQ(t.data_ptr<double>()[i], expected[i]);
    EXPECT_EQ(t.data_ptr<double>()[numel - 1], expected[numel - 1]);
    EXPECT_NE(test::message_of([&] { group->broadcast(t, 3); }).find("root rank in [0, 3), got 3"),
              std::string::npos);
  });
}

TEST(ProcessGroup, AllGatherReturnsEveryRanksTensorInRankOrder) {
  test::run_ranks(4, [&](const auto& group) {
    Tensor mine = kiln::full({2, 3}, double(group->rank() * 10), kiln::TensorOptions(DType::Int64));
    kiln::TensorList all = group->all_gather(mine);
    ASSERT_EQ(all.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(all[r].sizes(), kiln::Dims({2, 3}));
      EXPECT_EQ(all[r].data_ptr<int64_t>()[5], 10 * r);
    }
  });
}

TEST(ProcessGroup, BarrierWaitsForTheLastRank) {
  std::atomic<bool> last_arrived{false};
  test::run_ranks(3, [&](const auto& group) {
    if (group->rank() == 2) {
      std::this_thread::sleep_for(150ms);
      last_arrived = true;
    }
    group->barrier();
    EXPECT_TRUE(last_arrived.load()) << "rank " << group->rank() << " left the barrier early";
  });
}

TEST(ProcessGroup, AsyncWorkCompletesInCallOrder) {
  test::run_ranks(2, [&](const auto& group) {
    std::vector<Tensor> ts;
    std::vector<dist::Work> works;
    for (int k = 0; k < 8; ++k) {
      ts.push_back(
          kiln::full({1000}, double(k + group->rank()), kiln::TensorOptions(DType::Float32)));
      works.push_back(group->all_reduce_async(ts.back()));
    }
    works.back().wait();
    for (int k = 0; k < 8; ++k) {
      EXPECT_TRUE(works[k].is_completed());  // the queue runs in order
      EXPECT_EQ(ts[k].data_ptr<float>()[999], float(2 * k + 1));
    }
  });
}

TEST(ProcessGroup, MismatchedCollectivesFailWithBothSidesNamed) {
  std::vector<std::string> messages(2), later(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    Tensor t = kiln::zeros({r == 0 ? 10 : 20});
    messages[r] = test::message_of([&] { group->all_reduce(t); });
    later[r] = test::message_of([&] { group->barrier(); });
  });
  const std::string both = messages[0] + " | " + messages[1];
  EXPECT_NE(both.find("ranks disagree"), std::string::npos) << both;
  EXPECT_NE(both.find("all_reduce of 10 float32 elements (sum)"), std::string::npos) << both;
  EXPECT_NE(both.find("all_reduce of 20 float32 elements (sum)"), std::string::npos) << both;
  // Neither rank hangs; later collectives repeat the failure.
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r], "(no error)") << "rank " << r;
    EXPECT_NE(later[r].find("failed earlier"), std::string::npos) << later[r];
  }
}

TEST(ProcessGroup, ARankThatLeftIsReportedBeforeTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  test::run_ranks(
      2,
      [&](const auto& group) {
        if (group->rank() == 1) return;  // destroys its group at once
        Tensor t = kiln::ones({100});
        message = test::message_of([&] { group->all_reduce(t); });
      },
      30s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("failed or exited"), std::string::npos) << message;
}

TEST(ProcessGroup, ACallRefusedOnOneRankFailsTheOthersInsteadOfShiftingThem) {
  // Refused everywhere: the group goes on.
  test::run_ranks(2, [&](const auto& group) {
    EXPECT_NE(test::message_of([&] { group->all_reduce(Tensor()); }).find("undefined"),
              std::string::npos);
    Tensor t = kiln::ones({3});
    group->all_reduce(t, dist::ReduceOp::Avg);
    EXPECT_EQ(t.data_ptr<float>()[2], 1.0f);
  });
  // Refused on rank 1 only: rank 0's all_reduce of the same size must not pair with rank 1's
  // next one.
  std::vector<std::string> first(2), second(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    Tensor t = r == 1 ? kiln::zeros({4}, kiln::TensorOptions(DType::Int32)) : kiln::ones({4});
    first[r] = test::message_of([&] { group->all_reduce(t, dist::ReduceOp::Avg); });
    Tensor u = kiln::ones({4});
    second[r] = test::message_of([&] { group->all_reduce(u, dist::ReduceOp::Avg); });
  });
  EXPECT_NE(first[1].find("avg needs a floating-point tensor"), std::string::npos) << first[1];
  const std::string rank0 = first[0] + " | " + second[0];
  EXPECT_NE(rank0.find("a refused call (all_reduce failed its checks on that rank)"),
            std::string::npos)
      << rank0;
}

TEST(ProcessGroup, SameElementCountOfAnotherShapeIsAMismatch) {
  std::vector<std::string> messages(2);
  test::run_ranks(2, [&](const auto& group) {
    const int r = group->rank();
    Tensor t = r == 0 ? kiln::zeros({2, 3}) : kiln::zeros({3, 2});
    messages[r] = test::message_of([&] { group->broadcast(t, 0); });
  });
  EXPECT_NE((messages[0] + messages[1]).find("of another shape"), std::string::npos)
      << messages[0] << " | " << messages[1];
}

namespace {
struct EnvGuard {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      setenv(name.c_str(), value, 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  ~EnvGuard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) {
        setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        unsetenv(it->first.c_str());
      }
    }
  }
};
}  // namespace

TEST(InitProcessGroup, ReadsTorchrunThenOpenMpiEnvironment) {
  EnvGuard env;
  for (const char* name : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT"}) {
    env.set(name, nullptr);
  }
  EXPECT_NE(test::message_of([] { dist::resolve_init_options({}); }).find("torchrun"),
            std::string::npos);
  env.set("OMPI_COMM_WORLD_RANK", "2");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  auto o = dist::resolve_init_options({});
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  env.set("RANK", "1");  // torchrun's variables win
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "10.0.0.7");
  env.set("MASTER_PORT", "12345");
  o = dist::resolve_init_options({});
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.7");
  EXPECT_EQ(o.master_port, 12345);
  env.set("RANK", "5");
  EXPECT_NE(test::message_of([] { dist::resolve_init_options({}); }).find("got 5 (RANK)"),
            std::string::npos);
  env.set("RANK", "one");
  EXPECT_NE(test::message_of([] { dist::resolve_init_options({}); }).find("in RANK, got 'one'"),
            std::string::npos);
  dist::InitOptions named;
  named.rank = 0;
  named.world_size = 1;
  named.backend = "gloo";  // PyTorch scripts' name for the ring
  EXPECT_EQ(dist::resolve_init_options(named).backend, "tcp");
  named.backend = "nccl";
  EXPECT_EQ(dist::resolve_init_options(named).backend, "nccl");
  named.backend = "mpi";
  EXPECT_NE(test::message_of([&] {
              dist::resolve_init_options(named);
            }).find("unknown backend 'mpi', expected tcp (alias gloo) or nccl"),
            std::string::npos);
}

TEST(InitProcessGroup, DefaultGroupOfOneRank) {
  struct Destroy {
    ~Destroy() { dist::destroy_process_group(); }
  } destroy;
  dist::InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.master_port = 0;  // any free port: nobody else connects
  EXPECT_FALSE(dist::is_initialized());
  dist::init_process_group(o);
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_EQ(dist::get_world_size(), 1);
  EXPECT_NE(test::message_of([&] { dist::init_process_group(o); }).find("already initialized"),
            std::string::npos);
  dist::default_group()->barrier();
  dist::destroy_process_group();
  EXPECT_FALSE(dist::is_initialized());
  EXPECT_NE(test::message_of([] { dist::get_rank(); }).find("not initialized"), std::string::npos);
}

TEST(ProcessGroup, RanksStartedWithDifferentWorldSizesFailAtOnce) {
  auto server = std::make_shared<dist::TCPStore>("", 0, true, 30s);
  std::vector<std::string> messages(2);
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] {
    auto store = std::make_shared<dist::TCPStore>("127.0.0.1", server->port(), false, 30s);
    messages[1] = test::message_of([&] { dist::ProcessGroup(store, 1, 3); });
  });
  messages[0] = test::message_of([&] { dist::ProcessGroup(server, 0, 2); });
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("rank 1 was started with a world size of 3, rank 0 with 2"), std::string::npos)
        << m;
  }
}

// A rank asking for a backend that does not exist fails during setup, and so do the others,
// naming it (instead of constructing and failing at the first collective).
TEST(ProcessGroup, ARankWithAnUnknownBackendFailsTheOthersAtSetup) {
  auto server = std::make_shared<dist::TCPStore>("", 0, true, 30s);
  std::vector<std::string> messages(2);
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] {
    auto store = std::make_shared<dist::TCPStore>("127.0.0.1", server->port(), false, 30s);
    dist::ProcessGroupOptions options;
    options.backend = "mpi";
    messages[1] = test::message_of([&] { dist::ProcessGroup(store, 1, 2, options); });
  });
  messages[0] = test::message_of([&] { dist::ProcessGroup(server, 0, 2); });
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_NE(messages[1].find("unknown backend 'mpi', expected tcp or nccl"), std::string::npos)
      << messages[1];
  EXPECT_NE(messages[0].find("rank 1 asked for an unknown backend, rank 0 for tcp"),
            std::string::npos)
      << messages[0];
}

namespace {

// A rank's view of the store with one key's value replaced: that rank reads a bad address for
// its neighbour and fails after publishing its own.
class StoreWithBadKey : public dist::Store {
 public:
  StoreWithBadKey(std::shared_ptr<dist::Store> inner, std::string key)
      : inner_(std::move(inner)), key_(std::move(key)) {}
  using dist::Store::set;
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    std::vector<uint8_t> value = inner_->get(key);
    if (key != key_) return value;
    const std::string bad = "127.0.0.1:not-a-port";
    return {bad.begin(), bad.end()};
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

 private:
  std::shared_ptr<dist::Store> inner_;
  std::string key_;
};

// One rank of 3 publishes its address, then fails to connect to the next rank (it reads a bad
// address for it): the rank waiting for its connection would wait until the timeout, and a rank
// connecting to it would retry its closed listener; they fail at once instead, naming its error.
// As under init_process_group, rank 0's group holds the only reference to the store it hosts, so
// when rank 0 is the one failing the store goes with it.
std::vector<std::string> fail_connecting(int failing, std::chrono::nanoseconds* took) {
  constexpr auto kTimeout = 60s;
  auto server = std::make_shared<dist::TCPStore>("", 0, true, kTimeout);
  const int port = server->port();
  std::vector<std::string> messages(3);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    std::shared_ptr<dist::Store> store =
        r == 0 ? std::shared_ptr<dist::Store>(std::move(server))
               : std::make_shared<dist::TCPStore>("127.0.0.1", port, false, kTimeout);
    if (r == failing)
      store = std::make_shared<StoreWithBadKey>(
          store, "kiln/pg/default/addr/" + std::to_string((r + 1) % 3));
    ranks.emplace_back([&messages, r, kTimeout, store = std::move(store)]() mutable {
      dist::ProcessGroupOptions options;
      options.timeout = kTimeout;
      messages[r] = test::message_of([&] { dist::ProcessGroup(std::move(store), r, 3, options); });
    });
  }
  for (auto& t : ranks) t.join();
  *took = std::chrono::steady_clock::now() - start;
  return messages;
}

}  // namespace

TEST(ProcessGroup, ARankFailingToConnectTheRingFailsTheOthersAtOnce) {
  for (int failing : {1, 0}) {
    SCOPED_TRACE("failing rank " + std::to_string(failing));
    std::chrono::nanoseconds took{};
    const std::vector<std::string> messages = fail_connecting(failing, &took);
    EXPECT_LT(took, 15s);
    const std::string cause =
        "rank " + std::to_string(failing) + " of 3 could not connect the ring: bad address";
    EXPECT_NE(messages[failing].find(cause), std::string::npos) << messages[failing];
    // The rank whose predecessor never connects hears why.
    const int waiting = (failing + 1) % 3;
    EXPECT_NE(
        messages[waiting].find("rank " + std::to_string(waiting) + " of 3 gives up: " + cause),
        std::string::npos)
        << messages[waiting];
    for (const std::string& m : messages) EXPECT_NE(m, "(no error)");
  }
}
