// The default process group, set up from the launcher's environment (torchrun, mpirun, srun).

#include <cstdlib>
#include <mutex>

#include "kiln/distributed/process_group.h"
#include "kiln/runtime/error.h"

namespace kiln::distributed {
namespace {

std::mutex g_mu;
std::shared_ptr<ProcessGroup> g_group;

// The first of `names` set in the environment, parsed as an integer; -1 when none is set.
int env_int(std::initializer_list<const char*> names, std::string* which) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    KILN_CHECK(*end == '\0' && v >= 0 && v <= (1 << 30), "init_process_group",
               "expected a non-negative integer in ", name, ", got '", value, "'");
    *which = name;
    return static_cast<int>(v);
  }
  return -1;
}

}  // namespace

InitOptions resolve_init_options(InitOptions o) {
  std::string rank_from = "InitOptions::rank", size_from = "InitOptions::world_size";
  if (o.rank < 0) o.rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, &rank_from);
  if (o.world_size < 0)
    o.world_size = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, &size_from);
  KILN_CHECK(o.rank >= 0 && o.world_size >= 1, "init_process_group",
             "no rank and world size given and none in the environment: launch with torchrun "
             "(RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE) or srun, or "
             "set InitOptions::rank and world_size");
  KILN_CHECK(o.rank < o.world_size, "init_process_group", "expected a rank in [0, ", o.world_size,
             ") (", size_from, "), got ", o.rank, " (", rank_from, ")");
  if (o.master_addr.empty()) {
    const char* addr = std::getenv("MASTER_ADDR");
    o.master_addr = addr && *addr ? addr : "127.0.0.1";
  }
  if (o.master_port < 0) {
    std::string from;
    o.master_port = env_int({"MASTER_PORT"}, &from);
    if (o.master_port < 0) o.master_port = 29500;
  }
  // Port 0 (any free one) only serves a group of one: other ranks could not find it.
  KILN_CHECK(
      (o.master_port > 0 || (o.master_port == 0 && o.world_size == 1)) && o.master_port <= 65535,
      "init_process_group", "expected a master port in [1, 65535], got ", o.master_port);
  if (o.backend == "gloo") o.backend = "tcp";
  KILN_CHECK(o.backend == "tcp" || o.backend == "nccl", "init_process_group", "unknown backend '",
             o.backend, "', expected tcp (alias gloo) or nccl");
  return o;
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions options) {
  std::lock_guard<std::mutex> lock(g_mu);
  KILN_CHECK(!g_group, "init_process_group",
             "the default process group is already initialized (destroy_process_group() first)");
  const InitOptions o = resolve_init_options(std::move(options));
  auto store = std::make_shared<TCPStore>(o.master_addr, o.master_port, o.rank == 0, o.timeout);
  ProcessGroupOptions pg;
  pg.timeout = o.timeout;
  pg.backend = o.backend;
  g_group = std::make_shared<ProcessGroup>(std::move(store), o.rank, o.world_size, pg);
  return g_group;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return static_cast<bool>(g_group);
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  KILN_CHECK(g_group, "distributed",
             "the default process group is not initialized: call init_process_group() first");
  return g_group;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    group = std::move(g_group);
  }
}

int get_rank() {
  return default_group()->rank();
}
int get_world_size() {
  return default_group()->size();
}

}  // namespace kiln::distributed
