// Session: one arena, a prebuilt tensor per value slot, and the plan loop. The hot path checks
// the guards, copies the inputs into their arena slots, calls each instruction's kernel (or
// compiled function) on prebuilt operand arrays, and copies the outputs out.

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "model_impl.h"

namespace kiln::rt {
namespace {

// dst <- src for tensors of one dtype and shape, any strides (the core's only copy: the
// kernels' general copy_ converts dtypes and broadcasts, which the executor never needs).
void copy_same(TensorImpl& dst, const TensorImpl& src) {
  if (dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.data(), src.data(), dst.nbytes());
    return;
  }
  const size_t es = dst.itemsize();
  const int64_t rank = dst.dim();
  int64_t idx[8] = {0};
  char* d = static_cast<char*>(dst.data());
  const char* s = static_cast<const char*>(src.data());
  for (int64_t n = 0; n < dst.numel(); ++n) {
    int64_t od = 0, os = 0;
    for (int64_t k = 0; k < rank; ++k) {
      od += idx[k] * dst.strides()[k];
      os += idx[k] * src.strides()[k];
    }
    std::memcpy(d + od * static_cast<int64_t>(es), s + os * static_cast<int64_t>(es), es);
    for (int64_t k = rank - 1; k >= 0 && ++idx[k] == dst.sizes()[k]; --k) idx[k] = 0;
  }
}

// The truth of a one-element predicate (loader-checked): nonzero, as C reads it (-0.0 is false,
// NaN true).
bool nonzero(const TensorImpl& t) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::Float32:
      return *static_cast<const float*>(p) != 0.0f;
    case DType::Float64:
      return *static_cast<const double*>(p) != 0.0;
    case DType::Float16:
    case DType::BFloat16:
      return (*static_cast<const uint16_t*>(p) & 0x7fff) != 0;
    default: {
      const auto* b = static_cast<const uint8_t*>(p);
      for (size_t i = 0; i < t.itemsize(); ++i)
        if (b[i]) return true;
      return false;
    }
  }
}

// Per instruction, the positions over which what it touches must stay intact: [k, k] for a
// kernel, through the end of its regions for a control instruction, and the whole body of the
// outermost loop around it (a later iteration reads the values again).
std::vector<std::pair<int64_t, int64_t>> live_extents(const Model::Impl& m) {
  const int64_t n = static_cast<int64_t>(m.instrs.size());
  std::vector<std::pair<int64_t, int64_t>> extent(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const InstrInfo& in = m.instrs[k];
    const int64_t region_end = k + in.body_size + in.else_size;
    extent[k] = {k, region_end};
  }
  // A block prologue's operands are read while the product after it runs (prologue_chain).
  for (int64_t k = 0; k < n; ++k)
    if (m.instrs[k].prologue_fn) extent[m.instrs[k].prologue_chain].second = k;
  for (int64_t k = 0; k < n; ++k) {  // outer loops first: they come first
    const InstrInfo& in = m.instrs[k];
    if (in.control != Control::For) continue;
    const auto outer = extent[k];
    for (int64_t j = k + 1; j <= k + static_cast<int64_t>(in.body_size); ++j) {
      extent[j].first = std::min(extent[j].first, outer.first);
      extent[j].second = std::max(extent[j].second, outer.second);
    }
  }
  return extent;
}

// Every slot an instruction reads or writes, its own and its regions' copies included.
template <typename F>
void for_each_slot(const InstrInfo& in, F f) {
  for (const auto* list : {&in.inputs, &in.outputs, &in.yields, &in.else_yields, &in.carried})
    for (int32_t s : *list)
      if (s >= 0) f(s);
  if (in.counter >= 0) f(in.counter);
}

}  // namespace

