// The artifact loader: structure (FlatBuffers Verifier) then meaning. Nothing in the file is
// trusted until checked here: every index, offset, size, dtype and shape is range-checked with
// overflow-checked arithmetic, every kernel is looked up (all missing names reported at once),
// every operand is defined before it is read, and the target and CPU features are matched.

#include <algorithm>
#include <map>
#include <set>

#include "kiln/runtime/checked_math.h"
#include "kiln_generated.h"
#include "model_impl.h"

namespace kiln::rt {
namespace {

constexpr const char* kOp = "kiln artifact";
constexpr size_t kMaxRank = 6;                   // Dims keeps 6 dims inline
constexpr uint64_t kMaxArenaBytes = 1ull << 40;  // far beyond any real model; rejects garbage

uint64_t align64(uint64_t x) {
  return (x + 63) & ~uint64_t{63};
}

std::string str(const flatbuffers::String* s) {
  return s ? s->str() : std::string();
}

// The FlatBuffers Verifier checks a vector's length word, not that its 8-byte elements are
// 8-byte aligned; a builder always aligns them, so a misaligned one means a corrupt file (and
// reading it would be undefined behaviour).
const flatbuffers::Vector<int64_t>* aligned(const flatbuffers::Vector<int64_t>* v,
                                            const std::string& what) {
  // (An empty vector has no elements to read, and builders do not align it.)
  KILN_CHECK(!v || v->size() == 0 || reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) == 0,
             kOp, what, ": misaligned 64-bit array");
  return v;
}

struct Checker {
  const fb::Model& m;
  Model::Impl& out;
  const Registry& registry;
  uint64_t segment_size = 0;
  const uint8_t* segment = nullptr;
  bool allow_native_code = true;  // LoadOptions::allow_native_code

  void blobs() {
    if (!m.weights()) return;
    for (uint32_t i = 0; i < m.weights()->size(); ++i) {
      const fb::Blob* b = m.weights()->Get(i);
      const uint64_t off = b->offset(), size = b->size();
      KILN_CHECK(off % 64 == 0, kOp, "blob ", i, " (\"", str(b->name()), "\"): offset ", off,
                 " is not a multiple of 64");
      KILN_CHECK(off <= segment_size && size <= segment_size - off, kOp, "blob ", i, " (\"",
                 str(b->name()), "\"): bytes [", off, ", ", off, "+", size,
                 ") lie outside the data segment of ", segment_size, " bytes");
      out.blobs.push_back({str(b->name()), segment + off, static_cast<size_t>(size)});
      out.stats.weight_bytes += size;
    }
  }

