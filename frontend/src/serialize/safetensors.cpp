// .safetensors: u64 LE header length N, N bytes of JSON header, then the data buffer. The header
// maps tensor names to {"dtype", "shape", "data_offsets": [begin, end)} relative to the buffer,
// plus an optional "__metadata__" object of strings.
#include <algorithm>
#include <unordered_set>

#include "io.h"
#include "json.h"
#include "kiln/ops.h"
#include "kiln/runtime/safetensors.h"
#include "kiln/serialize.h"

namespace kiln {

using namespace serialize_detail;

namespace {

constexpr const char* kRead = "read_safetensors";
constexpr const char* kWrite = "write_safetensors";
constexpr uint64_t kMaxHeader = 100'000'000;  // as the reference implementation

struct Entry {
  std::string name;
  DType dtype;
  Dims shape;
  uint64_t begin, end;
};

}  // namespace

SafetensorsFile read_safetensors_file(const std::string& path) {
  FileSource src(path, kRead);
  auto bad = [&](const auto&... a) { fail(kRead, path, ": ", a...); };
  if (src.size() < 8) bad("truncated: ", src.size(), " bytes, the 8-byte header length is missing");
  uint8_t lenbuf[8];
  src.read_at(0, lenbuf, 8, kRead, "the header length");
  const uint64_t n = get_le<uint64_t>(lenbuf);
  if (n > kMaxHeader) bad("header length ", n, " exceeds the limit of ", kMaxHeader, " bytes");
  if (n > src.size() - 8)
    bad("truncated: header length ", n, " but only ", src.size() - 8, " bytes follow it");
  std::string header(n, '\0');
  src.read_at(8, header.data(), n, kRead, "the header");
  if (n == 0 || header[0] != '{') bad("the header does not start with '{'");
  const Json root = parse_json(header, kRead, path);
  if (root.kind != Json::Kind::Object) bad("the header is not a JSON object");
  const uint64_t buffer = src.size() - 8 - n;

  SafetensorsFile out;
  std::vector<Entry> entries;
  std::unordered_set<std::string> names;
  bool have_meta = false;
  for (const auto& [name, j] : root.object) {
    if (!names.insert(name).second) bad("duplicate key '", name, "' in the header");
    if (name == "__metadata__") {
      have_meta = true;
      if (j.kind != Json::Kind::Object) bad("__metadata__ is ", j.kind_name(), ", not an object");
      for (const auto& [k, v] : j.object) {
        if (v.kind != Json::Kind::String)
          bad("__metadata__ value of '", k, "' is ", v.kind_name(), ", not a string");
        out.metadata.emplace_back(k, v.text);
      }
      continue;
    }
    if (j.kind != Json::Kind::Object)
      bad("tensor '", name, "' is ", j.kind_name(), ", not an object");
    const Json *dt = nullptr, *shape = nullptr, *offs = nullptr;
    for (const auto& [k, v] : j.object) {
      const Json** slot = k == "dtype"          ? &dt
                          : k == "shape"        ? &shape
                          : k == "data_offsets" ? &offs
                                                : nullptr;
      if (!slot) bad("tensor '", name, "' has an unexpected key '", k, "'");
      if (*slot) bad("tensor '", name, "' repeats the key '", k, "'");
      *slot = &v;
    }
    if (!dt || !shape || !offs) bad("tensor '", name, "' needs dtype, shape and data_offsets");
    if (dt->kind != Json::Kind::String) bad("tensor '", name, "': dtype is ", dt->kind_name());
    Entry e;
    e.name = name;
    const std::optional<DType> found = safetensors::dtype_from_format_name(dt->text);
    if (!found)
      bad("tensor '", name, "': unsupported dtype '", dt->text,
          "' (kiln reads F32 F64 F16 BF16 I8 U8 I32 I64 BOOL)");
    e.dtype = *found;
    if (shape->kind != Json::Kind::Array) bad("tensor '", name, "': shape is ", shape->kind_name());
    if (shape->array.size() > 64) bad("tensor '", name, "': more than 64 dims");
    uint64_t numel = 1;
    bool overflow = false;
    for (const Json& d : shape->array) {
      const auto v = d.as_u64();
      if (!v || *v > uint64_t(INT64_MAX))
        bad("tensor '", name, "': shape entries must be non-negative integers");
      e.shape.push_back(static_cast<int64_t>(*v));
      overflow = overflow || !mul_ok(numel, *v, numel) || numel > uint64_t(INT64_MAX);
    }
    uint64_t nbytes = 0;
    if (overflow || !mul_ok(numel, dtype_size(e.dtype), nbytes))
      bad("tensor '", name, "': shape ", e.shape, " overflows 64-bit sizes");
    if (offs->kind != Json::Kind::Array || offs->array.size() != 2)
      bad("tensor '", name, "': data_offsets must be an array [begin, end]");
    const auto b = offs->array[0].as_u64(), en = offs->array[1].as_u64();
    if (!b || !en) bad("tensor '", name, "': data_offsets must be non-negative integers");
    e.begin = *b;
    e.end = *en;
    if (e.begin > e.end)
      bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] are reversed");
    if (e.end > buffer)
      bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end,
          "] lie outside the data buffer of ", buffer, " bytes (truncated file?)");
    if (e.end - e.begin != nbytes)
      bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
          " bytes, but ", dt->text, " shape ", e.shape, " needs ", nbytes);
    entries.push_back(std::move(e));
  }
  (void)have_meta;
  // The regions must tile the buffer: sorted by begin, each starts where the previous ended.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < at)
      bad("tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
          prev->name, "' [", prev->begin, ", ", prev->end, "]");
    if (e.begin > at)
      bad("gap in the data buffer: bytes [", at, ", ", e.begin, ") belong to no tensor (before '",
          e.name, "')");
    at = e.end;
    prev = &e;
  }
  if (at != buffer)
    bad("the tensors cover ", at, " bytes but the data buffer has ", buffer,
        at < buffer ? " (unexpected trailing bytes)" : "");
  for (const Entry& e : entries) {
    Tensor t = kiln::empty(e.shape, TensorOptions(e.dtype));
    src.read_at(8 + n + e.begin, t.data(), e.end - e.begin, kRead, "tensor '" + e.name + "'");
    if (e.dtype == DType::Bool) {
      const auto* p = static_cast<const uint8_t*>(t.data());
      for (uint64_t i = 0; i < e.end - e.begin; ++i)
        if (p[i] > 1) bad("tensor '", e.name, "': bool element ", i, " is ", int(p[i]));
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

NamedTensors read_safetensors(const std::string& path) {
  return read_safetensors_file(path).tensors;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<Tensor> keep;
  std::vector<safetensors::Entry> entries;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(t.defined(), kWrite, "tensor '", name, "' is undefined");
    keep.push_back(t.detach().contiguous());
    const Tensor& c = keep.back();
    entries.push_back({name, c.dtype(), std::vector<int64_t>(c.sizes().begin(), c.sizes().end()),
                       c.impl()->data()});
  }
  safetensors::write(path, entries, metadata, kWrite);
}

}  // namespace kiln
