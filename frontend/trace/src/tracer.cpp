// The tracer: a dispatch::TraceHook that turns every op the eager frontend runs into a kiln
// dialect op, keyed by the identity of the tensors flowing between them.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include "kiln/autograd.h"
#include "kiln/control_flow.h"
#include "kiln/dispatch.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/OpSchema.h"
#include "kiln/nn/module.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/random.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "types.h"

namespace kiln::jit {

struct TracedFunction::State {
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TracedFunction::TracedFunction() : state_(std::make_unique<State>()) {}
TracedFunction::~TracedFunction() = default;
TracedFunction::TracedFunction(TracedFunction&&) noexcept = default;
TracedFunction& TracedFunction::operator=(TracedFunction&&) noexcept = default;

mlir::ModuleOp TracedFunction::module() const {
  return *state_->module;
}
mlir::MLIRContext& TracedFunction::context() const {
  return *state_->ctx;
}

std::string TracedFunction::str() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  state_->module->print(os);
  return s;
}

std::string TracedFunction::bytecode() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (mlir::failed(mlir::writeBytecodeToFile(*state_->module, os))) {
    fail("trace", "could not write MLIR bytecode");
  }
  return s;
}

TensorList TracedFunction::operator()(const TensorList& inputs) const {
  KILN_CHECK(inputs.size() == num_inputs_, "traced function", "expected ", num_inputs_,
             " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Guard& g = guards_[i];
    KILN_CHECK(inputs[i].sizes() == g.sizes && inputs[i].dtype() == g.dtype, "traced function",
               "input \"", g.name, "\": expected ", g.sizes, " ", dtype_short_name(g.dtype),
               ", got ", inputs[i].sizes(), " ", dtype_short_name(inputs[i].dtype()));
  }
  refresh_host_values(host_values_, captures_);
  // Random ops continue the process's default stream, as eager calls would.
  if (rng_capture_) {
    int64_t* rng = captures_[*rng_capture_].data_ptr<int64_t>();
    rng[0] = static_cast<int64_t>(default_generator().seed());
    rng[1] = static_cast<int64_t>(default_generator().offset());
  }
  TensorList args = inputs;
  args.insert(args.end(), captures_.begin(), captures_.end());
  TensorList results = interpret(*state_->module, args);
  // Write in-out values back into the captured tensors (a training step updates its parameters).
  for (size_t k = 0; k < mutated_captures_.size(); ++k) {
    kernels::copy_(*captures_[mutated_captures_[k]].impl(), *results[num_outputs_ + k].impl());
    autograd::bump_version(captures_[mutated_captures_[k]]);
  }
  if (rng_capture_) {
    default_generator().set_offset(
        static_cast<uint64_t>(captures_[*rng_capture_].data_ptr<int64_t>()[1]));
  }
  results.resize(num_outputs_);
  return results;
}

void refresh_host_values(const std::vector<HostValue>& values, const TensorList& captures) {
  for (const HostValue& v : values) {
    const double now = v.read();
    if (v.capture) {
      const Tensor& c = captures.at(*v.capture);
      *c.impl()->data_ptr<double>() = now;
      autograd::bump_version(c);
    } else if (now != v.traced && !(std::isnan(now) && std::isnan(v.traced))) {
      throw GuardError("guard", detail::concat("the trace was recorded with ", v.name, " = ",
                                               v.traced, "; it is now ", now,
                                               ", which changes what the trace must compute. "
                                               "Trace again"));
    }
  }
}

class Tracer final : public dispatch::TraceHook {
 public:
  Tracer(mlir::MLIRContext* ctx, const TraceOptions& options)
      : ctx_(ctx), builder_(ctx), options_(options) {}

  void begin(const TensorList& inputs, TracedFunction& out) {
    out_ = &out;
    auto loc = builder_.getUnknownLoc();
    module_ = mlir::ModuleOp::create(loc);
    builder_.setInsertionPointToEnd(module_->getBody());
    // Arguments are appended as captures appear: start with the inputs.
    fn_ = builder_.create<mlir::func::FuncOp>(loc, "forward", builder_.getFunctionType({}, {}));
    block_ = fn_.addEntryBlock();
    builder_.setInsertionPointToStart(block_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string name = "input" + std::to_string(i);
      bind(inputs[i], add_argument(inputs[i], name));
      out.guards_.push_back({name, inputs[i].sizes(), inputs[i].dtype()});
    }
    out.num_inputs_ = inputs.size();
    for (const auto& [name, t] : options_.named_captures) capture_names_[t.impl()] = name;
  }