  void slots() {
    KILN_CHECK(m.slots(), kOp, "no value slots");
    out.arena_bytes = m.arena_bytes();
    KILN_CHECK(out.arena_bytes <= kMaxArenaBytes, kOp, "arena of ", out.arena_bytes,
               " bytes exceeds the limit of ", kMaxArenaBytes);
    for (uint32_t i = 0; i < m.slots()->size(); ++i) {
      const fb::Slot* s = m.slots()->Get(i);
      SlotInfo info;
      const int kind = static_cast<int>(s->kind());
      KILN_CHECK(kind >= 0 && kind <= 2, kOp, "slot ", i, ": unknown kind ", kind);
      info.kind = static_cast<SlotKind>(kind);
      const int dt = static_cast<int>(s->dtype());
      KILN_CHECK(dt >= 0 && dt < kNumDTypes, kOp, "slot ", i, ": unknown dtype ", dt);
      info.dtype = static_cast<DType>(dt);
      if (info.kind != SlotKind::None) {
        const auto* shape = aligned(s->shape(), "slot " + std::to_string(i) + " shape");
        const size_t rank = shape ? shape->size() : 0;
        KILN_CHECK(rank <= kMaxRank, kOp, "slot ", i, ": rank ", rank, " exceeds ", kMaxRank);
        uint64_t bytes = dtype_size(info.dtype);
        // Kernels multiply dims into strides even when another dim is 0: bound the product of
        // the non-zero dims too, so no stride arithmetic can overflow.
        uint64_t extent = 1;
        for (size_t d = 0; d < rank; ++d) {
          const int64_t n = shape->Get(d);
          KILN_CHECK(n >= 0, kOp, "slot ", i, ": negative dimension ", n);
          KILN_CHECK(mul_ok(bytes, static_cast<uint64_t>(n), bytes) &&
                         mul_ok(extent, static_cast<uint64_t>(n ? n : 1), extent) &&
                         extent <= kMaxArenaBytes,
                     kOp, "slot ", i, ": size overflows");
          info.shape.push_back(n);
        }
        info.nbytes = bytes;
      }
      if (info.kind == SlotKind::Arena) {
        info.offset = s->offset();
        KILN_CHECK(info.offset % dtype_size(info.dtype) == 0, kOp, "slot ", i, ": arena offset ",
                   info.offset, " is not aligned to its ", dtype_short_name(info.dtype),
                   " elements");
        KILN_CHECK(info.offset <= out.arena_bytes && info.nbytes <= out.arena_bytes - info.offset,
                   kOp, "slot ", i, ": bytes [", info.offset, ", ", info.offset, "+", info.nbytes,
                   ") lie outside the arena of ", out.arena_bytes, " bytes");
      } else if (info.kind == SlotKind::Weight) {
        info.weight = s->weight();
        KILN_CHECK(info.weight < out.blobs.size(), kOp, "slot ", i, ": weight index ", info.weight,
                   " out of range (", out.blobs.size(), " weights)");
        KILN_CHECK(info.nbytes <= out.blobs[info.weight].size, kOp, "slot ", i, ": needs ",
                   info.nbytes, " bytes, weight \"", out.blobs[info.weight].name, "\" has ",
                   out.blobs[info.weight].size);
      }
      out.slots.push_back(std::move(info));
    }
    // The arena holds values only: bytes past the last one are never used, and a size beyond
    // them is a corrupt field that a session would allocate and zero in full.
    uint64_t used = 0;
    for (const SlotInfo& info : out.slots)
      if (info.kind == SlotKind::Arena) used = std::max(used, info.offset + info.nbytes);
    KILN_CHECK(out.arena_bytes <= align64(used), kOp, "arena of ", out.arena_bytes,
               " bytes extends past its last value, which ends at byte ", used);
    out.stats.num_slots = out.slots.size();
    out.stats.arena_bytes = out.arena_bytes;
    out.stats.naive_bytes = m.naive_bytes();
  }

  uint32_t slot_index(uint32_t s, const char* what, size_t i) {
    KILN_CHECK(s < out.slots.size(), kOp, what, " ", i, ": slot ", s, " out of range (",
               out.slots.size(), " slots)");
    return s;
  }

  void io() {
    std::set<std::string> names;
    auto read = [&](const flatbuffers::Vector<flatbuffers::Offset<fb::Io>>* v, const char* what,
                    std::vector<TensorSpec>& specs, std::vector<uint32_t>& slots) {
      if (!v) return;
      for (uint32_t i = 0; i < v->size(); ++i) {
        const fb::Io* io = v->Get(i);
        const uint32_t s = slot_index(io->slot(), what, i);
        const SlotInfo& info = out.slots[s];
        KILN_CHECK(info.kind != SlotKind::None, kOp, what, " \"", io->name()->str(), "\": slot ", s,
                   " holds no value");
        if (std::string_view(what) == "input") {
          KILN_CHECK(info.kind == SlotKind::Arena, kOp, "input \"", io->name()->str(), "\": slot ",
                     s, " is not an arena slot");
          KILN_CHECK(names.insert(io->name()->str()).second, kOp, "input \"", io->name()->str(),
                     "\" appears twice");
        }
        specs.push_back({io->name()->str(), info.dtype, info.shape});
        slots.push_back(s);
      }
    };
    read(m.inputs(), "input", out.inputs, out.input_slots);
    read(m.outputs(), "output", out.outputs, out.output_slots);
    KILN_CHECK(!out.outputs.empty(), kOp, "no outputs");
    if (m.state_updates()) {
      for (uint32_t i = 0; i < m.state_updates()->size(); ++i) {
        const fb::StateUpdate* u = m.state_updates()->Get(i);
        const uint32_t v = slot_index(u->value(), "state update", i);
        KILN_CHECK(u->weight() < out.blobs.size(), kOp, "state update ", i, ": weight ",
                   u->weight(), " out of range");
        KILN_CHECK(out.slots[v].kind == SlotKind::Arena &&
                       out.slots[v].nbytes == out.blobs[u->weight()].size,
                   kOp, "state update ", i, ": value slot ", v, " (", out.slots[v].nbytes,
                   " bytes) does not match weight \"", out.blobs[u->weight()].name, "\" (",
                   out.blobs[u->weight()].size, " bytes)");
        out.state_updates.emplace_back(v, u->weight());
      }
    }
  }