struct Session::State {
  void* arena = nullptr;
  std::vector<TensorImplPtr> slots;
  std::vector<TensorImpl*> operands;  // flattened per instruction: inputs then outputs
  std::vector<void*> pointers;        // data pointers, same layout (compiled functions)
  struct Step {
    uint32_t in_begin, n_in, out_begin, n_out;
  };
  std::vector<Step> steps;
  // Training-step state: weight blob -> this session's own copy.
  std::vector<std::pair<uint32_t, void*>> state;
  // Inputs read in place from the caller's tensor (no copy into the arena): per model input, the
  // operand positions that read its slot, or empty when it must be copied (see direct_inputs()).
  std::vector<std::vector<uint32_t>> direct_uses;
  // Per instruction, the arena bytes [offset, offset + size) no tensor live at it occupies (the
  // largest such gap): lent to the kernel for its scratch (scratch_allocate).
  struct Gap {
    uint64_t offset = 0, size = 0;
  };
  std::vector<Gap> gaps;
  // enable_profiling: nanoseconds per instruction, summed over `profiled_runs`.
  bool profiling = false;
  std::vector<uint64_t> instr_ns;
  uint64_t profiled_runs = 0;
  ~State() {
    std::free(arena);
    for (auto& [blob, p] : state) std::free(p);
  }
};

Session::Session(std::shared_ptr<const Model> model) : model_(std::move(model)), s_(new State) {
  KILN_CHECK(model_, "kiln session", "no model");
  const Model::Impl& m = model_->impl();
  const size_t arena_bytes = (m.arena_bytes + 63) / 64 * 64;
  if (arena_bytes > 0) {
    s_->arena = std::aligned_alloc(64, arena_bytes);
    KILN_CHECK(s_->arena, "kiln session", "cannot allocate an arena of ", arena_bytes, " bytes");
    std::memset(s_->arena, 0, arena_bytes);
  }
  for (const auto& [slot, blob] : m.state_updates) {
    bool seen = false;
    for (const auto& st : s_->state) seen |= st.first == blob;
    if (seen) continue;
    const size_t n = (m.blobs[blob].size + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n ? n : 64);
    KILN_CHECK(p, "kiln session", "cannot allocate state \"", m.blobs[blob].name, "\"");
    std::memcpy(p, m.blobs[blob].data, m.blobs[blob].size);
    s_->state.emplace_back(blob, p);
  }
  s_->slots.resize(m.slots.size());
  for (size_t i = 0; i < m.slots.size(); ++i) {
    const SlotInfo& info = m.slots[i];
    if (info.kind == SlotKind::Arena) {
      s_->slots[i] =
          kiln::from_blob(static_cast<char*>(s_->arena) + info.offset, info.shape, info.dtype);
    } else if (info.kind == SlotKind::Weight) {
      s_->slots[i] = m.weight_tensors[i];
      for (const auto& [blob, p] : s_->state) {
        if (blob == info.weight) s_->slots[i] = kiln::from_blob(p, info.shape, info.dtype);
      }
    }
  }
  for (const InstrInfo& in : m.instrs) {
    State::Step step{};
    step.in_begin = static_cast<uint32_t>(s_->operands.size());
    step.n_in = static_cast<uint32_t>(in.inputs.size());
    for (int32_t s : in.inputs) s_->operands.push_back(s < 0 ? nullptr : s_->slots[s].get());
    step.out_begin = static_cast<uint32_t>(s_->operands.size());
    step.n_out = static_cast<uint32_t>(in.outputs.size());
    for (size_t i = 0; i < in.outputs.size(); ++i)
      s_->operands.push_back((in.discarded_outputs >> i) & 1u ? nullptr
                                                              : s_->slots[in.outputs[i]].get());
    s_->steps.push_back(step);
  }
  for (TensorImpl* t : s_->operands) s_->pointers.push_back(t ? t->data() : nullptr);
  direct_inputs();
  scratch_gaps();
  prepare_model();
}

