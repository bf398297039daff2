// kiln::Value and kiln's binary save/load format.
//
// Layout (all integers little-endian):
//   [0, 8)    magic "KILNSAVE"
//   [8, 12)   u32 format version (1)
//   [12, 16)  u32 CRC-32 of bytes [16, meta_end)
//   [16, 24)  u64 S: number of storages
//   [24, 32)  u64 T: bytes of the value tree
//   [32, 32 + 24 S)        storage table: per storage {u64 offset, u64 nbytes, u32 crc32, u32 0}
//   [.., meta_end = .. + T) the value tree (tags below)
//   zero padding to a multiple of 64, then the storages' bytes, each at its 64-aligned offset, in
//   table order, not overlapping; the file ends where the last storage ends.
// Value tree: u8 tag, then
//   0 none | 1 bool: u8 0/1 | 2 int: i64 | 3 double: f64 | 4 string: u64 length, bytes
//   5 tensor: u8 dtype, u8 requires_grad, u32 ndim, ndim x i64 sizes, ndim x i64 strides,
//             i64 storage_offset (elements), u64 storage index
//   6 list: u64 count, values | 7 dict: u64 count, count x {u64 key length, key, value}
//   8 undefined tensor
#include "kiln/serialize.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "io.h"
#include "kiln/autograd.h"

namespace kiln {

using namespace serialize_detail;

// ------------------------------------------------------------------------------------- Value

Value::Value(uint64_t v) {
  KILN_CHECK(v <= static_cast<uint64_t>(INT64_MAX), "Value", "integer ", v,
             " does not fit in int64");
  v_ = static_cast<int64_t>(v);
}

Value::Value(Dict d) {
  std::unordered_set<std::string> seen;
  for (const auto& [k, _] : d)
    KILN_CHECK(seen.insert(k).second, "Value", "duplicate dict key '", k, "'");
  v_ = std::move(d);
}

Value::Value(const std::vector<Tensor>& tensors) {
  List l;
  l.reserve(tensors.size());
  for (const auto& t : tensors) l.emplace_back(t);
  v_ = std::move(l);
}

std::string Value::kind() const {
  static const char* names[] = {"none",   "bool",   "int",  "double",
                                "string", "tensor", "list", "dict"};
  return names[v_.index()];
}

namespace {
[[noreturn]] void wrong_kind(const Value& v, const char* want) {
  fail("Value", "expected a ", want, ", holds a ", v.kind());
}
}  // namespace

bool Value::to_bool() const {
  if (!is_bool()) wrong_kind(*this, "bool");
  return std::get<bool>(v_);
}
int64_t Value::to_int() const {
  if (!is_int()) wrong_kind(*this, "int");
  return std::get<int64_t>(v_);
}
double Value::to_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(v_));
  if (!is_double()) wrong_kind(*this, "double");
  return std::get<double>(v_);
}
const std::string& Value::to_string() const {
  if (!is_string()) wrong_kind(*this, "string");
  return std::get<std::string>(v_);
}
const Tensor& Value::to_tensor() const {
  if (!is_tensor()) wrong_kind(*this, "tensor");
  return std::get<Tensor>(v_);
}
const Value::List& Value::to_list() const {
  if (!is_list()) wrong_kind(*this, "list");
  return std::get<List>(v_);
}
Value::List& Value::to_list() {
  if (!is_list()) wrong_kind(*this, "list");
  return std::get<List>(v_);
}
const Value::Dict& Value::to_dict() const {
  if (!is_dict()) wrong_kind(*this, "dict");
  return std::get<Dict>(v_);
}
Value::Dict& Value::to_dict() {
  if (!is_dict()) wrong_kind(*this, "dict");
  return std::get<Dict>(v_);
}

const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : to_dict())
    if (k == key) return &v;
  return nullptr;
}

const Value& Value::at(const std::string& key) const {
  const Value* v = find(key);
  KILN_CHECK(v != nullptr, "Value", "no key '", key, "' in the dict");
  return *v;
}

void Value::insert(const std::string& key, Value value) {
  if (is_none()) v_ = Dict{};
  Dict& d = to_dict();
  for (auto& [k, v] : d)
    if (k == key) {
      v = std::move(value);
      return;
    }
  d.emplace_back(key, std::move(value));
}

