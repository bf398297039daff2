// Model: loading (mmap or an owned copy) and read-only accessors.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "model_impl.h"

namespace kiln::rt {
namespace {
std::unique_ptr<Model::Impl> with_options(std::unique_ptr<Model::Impl> impl,
                                          const LoadOptions& options) {
  impl->prepare_weights = options.prepare_weights;
  return impl;
}
}  // namespace

Mapping::~Mapping() {
  if (!data) return;
  if (mapped) {
    munmap(const_cast<uint8_t*>(data), size);
  } else {
    std::free(const_cast<uint8_t*>(data));
  }
}

std::string describe_spec(std::span<const int64_t> shape, DType dtype) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "] " + std::string(dtype_short_name(dtype));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& path, const Registry& registry,
                                         const LoadOptions& options) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, "kiln load", "cannot open \"", path, "\": ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    fail("kiln load", "\"", path, "\" is not a regular file");
  }
  auto file = std::make_unique<Mapping>();
  file->size = static_cast<size_t>(st.st_size);
  if (file->size > 0) {
    void* p = mmap(nullptr, file->size, PROT_READ,
                   MAP_PRIVATE | (options.populate ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      close(fd);
      fail("kiln load", "cannot map \"", path, "\": ", std::strerror(err));
    }
    file->data = static_cast<const uint8_t*>(p);
    file->mapped = true;
  }
  close(fd);
  try {
    return std::shared_ptr<const Model>(
        new Model(with_options(verify_and_decode(std::move(file), registry, options), options)));
  } catch (const Error& e) {
    fail(e.op(), "\"", path, "\": ", e.message());
  }
}

std::shared_ptr<const Model> Model::from_bytes(std::span<const uint8_t> bytes,
                                               const Registry& registry,
                                               const LoadOptions& options) {
  auto file = std::make_unique<Mapping>();
  // An aligned copy, so weights are as aligned as in a mapped file.
  const size_t cap = (bytes.size() + 63) / 64 * 64;
  if (cap > 0) {
    void* p = std::aligned_alloc(64, cap);
    KILN_CHECK(p, "kiln load", "out of memory for ", bytes.size(), " bytes");
    std::memcpy(p, bytes.data(), bytes.size());
    file->data = static_cast<const uint8_t*>(p);
  }
  file->size = bytes.size();
  return std::shared_ptr<const Model>(
      new Model(with_options(verify_and_decode(std::move(file), registry, options), options)));
}

const std::string& Model::name() const {
  return impl_->name;
}
const std::string& Model::producer() const {
  return impl_->producer;
}
const std::string& Model::target_triple() const {
  return impl_->target_triple;
}
const std::vector<std::string>& Model::cpu_features() const {
  return impl_->cpu_features;
}
const std::vector<TensorSpec>& Model::inputs() const {
  return impl_->inputs;
}
std::vector<std::string> Model::state_names() const {
  std::vector<std::string> names;
  for (const auto& [slot, blob] : impl_->state_updates) names.push_back(impl_->blobs[blob].name);
  return names;
}

const std::vector<TensorSpec>& Model::outputs() const {
  return impl_->outputs;
}
const std::vector<std::pair<std::string, std::string>>& Model::metadata() const {
  return impl_->metadata;
}
uint64_t Model::arena_bytes() const {
  return impl_->arena_bytes;
}
std::span<const uint8_t> Model::mlir_bytecode() const {
  return impl_->mlir_bytecode;
}
std::optional<std::span<const uint8_t>> Model::blob(std::string_view name) const {
  for (const BlobInfo& b : impl_->blobs)
    if (b.name == name) return std::span<const uint8_t>(b.data, b.size);
  return std::nullopt;
}
const ModelStats& Model::stats() const {
  return impl_->stats;
}

PreparedStats Model::prepared_stats() const {
  PreparedStats st;
  if (!impl_->prepared_ready.load(std::memory_order_acquire)) return st;
  st.ready = true;
  for (size_t k = 0; k < impl_->prepared.size(); ++k) {
    const PreparedInputs& p = impl_->prepared[k];
    if (!p.data) continue;
    st.bytes += p.bytes;
    const std::string key = impl_->instrs[k].name + ": " + std::string(p.algorithm);
    auto it = std::find_if(st.counts.begin(), st.counts.end(),
                           [&](const auto& c) { return c.first == key; });
    if (it == st.counts.end())
      st.counts.emplace_back(key, 1);
    else
      ++it->second;
  }
  return st;
}

int Model::input_index(std::string_view name) const {
  for (size_t i = 0; i < impl_->inputs.size(); ++i) {
    if (impl_->inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}
int Model::output_index(std::string_view name) const {
  for (size_t i = 0; i < impl_->outputs.size(); ++i) {
    if (impl_->outputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string Model::describe_plan() const {
  std::ostringstream os;
  auto operand = [&](int32_t s) {
    if (s < 0 || impl_->slots[s].kind == SlotKind::None) return std::string("none");
    const SlotInfo& i = impl_->slots[s];
    std::string where = i.kind == SlotKind::Arena ? "@" + std::to_string(i.offset)
                                                  : "w:" + impl_->blobs[i.weight].name;
    return "%" + std::to_string(s) + describe_spec(i.shape, i.dtype) + " " + where;
  };
  for (size_t k = 0; k < impl_->instrs.size(); ++k) {
    const InstrInfo& in = impl_->instrs[k];
    os << k << ": " << in.name << (in.fn ? " (compiled)" : "") << "(";
    for (size_t i = 0; i < in.inputs.size(); ++i) os << (i ? ", " : "") << operand(in.inputs[i]);
    os << ") -> ";
    for (size_t i = 0; i < in.outputs.size(); ++i)
      os << (i ? ", " : "") << operand(in.outputs[i])
         << ((in.discarded_outputs >> i) & 1u ? " (discarded)" : "");
    os << "\n";
  }
  return os.str();
}

}  // namespace kiln::rt