// A slot is live from the instruction that first writes it (model inputs: from the start) to the
// last that reads or writes it (model outputs and state written back: to the end); the bytes of
// every slot live at an instruction are off limits for its scratch.
void Session::scratch_gaps() {
  const Model::Impl& m = model_->impl();
  const int64_t n = static_cast<int64_t>(m.instrs.size());
  std::vector<int64_t> first(m.slots.size(), n), last(m.slots.size(), -1);
  const auto extent = live_extents(m);
  for (int64_t k = 0; k < n; ++k) {
    for_each_slot(m.instrs[k], [&](int32_t s) {
      first[s] = std::min(first[s], extent[k].first);
      last[s] = std::max(last[s], extent[k].second);
    });
  }
  for (uint32_t s : m.input_slots) first[s] = 0;
  for (uint32_t s : m.output_slots) last[s] = n;
  for (const auto& [s, blob] : m.state_updates) last[s] = n;
  s_->gaps.assign(static_cast<size_t>(n), {});
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // [begin, end) byte ranges
  for (int64_t k = 0; k < n; ++k) {
    busy.clear();
    for (size_t s = 0; s < m.slots.size(); ++s) {
      const SlotInfo& info = m.slots[s];
      if (info.kind == SlotKind::Arena && info.nbytes > 0 && first[s] <= k && k <= last[s])
        busy.emplace_back(info.offset, info.offset + info.nbytes);
    }
    std::sort(busy.begin(), busy.end());
    State::Gap best;
    uint64_t at = 0;
    auto consider = [&](uint64_t end) {
      const uint64_t begin = (at + 63) / 64 * 64;  // the session's arena is 64-byte aligned
      if (end > begin && end - begin > best.size) best = {begin, end - begin};
    };
    for (const auto& [b, e] : busy) {
      consider(b);
      at = std::max(at, e);
    }
    consider(m.arena_bytes);
    s_->gaps[k] = best;
  }
}

// An input slot can be bypassed (its readers pointed at the caller's contiguous tensor) when no
// instruction writes bytes overlapping it while it is still read (in-place results, views
// aliasing it), it is not itself a model output and no control instruction copies it (those
// copies read the slot); the arena bytes reused after its last read are unaffected. Saves
// copying the input each run.
void Session::direct_inputs() {
  const Model::Impl& m = model_->impl();
  s_->direct_uses.assign(m.input_slots.size(), {});
  const auto extent = live_extents(m);
  for (size_t i = 0; i < m.input_slots.size(); ++i) {
    const uint32_t slot = m.input_slots[i];
    const SlotInfo& in = m.slots[slot];
    if (in.kind != SlotKind::Arena || in.nbytes == 0) continue;
    bool safe = true;
    for (uint32_t o : m.output_slots) safe &= o != slot;
    size_t last_read = 0;
    std::vector<uint32_t> uses;
    for (size_t k = 0; k < m.instrs.size(); ++k) {
      const InstrInfo& instr = m.instrs[k];
      if (instr.control == Control::Generated) {  // its call reads inputs as a kernel does
        for (const auto* list : {&instr.outputs, &instr.yields})
          for (int32_t s : *list) safe &= s != static_cast<int32_t>(slot);
      } else if (instr.control != Control::None) {
        for_each_slot(instr, [&](int32_t s) { safe &= s != static_cast<int32_t>(slot); });
        continue;
      }
      const State::Step& st = s_->steps[k];
      for (uint32_t j = 0; j < st.n_in; ++j)
        if (instr.inputs[j] == static_cast<int32_t>(slot))
          uses.push_back(st.in_begin + j),
              last_read = std::max(last_read, static_cast<size_t>(extent[k].second));
    }
    for (size_t k = 0; k <= last_read && k < m.instrs.size() && safe; ++k) {
      for (int32_t o : m.instrs[k].outputs) {
        const SlotInfo& out = m.slots[o];
        if (out.kind == SlotKind::Arena && out.offset < in.offset + in.nbytes &&
            in.offset < out.offset + out.nbytes)
          safe = false;
      }
    }
    if (safe) s_->direct_uses[i] = std::move(uses);
  }
}

