// ProcessGroup: the rendezvous, the collectives' thread and queue, the checks each collective
// makes before moving data. The algorithms are in ring.cpp.

#include "kiln/distributed/process_group.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "copy_values.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/nccl.h"
#include "ring.h"

namespace kiln::distributed {

using detail::Clock;
using detail::Socket;

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Product:
      return "product";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

namespace {
// An error as text: each thread that reports it throws its own kiln::Error, so no exception
// object is shared between the group's thread and its callers.
struct Failure {
  bool failed = false;
  std::string op, message;

  static Failure current() {  // inside a catch block
    try {
      throw;
    } catch (const Error& e) {
      return {true, e.op(), e.message()};
    } catch (const std::exception& e) {
      return {true, "distributed", e.what()};
    } catch (...) {
      return {true, "distributed", "unknown error"};
    }
  }
};
}  // namespace

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Failure error;

  void finish(Failure e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

void Work::wait() const {
  KILN_CHECK(state_, "Work::wait", "an empty Work handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error.failed) throw Error(state_->error.op, state_->error.message);
}

bool Work::is_completed() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

namespace {

// Refused: a call that failed its checks on one rank still takes its turn (with the refused
// collective in `op`), so the ranks stay in step and a rank that did not refuse fails naming it.
enum class Kind : uint32_t {
  AllReduce = 1,
  Broadcast = 2,
  AllGather = 3,
  Barrier = 4,
  Refused = 5
};

const char* kind_name(uint32_t k) {
  switch (static_cast<Kind>(k)) {
    case Kind::AllReduce:
      return "all_reduce";
    case Kind::Broadcast:
      return "broadcast";
    case Kind::AllGather:
      return "all_gather";
    case Kind::Barrier:
      return "barrier";
    case Kind::Refused:
      return "a refused call";
  }
  return "an unknown collective";
}

// What each rank says about the collective it is about to run; neighbours compare.
struct Header {
  uint64_t sequence = 0;
  uint32_t kind = 0;
  uint32_t op = 0;
  uint32_t dtype = 0;
  int32_t root = 0;
  int64_t numel = 0;
  uint64_t shape = 0;      // a hash of the tensor's sizes
  uint64_t tag = 0;        // the caller's label (DistributedDataParallel: step and bucket)
  uint32_t transport = 0;  // 0: the ring, 1: NCCL
  uint32_t reserved = 0;   // (no padding: headers compare bytewise)
};
static_assert(sizeof(Header) == 56);

uint64_t shape_hash(const Dims& sizes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the sizes' bytes
  for (int64_t d : sizes) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= static_cast<uint64_t>(d >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::string describe(const Header& h) {
  std::string s = kiln::detail::concat("collective #", h.sequence, " ", kind_name(h.kind));
  if (static_cast<Kind>(h.kind) == Kind::Barrier) return s;
  if (static_cast<Kind>(h.kind) == Kind::Refused)
    return s + kiln::detail::concat(" (", kind_name(h.op), " failed its checks on that rank)");
  s += kiln::detail::concat(" of ", h.numel, " ", dtype_name(static_cast<DType>(h.dtype)),
                            " elements");
  if (static_cast<Kind>(h.kind) == Kind::AllReduce)
    s += kiln::detail::concat(" (", reduce_op_name(static_cast<ReduceOp>(h.op)), ")");
  if (static_cast<Kind>(h.kind) == Kind::Broadcast)
    s += kiln::detail::concat(" from rank ", h.root);
  if (h.tag != 0) s += kiln::detail::concat(" tagged ", h.tag);
  s += h.transport == 1 ? " through NCCL" : " through the ring";
  return s;
}

std::string rank_name(int r) {
  return "rank " + std::to_string(r);
}

}  // namespace

struct ProcessGroup::Impl {
  std::shared_ptr<Store> store;
  detail::Ring ring;
  // With the "nccl" backend: CUDA tensors go through NCCL on the eager stream; host tensors,
  // the headers and barriers through the ring.
  std::unique_ptr<cuda::nccl::Communicator> nccl;
  bool uses_nccl(const Tensor& t) const { return nccl && t.device() == Device::CUDA; }
  uint64_t sequence = 0;  // touched by the worker only

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work::State>>> queue;
  bool stopping = false;
  bool running = false;
  Failure failure;  // the first error; later collectives repeat it
  std::thread worker;

  void run() {
    for (;;) {
      std::pair<std::function<void()>, std::shared_ptr<Work::State>> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
        running = true;
      }
      Failure error;
      {
        std::lock_guard<std::mutex> lock(mu);
        error = failure;
      }
      if (error.failed) {
        error.message = "the process group failed earlier: " + error.message;
      } else {
        try {
          task.first();
        } catch (...) {
          error = Failure::current();
          // Neighbours blocked on this rank see the connection close at once instead of waiting
          // for their timeout.
          ring.next.shutdown();
          ring.prev.shutdown();
          if (nccl) nccl->abort();  // peers blocked in NCCL kernels are released too
          std::lock_guard<std::mutex> lock(mu);
          failure = error;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        running = false;
      }
      task.second->finish(error);
    }
  }

  // Runs a call's checks; when they fail, the call still takes its turn in the ring (a refused
  // header) before the error reaches the caller.
  template <typename F>
  void checked(Kind kind, F&& checks) {
    try {
      checks();
    } catch (const Error&) {
      submit([this, kind] {
        Header h{};
        h.kind = uint32_t(Kind::Refused);
        h.op = uint32_t(kind);
        check_header(h);
      });
      throw;
    }
  }

  Work submit(std::function<void()> fn) {
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.emplace_back(std::move(fn), state);
    }
    cv.notify_one();
    return Work(state);
  }

  // Compares this collective's header with the previous rank's (and sends ours to the next).
  void check_header(Header mine) {
    mine.sequence = sequence++;
    if (ring.size == 1) return;
    Header theirs{};
    const char* name = kind_name(mine.kind);
    detail::send_recv(ring.next, &mine, sizeof(mine), ring.next_name, ring.prev, &theirs,
                      sizeof(theirs), ring.prev_name, ring.deadline(), name);
    if (std::memcmp(&mine, &theirs, sizeof(mine)) != 0) {
      Header a = mine, b = theirs;
      a.shape = b.shape = 0;
      const bool only_shape = std::memcmp(&a, &b, sizeof(a)) == 0;
      fail(name, "ranks disagree: ", rank_name(ring.rank), " runs ", describe(mine), ", ",
           ring.prev_name, " runs ", describe(theirs), only_shape ? " of another shape" : "",
           "; every rank must call the same collectives in the same order with tensors of one "
           "shape and dtype");
    }
  }
};

namespace {

// `check` runs while waiting for the neighbours and throws when another rank gave up.
Socket connect_ring(detail::Ring& ring, Store& store, const std::string& prefix,
                    const Socket& listener, Clock::time_point deadline,
                    const std::function<void()>& check) {
  const int next = (ring.rank + 1) % ring.size;
  const std::string where = store.get_string(prefix + "/addr/" + std::to_string(next));
  if (where.rfind("error: ", 0) == 0) fail("init_process_group", where.substr(7));
  const size_t colon = where.rfind(':');
  KILN_CHECK(colon != std::string::npos, "init_process_group", "bad address '", where,
             "' published by ", rank_name(next));
  const std::string host = where.substr(0, colon);
  char* end = nullptr;
  const long port = std::strtol(where.c_str() + colon + 1, &end, 10);
  KILN_CHECK(*end == '\0' && port > 0 && port <= 65535, "init_process_group", "bad address '",
             where, "' published by ", rank_name(next));
  ring.next = Socket::connect(host, port, deadline, "init_process_group", check);
  const int32_t hello[2] = {ring.rank, ring.size};
  ring.next.send_all(hello, sizeof(hello), deadline, "init_process_group", ring.next_name);
  return listener.accept(deadline, "init_process_group", check);
}

}  // namespace

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int world_size,
                           ProcessGroupOptions options)
    : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(store, "ProcessGroup", "expected a store, got null");
  KILN_CHECK(world_size >= 1, "ProcessGroup", "expected a world size >= 1, got ", world_size);
  KILN_CHECK(rank >= 0 && rank < world_size, "ProcessGroup", "expected a rank in [0, ", world_size,
             "), got ", rank);
  auto& ring = impl_->ring;
  impl_->store = std::move(store);
  ring.rank = rank;
  ring.size = world_size;
  ring.timeout = options.timeout;
  ring.next_name = rank_name((rank + 1) % world_size);
  ring.prev_name = rank_name((rank - 1 + world_size) % world_size);
  // Whether this rank can run NCCL, told to the others during setup (below).
  std::string cannot;
  if (options.backend == "nccl") {
    try {
      cuda::require_device("init_process_group");
      cuda::nccl::version("init_process_group");
    } catch (const Error& e) {
      cannot = e.what();
    }
  }
  if (world_size > 1) {
    const auto deadline = Clock::now() + options.timeout;
    const std::string prefix = "kiln/pg/" + options.name;
    // Listen where the store's connection goes out: an interface the other ranks reach.
    std::string address = "127.0.0.1";
    if (auto* tcp = dynamic_cast<TCPStore*>(impl_->store.get())) address = tcp->local_address();
    Socket listener = Socket::listen("", 0, "init_process_group");
    // Rank 0 states the world size; a rank that disagrees, or a rank taken twice, publishes the
    // error where its address would be, so that the rank reading it fails too instead of waiting.
    Store& store = *impl_->store;
    const std::string addr_key = prefix + "/addr/" + std::to_string(rank);
    if (rank == 0) store.set(prefix + "/world_size", std::to_string(world_size));
    std::string problem;
    const int64_t arrivals = store.add(prefix + "/joined/" + std::to_string(rank), 1);
    const std::string stated = store.get_string(prefix + "/world_size");
    if (stated != std::to_string(world_size)) {
      problem = kiln::detail::concat(rank_name(rank), " was started with a world size of ",
                                     world_size, ", rank 0 with ", stated);
    } else if (arrivals != 1) {
      problem = kiln::detail::concat("two processes were started as ", rank_name(rank));
    }
    if (!problem.empty()) {
      if (arrivals == 1) store.set(addr_key, "error: " + problem);
      fail("init_process_group", problem);
    }
    store.set(addr_key, address + ":" + std::to_string(listener.local_port()));
    // A rank that fails to connect after publishing its address says so in the store: the others
    // look between connection attempts and while waiting for their predecessor, and fail naming
    // it instead of retrying until the timeout (its listener is gone, or it never connects).
    const std::string failed_key = prefix + "/setup_failed", error_key = prefix + "/setup_error";
    bool relayed = false;
    auto check = [&] {
      int64_t failed = 0;
      try {
        failed = store.add(failed_key, 0);
      } catch (const Error& e) {
        relayed = true;
        fail("init_process_group", rank_name(rank), " of ", world_size,
             " gives up: the store stopped answering (its host, rank 0 under init_process_group, ",
             "failed or exited: see its error): ", e.message());
      }
      if (failed == 0) return;
      relayed = true;
      fail("init_process_group", rank_name(rank), " of ", world_size,
           " gives up: ", store.get_string(error_key));
    };
    // Everything that exchanges with the other ranks: a failure here is relayed through the
    // store (see check above) so that every rank names the first cause.
    std::vector<int64_t> said(2 * static_cast<size_t>(world_size));
    int32_t hello[2] = {-1, -1};
    try {
      ring.prev = connect_ring(ring, store, prefix, listener, deadline, check);
      ring.prev.recv_all(hello, sizeof(hello), deadline, "init_process_group", ring.prev_name);
      const int expected = (rank - 1 + world_size) % world_size;
      KILN_CHECK(hello[0] == expected && hello[1] == world_size, "init_process_group",
                 rank_name(rank), " of ", world_size, " expected ", rank_name(expected), " of ",
                 world_size, " to connect, got rank ", hello[0], " of ", hello[1],
                 " (do all ranks agree on the world size?)");
      // Which backend each rank asked for (tcp 0, nccl 1, anything else 2) and whether it can
      // run it, before any rank waits in NCCL (whose setup has no deadline): a rank without a
      // device or NCCL, or on another backend, fails them all at once, named.
      said[2 * rank] = options.backend == "tcp" ? 0 : options.backend == "nccl" ? 1 : 2;
      said[2 * rank + 1] = cannot.empty() ? 1 : 0;
      std::vector<void*> parts;
      for (int r = 0; r < world_size; ++r) parts.push_back(&said[2 * r]);
      ring.all_gather(parts, 2 * sizeof(int64_t), "init_process_group");
    } catch (const Error& e) {
      std::string failure = std::string(e.message());
      if (!relayed) {
        // A rank that got through connecting can still lose a neighbour that failed: the first
        // failure recorded is the cause, and this rank's own error only a consequence.
        std::string cause;
        try {
          if (store.add(failed_key, 0) > 0) cause = store.get_string(error_key);
        } catch (const Error&) {
          // The store itself failed: this rank's own error is all there is.
        }
        if (!cause.empty()) {
          failure = kiln::detail::concat(rank_name(rank), " of ", world_size, " gives up: ", cause);
        } else {
          failure = kiln::detail::concat(rank_name(rank), " of ", world_size,
                                         " could not connect the ring: ", e.message());
          // The first failure is the cause; later ones (a neighbour losing its connection to
          // this rank) would hide it. Readers that see the count wait in get() for the text.
          try {
            if (store.add(failed_key, 1) == 1) store.set(error_key, failure);
          } catch (const Error&) {
            // The store itself failed: the others' checks report that.
          }
        }
      }
      // Neighbours blocked on this rank's connections (in the handshake or the exchange, which
      // do not look at the store) get end of stream now, and come to read the cause: only now,
      // once it is recorded, or they would record their lost connection as the cause.
      ring.prev.shutdown();
      ring.next.shutdown();
      listener.close();
      // Rank 0 hosts the store under init_process_group, which stops with this group: it waits
      // until every other rank has left setup (each counts itself out once it has its error), so
      // none finds the store gone before reading why; a rank that died never counts itself,
      // hence the bound.
      const std::string left_key = prefix + "/setup_left";
      try {
        if (rank != 0) {
          store.add(left_key, 1);
        } else {
          const auto give_up = std::chrono::steady_clock::now() + 25 * Socket::kCheckInterval;
          while (store.add(left_key, 0) < world_size - 1 &&
                 std::chrono::steady_clock::now() < give_up) {
            std::this_thread::sleep_for(Socket::kCheckInterval / 10);
          }
        }
      } catch (const Error&) {
        // The store itself failed: nothing to wait for.
      }
      fail("init_process_group", failure);
    }
    KILN_CHECK(options.backend == "tcp" || options.backend == "nccl", "ProcessGroup",
               "unknown backend '", options.backend, "', expected tcp or nccl");
    for (int r = 0; r < world_size; ++r) {
      const char* names[] = {"the tcp", "the nccl", "an unknown"};
      KILN_CHECK(said[2 * r] == said[2 * rank], "init_process_group", rank_name(r), " asked for ",
                 names[std::clamp<int64_t>(said[2 * r], 0, 2)], " backend, ", rank_name(rank),
                 " for ", options.backend);
      KILN_CHECK(said[2 * r + 1] == 1, "init_process_group", rank_name(r), " cannot use NCCL",
                 r == rank ? ": " + cannot : std::string(" (see its error)"));
    }
  }
  KILN_CHECK(options.backend == "tcp" || options.backend == "nccl", "ProcessGroup",
             "unknown backend '", options.backend, "', expected tcp or nccl");
  KILN_CHECK(cannot.empty(), "init_process_group", cannot);
  if (options.backend == "nccl") {
    // Rank 0's communicator id reaches the others through the store.
    const std::string key = "kiln/pg/" + options.name + "/nccl_id";
    cuda::nccl::UniqueId id{};
    if (rank == 0) {
      id = cuda::nccl::unique_id("init_process_group");
      impl_->store->set(key, std::vector<uint8_t>(id.begin(), id.end()));
    } else {
      const std::vector<uint8_t> bytes = impl_->store->get(key);
      KILN_CHECK(bytes.size() == id.size(), "init_process_group", "expected an NCCL id of ",
                 id.size(), " bytes from rank 0, got ", bytes.size());
      std::copy(bytes.begin(), bytes.end(), id.begin());
    }
    impl_->nccl = std::make_unique<cuda::nccl::Communicator>(id, rank, world_size);
  }
  impl_->worker = std::thread([impl = impl_.get()] { impl->run(); });
}

const char* ProcessGroup::backend() const {
  return impl_->nccl ? "nccl" : "tcp";
}

ProcessGroup::~ProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    // Queued collectives never run; one running is woken by closing its connections.
    for (auto& [fn, state] : impl_->queue) {
      state->finish(
          {true, "ProcessGroup", "the process group was destroyed before this collective ran"});
    }
    impl_->queue.clear();
    if (impl_->running) {
      impl_->ring.next.shutdown();
      impl_->ring.prev.shutdown();
    }
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

int ProcessGroup::rank() const {
  return impl_->ring.rank;
}
int ProcessGroup::size() const {
  return impl_->ring.size;
}

namespace {

// The contiguous tensor a collective works on: `t` itself, or a copy written back at the end.
Tensor checked_buffer(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, "expected a tensor, got an undefined one");
  return t.is_contiguous() ? t : t.detach().contiguous();
}

void write_back(const Tensor& t, const Tensor& buffer) {
  if (buffer.impl() != t.impl()) detail::copy_values(t, buffer);
}

size_t byte_count(const Tensor& t) {
  return static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
}

// The header of a collective on `buffer`. Broadcast and all_gather move bytes (any dtype; NCCL
// sees them as uint8).
Header header(Kind kind, uint32_t op, int root, const Tensor& buffer, uint64_t tag, bool nccl) {
  Header h{};
  h.kind = uint32_t(kind);
  h.op = op;
  h.dtype = uint32_t(buffer.dtype());
  h.root = root;
  h.numel = buffer.numel();
  h.shape = shape_hash(buffer.sizes());
  h.tag = tag;
  h.transport = nccl ? 1 : 0;
  return h;
}

cuda::DevicePtr device_ptr(const Tensor& t) {
  return reinterpret_cast<cuda::DevicePtr>(t.impl()->raw_data());
}

cuda::nccl::Reduction nccl_reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return cuda::nccl::Reduction::Sum;
    case ReduceOp::Avg:
      return cuda::nccl::Reduction::Avg;
    case ReduceOp::Product:
      return cuda::nccl::Reduction::Product;
    case ReduceOp::Min:
      return cuda::nccl::Reduction::Min;
    case ReduceOp::Max:
      return cuda::nccl::Reduction::Max;
  }
  return cuda::nccl::Reduction::Sum;
}

