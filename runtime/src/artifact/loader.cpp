// The artifact loader: structure (FlatBuffers Verifier) then meaning. Nothing in the file is
// trusted until checked here: every index, offset, size, dtype and shape is range-checked with
// overflow-checked arithmetic, every kernel is looked up (all missing names reported at once),
// every operand is defined before it is read, and the target and CPU features are matched.

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

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

// A feature name this runtime does not know (a newer writer's) counts as one the CPU lacks.
bool host_knows_and_has(const std::string& feature) {
  try {
    return host_has_feature(feature);
  } catch (const Error&) {
    return false;
  }
}

// Hands a loaded object the runtime functions it imports, in CodeObject.imports order.
void bind_imports(const CodeHandle& code, const std::vector<void*>& functions) {
  using BindFn = void (*)(void* const*);
  const auto bind = reinterpret_cast<BindFn>(find_symbol(code, "kiln_code_bind"));
  bind(functions.data());
}

struct Checker {
  const fb::Model& m;
  Model::Impl& out;
  const Registry& registry;
  uint64_t segment_size = 0;
  const uint8_t* segment = nullptr;
  bool allow_native_code = true;  // LoadOptions::allow_native_code
  uint64_t max_runs = 0;          // LoadOptions::max_instruction_runs

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
        info.splat = s->splat();
        KILN_CHECK(!info.splat || m.format_version() >= 3, kOp, "slot ", i,
                   ": a splat weight needs format version 3, the file says ", m.format_version());
        const uint64_t stored = info.splat ? dtype_size(info.dtype) : info.nbytes;
        KILN_CHECK(stored <= out.blobs[info.weight].size, kOp, "slot ", i, ": needs ", stored,
                   " bytes, weight \"", out.blobs[info.weight].name, "\" has ",
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

  // Why no code object defines a symbol (for the error of an instruction without a portable form).
  std::string code_skipped{};
  // Generated instructions naming a block epilogue: its symbol, and its function where both it
  // and the instruction's own code were loaded.
  std::map<uint32_t, std::string> block_symbols{};
  std::map<uint32_t, BlockEpilogueFn> block_fns{};
  // The same for block prologues.
  std::map<uint32_t, std::string> prologue_symbols{};
  std::map<uint32_t, BlockEpilogueFn> prologue_fns{};

  // Compiled code for this host, loaded now so a missing symbol is a load-time error: in file
  // order, each object for this architecture whose CPU features the host has and that defines a
  // symbol no earlier one did. Objects for other CPUs are listed and skipped; Generated
  // instructions then run their portable form.
  std::map<std::string, CompiledFn> code() {
    std::map<std::string, CompiledFn> symbols;
    if (!m.code()) return symbols;
    out.take_error = reinterpret_cast<char* (*)()>(registry.function("kiln_abi_take_error"));
    out.free_error = reinterpret_cast<void (*)(char*)>(registry.function("kiln_abi_free_error"));
    if (!out.take_error || !out.free_error) out.take_error = nullptr, out.free_error = nullptr;
    auto skip = [&](CodeObjectInfo& info, uint32_t i, const std::string& why) {
      info.why_not = why;
      code_skipped +=
          "; code object " + std::to_string(i) + " (" + info.target_triple + "): " + why;
    };
    for (uint32_t i = 0; i < m.code()->size(); ++i) {
      const fb::CodeObject* c = m.code()->Get(i);
      KILN_CHECK(c->blob() < out.blobs.size(), kOp, "code object ", i, ": blob ", c->blob(),
                 " out of range");
      CodeObjectInfo info;
      info.target_triple = str(c->target_triple());
      info.bytes = out.blobs[c->blob()].size;
      out.stats.code_bytes += info.bytes;
      if (c->cpu_features())
        for (const auto* f : *c->cpu_features()) info.cpu_features.push_back(f->str());
      std::vector<std::string> names;
      if (c->symbols())
        for (const auto* s : *c->symbols()) names.push_back(s->str());
      info.num_symbols = names.size();
      std::vector<void*> imports;
      std::string unknown;
      if (c->imports()) {
        for (const auto* s : *c->imports()) {
          imports.push_back(registry.function(s->string_view()));
          if (!imports.back()) unknown += (unknown.empty() ? "" : ", ") + s->str();
        }
      }
      std::string lacking;
      for (const std::string& f : info.cpu_features)
        if (!host_knows_and_has(f)) lacking += (lacking.empty() ? "" : ", ") + f;
      const bool adds = std::any_of(names.begin(), names.end(),
                                    [&](const std::string& s) { return !symbols.count(s); });
      if (info.target_triple.substr(0, info.target_triple.find('-')) != host_arch()) {
        skip(info, i, "it is for another architecture");
      } else if (!allow_native_code) {
        skip(info, i, "it is native code and LoadOptions::allow_native_code is off");
      } else if (!lacking.empty()) {
        skip(info, i, "this CPU lacks: " + lacking);
      } else if (!unknown.empty()) {
        skip(info, i, "this runtime lacks the functions it calls: " + unknown);
      } else if (!adds) {
        skip(info, i, "an earlier code object defines all its symbols");
      } else {
        const BlobInfo& blob = out.blobs[c->blob()];
        out.code.push_back(
            load_code_object(blob.data, blob.size, "code object " + info.target_triple));
        if (!imports.empty()) bind_imports(*out.code.back(), imports);
        for (const std::string& s : names)
          if (!symbols.count(s)) symbols[s] = find_symbol(*out.code.back(), s);
        info.loaded = true;
      }
      out.stats.code_objects.push_back(std::move(info));
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
      for (const auto* list : {&in.inputs, &in.yields, &in.else_yields})
        for (int32_t s : *list)
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
  void check_overlaps(const InstrInfo& info, const std::string& where, bool compiled = false) {
    auto range = [&](int32_t s) {
      const SlotInfo& i = out.slots[s];
      return std::pair<uint64_t, uint64_t>(i.offset, i.offset + i.nbytes);
    };
    auto overlaps = [](std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {
      return a.first < b.second && b.first < a.second;
    };
    const bool alias_ok = compiled || info.fn != nullptr || (info.def && info.def->inplace_ok);
    for (size_t a = 0; a < info.outputs.size(); ++a) {
      const auto ra = range(info.outputs[a]);
      if (ra.first == ra.second) continue;
      for (size_t b = a + 1; b < info.outputs.size(); ++b) {
        KILN_CHECK(!overlaps(ra, range(info.outputs[b])), kOp, where, ": outputs ", a, " and ", b,
                   " overlap in the arena");
      }
      for (size_t j = 0; j < info.inputs.size(); ++j) {
        const int32_t in = info.inputs[j];
        if (in < 0 || out.slots[in].kind != SlotKind::Arena) continue;
        const auto rb = range(in);
        if (rb.first == rb.second || !overlaps(ra, rb)) continue;
        const bool update_ok = info.def && info.def->update_ok && a == 0 && j == 0;
        KILN_CHECK((alias_ok || update_ok) && ra == rb, kOp, where, ": output slot ",
                   info.outputs[a], " overlaps input slot ", in,
                   alias_ok || update_ok ? " without being its exact alias"
                                         : " in the arena (this kernel cannot run in place)");
      }
    }
  }

  // Decodes instruction k (kernel lookup, attributes, operand ranges); an unknown kernel is
  // collected in `missing` and checked no further.
  InstrInfo decode_instruction(uint32_t k, const std::map<std::string, CompiledFn>& symbols,
                               std::set<std::string>& missing) {
    const fb::Instruction& ins = *m.instructions()->Get(k);
    InstrInfo info;
    const std::string kernel = str(ins.kernel()), symbol = str(ins.symbol());
    const int control = static_cast<int>(ins.control());
    KILN_CHECK(control >= 0 && control <= 3, kOp, "instruction ", k, ": unknown control kind ",
               control);
    info.control = static_cast<Control>(control);
    auto slot_list = [&](const flatbuffers::Vector<int32_t>* v, std::vector<int32_t>& dst) {
      if (!v) return;
      for (int32_t s : *v) {
        KILN_CHECK(s >= -1 && s < static_cast<int64_t>(out.slots.size()), kOp, "instruction ", k,
                   " (", kernel.empty() ? symbol : kernel, "): operand slot ", s, " out of range (",
                   out.slots.size(), " slots)");
        dst.push_back(s);
      }
    };
    slot_list(ins.inputs(), info.inputs);
    slot_list(ins.outputs(), info.outputs);
    if (info.control == Control::Generated) {
      // Compiled code with its portable form: the code when a loaded object defines the symbol.
      info.name = symbol;
      KILN_CHECK(kernel.empty() && !symbol.empty(), kOp, "instruction ", k,
                 ": a generated instruction names a symbol and no kernel");
      slot_list(ins.yields(), info.yields);
      KILN_CHECK(
          !ins.else_yields() && !ins.carried() && ins.else_size() == 0 && ins.counter() == -1, kOp,
          "instruction ", k, " (", symbol,
          "): a generated instruction has no else-region, carried slots or counter");
      info.body_size = ins.body_size();
      if (auto it = symbols.find(symbol); it != symbols.end()) info.fn = it->second;
      if (ins.block_epilogue()) {
        const std::string block = ins.block_epilogue()->str();
        KILN_CHECK(!block.empty() && block != symbol, kOp, "instruction ", k, " (", symbol,
                   "): a block epilogue names a symbol of its own");
        block_symbols[k] = block;
        if (auto it = symbols.find(block); it != symbols.end() && info.fn)
          block_fns[k] = reinterpret_cast<BlockEpilogueFn>(it->second);
      }
      if (ins.block_prologue()) {
        const std::string block = ins.block_prologue()->str();
        KILN_CHECK(
            !block.empty() && block != symbol && !ins.block_epilogue(), kOp, "instruction ", k,
            " (", symbol,
            "): a block prologue names a symbol of its own, and no block epilogue beside it");
        prologue_symbols[k] = block;
        if (auto it = symbols.find(block); it != symbols.end() && info.fn)
          prologue_fns[k] = reinterpret_cast<BlockEpilogueFn>(it->second);
      }
      return info;
    }
    KILN_CHECK(!ins.block_epilogue() && !ins.block_prologue(), kOp, "instruction ", k,
               ": only a generated instruction names a block epilogue or prologue");
    if (info.control != Control::None) {
      info.name = info.control == Control::If ? "if" : "for";
      KILN_CHECK(kernel.empty() && symbol.empty(), kOp, "instruction ", k, " (", info.name,
                 "): a control instruction names no kernel or symbol");
      slot_list(ins.yields(), info.yields);
      slot_list(ins.else_yields(), info.else_yields);
      slot_list(ins.carried(), info.carried);
      info.body_size = ins.body_size();
      info.else_size = ins.else_size();
      info.counter = ins.counter();
      KILN_CHECK(info.counter >= -1 && info.counter < static_cast<int64_t>(out.slots.size()), kOp,
                 "instruction ", k, " (", info.name, "): counter slot ", info.counter,
                 " out of range (", out.slots.size(), " slots)");
      // Fields of the other kind of control instruction must be absent: the session reads every
      // slot an instruction names.
      if (info.control == Control::If) {
        KILN_CHECK(info.counter == -1 && info.carried.empty(), kOp, "instruction ", k,
                   " (if): a loop's counter or carried slots on a branch");
      } else {
        KILN_CHECK(info.else_yields.empty(), kOp, "instruction ", k,
                   " (for): else-branch yields on a loop");
      }
      info.begin = ins.begin();
      info.end = ins.end();
      info.step = ins.step();
      return info;
    }
    KILN_CHECK(kernel.empty() != symbol.empty(), kOp, "instruction ", k,
               ": expected exactly one of a kernel name or a compiled symbol");
    info.name = kernel.empty() ? symbol : kernel;
    const std::string where = "instruction " + std::to_string(k) + " (" + info.name + ")";
    if (!symbol.empty()) {
      auto it = symbols.find(symbol);
      KILN_CHECK(it != symbols.end(), kOp, where,
                 ": no code object this runtime loaded defines the symbol, and the instruction "
                 "has no portable form",
                 code_skipped);
      info.fn = it->second;
      return info;
    }
    info.def = registry.find(kernel);
    if (!info.def) {
      missing.insert(kernel);
      return info;
    }
    const KernelDef& d = *info.def;
    const int64_t ni = info.inputs.size(), no = info.outputs.size();
    KILN_CHECK(ni >= d.min_inputs && (d.max_inputs < 0 || ni <= d.max_inputs), kOp, where,
               ": expected ", d.min_inputs, d.max_inputs < 0 ? " or more" : "",
               d.max_inputs > d.min_inputs ? " to " + std::to_string(d.max_inputs) : "",
               " inputs, got ", ni);
    KILN_CHECK(no == d.num_outputs, kOp, where, ": expected ", d.num_outputs, " outputs, got ", no);
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
      KILN_CHECK(!spec.required || attr_map.find(spec.name), kOp, where, ": missing attribute '",
                 spec.name, "' (", attr_type_name(spec.type), ")");
    }
    if (d.decode) {
      try {
        info.params = d.decode(attr_map);
      } catch (const Error& e) {
        fail(kOp, where, ": ", e.what());
      }
    }
    return info;
  }

  // Which slots hold a value at the current point of the check; values defined inside a region
  // are forgotten when it ends (only the control instruction's outputs survive it), undone from
  // a log so that nested regions cost time in proportion to their instructions.
  struct Defined {
    std::vector<uint8_t> at;
    std::vector<int32_t> log;
    void set(int32_t s) {
      if (!at[s]) at[s] = 1, log.push_back(s);
    }
    size_t mark() const { return log.size(); }
    void undo(size_t mark) {
      for (; log.size() > mark; log.pop_back()) at[log.back()] = 0;
    }
  };

  static constexpr int kMaxNesting = 64;

  bool same_spec(int32_t a, int32_t b) const {
    return out.slots[a].dtype == out.slots[b].dtype && out.slots[a].shape == out.slots[b].shape;
  }

  // Checks `slots` (yields of a region) against `targets`: defined, and of the target's dtype and
  // shape.
  void check_copies(const std::string& where, const char* what, const std::vector<int32_t>& slots,
                    const std::vector<int32_t>& targets, const Defined& defined) {
    KILN_CHECK(slots.size() == targets.size(), kOp, where, ": ", slots.size(), " ", what, " for ",
               targets.size(), " values");
    for (size_t i = 0; i < slots.size(); ++i) {
      const int32_t s = slots[i];
      KILN_CHECK(s >= 0 && out.slots[s].kind != SlotKind::None && defined.at[s], kOp, where, ": ",
                 what, " ", i, " (slot ", s, ") holds no value at the region's end");
      KILN_CHECK(same_spec(s, targets[i]), kOp, where, ": ", what, " ", i, " is ",
                 describe_spec(out.slots[s].shape, out.slots[s].dtype), ", its target is ",
                 describe_spec(out.slots[targets[i]].shape, out.slots[targets[i]].dtype));
    }
  }

  // Verifies instructions [begin, end): every read after a write in the same or an enclosing
  // region, outputs in the arena, regions nested inside their parents.
  // `runs`: how many times each instruction of the region runs per call (loops around it).
  void check_region(uint32_t begin, uint32_t end, Defined& defined, int depth, uint64_t runs) {
    int64_t prev = -1;  // the region's instruction before k (-1: k is its first)
    for (uint32_t k = begin; k < end;) {
      const int64_t before = std::exchange(prev, k);
      InstrInfo& info = out.instrs[k];
      const std::string where = "instruction " + std::to_string(k) + " (" + info.name + ")";
      for (int32_t s : info.inputs) {
        KILN_CHECK(s < 0 || out.slots[s].kind == SlotKind::None || defined.at[s], kOp, where,
                   ": reads slot ", s, " before any instruction writes it");
      }
      for (int32_t s : info.outputs) {
        KILN_CHECK(s >= 0 && out.slots[s].kind == SlotKind::Arena, kOp, where, ": output slot ", s,
                   " is not an arena slot (weights are read-only)");
      }
      if (info.control == Control::None) {
        check_overlaps(info, where);
        for (int32_t s : info.outputs) defined.set(s);
        ++k;
        continue;
      }
      if (info.control == Control::Generated) {
        check_generated(k, end, defined, depth, runs);
        if (block_symbols.count(k)) check_block_epilogue(k, before);
        if (prologue_symbols.count(k)) check_block_prologue(k, end);
        k += 1 + info.body_size;
        continue;
      }
      KILN_CHECK(depth < kMaxNesting, kOp, where, ": control flow nested deeper than ",
                 kMaxNesting);
      KILN_CHECK(info.control == Control::If || info.else_size == 0, kOp, where,
                 ": a loop has no else-region");
      const uint64_t body_end = uint64_t{k} + 1 + info.body_size;
      const uint64_t else_end = body_end + info.else_size;
      KILN_CHECK(else_end <= end, kOp, where, ": its regions (", info.body_size, " + ",
                 info.else_size, " instructions) extend past the end of the enclosing ",
                 depth ? "region" : "program", " at instruction ", end);
      for (size_t a = 0; a < info.outputs.size(); ++a)
        for (size_t b = a + 1; b < info.outputs.size(); ++b) {
          const SlotInfo &x = out.slots[info.outputs[a]], &y = out.slots[info.outputs[b]];
          KILN_CHECK(x.nbytes == 0 || y.nbytes == 0 || x.offset + x.nbytes <= y.offset ||
                         y.offset + y.nbytes <= x.offset,
                     kOp, where, ": outputs ", a, " and ", b, " overlap in the arena");
        }
      if (info.control == Control::If) {
        KILN_CHECK(
            info.inputs.size() == 1 && info.inputs[0] >= 0 &&
                out.slots[info.inputs[0]].kind != SlotKind::None &&
                out.slots[info.inputs[0]].nbytes == dtype_size(out.slots[info.inputs[0]].dtype),
            kOp, where, ": expected one input, a one-element predicate");
        const size_t mark = defined.mark();
        check_region(k + 1, static_cast<uint32_t>(body_end), defined, depth + 1, runs);
        check_copies(where, "then-branch yield", info.yields, info.outputs, defined);
        defined.undo(mark);
        check_region(static_cast<uint32_t>(body_end), static_cast<uint32_t>(else_end), defined,
                     depth + 1, runs);
        check_copies(where, "else-branch yield", info.else_yields, info.outputs, defined);
        defined.undo(mark);
      } else {
        KILN_CHECK(info.step > 0, kOp, where, ": the step must be positive, got ", info.step);
        KILN_CHECK(
            info.carried.size() == info.inputs.size() && info.outputs.size() == info.inputs.size(),
            kOp, where, ": ", info.inputs.size(), " initial values, ", info.carried.size(),
            " carried slots and ", info.outputs.size(), " outputs (expected equal counts)");
        for (size_t i = 0; i < info.inputs.size(); ++i) {
          const int32_t c = info.carried[i];
          KILN_CHECK(info.inputs[i] >= 0 && out.slots[info.inputs[i]].kind != SlotKind::None, kOp,
                     where, ": initial value ", i, " is absent");
          KILN_CHECK(c >= 0 && out.slots[c].kind == SlotKind::Arena, kOp, where, ": carried slot ",
                     i, " is not an arena slot");
          KILN_CHECK(same_spec(c, info.inputs[i]) && same_spec(c, info.outputs[i]), kOp, where,
                     ": carried value ", i,
                     " changes dtype or shape between its initial value, "
                     "carried slot and output");
        }
        const int32_t ctr = info.counter;
        KILN_CHECK(
            ctr == -1 || (ctr >= 0 && ctr < static_cast<int64_t>(out.slots.size()) &&
                          out.slots[ctr].kind == SlotKind::Arena &&
                          out.slots[ctr].dtype == DType::Int64 && out.slots[ctr].shape.empty()),
            kOp, where, ": the counter slot ", ctr, " is not a 0-dim int64 arena slot");
        // Trip count ceil((end - begin) / step), in unsigned arithmetic that cannot overflow.
        const uint64_t span = info.end > info.begin ? static_cast<uint64_t>(info.end) -
                                                          static_cast<uint64_t>(info.begin)
                                                    : 0;
        const uint64_t step = static_cast<uint64_t>(info.step);
        const uint64_t trips = span / step + (span % step != 0);
        uint64_t body_runs = 0;
        const bool fits = mul_ok(runs, trips, body_runs);
        KILN_CHECK(max_runs == 0 || (fits && body_runs <= max_runs), kOp, where, ": its body runs ",
                   trips, " times per run of the loop (", runs,
                   " runs), beyond LoadOptions::max_instruction_runs = ", max_runs);
        const size_t mark = defined.mark();
        for (int32_t c : info.carried) defined.set(c);
        if (ctr >= 0) defined.set(ctr);
        check_region(k + 1, static_cast<uint32_t>(body_end), defined, depth + 1,
                     fits ? body_runs : ~uint64_t{0});
        check_copies(where, "loop-body yield", info.yields, info.carried, defined);
        defined.undo(mark);
        for (size_t i = 0; i < info.yields.size(); ++i)
          for (size_t j = 0; j < info.carried.size(); ++j)
            info.staged |= i != j && info.yields[i] == info.carried[j];
      }
      for (int32_t s : info.outputs) defined.set(s);
      k = static_cast<uint32_t>(else_end);
    }
  }

  // A generated instruction: its call checked as a compiled instruction's, its portable form as
  // a region whose yields become the outputs, whichever the host runs (the file is valid or not
  // whatever CPU loads it). The form not run is marked unused (not prepared, not profiled).
  void check_generated(uint32_t k, uint32_t end, Defined& defined, int depth, uint64_t runs) {
    InstrInfo& info = out.instrs[k];
    const std::string where = "instruction " + std::to_string(k) + " (" + info.name + ")";
    KILN_CHECK(depth < kMaxNesting, kOp, where, ": control flow nested deeper than ", kMaxNesting);
    const uint64_t body_end = uint64_t{k} + 1 + info.body_size;
    KILN_CHECK(body_end <= end, kOp, where, ": its portable form (", info.body_size,
               " instructions) extends past the end of the enclosing ",
               depth ? "region" : "program", " at instruction ", end);
    check_overlaps(info, where, /*compiled=*/true);
    const size_t mark = defined.mark();
    check_region(k + 1, static_cast<uint32_t>(body_end), defined, depth + 1, runs);
    check_copies(where, "portable-form yield", info.yields, info.outputs, defined);
    defined.undo(mark);
    for (int32_t s : info.outputs) defined.set(s);
    if (info.fn)
      for (uint64_t j = k + 1; j < body_end; ++j) out.instrs[j].unused = true;
  }

  // How many times each slot is read: as an operand, a region's copy, a model output or training
  // state (counted once, when a block prologue first asks).
  const std::vector<uint32_t>& slot_reads() {
    if (reads_.empty()) {
      reads_.assign(out.slots.size(), 0);
      for (const InstrInfo& in : out.instrs)
        for (const auto* list : {&in.inputs, &in.yields, &in.else_yields, &in.carried})
          for (int32_t s : *list)
            if (s >= 0) ++reads_[s];
      for (uint32_t s : out.output_slots) ++reads_[s];
      for (const auto& [v, blob] : out.state_updates) ++reads_[v];
    }
    return reads_;
  }
  std::vector<uint32_t> reads_{};

  // Whether slots a and b (either may be -1: absent) share arena bytes.
  bool arena_overlap(int32_t a, int32_t b) const {
    if (a < 0 || b < 0) return false;
    const SlotInfo &x = out.slots[a], &y = out.slots[b];
    return x.kind == SlotKind::Arena && y.kind == SlotKind::Arena && x.nbytes > 0 && y.nbytes > 0 &&
           x.offset < y.offset + y.nbytes && y.offset < x.offset + x.nbytes;
  }

  // A generated instruction naming a block epilogue (kiln.fbs): the instruction before it in
  // its region is a product kernel whose output is one of its inputs and, as its one float32
  // output of the same shape, the very bytes it writes. Where the code runs here, the product
  // runs it on each block it finishes and the instruction is skipped.
  void check_block_epilogue(uint32_t k, int64_t before) {
    InstrInfo& info = out.instrs[k];
    const std::string where = "instruction " + std::to_string(k) + " (" + info.name + ")";
    KILN_CHECK(before >= 0 && before == int64_t{k} - 1, kOp, where,
               ": a block epilogue follows the product it completes, in the same region");
    InstrInfo& product = out.instrs[k - 1];
    KILN_CHECK(product.control == Control::None && product.def && product.def->block_epilogue &&
                   product.outputs.size() == 1,
               kOp, where,
               ": a block epilogue follows a conv2d, conv2d_fused, linear, "
               "linear_fused or matmul, not ",
               product.name);
    const int32_t y = product.outputs[0];
    KILN_CHECK(info.outputs.size() == 1 && std::count(info.inputs.begin(), info.inputs.end(), y),
               kOp, where, ": a block epilogue reads the output of ", product.name,
               " and has one output");
    const SlotInfo &ys = out.slots[y], &zs = out.slots[info.outputs[0]];
    KILN_CHECK(ys.dtype == DType::Float32 && zs.dtype == DType::Float32 && ys.shape == zs.shape &&
                   ys.offset == zs.offset && ys.nbytes == zs.nbytes,
               kOp, where, ": a block epilogue's output is the product's float32 output in place (",
               describe_spec(zs.shape, zs.dtype), " at byte ", zs.offset, ", the product's ",
               describe_spec(ys.shape, ys.dtype), " at byte ", ys.offset, ")");
    // Its other inputs are read while the product writes those bytes.
    for (int32_t s : info.inputs)
      KILN_CHECK(s == y || !arena_overlap(s, y), kOp, where, ": a block epilogue's input slot ", s,
                 " overlaps the output of ", product.name);
    auto fn = block_fns.find(k);
    if (fn == block_fns.end()) return;  // the code does not run here
    product.block_fn = fn->second;
    product.block_chain = k;
    info.by_product = true;
    ++out.stats.block_epilogues;
  }

  // A generated instruction naming a block prologue (kiln.fbs): its one float32 output is input
  // 0 of the instruction right after its portable form in its region, a linear, linear_fused or
  // matmul by a [K, N] matrix, and is read nowhere else (bound, the slot is never written).
  void check_block_prologue(uint32_t k, uint32_t end) {
    InstrInfo& info = out.instrs[k];
    const std::string where = "instruction " + std::to_string(k) + " (" + info.name + ")";
    const uint64_t at = uint64_t{k} + 1 + info.body_size;
    InstrInfo* product = at < end ? &out.instrs[at] : nullptr;
    KILN_CHECK(product && product->control == Control::None && product->def &&
                   product->def->block_prologue,
               kOp, where,
               ": a block prologue precedes a linear, linear_fused or matmul in its "
               "region, not ",
               product ? product->name : "the region's end");
    KILN_CHECK(info.outputs.size() == 1, kOp, where, ": a block prologue has one output");
    const int32_t x = info.outputs[0];
    const SlotInfo& xs = out.slots[x];
    KILN_CHECK(xs.dtype == DType::Float32 && !product->inputs.empty() && product->inputs[0] == x,
               kOp, where, ": a block prologue computes the float32 input 0 of ", product->name);
    if (product->name == "matmul") {
      const int32_t b = product->inputs.size() > 1 ? product->inputs[1] : -1;
      KILN_CHECK(b >= 0 && out.slots[b].shape.size() == 2, kOp, where,
                 ": a block prologue of a matmul by a [K, N] matrix");
    }
    // Read by nothing else: no other operand, region copy, model output or training state
    // (its own yields, copied into it by its portable form, do not read it); and the product's
    // other operands do not share its bytes (bound, they are never overwritten by it).
    const size_t reads = slot_reads()[x] - std::count(info.yields.begin(), info.yields.end(), x);
    KILN_CHECK(reads == 1, kOp, where, ": a block prologue's output is read by ", product->name,
               "'s input 0 alone");
    for (size_t j = 1; j < product->inputs.size(); ++j)
      KILN_CHECK(!arena_overlap(product->inputs[j], x), kOp, where, ": ", product->name,
                 "'s input ", j, " shares bytes with the block prologue's output");
    // Its inputs are read while the product writes its output.
    for (int32_t s : info.inputs)
      for (int32_t o : product->outputs)
        KILN_CHECK(!arena_overlap(s, o), kOp, where, ": a block prologue's input slot ", s,
                   " overlaps the output of ", product->name);
    auto fn = prologue_fns.find(k);
    if (fn == prologue_fns.end()) return;  // the code does not run here
    product->prologue_fn = fn->second;
    product->prologue_chain = k;
    info.by_product = true;
    ++out.stats.block_prologues;
  }

  void instructions() {
    const std::map<std::string, CompiledFn> symbols = code();
    std::set<std::string> missing;
    std::map<std::string, size_t> counts;
    const uint32_t n = m.instructions() ? m.instructions()->size() : 0;
    for (uint32_t k = 0; k < n; ++k) {
      out.instrs.push_back(decode_instruction(k, symbols, missing));
      const Control control = out.instrs.back().control;
      const uint32_t needs = control == Control::Generated ? 3 : control == Control::None ? 1 : 2;
      KILN_CHECK(m.format_version() >= needs, kOp, "instruction ", k,
                 control == Control::Generated ? ": generated code with a portable form"
                                               : ": control flow",
                 " needs format version ", needs, ", the file says ", m.format_version());
      ++counts[control == Control::Generated ? "(generated code)" : out.instrs.back().name];
      if (control == Control::Generated) {
        ++out.stats.generated_instructions;
        out.stats.native_instructions += out.instrs.back().fn != nullptr;
      }
    }
    if (!missing.empty()) {
      std::string names;
      for (const std::string& s : missing) names += (names.empty() ? "" : ", ") + s;
      fail(kOp, "unknown kernels (not in this runtime's registry): ", names);
    }
    Defined defined;
    defined.at.assign(out.slots.size(), 0);
    for (size_t s = 0; s < out.slots.size(); ++s)
      defined.at[s] = out.slots[s].kind == SlotKind::Weight;
    for (uint32_t s : out.input_slots) defined.at[s] = 1;
    check_region(0, n, defined, 0, 1);
    for (size_t i = 0; i < out.output_slots.size(); ++i) {
      KILN_CHECK(defined.at[out.output_slots[i]], kOp, "output \"", out.outputs[i].name,
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
  KILN_CHECK(m.format_version() >= 1 && m.format_version() <= kFormatVersion, kOp,
             "format version ", m.format_version(), ", this runtime reads versions 1 to ",
             kFormatVersion);

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
  c.max_runs = options.max_instruction_runs;
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
    if (info.splat) {  // expanded once, shared by every session
      TensorImplPtr t = kiln::empty(info.shape, info.dtype);
      const size_t e = dtype_size(info.dtype);
      auto* dst = static_cast<uint8_t*>(t->data());
      for (size_t off = 0; off < info.nbytes; off += e) std::memcpy(dst + off, p, e);
      impl->weight_tensors[s] = std::move(t);
      continue;
    }
    impl->weight_tensors[s] = kiln::from_blob(p, info.shape, info.dtype);
  }
  if (m.mlir_bytecode())
    impl->mlir_bytecode = {m.mlir_bytecode()->data(), m.mlir_bytecode()->size()};
  impl->file = std::move(file);
  return impl;
}

}  // namespace kiln::rt