  void target(const LoadOptions& options) {
    out.target_triple = str(m.target_triple());
    if (m.cpu_features()) {
      for (const auto* f : *m.cpu_features()) out.cpu_features.push_back(f->str());
    }
    if (options.allow_foreign_target) return;
    if (!out.target_triple.empty()) {
      const std::string_view arch =
          std::string_view(out.target_triple).substr(0, out.target_triple.find('-'));
      KILN_CHECK(arch == host_arch(), kOp, "compiled for target ", out.target_triple,
                 ", this runtime runs on ", host_arch());
    }
    std::string missing;
    for (const std::string& f : out.cpu_features) {
      if (!host_has_feature(f)) missing += (missing.empty() ? "" : ", ") + f;
    }
    KILN_CHECK(missing.empty(), kOp,
               "this CPU lacks the features the artifact requires: ", missing);
  }

  // Compiled code for this host: loaded now so a missing symbol is a load-time error.
  std::map<std::string, CompiledFn> code() {
    std::map<std::string, CompiledFn> symbols;
    if (!m.code()) return symbols;
    for (uint32_t i = 0; i < m.code()->size(); ++i) {
      const fb::CodeObject* c = m.code()->Get(i);
      KILN_CHECK(c->blob() < out.blobs.size(), kOp, "code object ", i, ": blob ", c->blob(),
                 " out of range");
      const std::string triple = str(c->target_triple());
      if (triple.substr(0, triple.find('-')) != host_arch()) continue;
      KILN_CHECK(allow_native_code, kOp, "code object ", i, " (", triple,
                 ") is native code and LoadOptions::allow_native_code is off");
      const BlobInfo& blob = out.blobs[c->blob()];
      out.stats.code_bytes += blob.size;
      out.code.push_back(load_code_object(blob.data, blob.size, "code object " + triple));
      if (c->symbols()) {
        for (const auto* s : *c->symbols())
          symbols[s->str()] = find_symbol(*out.code.back(), s->str());
      }
    }
    return symbols;
  }

  void attrs(const fb::Instruction& ins, std::vector<AttrValue>& values) {
    if (!ins.attrs()) return;
    for (const fb::Attr* a : *ins.attrs()) {
      AttrValue v;
      v.name = a->name()->string_view();
      const int kind = static_cast<int>(a->kind());
      KILN_CHECK(kind >= 0 && kind <= 4, kOp, "attribute '", v.name, "': unknown kind ", kind);
      v.type = static_cast<AttrType>(kind);
      v.i = a->i();
      v.f = a->f();
      if (const auto* ints = aligned(a->ints(), "attribute '" + std::string(v.name) + "'")) {
        v.ints = std::span<const int64_t>(ints->data(), ints->size());
      }
      if (a->s()) v.s = a->s()->string_view();
      values.push_back(v);
    }
  }

  // Optional outputs (KernelDef::optional_outputs) whose slot no instruction reads and that are
  // neither model outputs nor training state are not computed.
  void discard_unread_outputs() {
    std::vector<char> read(out.slots.size(), 0);
    for (const InstrInfo& in : out.instrs)
      for (int32_t s : in.inputs)
        if (s >= 0) read[s] = 1;
    for (uint32_t s : out.output_slots) read[s] = 1;
    for (const auto& [v, blob] : out.state_updates) read[v] = 1;
    for (InstrInfo& in : out.instrs) {
      if (!in.def) continue;
      for (size_t i = 0; i < in.outputs.size() && i < 32; ++i)
        if ((in.def->optional_outputs >> i) & 1u && !read[in.outputs[i]])
          in.discarded_outputs |= 1u << i;
    }
  }