// A collective's bytes on the host. A CUDA tensor's are staged through host memory (as Gloo
// does): copied out on the eager stream after the work that produced them, copied back before
// the collective completes. The ring itself only ever sees host memory.
class HostBytes {
 public:
  HostBytes(const Tensor& buffer, bool read) : buffer_(buffer) {
    const size_t bytes = static_cast<size_t>(buffer.numel()) * dtype_size(buffer.dtype());
    if (buffer.device() == Device::CPU) {
      data_ = buffer.impl()->raw_data();
      return;
    }
    staged_.resize(bytes);
    data_ = staged_.data();
    if (read) {
      cuda::copy_to_host(data_, reinterpret_cast<cuda::DevicePtr>(buffer.impl()->raw_data()), bytes,
                         cuda::current_stream());
    }
  }
  void* data() const { return data_; }
  // Copies staged bytes back to the device (a no-op for host tensors).
  void store() {
    if (staged_.empty()) return;
    cuda::copy_to_device(reinterpret_cast<cuda::DevicePtr>(buffer_.impl()->raw_data()), data_,
                         staged_.size(), cuda::current_stream());
  }

 private:
  Tensor buffer_;
  std::vector<char> staged_;
  void* data_ = nullptr;
};

}  // namespace

Work ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op, uint64_t tag) {
  Tensor buffer;
  DType dtype{};
  impl_->checked(Kind::AllReduce, [&] {
    buffer = checked_buffer(tensor, "all_reduce");
    dtype = tensor.dtype();
    KILN_CHECK(dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Int32 ||
                   dtype == DType::Int64,
               "all_reduce", "expected a float32, float64, int32 or int64 tensor, got ", dtype);
    KILN_CHECK(op != ReduceOp::Avg || dtype == DType::Float32 || dtype == DType::Float64,
               "all_reduce", "avg needs a floating-point tensor, got ", dtype);
  });
  tensor.impl()->storage()->bump_version();
  return impl_->submit([impl = impl_.get(), tensor, buffer, op, dtype, tag] {
    const bool nccl = impl->uses_nccl(buffer);
    impl->check_header(header(Kind::AllReduce, uint32_t(op), 0, buffer, tag, nccl));
    if (nccl) {
      impl->nccl->all_reduce(device_ptr(buffer), static_cast<size_t>(buffer.numel()), dtype,
                             nccl_reduction(op), cuda::current_stream());
      write_back(tensor, buffer);
      return;
    }
    HostBytes bytes(buffer, /*read=*/true);
    impl->ring.all_reduce(bytes.data(), buffer.numel(), dtype, op, "all_reduce");
    bytes.store();
    write_back(tensor, buffer);
  });
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op).wait();
}