  mlir::ModuleOp finish(const TensorList& outputs) {
    // Captures are read at every call: one written raw during tracing changed behind the trace.
    for (const Tensor& c : out_->captures_) check_raw(c);
    // A capture (or a small one inlined as a constant) written through another view of its
    // memory has a new value the trace cannot give it: it would be written back stale.
    for (const Tensor& c : out_->captures_) check_not_stale(c, "captured tensor");
    for (const auto& [t, c] : inlined_) check_not_stale(t, "captured tensor");
    promote_written_constants();
    llvm::SmallVector<mlir::Value> results;
    llvm::SmallVector<mlir::Type> types;
    for (const Tensor& t : outputs) {
      mlir::Value v = lookup(t);
      results.push_back(v);
      types.push_back(v.getType());
    }
    out_->num_outputs_ = outputs.size();
    // Captured tensors written in place (parameters and optimizer state of a training step) are
    // in-out values: their final values are extra results, written back after each call.
    for (size_t i = 0; i < out_->captures_.size(); ++i) {
      const TensorImpl* impl = out_->captures_[i].impl();
      mlir::Value now = values_[impl];
      if (now != capture_args_[impl]) {
        results.push_back(now);
        types.push_back(now.getType());
        out_->mutated_captures_.push_back(i);
      }
    }
    for (size_t i = 0; i < out_->captures_.size(); ++i) {
      if (rng_.defined() && out_->captures_[i].impl() == rng_.impl()) out_->rng_capture_ = i;
    }
    // Host scalars the computation used are arguments refreshed before each call; unused ones
    // need nothing.
    std::erase_if(out_->host_values_, [&](HostValue& v) {
      for (size_t k = 0; k < host_scalar_tensors_.size(); ++k) {
        if (capture_names_[host_scalar_tensors_[k].impl()] != v.name) continue;
        for (size_t i = 0; i < out_->captures_.size(); ++i) {
          if (out_->captures_[i].impl() == host_scalar_tensors_[k].impl()) v.capture = i;
        }
        return !v.capture;
      }
      return false;  // a guard
    });
    builder_.create<mlir::func::ReturnOp>(builder_.getUnknownLoc(), results);
    fn_.setFunctionType(builder_.getFunctionType(block_->getArgumentTypes(), types));
    llvm::SmallVector<mlir::Attribute> names;
    for (const auto& n : out_->arg_names_) names.push_back(builder_.getStringAttr(n));
    fn_->setAttr("kiln.arg_names", builder_.getArrayAttr(names));
    // The results before the in-out values: what gradient elimination keeps.
    fn_->setAttr("kiln.num_outputs", builder_.getI64IntegerAttr(out_->num_outputs_));
    return module_.release();
  }

  void on_op(const char* op, const TensorList& inputs, const TensorList& outputs,
             const dispatch::Attrs& attrs) override {
    dispatch::TraceGuard pause(nullptr);  // the tracer's own tensor work is not part of the trace
    // What a recorded op writes (in place, or running statistics) is seen by the trace.
    for (const Tensor& t : outputs)
      if (t.defined()) refresh_raw(t);
    std::string name = op;
    // In-place ops are recorded as their functional form; the written tensor is rebound to the
    // new value (the aliasing the in-place op implies), and so are tensors sharing its memory
    // (see propagate_write).
    struct AfterWrite {
      Tracer* tracer = nullptr;
      const Tensor* written = nullptr;
      const char* op = nullptr;
      ~AfterWrite() {
        if (tracer) tracer->propagate_write(*written, op);
      }
    } after_write;
    if (name.size() > 1 && name.back() == '_') {
      name.pop_back();
      if (!outputs.empty() && outputs[0].defined()) after_write = {this, &outputs[0], op};
      // Inside a cond/loop region only tensors the region created may be written in place.
      KILN_CHECK(region_created_.empty() || region_created_.back().count(outputs[0].impl()),
                 "cond/loop", "a branch or loop body wrote a tensor defined outside it in place (",
                 op, "); return the new value instead");
    }
    if (name == "detach") {  // an alias: same value, no op
      // Autograd saves an alias of an op's output before the op itself reaches the tracer, so
      // the source may not be bound yet: resolve it on first use.
      keep_alive_.push_back(inputs[0].impl_ptr());
      keep_alive_.push_back(outputs[0].impl_ptr());
      aliases_[outputs[0].impl()] = inputs[0];
      return;
    }
    if (const ir::OpSchema* s = ir::find_op_schema(name); s && (s->traits & ir::kTraitRandom)) {
      emit_random(name, outputs[0], attrs);
      return;
    }
    if (name == "add_scalar" || name == "mul_scalar" || name == "div_scalar" ||
        name == "pow_scalar" || name == "rsub_scalar") {
      emit_scalar_binary(name, inputs[0], outputs[0], attrs);
      return;
    }
    if (name == "masked_select") {
      fail("trace",
           "masked_select has a data-dependent shape and cannot be traced; use "
           "where() or masked_fill()");
    }
    if (name == "fill") {
      emit("fill", {inputs[0]}, outputs, attrs);
      return;
    }
    emit(name, inputs, outputs, attrs);
  }

  // The value is baked into what follows (a branch taken, a scalar used): a kiln.guard checks at
  // run time that the input gives the same value, else the call fails with a GuardError.
  void on_read_back(const Tensor& t, double value, const std::source_location& where) override {
    dispatch::TraceGuard pause(nullptr);
    KILN_CHECK(loop_depth_ == 0, "trace",
               "a value was read back from a tensor inside a kiln::loop "
               "body at ",
               where.file_name(), ":", where.line(), " (", where.function_name(),
               "): the body is recorded once, so a guard could only check the first "
               "iteration's value; compute with tensors (kiln::cond) instead");
    out_->read_backs_.push_back({value, where.file_name(), where.line(), where.function_name()});
    if (options_.warn_on_read_back) {
      std::fprintf(stderr,
                   "kiln trace warning: %s:%u (%s): a value was read back from a tensor "
                   "(value %g); the trace is specialized to it and checks it at run time\n",
                   where.file_name(), where.line(), where.function_name(), value);
    }
    // Even a value that is a constant here gets its guard: a small capture inlined as a constant
    // may be written later in the trace and become an in-out argument (a step counter);
    // --kiln-cleanup drops guards of values that stay constant.
    const mlir::Value read = lookup(t);
    const std::string site = std::string(where.file_name()) + ":" + std::to_string(where.line()) +
                             " (" + where.function_name() + ")";
    mlir::OperationState state(location(where), "kiln.guard");
    state.addOperands(read);
    state.addAttribute("value", builder_.getF64FloatAttr(value));
    state.addAttribute("where", builder_.getStringAttr(site));
    builder_.create(state);
  }