// Runs every kernel's one-time preparation on the model's constant weights (the first session
// does it for all of them).
void Session::prepare_model() {
  const Model::Impl& m = model_->impl();
  std::call_once(m.prepare_once, [&] {
    std::vector<PreparedInputs> prepared(m.instrs.size());
    if (!m.prepare_weights) {  // LoadOptions::prepare_weights = false: nothing prepared
      m.prepared = std::move(prepared);
      m.prepared_ready.store(true, std::memory_order_release);
      return;
    }
    TensorImpl* const* ops = s_->operands.data();
    for (size_t k = 0; k < m.instrs.size(); ++k) {
      const InstrInfo& in = m.instrs[k];
      if (!in.def || !in.def->prepare || in.unused) continue;
      uint32_t constant = 0;
      for (size_t i = 0; i < in.inputs.size() && i < 32; ++i) {
        const int32_t slot = in.inputs[i];
        if (slot < 0 || m.slots[slot].kind != SlotKind::Weight) continue;
        bool is_state = false;
        for (const auto& [v, blob] : m.state_updates) is_state |= blob == m.slots[slot].weight;
        if (!is_state) constant |= 1u << i;
      }
      if (constant == 0) continue;
      const State::Step& st = s_->steps[k];
      try {
        prepared[k] = in.def->prepare(
            KernelCall{
                in.params.get(), {ops + st.in_begin, st.n_in}, {ops + st.out_begin, st.n_out}},
            constant);
      } catch (const std::bad_alloc&) {
        fail("kiln session", "preparing instruction ", k, " (", in.name, "): out of memory");
      } catch (const std::exception& e) {  // kiln::Error, or a std:: one from a kernel
        fail("kiln session", "preparing instruction ", k, " (", in.name, "): ", e.what());
      }
    }
    m.prepared = std::move(prepared);
    m.prepared_ready.store(true, std::memory_order_release);
  });
}

Session::~Session() = default;

void Session::execute(std::span<const TensorImpl* const> inputs) {
  const Model::Impl& m = model_->impl();
  KILN_CHECK(inputs.size() == m.inputs.size(), "kiln run", "expected ", m.inputs.size(),
             " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = m.inputs[i];
    const TensorImpl* x = inputs[i];
    KILN_CHECK(x, "kiln run", "input \"", spec.name, "\" is null");
    if (x->dtype() != spec.dtype || x->sizes() != spec.shape) [[unlikely]] {
      fail("kiln run", "input \"", spec.name, "\": expected ",
           describe_spec(spec.shape, spec.dtype), ", got ", describe_spec(x->sizes(), x->dtype()));
    }
    std::vector<uint32_t>& uses = s_->direct_uses[i];
    const bool direct = !uses.empty() && x->is_contiguous();
    TensorImpl* slot = s_->slots[m.input_slots[i]].get();
    // Readers see the caller's tensor, or (not contiguous, or not bypassable) the slot's copy.
    TensorImpl* source = direct ? const_cast<TensorImpl*>(x) : slot;
    for (uint32_t pos : uses) {
      s_->operands[pos] = source;
      s_->pointers[pos] = source->data();
    }
    if (!direct) copy_same(*slot, *x);
  }
  run_range(0, m.instrs.size());
  if (s_->profiling) ++s_->profiled_runs;
  for (const auto& [slot, blob] : m.state_updates) {
    for (const auto& [b, p] : s_->state) {
      if (b == blob) std::memcpy(p, s_->slots[slot]->data(), m.blobs[blob].size);
    }
  }
}