Work ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  Tensor buffer;
  impl_->checked(Kind::Broadcast, [&] {
    buffer = checked_buffer(tensor, "broadcast");
    KILN_CHECK(root >= 0 && root < size(), "broadcast", "expected a root rank in [0, ", size(),
               "), got ", root);
  });
  tensor.impl()->storage()->bump_version();
  return impl_->submit([impl = impl_.get(), tensor, buffer, root] {
    const bool nccl = impl->uses_nccl(buffer);
    impl->check_header(header(Kind::Broadcast, 0, root, buffer, 0, nccl));
    const bool receives = impl->ring.rank != root;
    if (nccl) {
      impl->nccl->broadcast(device_ptr(buffer), byte_count(buffer), DType::UInt8, root,
                            cuda::current_stream());
      if (receives) write_back(tensor, buffer);
      return;
    }
    HostBytes bytes(buffer, /*read=*/!receives);
    impl->ring.broadcast(bytes.data(), byte_count(buffer), root, "broadcast");
    if (receives) {
      bytes.store();
      write_back(tensor, buffer);
    }
  });
}

void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  broadcast_async(tensor, root).wait();
}

TensorList ProcessGroup::all_gather(const Tensor& tensor) {
  Tensor mine, gathered;
  impl_->checked(Kind::AllGather, [&] {
    mine = checked_buffer(tensor, "all_gather");
    // With NCCL: one device buffer of every rank's part, in rank order; the parts are views.
    if (impl_->uses_nccl(mine)) {
      gathered = Tensor(kiln::empty(Dims{mine.numel() * size()}, mine.dtype(), mine.device()));
    }
  });
  if (gathered.defined()) {
    impl_
        ->submit([impl = impl_.get(), mine, gathered] {
          impl->check_header(header(Kind::AllGather, 0, 0, mine, 0, /*nccl=*/true));
          impl->nccl->all_gather(device_ptr(mine), device_ptr(gathered), byte_count(mine),
                                 DType::UInt8, cuda::current_stream());
        })
        .wait();
    TensorList parts;
    for (int r = 0; r < size(); ++r) {
      parts.push_back(gathered.narrow(0, r * mine.numel(), mine.numel()).view(mine.sizes()));
    }
    return parts;
  }
  if (mine.device() != Device::CPU) {  // staged through the host, as the other collectives
    TensorList parts = all_gather(mine.cpu());
    for (Tensor& p : parts) p = p.to(mine.device());
    return parts;
  }
  TensorList parts;
  std::vector<void*> pointers;
  for (int r = 0; r < size(); ++r) {
    parts.push_back(r == rank() ? mine.detach().clone()
                                : empty(tensor.sizes(), TensorOptions(tensor.dtype())));
    pointers.push_back(parts.back().impl()->raw_data());
  }
  impl_
      ->submit([impl = impl_.get(), pointers, mine] {
        impl->check_header(header(Kind::AllGather, 0, 0, mine, 0, /*nccl=*/false));
        impl->ring.all_gather(pointers, byte_count(mine), "all_gather");
      })
      .wait();
  return parts;
}

void ProcessGroup::barrier() {
  impl_
      ->submit([impl = impl_.get()] {
        Header h{0, uint32_t(Kind::Barrier), 0, 0, 0, 0};
        impl->check_header(h);
        int64_t token = 0;
        impl->ring.all_reduce(&token, 1, DType::Int64, ReduceOp::Sum, "barrier");
      })
      .wait();
}

}  // namespace kiln::distributed
