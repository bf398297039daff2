// NCCL through dlopen (see kiln/runtime/cuda/nccl.h). NCCL's header gives the types; without it
// (or without CUDA) every entry point says that kiln was built without NCCL.
#include "kiln/runtime/cuda/nccl.h"

#include "kiln/runtime/error.h"

#if KILN_HAVE_CUDA && __has_include(<nccl.h>)
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "api.h"

namespace kiln::cuda::nccl {
namespace {

#define KILN_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)            \
  X(ncclGetUniqueId)           \
  X(ncclCommInitRank)          \
  X(ncclCommDestroy)           \
  X(ncclCommAbort)             \
  X(ncclAllReduce) X(ncclBroadcast) X(ncclAllGather) X(ncclGetErrorString) X(ncclGetLastError)

#define KILN_NCCL_MEMBER(f) decltype(&::f) f = nullptr;
struct Table {
  KILN_NCCL_FUNCTIONS(KILN_NCCL_MEMBER)
};

struct Loaded {
  Table table;
  std::string error;
};

Loaded load() {
  Loaded l;
  void* lib = api::open_toolkit_library("libnccl.so.2", "libnccl.so", l.error);
  if (!lib) {
    l.error = "NCCL (libnccl.so.2) " + l.error;
    return l;
  }
  Table& table = l.table;
  std::string missing;
#define KILN_NCCL_RESOLVE(f)                                     \
  table.f = reinterpret_cast<decltype(table.f)>(dlsym(lib, #f)); \
  if (!table.f && missing.empty()) missing = #f;
  KILN_NCCL_FUNCTIONS(KILN_NCCL_RESOLVE)
#undef KILN_NCCL_RESOLVE
  if (!missing.empty()) l.error = "libnccl.so.2 lacks " + missing + " (NCCL older than 2.13?)";
  return l;
}

const Table& nccl(const char* op) {
  static const Loaded l = load();
  if (!l.error.empty()) fail(op, l.error);
  return l.table;
}

void check(ncclResult_t r, const char* op, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) [[likely]]
    return;
  const Table& t = nccl(op);
  const char* detail = t.ncclGetLastError(comm);
  fail(op, what, " failed: ", t.ncclGetErrorString(r),
       detail && *detail ? std::string(" (") + detail + ")" : std::string());
}

ncclDataType_t nccl_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Int8:
      return ncclInt8;
    case DType::UInt8:
      return ncclUint8;
    default:
      fail(op, "NCCL has no type for ", dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(Reduction op) {
  switch (op) {
    case Reduction::Sum:
      return ncclSum;
    case Reduction::Product:
      return ncclProd;
    case Reduction::Max:
      return ncclMax;
    case Reduction::Min:
      return ncclMin;
    case Reduction::Avg:
      return ncclAvg;
  }
  return ncclSum;
}

cudaStream_t stream_of(StreamId id) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(id));
}

ncclComm_t as_comm(void* p) {
  return static_cast<ncclComm_t>(p);
}

}  // namespace

int version(const char* op) {
  int v = 0;
  check(nccl(op).ncclGetVersion(&v), op, "ncclGetVersion");
  return v;
}

UniqueId unique_id(const char* op) {
  static_assert(sizeof(ncclUniqueId) == sizeof(UniqueId));
  ncclUniqueId id;
  check(nccl(op).ncclGetUniqueId(&id), op, "ncclGetUniqueId");
  UniqueId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

Communicator::Communicator(const UniqueId& id, int rank, int size) {
  constexpr const char* op = "nccl";
  api::make_context_current(op);  // NCCL takes the calling thread's device
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof uid);
  ncclComm_t comm = nullptr;
  check(nccl(op).ncclCommInitRank(&comm, size, uid, rank), op, "ncclCommInitRank");
  comm_ = comm;
}

Communicator::~Communicator() {
  if (comm_) nccl("nccl").ncclCommDestroy(as_comm(comm_));
}

void Communicator::abort() {
  if (comm_) nccl("nccl").ncclCommAbort(as_comm(comm_));
  comm_ = nullptr;
}

void Communicator::all_reduce(DevicePtr data, size_t count, DType dtype, Reduction op,
                              StreamId stream) {
  constexpr const char* name = "all_reduce";
  KILN_CHECK(comm_, name, "the NCCL communicator was aborted after an earlier error");
  api::make_context_current(name);
  void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(data));
  check(nccl(name).ncclAllReduce(p, p, count, nccl_type(dtype, name), nccl_op(op), as_comm(comm_),
                                 stream_of(stream)),
        name, "ncclAllReduce", as_comm(comm_));
}

void Communicator::broadcast(DevicePtr data, size_t count, DType dtype, int root, StreamId stream) {
  constexpr const char* name = "broadcast";
  KILN_CHECK(comm_, name, "the NCCL communicator was aborted after an earlier error");
  api::make_context_current(name);
  void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(data));
  check(nccl(name).ncclBroadcast(p, p, count, nccl_type(dtype, name), root, as_comm(comm_),
                                 stream_of(stream)),
        name, "ncclBroadcast", as_comm(comm_));
}

void Communicator::all_gather(DevicePtr send, DevicePtr recv, size_t count, DType dtype,
                              StreamId stream) {
  constexpr const char* name = "all_gather";
  KILN_CHECK(comm_, name, "the NCCL communicator was aborted after an earlier error");
  api::make_context_current(name);
  check(nccl(name).ncclAllGather(reinterpret_cast<void*>(static_cast<uintptr_t>(send)),
                                 reinterpret_cast<void*>(static_cast<uintptr_t>(recv)), count,
                                 nccl_type(dtype, name), as_comm(comm_), stream_of(stream)),
        name, "ncclAllGather", as_comm(comm_));
}

}  // namespace kiln::cuda::nccl

#else  // no CUDA or no nccl.h at build time

namespace kiln::cuda::nccl {
namespace {
constexpr const char* kWhy =
    "kiln was built without NCCL (CUDA's and NCCL's headers were not found at configure time)";
}
int version(const char* op) {
  fail(op, kWhy);
}
UniqueId unique_id(const char* op) {
  fail(op, kWhy);
}
Communicator::Communicator(const UniqueId&, int, int) {
  fail("nccl", kWhy);
}
Communicator::~Communicator() = default;
void Communicator::abort() {}
void Communicator::all_reduce(DevicePtr, size_t, DType, Reduction, StreamId) {
  fail("all_reduce", kWhy);
}
void Communicator::broadcast(DevicePtr, size_t, DType, int, StreamId) {
  fail("broadcast", kWhy);
}
void Communicator::all_gather(DevicePtr, DevicePtr, size_t, DType, StreamId) {
  fail("all_gather", kWhy);
}
}  // namespace kiln::cuda::nccl

#endif