// Runs instructions [begin, end): kernels and compiled functions, and control instructions with
// their regions (loader-checked to nest inside [begin, end)).
void Session::run_range(size_t begin, size_t end) {
  const Model::Impl& m = model_->impl();
  auto slot = [&](int32_t s) -> TensorImpl& { return *s_->slots[s]; };
  auto copy = [&](const std::vector<int32_t>& from, const std::vector<int32_t>& to) {
    for (size_t i = 0; i < from.size(); ++i)  // (two slots may name the same bytes)
      if (from[i] != to[i] && slot(to[i]).data() != slot(from[i]).data())
        std::memmove(slot(to[i]).data(), slot(from[i]).data(), slot(to[i]).nbytes());
  };
  for (size_t k = begin; k < end;) {
    const InstrInfo& in = m.instrs[k];
    const size_t body_end = k + 1 + in.body_size, else_end = body_end + in.else_size;
    switch (in.control) {
      case Control::None:
        run_instruction(k);
        ++k;
        continue;
      case Control::If:
        if (nonzero(slot(in.inputs[0]))) {
          run_range(k + 1, body_end);
          copy(in.yields, in.outputs);
        } else {
          run_range(body_end, else_end);
          copy(in.else_yields, in.outputs);
        }
        break;
      case Control::Generated:
        if (in.by_product) {  // a product next to it runs its code (block epilogue or prologue)
        } else if (in.fn) {
          run_instruction(k);
        } else {
          run_range(k + 1, body_end);
          copy(in.yields, in.outputs);
        }
        break;
      case Control::For:
        copy(in.inputs, in.carried);
        for (int64_t i = in.begin; i < in.end; i += in.step) {
          if (in.counter >= 0) *static_cast<int64_t*>(slot(in.counter).data()) = i;
          run_range(k + 1, body_end);
          if (in.staged) {  // a parallel copy: through the outputs
            copy(in.yields, in.outputs);
            copy(in.outputs, in.carried);
          } else {
            copy(in.yields, in.carried);
          }
          // i + step reaches the end (computed without overflowing: i < end).
          if (static_cast<uint64_t>(in.end) - static_cast<uint64_t>(i) <=
              static_cast<uint64_t>(in.step))
            break;
        }
        copy(in.carried, in.outputs);
        break;
    }
    k = else_end;
  }
}

void Session::run_instruction(size_t k) {
  const Model::Impl& m = model_->impl();
  const InstrInfo& in = m.instrs[k];
  const State::Step& st = s_->steps[k];
  TensorImpl* const* ops = s_->operands.data();
  const bool profiling = s_->profiling;
  std::chrono::steady_clock::time_point t0;
  if (profiling) [[unlikely]]
    t0 = std::chrono::steady_clock::now();
  const State::Gap& gap = s_->gaps[k];
  ScratchLease lease(gap.size ? static_cast<char*>(s_->arena) + gap.offset : nullptr, gap.size);
  try {
    if (in.def) {
      // A generated block epilogue or prologue reads the operands of its own instruction.
      void* const* pointers = s_->pointers.data();
      const void* block_ctx = in.block_fn ? pointers + s_->steps[in.block_chain].in_begin : nullptr;
      const void* prologue_ctx =
          in.prologue_fn ? pointers + s_->steps[in.prologue_chain].in_begin : nullptr;
      in.def->run(KernelCall{in.params.get(),
                             {ops + st.in_begin, st.n_in},
                             {ops + st.out_begin, st.n_out},
                             m.prepared[k].data.get(),
                             in.block_fn,
                             block_ctx,
                             in.prologue_fn,
                             prologue_ctx});
    } else {
      in.fn(s_->pointers.data() + st.in_begin);
      // Generated code records a failure (an allocation it could not make) for this thread.
      if (m.take_error) [[likely]]
        if (char* error = m.take_error()) [[unlikely]] {
          const std::string message(error);
          m.free_error(error);
          fail("kiln run", "instruction ", k, " (", in.name, "): ", message);
        }
    }
  } catch (const std::bad_alloc&) {
    fail("kiln run", "instruction ", k, " (", in.name, "): out of memory");
  } catch (const GuardError& e) {  // keeps its type: a caller may re-trace on it
    throw GuardError("kiln run", detail::concat("instruction ", k, " (", in.name, "): ", e.what()));
  } catch (const std::exception& e) {  // kiln::Error, or a std:: one from a kernel
    fail("kiln run", "instruction ", k, " (", in.name, "): ", e.what());
  }
  if (profiling) [[unlikely]]
    s_->instr_ns[k] += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
}