  // An output may share bytes with an input only as an exact alias, and only for kernels that
  // compute elementwise or view their input (KernelDef::inplace_ok; compiled code likewise);
  // outputs never overlap each other.
  void check_overlaps(const InstrInfo& info, const std::string& where) {
    auto range = [&](int32_t s) {
      const SlotInfo& i = out.slots[s];
      return std::pair<uint64_t, uint64_t>(i.offset, i.offset + i.nbytes);
    };
    auto overlaps = [](std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {
      return a.first < b.second && b.first < a.second;
    };
    const bool alias_ok = info.fn != nullptr || (info.def && info.def->inplace_ok);
    for (size_t a = 0; a < info.outputs.size(); ++a) {
      const auto ra = range(info.outputs[a]);
      if (ra.first == ra.second) continue;
      for (size_t b = a + 1; b < info.outputs.size(); ++b) {
        KILN_CHECK(!overlaps(ra, range(info.outputs[b])), kOp, where, ": outputs ", a, " and ", b,
                   " overlap in the arena");
      }
      for (int32_t in : info.inputs) {
        if (in < 0 || out.slots[in].kind != SlotKind::Arena) continue;
        const auto rb = range(in);
        if (rb.first == rb.second || !overlaps(ra, rb)) continue;
        KILN_CHECK(alias_ok && ra == rb, kOp, where, ": output slot ", info.outputs[a],
                   " overlaps input slot ", in,
                   alias_ok ? " without being its exact alias"
                            : " in the arena (this kernel cannot run in place)");
      }
    }
  }

  void instructions() {
    const std::map<std::string, CompiledFn> symbols = code();
    std::vector<uint8_t> defined(out.slots.size(), 0);
    for (size_t s = 0; s < out.slots.size(); ++s)
      defined[s] = out.slots[s].kind == SlotKind::Weight;
    for (uint32_t s : out.input_slots) defined[s] = 1;
    std::set<std::string> missing;
    std::map<std::string, size_t> counts;
    const uint32_t n = m.instructions() ? m.instructions()->size() : 0;
    for (uint32_t k = 0; k < n; ++k) {
      const fb::Instruction& ins = *m.instructions()->Get(k);
      InstrInfo info;
      const std::string kernel = str(ins.kernel()), symbol = str(ins.symbol());
      KILN_CHECK(kernel.empty() != symbol.empty(), kOp, "instruction ", k,
                 ": expected exactly one of a kernel name or a compiled symbol");
      info.name = kernel.empty() ? symbol : kernel;
      ++counts[info.name];
      auto operands = [&](const flatbuffers::Vector<int32_t>* v, std::vector<int32_t>& dst) {
        if (!v) return;
        for (int32_t s : *v) {
          KILN_CHECK(s >= -1 && s < static_cast<int64_t>(out.slots.size()), kOp, "instruction ", k,
                     " (", info.name, "): operand slot ", s, " out of range (", out.slots.size(),
                     " slots)");
          dst.push_back(s);
        }
      };
      operands(ins.inputs(), info.inputs);
      operands(ins.outputs(), info.outputs);
      const std::string where = "instruction " + std::to_string(k) + " (" + info.name + ")";
      if (!kernel.empty()) {
        info.def = registry.find(kernel);
        if (!info.def) {
          missing.insert(kernel);
          out.instrs.push_back(std::move(info));
          continue;
        }
        const KernelDef& d = *info.def;
        const int64_t ni = info.inputs.size(), no = info.outputs.size();
        KILN_CHECK(ni >= d.min_inputs && (d.max_inputs < 0 || ni <= d.max_inputs), kOp, where,
                   ": expected ", d.min_inputs, d.max_inputs < 0 ? " or more" : "",
                   d.max_inputs > d.min_inputs ? " to " + std::to_string(d.max_inputs) : "",
                   " inputs, got ", ni);
        KILN_CHECK(no == d.num_outputs, kOp, where, ": expected ", d.num_outputs, " outputs, got ",
                   no);
        for (int64_t i = 0; i < ni; ++i) {
          const bool optional = i < 32 && (d.optional_inputs >> i) & 1u;
          KILN_CHECK(
              optional || (info.inputs[i] >= 0 && out.slots[info.inputs[i]].kind != SlotKind::None),
              kOp, where, ": input ", i, " is required");
        }
        std::vector<AttrValue> values;
        attrs(ins, values);
        const AttrMap attr_map(kernel, values, d.attrs);
        for (const AttrSpec& spec : d.attrs) {
          KILN_CHECK(!spec.required || attr_map.find(spec.name), kOp, where,
                     ": missing attribute '", spec.name, "' (", attr_type_name(spec.type), ")");
        }
        if (d.decode) {
          try {
            info.params = d.decode(attr_map);
          } catch (const Error& e) {
            fail(kOp, where, ": ", e.what());
          }
        }
      } else {
        auto it = symbols.find(symbol);
        KILN_CHECK(it != symbols.end(), kOp, where,
                   ": no code object for this host defines the symbol");
        info.fn = it->second;
      }
      for (int32_t s : info.inputs) {
        KILN_CHECK(s < 0 || out.slots[s].kind == SlotKind::None || defined[s], kOp, where,
                   ": reads slot ", s, " before any instruction writes it");
      }
      for (int32_t s : info.outputs) {
        KILN_CHECK(s >= 0 && out.slots[s].kind == SlotKind::Arena, kOp, where, ": output slot ", s,
                   " is not an arena slot (weights are read-only)");
      }
      check_overlaps(info, where);
      for (int32_t s : info.outputs) defined[s] = 1;
      out.instrs.push_back(std::move(info));
    }
    if (!missing.empty()) {
      std::string names;
      for (const std::string& s : missing) names += (names.empty() ? "" : ", ") + s;
      fail(kOp, "unknown kernels (not in this runtime's registry): ", names);
    }
    for (size_t i = 0; i < out.output_slots.size(); ++i) {
      KILN_CHECK(defined[out.output_slots[i]], kOp, "output \"", out.outputs[i].name,
                 "\" is never written");
    }
    discard_unread_outputs();
    out.stats.num_instructions = out.instrs.size();
    out.stats.op_counts.assign(counts.begin(), counts.end());
  }
};

}  // namespace

std::unique_ptr<Model::Impl> verify_and_decode(std::unique_ptr<Mapping> file,
                                               const Registry& registry,
                                               const LoadOptions& options) {
  const uint8_t* data = file->data;
  const uint64_t size = file->size;
  KILN_CHECK(size >= 12, kOp, "file of ", size, " bytes is too small to be an artifact");
  const uint32_t fb_size = flatbuffers::ReadScalar<uint32_t>(data);
  KILN_CHECK(flatbuffers::BufferHasIdentifier(data + 4, fb::ModelIdentifier()), kOp,
             "not a kiln artifact (file identifier is not \"KILN\")");
  KILN_CHECK(uint64_t{fb_size} + 4 <= size, kOp, "header declares ", fb_size,
             " bytes of table, the file has ", size - 4, " (truncated?)");
  flatbuffers::Verifier::Options vo;
  vo.max_depth = 32;
  vo.max_tables = 1u << 22;
  // Verified with its size prefix: the builder aligned the prefixed buffer as a whole.
  flatbuffers::Verifier verifier(data, uint64_t{fb_size} + 4, vo);
  KILN_CHECK(fb::VerifySizePrefixedModelBuffer(verifier), kOp,
             "the FlatBuffers table is malformed (verifier rejected it)");
  const fb::Model& m = *fb::GetModel(data + 4);
  KILN_CHECK(m.format_version() == kFormatVersion, kOp, "format version ", m.format_version(),
             ", this runtime reads version ", kFormatVersion);

  auto impl = std::make_unique<Model::Impl>();
  impl->name = str(m.name());
  impl->producer = str(m.producer());
  impl->stats.file_bytes = size;
  if (m.metadata()) {
    for (const fb::KeyValue* kv : *m.metadata())
      impl->metadata.emplace_back(kv->key()->str(), str(kv->value()));
  }
  Checker c{m, *impl, registry};
  c.allow_native_code = options.allow_native_code;
  const uint64_t seg = align64(uint64_t{fb_size} + 4);
  c.segment_size = seg <= size ? size - seg : 0;
  c.segment = data + std::min<uint64_t>(seg, size);
  c.target(options);
  c.blobs();
  c.slots();
  c.io();
  c.instructions();

  impl->weight_tensors.resize(impl->slots.size());
  for (size_t s = 0; s < impl->slots.size(); ++s) {
    const SlotInfo& info = impl->slots[s];
    if (info.kind != SlotKind::Weight) continue;
    // Zero-copy: the tensor reads the mapped file (kernels never write their inputs).
    void* p = const_cast<uint8_t*>(impl->blobs[info.weight].data);
    impl->weight_tensors[s] = kiln::from_blob(p, info.shape, info.dtype);
  }
  if (m.mlir_bytecode())
    impl->mlir_bytecode = {m.mlir_bytecode()->data(), m.mlir_bytecode()->size()};
  impl->file = std::move(file);
  return impl;
}

}  // namespace kiln::rt