NamedTensors Value::to_named_tensors() const {
  NamedTensors out;
  if (is_list()) {
    const List& l = to_list();
    for (size_t i = 0; i < l.size(); ++i) out.emplace_back(std::to_string(i), l[i].to_tensor());
    return out;
  }
  for (const auto& [k, v] : to_dict()) {
    KILN_CHECK(v.is_tensor(), "Value", "key '", k, "' holds a ", v.kind(), ", not a tensor");
    out.emplace_back(k, v.to_tensor());
  }
  return out;
}

std::map<std::string, Tensor> Value::to_tensor_map() const {
  std::map<std::string, Tensor> out;
  for (auto& [k, t] : to_named_tensors()) out.emplace(k, t);
  return out;
}

std::vector<Tensor> Value::to_tensor_list() const {
  std::vector<Tensor> out;
  for (const Value& v : to_list()) out.push_back(v.to_tensor());
  return out;
}

// ---------------------------------------------------------------------------- binary format

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'S', 'A', 'V', 'E'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kAlign = 64;
constexpr uint64_t kFixedHeader = 32;
constexpr uint64_t kTableEntry = 24;
constexpr int kMaxDepth = 128;
constexpr int64_t kMaxDims = 64;

enum Tag : uint8_t {
  kNone = 0,
  kBool = 1,
  kInt = 2,
  kDouble = 3,
  kString = 4,
  kTensor = 5,
  kList = 6,
  kDict = 7,
  kUndefinedTensor = 8,
};