  // Remembers the bytes of memory handed out raw; check_raw compares when the trace uses it.
  // The values handed out may decide what the function does next, as item()'s do: a small
  // traced value that depends on the inputs gets a guard per element, a larger one is refused.
  void on_raw_access(const Tensor& t, const std::source_location& where) override {
    guard_raw_read(t, where);
    const StoragePtr& storage = t.impl()->storage();
    auto [it, fresh] = raw_.try_emplace(storage.get());
    if (!fresh) return;
    it->second.where = where;
    it->second.storage = storage;
    const auto* p = static_cast<const uint8_t*>(storage->data());
    it->second.bytes.assign(p, p + storage->nbytes());
  }

  void check_not_stale(const Tensor& t, const char* what) {
    auto s = stale_.find(t.impl());
    if (s == stale_.end()) return;
    fail("trace", "a ", what, " of shape ", t.sizes(), " was written in place by '", s->second,
         "' through another view of its memory: the trace records values, not memory, and cannot "
         "carry that write into it; write the whole tensor (an out-of-place op, then copy_)");
  }

  static constexpr int64_t kMaxGuardedRawRead = 16;

  void guard_raw_read(const Tensor& t, const std::source_location& where) {
    auto it = values_.find(t.impl());
    if (it == values_.end() || !depends_on_arguments(it->second)) return;
    const int64_t n = t.numel();
    KILN_CHECK(n <= kMaxGuardedRawRead, "trace", "data_ptr() at ", where.file_name(), ":",
               where.line(), " (", where.function_name(),
               ") hands out the memory of a traced "
               "tensor of shape ",
               t.sizes(),
               " whose values depend on the function's inputs: "
               "the trace cannot check what the code does with them; read the values that "
               "decide with item() (each becomes a run-time guard), or compute with tensor ops");
    Tensor flat;
    {
      dispatch::TraceGuard pause(nullptr);
      flat = t.reshape({-1}).contiguous();
    }
    // Each element, sliced out of the flattened value, guarded like an item() of it.
    auto loc = location(where);
    mlir::OperationState view(loc, "kiln.view");
    view.addOperands(it->second);
    view.addAttribute("shape", builder_.getDenseI64ArrayAttr({n}));
    view.addTypes(tensor_type(ctx_, Dims{n}, t.dtype()));
    const mlir::Value flat_value = builder_.create(view)->getResult(0);
    const std::string site = std::string(where.file_name()) + ":" + std::to_string(where.line()) +
                             " (" + where.function_name() + ", data_ptr)";
    for (int64_t i = 0; i < n; ++i) {
      double value;
      {
        dispatch::TraceGuard pause(nullptr);
        value = flat.index({i}).item_double();
      }
      mlir::OperationState slice(loc, "kiln.slice");
      slice.addOperands(flat_value);
      slice.addAttribute("dim", builder_.getI64IntegerAttr(0));
      slice.addAttribute("start", builder_.getI64IntegerAttr(i));
      slice.addAttribute("end", builder_.getI64IntegerAttr(i + 1));
      slice.addAttribute("step", builder_.getI64IntegerAttr(1));
      slice.addTypes(tensor_type(ctx_, Dims{1}, t.dtype()));
      mlir::OperationState guard(loc, "kiln.guard");
      guard.addOperands(builder_.create(slice)->getResult(0));
      guard.addAttribute("value", builder_.getF64FloatAttr(value));
      guard.addAttribute("where", builder_.getStringAttr(site));
      builder_.create(guard);
    }
  }

  // Whether `v` is computed from an argument of @forward or of a region (inputs, captures,
  // carried values): constants and factories alone give the same bytes every call.
  static bool depends_on_arguments(mlir::Value v) {
    llvm::SmallVector<mlir::Value> stack{v};
    llvm::SmallPtrSet<mlir::Operation*, 32> seen;
    while (!stack.empty()) {
      mlir::Value x = stack.pop_back_val();
      if (mlir::isa<mlir::BlockArgument>(x)) return true;
      mlir::Operation* op = x.getDefiningOp();
      if (!op || !seen.insert(op).second) continue;
      for (mlir::Value operand : op->getOperands()) stack.push_back(operand);
    }
    return false;
  }