void Session::enable_profiling(bool on) {
  s_->profiling = on;
  s_->instr_ns.assign(on ? model_->impl().instrs.size() : 0, 0);
  s_->profiled_runs = 0;
}

std::vector<Session::InstructionTime> Session::profile() const {
  const Model::Impl& m = model_->impl();
  std::vector<InstructionTime> out;
  for (size_t k = 0; k < s_->instr_ns.size(); ++k) {
    const InstrInfo& in = m.instrs[k];
    if (in.unused || in.by_product) continue;
    std::string what = in.name + (in.fn ? " (compiled)" : "");
    if (in.prologue_fn) what += " (+ generated prologue)";
    if (in.block_fn) what += " (+ generated epilogue)";
    if (!in.outputs.empty() && in.outputs[0] >= 0) {
      const SlotInfo& o = m.slots[in.outputs[0]];
      what += " -> " + describe_spec(o.shape, o.dtype);
    }
    if (k < m.prepared.size() && m.prepared[k].data)
      what += " [" + std::string(m.prepared[k].algorithm) + "]";
    out.push_back(
        {k, std::move(what), s_->instr_ns[k] * 1e-6, s_->profiled_runs, in.fn != nullptr});
  }
  return out;
}

std::vector<TensorImplPtr> Session::run(std::span<const TensorImpl* const> inputs) {
  execute(inputs);
  const Model::Impl& m = model_->impl();
  std::vector<TensorImplPtr> out;
  out.reserve(m.outputs.size());
  for (uint32_t slot : m.output_slots) {
    const TensorImpl& src = *s_->slots[slot];
    TensorImplPtr t = kiln::empty(src.sizes(), src.dtype());
    std::memcpy(t->data(), src.data(), src.nbytes());
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TensorImplPtr> Session::run_named(
    std::span<const std::pair<std::string_view, const TensorImpl*>> inputs) {
  const Model& m = *model_;
  std::vector<const TensorImpl*> ordered(m.inputs().size(), nullptr);
  for (const auto& [name, t] : inputs) {
    const int i = m.input_index(name);
    KILN_CHECK(i >= 0, "kiln run", "the model has no input \"", name, "\"");
    KILN_CHECK(!ordered[i], "kiln run", "input \"", name, "\" given twice");
    ordered[i] = t;
  }
  for (size_t i = 0; i < ordered.size(); ++i) {
    KILN_CHECK(ordered[i], "kiln run", "input \"", m.inputs()[i].name, "\" is missing");
  }
  return run(ordered);
}

void Session::run_into(std::span<const TensorImpl* const> inputs,
                       std::span<TensorImpl* const> outputs) {
  const Model::Impl& m = model_->impl();
  KILN_CHECK(outputs.size() == m.outputs.size(), "kiln run", "expected ", m.outputs.size(),
             " output buffers, got ", outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSpec& spec = m.outputs[i];
    KILN_CHECK(outputs[i] && outputs[i]->dtype() == spec.dtype && outputs[i]->sizes() == spec.shape,
               "kiln run", "output \"", spec.name, "\": expected a buffer of ",
               describe_spec(spec.shape, spec.dtype), ", got ",
               outputs[i] ? describe_spec(outputs[i]->sizes(), outputs[i]->dtype()) : "null");
  }
  execute(inputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    copy_same(*outputs[i], *s_->slots[m.output_slots[i]]);
  }
}

const TensorImpl* Session::state(std::string_view name) const {
  const Model::Impl& m = model_->impl();
  for (size_t i = 0; i < m.slots.size(); ++i) {
    if (m.slots[i].kind == SlotKind::Weight && m.blobs[m.slots[i].weight].name == name) {
      return s_->slots[i].get();
    }
  }
  return nullptr;
}

}  // namespace kiln::rt