uint64_t align_up(uint64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

struct Writer {
  std::vector<uint8_t> tree;
  std::vector<const Storage*> storages;
  std::vector<Tensor> host_copies;  // device tensors' bytes, copied to the host
  std::unordered_map<const Storage*, uint64_t> index;

  void put_string(const std::string& s) {
    put_le<uint64_t>(tree, s.size());
    tree.insert(tree.end(), s.begin(), s.end());
  }

  void value(const Value& v, int depth) {
    KILN_CHECK(depth < kMaxDepth, "save", "values nested deeper than ", kMaxDepth, " levels");
    if (v.is_none()) {
      put_u8(tree, kNone);
    } else if (v.is_bool()) {
      put_u8(tree, kBool);
      put_u8(tree, v.to_bool() ? 1 : 0);
    } else if (v.is_int()) {
      put_u8(tree, kInt);
      put_le<int64_t>(tree, v.to_int());
    } else if (v.is_double()) {
      put_u8(tree, kDouble);
      put_le<double>(tree, v.to_double());
    } else if (v.is_string()) {
      put_u8(tree, kString);
      put_string(v.to_string());
    } else if (v.is_tensor()) {
      tensor(v.to_tensor());
    } else if (v.is_list()) {
      put_u8(tree, kList);
      put_le<uint64_t>(tree, v.to_list().size());
      for (const Value& x : v.to_list()) value(x, depth + 1);
    } else {
      put_u8(tree, kDict);
      put_le<uint64_t>(tree, v.to_dict().size());
      for (const auto& [k, x] : v.to_dict()) {
        put_string(k);
        value(x, depth + 1);
      }
    }
  }

  void tensor(const Tensor& t) {
    if (!t.defined()) {
      put_u8(tree, kUndefinedTensor);
      return;
    }
    if (t.device() != Device::CPU) {
      // Written from a host copy (loaded back as a CPU tensor); kept alive until the bytes are out.
      host_copies.push_back(t.cpu());
      host_copies.back().requires_grad_(t.requires_grad());
      return tensor(host_copies.back());
    }
    const TensorImpl& impl = *t.impl();
    const Storage* s = impl.storage().get();
    auto [it, added] = index.emplace(s, storages.size());
    if (added) storages.push_back(s);
    put_u8(tree, kTensor);
    put_u8(tree, static_cast<uint8_t>(impl.dtype()));
    put_u8(tree, t.requires_grad() ? 1 : 0);
    put_le<uint32_t>(tree, static_cast<uint32_t>(impl.dim()));
    for (int64_t x : impl.sizes()) put_le<int64_t>(tree, x);
    for (int64_t x : impl.strides()) put_le<int64_t>(tree, x);
    put_le<int64_t>(tree, impl.storage_offset());
    put_le<uint64_t>(tree, it->second);
  }
};

// Builds everything up to the first storage; `offsets` gets each storage's file offset.
std::vector<uint8_t> build_meta(const Writer& w, std::vector<uint64_t>& offsets, uint64_t& total) {
  const uint64_t n = w.storages.size();
  std::vector<uint8_t> meta;
  meta.insert(meta.end(), kMagic, kMagic + 8);
  put_le<uint32_t>(meta, kVersion);
  put_le<uint32_t>(meta, 0);  // CRC, filled below
  put_le<uint64_t>(meta, n);
  put_le<uint64_t>(meta, w.tree.size());
  const uint64_t meta_end = kFixedHeader + kTableEntry * n + w.tree.size();
  uint64_t at = align_up(meta_end);
  offsets.clear();
  for (const Storage* s : w.storages) {
    offsets.push_back(at);
    put_le<uint64_t>(meta, at);
    put_le<uint64_t>(meta, s->nbytes());
    put_le<uint32_t>(meta, crc32_of(s->data(), s->nbytes()));
    put_le<uint32_t>(meta, 0);
    at = align_up(at + s->nbytes());
  }
  total = n ? offsets.back() + w.storages.back()->nbytes() : meta_end;
  meta.insert(meta.end(), w.tree.begin(), w.tree.end());
  const uint32_t crc = crc32_of(meta.data() + 16, meta.size() - 16);
  std::memcpy(meta.data() + 12, &crc, 4);
  return meta;
}

template <typename Emit>
void emit_file(const Value& value, Emit&& emit) {
  Writer w;
  w.value(value, 0);
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  std::vector<uint8_t> meta = build_meta(w, offsets, total);
  emit(meta.data(), meta.size());
  uint64_t at = meta.size();
  static const uint8_t zeros[kAlign] = {};
  for (size_t i = 0; i < w.storages.size(); ++i) {
    emit(zeros, offsets[i] - at);
    emit(w.storages[i]->data(), w.storages[i]->nbytes());
    at = offsets[i] + w.storages[i]->nbytes();
  }
}

// ------------------------------------------------------------------------------------- reader

struct StorageEntry {
  uint64_t offset = 0, nbytes = 0;
  uint32_t crc = 0;
  StoragePtr storage;  // created on first use
  bool holds_bool = false;
};

class Reader {
 public:
  Reader(Source& src) : src_(src) {}

  Value read() {
    const uint64_t fsize = src_.size();
    if (fsize < kFixedHeader)
      bad("truncated: ", fsize, " bytes, the header alone needs ", kFixedHeader);
    uint8_t head[kFixedHeader];
    src_.read_at(0, head, kFixedHeader, "load", "the header");
    if (std::memcmp(head, kMagic, 8) != 0) bad("bad magic (not a kiln save file)");
    const uint32_t version = get_le<uint32_t>(head + 8);
    if (version != kVersion)
      bad("unsupported format version ", version, " (this kiln reads ", kVersion, ")");
    const uint32_t meta_crc = get_le<uint32_t>(head + 12);
    const uint64_t n = get_le<uint64_t>(head + 16);
    const uint64_t tree_bytes = get_le<uint64_t>(head + 24);
    const uint64_t room = fsize - kFixedHeader;
    if (n > room / kTableEntry)
      bad("truncated or corrupt: a table of ", n, " storages needs ", n, " x ", kTableEntry,
          " bytes, only ", room, " follow the header");
    const uint64_t table_bytes = n * kTableEntry;
    if (tree_bytes > room - table_bytes)
      bad("truncated or corrupt: the value tree of ", tree_bytes, " bytes does not fit in the ",
          room - table_bytes, " bytes after the storage table");
    const uint64_t meta_end = kFixedHeader + table_bytes + tree_bytes;
    meta_.resize(meta_end);
    std::memcpy(meta_.data(), head, kFixedHeader);
    src_.read_at(kFixedHeader, meta_.data() + kFixedHeader, meta_end - kFixedHeader, "load",
                 "the storage table and value tree");
    if (crc32_of(meta_.data() + 16, meta_end - 16) != meta_crc)
      bad("header checksum mismatch (the storage table or value tree is corrupt)");

    // Storage table: 64-aligned, in order, non-overlapping, inside the file, ending it.
    uint64_t prev_end = meta_end;
    entries_.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      const uint8_t* p = meta_.data() + kFixedHeader + i * kTableEntry;
      StorageEntry& e = entries_[i];
      e.offset = get_le<uint64_t>(p);
      e.nbytes = get_le<uint64_t>(p + 8);
      e.crc = get_le<uint32_t>(p + 16);
      if (get_le<uint32_t>(p + 20) != 0) bad("storage ", i, ": reserved field is not zero");
      if (e.offset % kAlign != 0) bad("storage ", i, ": offset ", e.offset, " is not 64-aligned");
      if (e.offset < prev_end)
        bad("storage ", i, ": offset ", e.offset, " overlaps the previous section (ends at ",
            prev_end, ")");
      if (e.offset > fsize || e.nbytes > fsize - e.offset)
        bad("truncated: storage ", i, " needs bytes [", e.offset, ", ", e.offset + e.nbytes,
            ") but the file has ", fsize);
      if (e.offset - prev_end >= kAlign)
        bad("storage ", i, ": offset ", e.offset, " leaves a gap of ", e.offset - prev_end,
            " bytes (padding is at most 63)");
      uint8_t pad[kAlign];
      src_.read_at(prev_end, pad, e.offset - prev_end, "load", "padding");
      for (uint64_t k = 0; k < e.offset - prev_end; ++k)
        if (pad[k] != 0) bad("padding byte ", prev_end + k, " is not zero");
      prev_end = e.offset + e.nbytes;
    }
    if (prev_end != fsize)
      bad(fsize > prev_end ? "unexpected trailing bytes: the file has " : "file size mismatch: ",
          fsize, " bytes, its contents end at ", prev_end);

    pos_ = kFixedHeader + table_bytes;
    end_ = meta_end;
    Value v = value(0);
    if (pos_ != end_) bad("value tree: ", end_ - pos_, " unused bytes after the root value");
    for (uint64_t i = 0; i < n; ++i)
      if (entries_[i].holds_bool && entries_[i].storage) check_bool(i);
    return v;
  }

 private:
  template <typename... A>
  [[noreturn]] void bad(const A&... a) {
    fail("load", src_.name(), ": ", a...);
  }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > end_ - pos_)
      bad("value tree truncated: ", what, " needs ", n, " bytes at tree byte ", pos_, ", ",
          end_ - pos_, " remain");
    const uint8_t* p = meta_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T get(const char* what) {
    return get_le<T>(take(sizeof(T), what));
  }
  std::string str(const char* what) {
    const uint64_t len = get<uint64_t>(what);
    const uint8_t* p = take(len, what);
    return std::string(reinterpret_cast<const char*>(p), len);
  }
  uint64_t count(const char* what) {
    const uint64_t c = get<uint64_t>(what);
    if (c > end_ - pos_)  // every element takes at least one byte
      bad("value tree: ", what, " count ", c, " exceeds the ", end_ - pos_, " bytes left");
    return c;
  }

  Value value(int depth) {
    if (depth >= kMaxDepth) bad("value tree nested deeper than ", kMaxDepth, " levels");
    const uint64_t at = pos_;
    const uint8_t tag = get<uint8_t>("a value tag");
    switch (tag) {
      case kNone:
        return Value();
      case kBool: {
        const uint8_t b = get<uint8_t>("a bool");
        if (b > 1) bad("value tree: bool at tree byte ", at, " is ", int(b), " (expected 0 or 1)");
        return Value(b == 1);
      }
      case kInt:
        return Value(get<int64_t>("an int"));
      case kDouble:
        return Value(get<double>("a double"));
      case kString:
        return Value(str("a string"));
      case kTensor:
        return Value(tensor(at));
      case kUndefinedTensor:
        return Value(Tensor());
      case kList: {
        const uint64_t c = count("list");
        Value::List l;
        l.reserve(c);
        for (uint64_t i = 0; i < c; ++i) l.push_back(value(depth + 1));
        return Value(std::move(l));
      }
      case kDict: {
        const uint64_t c = count("dict");
        Value::Dict d;
        d.reserve(c);
        std::unordered_set<std::string> keys;
        for (uint64_t i = 0; i < c; ++i) {
          std::string k = str("a dict key");
          if (!keys.insert(k).second) bad("value tree: duplicate dict key '", k, "'");
          d.emplace_back(std::move(k), value(depth + 1));
        }
        return Value(std::move(d));
      }
      default:
        bad("value tree: unknown tag ", int(tag), " at tree byte ", at);
    }
  }

  Tensor tensor(uint64_t at) {
    const uint8_t dt = get<uint8_t>("a tensor dtype");
    if (dt >= kNumDTypes) bad("tensor at tree byte ", at, ": unknown dtype code ", int(dt));
    const DType dtype = static_cast<DType>(dt);
    const uint8_t rg = get<uint8_t>("a tensor flag");
    if (rg > 1) bad("tensor at tree byte ", at, ": requires_grad flag is ", int(rg));
    const uint32_t ndim = get<uint32_t>("a tensor rank");
    if (ndim > kMaxDims) bad("tensor at tree byte ", at, ": rank ", ndim, " exceeds ", kMaxDims);
    Dims sizes(ndim), strides(ndim);
    for (uint32_t d = 0; d < ndim; ++d) sizes[d] = get<int64_t>("tensor sizes");
    for (uint32_t d = 0; d < ndim; ++d) strides[d] = get<int64_t>("tensor strides");
    const int64_t offset = get<int64_t>("a tensor offset");
    const uint64_t si = get<uint64_t>("a storage index");
    if (si >= entries_.size())
      bad("tensor at tree byte ", at, ": storage index ", si, " but the file has ", entries_.size(),
          " storages");
    if (offset < 0) bad("tensor at tree byte ", at, ": negative storage offset ", offset);
    bool empty = false;
    for (uint32_t d = 0; d < ndim; ++d) {
      if (sizes[d] < 0)
        bad("tensor at tree byte ", at, ": negative size ", sizes[d], " in dim ", d);
      if (strides[d] < 0)
        bad("tensor at tree byte ", at, ": negative stride ", strides[d], " in dim ", d);
      empty = empty || sizes[d] == 0;
    }
    // Elements it may touch: offset + sum (size-1) * stride, all overflow-checked.
    const uint64_t isz = dtype_size(dtype);
    uint64_t numel = 1, last = static_cast<uint64_t>(offset), need = 0;
    if (!empty) {
      for (uint32_t d = 0; d < ndim; ++d) {
        uint64_t span = 0;
        if (!mul_ok(numel, static_cast<uint64_t>(sizes[d]), numel) || numel > uint64_t(INT64_MAX) ||
            !mul_ok(static_cast<uint64_t>(sizes[d] - 1), static_cast<uint64_t>(strides[d]), span) ||
            !add_ok(last, span, last))
          bad("tensor at tree byte ", at, ": sizes ", sizes, " strides ", strides,
              " overflow 64-bit indexing");
      }
      if (!add_ok(last, 1, need) || !mul_ok(need, isz, need))
        bad("tensor at tree byte ", at, ": extent overflows 64-bit indexing");
    }
    StorageEntry& e = entries_[si];
    if (need > e.nbytes)
      bad("tensor at tree byte ", at, " (", dtype_short_name(dtype), " sizes ", sizes, " strides ",
          strides, " offset ", offset, ") reaches byte ", need, " of storage ", si, " which has ",
          e.nbytes);
    if (!e.storage) {
      e.storage = make_intrusive<Storage>(static_cast<size_t>(e.nbytes));
      src_.read_at(e.offset, e.storage->data(), e.nbytes, "load", "storage " + std::to_string(si));
      if (crc32_of(e.storage->data(), e.nbytes) != e.crc)
        bad("storage ", si, ": checksum mismatch (tensor data is corrupt)");
    }
    if (dtype == DType::Bool) e.holds_bool = true;
    Tensor t(
        make_intrusive<TensorImpl>(e.storage, std::move(sizes), std::move(strides), offset, dtype));
    if (rg) {
      if (!t.is_floating_point()) bad("tensor at tree byte ", at, ": requires_grad on a ", dtype);
      t.requires_grad_(true);
    }
    return t;
  }

  void check_bool(uint64_t i) {
    const auto* p = static_cast<const uint8_t*>(entries_[i].storage->data());
    for (uint64_t k = 0; k < entries_[i].nbytes; ++k)
      if (p[k] > 1) bad("storage ", i, " holds bool data but byte ", k, " is ", int(p[k]));
  }

  Source& src_;
  std::vector<uint8_t> meta_;
  std::vector<StorageEntry> entries_;
  uint64_t pos_ = 0, end_ = 0;
};

}  // namespace

void save(const Value& value, const std::string& path) {
  FileSink out(path, "save");
  emit_file(value, [&](const void* p, uint64_t n) { out.write(p, n); });
  out.close();
}

std::vector<uint8_t> save_to_bytes(const Value& value) {
  std::vector<uint8_t> bytes;
  emit_file(value, [&](const void* p, uint64_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  });
  return bytes;
}

Value load(const std::string& path) {
  FileSource src(path, "load");
  return Reader(src).read();
}

Value load_from_bytes(const std::vector<uint8_t>& bytes, const std::string& name) {
  MemorySource src(bytes.data(), bytes.size(), name);
  return Reader(src).read();
}

}  // namespace kiln