  void on_custom_function(const std::string& name, const TensorList& outputs) override {
    dispatch::TraceGuard pause(nullptr);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& t = outputs[i];
      if (!t.defined() || values_.count(t.impl()) || aliases_.count(t.impl())) continue;
      // Unrecorded but not written raw: a constant (a factory) or an outside tensor passed
      // through, which become constants or captures as anywhere else.
      auto raw = raw_.find(t.impl()->storage().get());
      if (raw == raw_.end() || std::memcmp(raw->second.storage->data(), raw->second.bytes.data(),
                                           raw->second.bytes.size()) == 0)
        continue;
      fail("trace", "custom autograd::Function '", name, "' returned output ", i, " (shape ",
           t.sizes(),
           ") that no kiln op produced: its forward computes outside the "
           "tracer's view (raw loops, a foreign library), so a trace would return this call's "
           "values for every input. Write its forward with kiln ops, or, if the output does not "
           "depend on the inputs, call kiln::jit::mark_constant on it before returning it");
    }
  }

  Tensor on_host_scalar(const void* owner, const std::string& name,
                        std::function<double()> read) override {
    auto [it, fresh] = host_scalars_.try_emplace({owner, name});
    if (!fresh) return it->second;
    dispatch::TraceGuard pause(nullptr);
    const double value = read();
    Tensor t = scalar_tensor(value, TensorOptions(DType::Float64));
    keep_alive_.push_back(t.impl_ptr());
    capture_names_[t.impl()] = unique_host_name(name);
    out_->host_values_.push_back({capture_names_[t.impl()], value, std::move(read), std::nullopt});
    host_scalar_tensors_.push_back(t);
    it->second = t;
    return t;
  }

  void on_host_guard(const void* owner, const std::string& name,
                     std::function<double()> read) override {
    if (!host_guards_.insert({owner, name}).second) return;
    const double value = read();
    out_->host_values_.push_back({unique_host_name(name), value, std::move(read), std::nullopt});
  }

  void on_mark_constant(const Tensor& t) override {
    dispatch::TraceGuard pause(nullptr);
    raw_.erase(t.impl()->storage().get());
    values_.erase(t.impl());
    aliases_.erase(t.impl());
    lookup(t);  // bound now, as a constant or a captured argument holding its current value
  }

  // scf.if with both branches recorded; eager execution continues with the taken branch's values.
  TensorList on_cond(const Tensor& pred, const std::function<TensorList()>& then_fn,
                     const std::function<TensorList()>& else_fn) override {
    autograd::NoGradGuard no_grad;
    KILN_CHECK(pred.defined() && pred.numel() == 1, "cond",
               "the predicate must be a one-element tensor, got shape ",
               pred.defined() ? pred.sizes() : Dims{});
    // The predicate as a 0-dim bool, recorded like any op.
    Tensor p = pred.dtype() == DType::Bool ? pred : ne(pred, zeros_like(pred));
    if (p.dim() != 0) p = p.reshape(Dims{});
    bool taken;
    {
      dispatch::TraceGuard pause(nullptr);  // reading the predicate is not a read-back
      taken = p.item_double() != 0.0;
    }
    auto loc = builder_.getUnknownLoc();
    mlir::Value flag = builder_.create<mlir::tensor::ExtractOp>(loc, lookup(p), mlir::ValueRange{});
    // Record the branches into a result-less scf.if, then move them into one with results.
    auto draft = builder_.create<mlir::scf::IfOp>(loc, mlir::TypeRange{}, flag, true);
    TensorList then_out = record_region(*draft.thenBlock(), {}, [&] { return then_fn(); });
    TensorList else_out = record_region(*draft.elseBlock(), {}, [&] { return else_fn(); });
    detail::check_same_signature("cond", " else branch vs then branch", then_out, else_out);
    builder_.setInsertionPoint(draft);
    llvm::SmallVector<mlir::Type> types;
    for (const Tensor& t : then_out) types.push_back(tensor_type(ctx_, t.sizes(), t.dtype()));
    auto op = builder_.create<mlir::scf::IfOp>(loc, types, flag, true);
    op.getThenRegion().takeBody(draft.getThenRegion());
    op.getElseRegion().takeBody(draft.getElseRegion());
    draft.erase();
    builder_.setInsertionPointAfter(op);
    return bind_results(taken ? then_out : else_out, op->getResults());
  }

  // scf.for over [0, n) with the carry as iteration arguments. The body is recorded on its first
  // iteration; the remaining iterations run eagerly (untraced) to produce the values.
  TensorList on_loop(int64_t n,
                     const std::function<TensorList(const Tensor&, const TensorList&)>& body,
                     const TensorList& carry) override {
    autograd::NoGradGuard no_grad;
    auto loc = builder_.getUnknownLoc();
    llvm::SmallVector<mlir::Value> init;
    for (const Tensor& c : carry) {
      KILN_CHECK(c.defined(), "loop", "carry values must be defined tensors");
      init.push_back(lookup(c));
    }
    auto index = [&](int64_t v) {
      return builder_.create<mlir::arith::ConstantIndexOp>(loc, v).getResult();
    };
    auto op = builder_.create<mlir::scf::ForOp>(loc, index(0), index(n), index(1), init);
    mlir::Block& block = *op.getBody();
    Tensor counter;
    TensorList carry_in;
    {
      dispatch::TraceGuard pause(nullptr);
      counter = scalar_tensor(0, TensorOptions(DType::Int64));
      for (const Tensor& c : carry) carry_in.push_back(c.detach());
    }
    std::vector<std::pair<Tensor, mlir::Value>> block_args;
    ++loop_depth_;
    struct LeaveLoop {
      int& depth;
      ~LeaveLoop() { --depth; }
    } leave{loop_depth_};
    TensorList first = record_region(
        block,
        [&] {
          builder_.setInsertionPointToStart(&block);
          mlir::Value i64 = builder_.create<mlir::arith::IndexCastOp>(loc, builder_.getI64Type(),
                                                                      op.getInductionVar());
          mlir::Value i = builder_.create<mlir::tensor::FromElementsOp>(
              loc, mlir::RankedTensorType::get({}, builder_.getI64Type()), mlir::ValueRange{i64});
          bind(counter, i);
          for (size_t k = 0; k < carry_in.size(); ++k) bind(carry_in[k], op.getRegionIterArg(k));
        },
        [&] { return body(counter, carry_in); });
    detail::check_same_signature("loop", " body result vs carry", carry, first);
    builder_.setInsertionPointAfter(op);
    TensorList state = n == 0 ? carry : first;
    {
      dispatch::TraceGuard pause(nullptr);
      for (int64_t i = 1; i < n; ++i) {
        TensorList next =
            body(scalar_tensor(static_cast<double>(i), TensorOptions(DType::Int64)), state);
        detail::check_same_signature("loop", " body result vs carry", state, next);
        state = std::move(next);
      }
    }
    return bind_results(state, op->getResults());
  }

 private:
  // Records fn() into `block` (any terminator already there is replaced by an scf.yield of fn's
  // results). Bindings made inside stay inside: the block's values do not dominate what follows.
  TensorList record_region(mlir::Block& block, const std::function<void()>& prologue,
                           const std::function<TensorList()>& fn) {
    if (!block.empty() && block.back().hasTrait<mlir::OpTrait::IsTerminator>()) {
      block.back().erase();
    }
    const auto outer = values_;
    const mlir::OpBuilder::InsertionGuard insertion(builder_);
    builder_.setInsertionPointToEnd(&block);
    region_created_.emplace_back();
    if (prologue) prologue();
    TensorList out = fn();
    region_created_.pop_back();
    llvm::SmallVector<mlir::Value> yielded;
    for (const Tensor& t : out) {
      KILN_CHECK(t.defined(), "cond/loop", "a branch or loop body returned an undefined tensor");
      yielded.push_back(lookup(t));
    }
    builder_.create<mlir::scf::YieldOp>(builder_.getUnknownLoc(), yielded);
    for (const auto& [impl, value] : outer) {
      auto now = values_.find(impl);
      KILN_CHECK(now != values_.end() && now->second == value, "cond/loop",
                 "a branch or loop body wrote a tensor defined outside it in place; return the "
                 "new value instead");
    }
    values_ = outer;
    // Captures first seen inside the region are function arguments: visible everywhere.
    for (const auto& [impl, arg] : capture_args_) values_.try_emplace(impl, arg);
    return out;
  }

  // A small tensor inlined as a constant but written later in the trace (an optimizer's momentum
  // buffer for a bias) is state, not a constant: it becomes an in-out argument instead.
  void promote_written_constants() {
    std::unordered_map<const TensorImpl*, mlir::Value> promoted;
    for (auto& [t, c] : inlined_) {
      auto now = values_.find(t.impl());
      const bool written = now != values_.end() && now->second != c;
      if (!written && !promoted.count(t.impl())) continue;
      auto [it, fresh] = promoted.try_emplace(t.impl());
      if (fresh) {
        it->second = add_argument(t, "capture" + std::to_string(out_->captures_.size()));
        capture_args_[t.impl()] = it->second;
        out_->captures_.push_back(t);
      }
      c.replaceAllUsesWith(it->second);
      for (auto& [impl, value] : values_) {
        if (value == c) value = it->second;
      }
      c.getDefiningOp()->erase();
    }
    inlined_.clear();
  }

  // Fresh tensor handles for a region op's results, carrying the eager values.
  TensorList bind_results(const TensorList& values, mlir::ResultRange results) {
    TensorList out;
    dispatch::TraceGuard pause(nullptr);
    for (size_t i = 0; i < values.size(); ++i) {
      out.push_back(values[i].detach());
      bind(out.back(), results[i]);
    }
    return out;
  }

  mlir::Value add_argument(const Tensor& t, const std::string& name) {
    mlir::Value arg =
        block_->addArgument(tensor_type(ctx_, t.sizes(), t.dtype()), builder_.getUnknownLoc());
    out_->arg_names_.push_back(name);
    return arg;
  }

  void bind(const Tensor& t, mlir::Value v) {
    keep_alive_.push_back(t.impl_ptr());
    values_[t.impl()] = v;
  }

  // [first, last + 1) byte range of a view's elements in its storage (empty for no elements).
  static std::pair<int64_t, int64_t> byte_extent(const TensorImpl& t) {
    const int64_t item = static_cast<int64_t>(t.itemsize());
    int64_t lo = t.storage_offset(), hi = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.sizes()[d] == 0) return {0, 0};
      const int64_t span = (t.sizes()[d] - 1) * t.strides()[d];
      (span < 0 ? lo : hi) += span;
    }
    return {lo * item, (hi + 1) * item};
  }

  // After an in-place op rebound `written` to its new value: every other tensor the trace holds
  // that shares its memory sees the write in eager. One of the same geometry (a detach alias)
  // takes the new value; a view of another shape, or the base of a view, would need the write
  // scattered into it, which the trace does not record: it becomes stale, and reading it later
  // is an error naming the op (never a stale value in the trace).
  void propagate_write(const Tensor& written, const char* op) {
    const TensorImpl* w = written.impl();
    auto now = values_.find(w);
    if (now == values_.end()) return;
    const mlir::Value v = now->second;
    std::vector<const TensorImpl*> stale;
    const auto written_bytes = byte_extent(*w);
    for (auto& [impl, value] : values_) {
      if (impl == w || impl->storage() != w->storage()) continue;
      const auto bytes = byte_extent(*impl);
      if (bytes.first >= written_bytes.second || written_bytes.first >= bytes.second)
        continue;  // disjoint parts of one storage (x[0] and x[1]): untouched
      if (impl->sizes() == w->sizes() && impl->strides() == w->strides() &&
          impl->storage_offset() == w->storage_offset() && impl->dtype() == w->dtype()) {
        value = v;
      } else {
        stale.push_back(impl);
      }
    }
    for (const TensorImpl* impl : stale) {
      values_.erase(impl);
      stale_[impl] = op;
    }
  }

  // Binds a tensor an op produced (as opposed to one looked up from outside).
  void bind_created(const Tensor& t, mlir::Value v) {
    bind(t, v);
    if (!region_created_.empty()) region_created_.back().insert(t.impl());
  }

  // The value of a tensor: produced earlier in the trace, or captured from outside.
  mlir::Value lookup(const Tensor& t) {
    if (!raw_.empty()) [[unlikely]]
      check_raw(t);
    auto it = values_.find(t.impl());
    if (it != values_.end()) return it->second;
    if (auto s = stale_.find(t.impl()); s != stale_.end()) [[unlikely]] {
      fail("trace", "a tensor of shape ", t.sizes(), " is read after '", s->second,
           "' wrote in place through another view of its memory (a view, or the base of a "
           "view): the trace records values, not memory, and cannot carry that write over; "
           "clone the view before writing it, or use the out-of-place op");
    }
    dispatch::TraceGuard pause(nullptr);  // inspecting a capture is not part of the trace
    auto alias = aliases_.find(t.impl());
    if (alias != aliases_.end()) {
      mlir::Value v = lookup(alias->second);
      bind(t, v);
      return v;
    }
    mlir::Value v;
    auto named = capture_names_.find(t.impl());
    if (named == capture_names_.end() && !t.requires_grad() &&
        (t.numel() <= options_.max_inline_constant || is_splat(t))) {
      // Small tensors, and tensors of one repeated value (zeros made by a factory inside the
      // traced function, such as an RNN's initial state), are constants, not inputs.
      v = constant(t);
      inlined_.emplace_back(t, v);
    } else {
      const std::string name = named != capture_names_.end()
                                   ? named->second
                                   : "capture" + std::to_string(out_->captures_.size());
      // Captured arguments must come before any op uses them: arguments live on the block, so
      // appending is fine.
      v = add_argument(t, name);
      capture_args_[t.impl()] = v;
      out_->captures_.push_back(t);
    }
    bind(t, v);
    return v;
  }

  // A tensor whose memory was handed out raw (data_ptr) reaches the trace: its bytes must be
  // the ones the tracer last saw, else something the trace cannot record wrote them.
  void check_raw(const Tensor& t) {
    auto it = raw_.find(t.impl()->storage().get());
    if (it == raw_.end()) return;
    const RawAccess& r = it->second;
    if (std::memcmp(r.storage->data(), r.bytes.data(), r.bytes.size()) == 0) return;
    fail("trace", "a tensor of shape ", t.sizes(), " was written through data_ptr()/data() at ",
         r.where.file_name(), ":", r.where.line(), " (", r.where.function_name(),
         ") and then used by the trace, which cannot see such writes and would replay this "
         "call's values for every input. Compute it with kiln ops, or, if its contents do not "
         "depend on the inputs, call kiln::jit::mark_constant on it after writing it");
  }

  // An op the trace records wrote `t` in place: its new bytes are the ones the trace knows.
  void refresh_raw(const Tensor& t) {
    if (raw_.empty()) return;
    auto it = raw_.find(t.impl()->storage().get());
    if (it == raw_.end()) return;
    const auto* p = static_cast<const uint8_t*>(it->second.storage->data());
    it->second.bytes.assign(p, p + it->second.bytes.size());
  }

  // Argument names are unique: a second optimizer's "SGD.group0.lr" becomes "SGD.group0.lr#2".
  std::string unique_host_name(const std::string& name) {
    const int n = ++host_name_uses_[name];
    return n == 1 ? name : name + "#" + std::to_string(n);
  }

  // Every element bit-identical to the first (compared as raw bytes: no conversion or copy of a
  // contiguous capture, which may be a large weight).
  static bool is_splat(const Tensor& t) {
    if (t.numel() == 0) return false;
    const Tensor c = t.detach().contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data());
    const size_t size = c.element_size();
    for (int64_t i = 1; i < c.numel(); ++i) {
      if (std::memcmp(p + i * size, p, size) != 0) return false;
    }
    return true;
  }

  mlir::Value constant(const Tensor& t) {
    auto type = tensor_type(ctx_, t.sizes(), t.dtype());
    if (t.numel() > options_.max_inline_constant) {  // a splat (is_splat): store one element
      const double v =
          t.detach().reshape(Dims{t.numel()}).slice(0, 0, 1).to(DType::Float64).item_double();
      mlir::Attribute element;
      if (auto ft = mlir::dyn_cast<mlir::FloatType>(type.getElementType())) {
        element = mlir::FloatAttr::get(ft, v);
      } else {
        element = mlir::IntegerAttr::get(type.getElementType(), static_cast<int64_t>(v));
      }
      mlir::OperationState state(builder_.getUnknownLoc(), "kiln.constant");
      state.addAttribute("value", mlir::DenseElementsAttr::get(type, element));
      state.addTypes(type);
      return builder_.create(state)->getResult(0);
    }
    Tensor c = t.detach().contiguous();
    mlir::DenseElementsAttr attr;
    if (is_floating(t.dtype())) {
      Tensor d = c.to(DType::Float64);
      std::vector<mlir::APFloat> values;
      const double* p = d.data_ptr<double>();
      auto et = mlir::cast<mlir::FloatType>(type.getElementType());
      for (int64_t i = 0; i < d.numel(); ++i) {
        bool lost;
        mlir::APFloat f(p[i]);
        f.convert(et.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
        values.push_back(f);
      }
      attr = mlir::DenseElementsAttr::get(type, values);
    } else {
      Tensor d = c.to(DType::Int64);
      std::vector<llvm::APInt> values;
      const int64_t* p = d.data_ptr<int64_t>();
      const unsigned width = type.getElementType().getIntOrFloatBitWidth();
      for (int64_t i = 0; i < d.numel(); ++i) {
        values.emplace_back(width, static_cast<uint64_t>(p[i]), /*isSigned=*/true);
      }
      attr = mlir::DenseElementsAttr::get(type, values);
    }
    mlir::OperationState state(builder_.getUnknownLoc(), "kiln.constant");
    state.addAttribute("value", attr);
    state.addTypes(type);
    return builder_.create(state)->getResult(0);
  }

  mlir::Location location(const std::source_location& where) {
    return mlir::FileLineColLoc::get(ctx_, where.file_name(), where.line(), where.column());
  }

  mlir::Value none() {
    mlir::OperationState state(builder_.getUnknownLoc(), "kiln.none");
    state.addTypes(builder_.getNoneType());
    return builder_.create(state)->getResult(0);
  }

  mlir::Attribute attribute(const dispatch::AttrValue& v) {
    if (auto* i = std::get_if<int64_t>(&v)) return builder_.getI64IntegerAttr(*i);
    if (auto* d = std::get_if<double>(&v)) return builder_.getF64FloatAttr(*d);
    if (auto* b = std::get_if<bool>(&v)) return builder_.getBoolAttr(*b);
    if (auto* dims = std::get_if<Dims>(&v)) {
      return builder_.getDenseI64ArrayAttr(llvm::ArrayRef<int64_t>(dims->data(), dims->size()));
    }
    return builder_.getStringAttr(std::get<std::string>(v));
  }

  // The op must be in the schema with the eager backend declared: what eager mode records is
  // what `kiln ops` and docs/ops.md say it records.
  void check_declared_eager(const std::string& name) const {
    const ir::OpSchema* schema = ir::find_op_schema(name);
    if (!schema || !mlir::RegisteredOperationName::lookup("kiln." + name, ctx_))
      fail("trace", "op '", name, "' has no kiln dialect counterpart");
    if (!(schema->backends & ir::kBackendEager))
      fail("trace", "op '", name,
           "' is recorded by eager mode but ir/ops.toml does not declare its eager backend");
  }

  // Number of operands the op takes: optional operands missing from the eager call become
  // kiln.none (the schema's count, so no argument is dropped).
  static size_t arity(const std::string& name) {
    const ir::OpSchema* schema = ir::find_op_schema(name);
    return schema && schema->num_operands > 0 ? static_cast<size_t>(schema->num_operands) : 0;
  }

  void emit(const std::string& name, const TensorList& inputs, const TensorList& outputs,
            const dispatch::Attrs& attrs) {
    mlir::OperationState state(builder_.getUnknownLoc(), "kiln." + name);
    const size_t n = std::max(arity(name), inputs.size());
    for (size_t i = 0; i < n; ++i) {
      state.addOperands(i < inputs.size() && inputs[i].defined() ? lookup(inputs[i]) : none());
    }
    for (const auto& [key, value] : attrs) state.addAttribute(key, attribute(value));
    for (const Tensor& t : outputs) state.addTypes(tensor_type(ctx_, t.sizes(), t.dtype()));
    check_declared_eager(name);
    mlir::Operation* op = builder_.create(state);
    for (size_t i = 0; i < outputs.size(); ++i) bind_created(outputs[i], op->getResult(i));
  }

  // A random draw: the op takes the generator state (seed, offset) as an operand and returns the
  // next state, threaded through the trace as the in-out argument "rng_state".
  void emit_random(const std::string& name, const Tensor& out, const dispatch::Attrs& attrs) {
    KILN_CHECK(region_created_.empty(), "trace", "random op '", name,
               "' inside kiln::cond/kiln::loop cannot be traced; draw it outside the region and "
               "pass it in");
    mlir::OperationState state(builder_.getUnknownLoc(), "kiln." + name);
    int64_t seed = 0, offset = 0;
    for (const auto& [key, value] : attrs) {
      if (key == "seed") {
        seed = std::get<int64_t>(value);
      } else if (key == "offset") {
        offset = std::get<int64_t>(value);
      } else {
        state.addAttribute(key, attribute(value));
      }
    }
    if (!rng_.defined()) {
      dispatch::TraceGuard pause(nullptr);
      rng_ = kiln::empty(Dims{2}, TensorOptions(DType::Int64));
      rng_.data_ptr<int64_t>()[0] = seed;
      rng_.data_ptr<int64_t>()[1] = offset;
      capture_names_[rng_.impl()] = "rng_state";
    }
    KILN_CHECK(rng_.data_ptr<int64_t>()[0] == seed, "trace",
               "the random seed changed while tracing (manual_seed inside the traced function); "
               "seed outside it");
    state.addOperands(lookup(rng_));
    state.addTypes(
        {tensor_type(ctx_, out.sizes(), out.dtype()), tensor_type(ctx_, Dims{2}, DType::Int64)});
    check_declared_eager(name);
    mlir::Operation* op = builder_.create(state);
    bind_created(out, op->getResult(0));
    bind(rng_, op->getResult(1));
  }

  void emit_scalar_binary(const std::string& name, const Tensor& x, const Tensor& out,
                          const dispatch::Attrs& attrs) {
    double s = 0;
    for (const auto& [k, v] : attrs) {
      if (auto* d = std::get_if<double>(&v)) s = *d;
    }
    // The scalar as a 0-dim constant of the result's dtype (it never widens the tensor).
    Tensor cst(kiln::full(Dims{}, s, TensorOptions(out.dtype())));
    mlir::Value c = constant(cst);
    mlir::Value xv = lookup(x);
    const std::string op = name == "add_scalar"   ? "kiln.add"
                           : name == "mul_scalar" ? "kiln.mul"
                           : name == "div_scalar" ? "kiln.div"
                           : name == "pow_scalar" ? "kiln.pow"
                                                  : "kiln.sub";
    mlir::OperationState state(builder_.getUnknownLoc(), op);
    if (name == "rsub_scalar") {
      state.addOperands({c, xv});
    } else {
      state.addOperands({xv, c});
    }
    state.addTypes(tensor_type(ctx_, out.sizes(), out.dtype()));
    bind_created(out, builder_.create(state)->getResult(0));
  }

  mlir::MLIRContext* ctx_;
  mlir::OpBuilder builder_;
  const TraceOptions& options_;
  TracedFunction* out_ = nullptr;
  // Owned until finish() hands it over: a traced function that throws frees what was recorded.
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  mlir::func::FuncOp fn_;
  mlir::Block* block_ = nullptr;
  std::unordered_map<const TensorImpl*, mlir::Value> values_;
  // Tensors an in-place write through another view of their memory made stale -> that op.
  std::unordered_map<const TensorImpl*, std::string> stale_;
  std::unordered_map<const TensorImpl*, std::string> capture_names_;
  std::unordered_map<const TensorImpl*, mlir::Value> capture_args_;
  std::unordered_map<const TensorImpl*, Tensor> aliases_;
  std::vector<TensorImplPtr> keep_alive_;
  std::vector<std::pair<Tensor, mlir::Value>> inlined_;  // captures inlined as constants
  Tensor rng_;  // the generator state the trace's random ops draw from (see emit_random)
  // Storage handed out raw while tracing (Tensor::data_ptr), with its bytes as last seen.
  struct RawAccess {
    std::source_location where;
    StoragePtr storage;
    std::vector<uint8_t> bytes;
  };
  std::unordered_map<const Storage*, RawAccess> raw_;
  int loop_depth_ = 0;  // kiln::loop bodies being recorded
  // Host values (on_host_scalar / on_host_guard), keyed by (owner, name).
  std::map<std::pair<const void*, std::string>, Tensor> host_scalars_;
  std::set<std::pair<const void*, std::string>> host_guards_;
  TensorList host_scalar_tensors_;
  std::unordered_map<std::string, int> host_name_uses_;
  // One set per cond/loop region being recorded: the tensors created inside it.
  std::vector<std::unordered_set<const TensorImpl*>>
      region_created_;  // tensor identities stay unique while tracing
};

void mark_constant(const Tensor& t) {
  if (auto* hook = dispatch::tracer(); hook && t.defined()) hook->on_mark_constant(t);
}

TracedFunction trace(const std::function<TensorList(const TensorList&)>& fn,
                     const TensorList& example_inputs, const TraceOptions& options,
                     TensorList* eager_results) {
  TracedFunction out;
  out.state_->ctx = make_context();
  Tracer tracer(out.state_->ctx.get(), options);
  tracer.begin(example_inputs, out);
  TensorList results;
  {
    dispatch::TraceGuard guard(&tracer);
    results = fn(example_inputs);
  }
  out.state_->module = tracer.finish(results);
  if (mlir::failed(mlir::verify(*out.state_->module))) {
    fail("trace", "the traced module does not verify:\n", out.str());
  }
  if (eager_results) *eager_results = std::move(results);
  return out;
}

TracedFunction trace(nn::Module& module, const TensorList& example_inputs, TraceOptions options) {
  KILN_CHECK(example_inputs.size() == 1, "trace", "a module's forward takes one input, got ",
             example_inputs.size());
  for (const auto& [name, t] : module.named_parameters())
    options.named_captures.emplace_back(name, t);
  for (const auto& [name, t] : module.named_buffers()) options.named_captures.emplace_back(name, t);
  return trace([&](const TensorList& in) { return TensorList{module.forward(in[0])}; },
               example_inputs, options);
}

mlir::ModuleOp parse_module(mlir::MLIRContext& ctx, const std::string& text) {
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic& d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> m = mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
  KILN_CHECK(m, "parse_module", "invalid kiln IR: ", diagnostics);
  return m.release();
}

}  // namespace kiln::jit
