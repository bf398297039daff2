// module -> .kiln bytes (see kiln/codegen/artifact.h and runtime/schema/kiln.fbs); the bytes of
// values and constants are artifact_values.cpp's.

#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <utility>

#include "artifact_values.h"
#include "kiln/codegen/artifact.h"
#include "kiln/codegen/native_code.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/OpSchema.h"
#include "kiln_generated.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"

namespace kiln::codegen {
namespace {

using artifact_values::align64;
using artifact_values::constant_bytes;
using artifact_values::dtype_bytes;
using artifact_values::dtype_of;
using artifact_values::fail;
using artifact_values::op_name;
using artifact_values::splat_element_bytes;

class Writer {
 public:
  Writer(mlir::ModuleOp module, const ArtifactOptions& o) : module_(module), o_(o) {}

  std::vector<uint8_t> write() {
    auto fn = module_.lookupSymbol<mlir::func::FuncOp>("forward");
    if (!fn) fail("the module has no func.func @forward");
    mlir::Block& block = fn.getBody().front();
    if (auto a = fn->getAttrOfType<mlir::IntegerAttr>("kiln.arena_bytes")) arena_ = a.getInt();
    if (auto a = fn->getAttrOfType<mlir::IntegerAttr>("kiln.naive_bytes")) naive_ = a.getInt();
    planned_arena_ = arena_;
    outside_pools_ = arena_;
    std::vector<std::string> arg_names;
    if (auto names = fn->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names")) {
      for (mlir::Attribute a : names) arg_names.push_back(mlir::cast<mlir::StringAttr>(a).str());
    }
    while (arg_names.size() < block.getNumArguments()) {
      arg_names.push_back("arg" + std::to_string(arg_names.size()));
    }
    int64_t num_inputs = o_.num_inputs;
    if (num_inputs < 0) {
      num_inputs = 0;
      while (num_inputs < block.getNumArguments() && !o_.weights.count(arg_names[num_inputs])) {
        ++num_inputs;
      }
    }
    llvm::ArrayRef<int64_t> arg_offsets;
    if (auto a = fn->getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.arg_offsets")) {
      arg_offsets = a.asArrayRef();
    }
    std::vector<std::string> missing;
    for (unsigned i = 0; i < block.getNumArguments(); ++i) {
      mlir::Value arg = block.getArgument(i);
      const std::string& name = arg_names[i];
      if (static_cast<int64_t>(i) < num_inputs) {
        const int64_t off = i < arg_offsets.size() ? arg_offsets[i] : -1;
        const int32_t s = arena_slot(arg, off, "input \"" + name + "\"");
        inputs_.push_back(fb::CreateIo(fbb_, fbb_.CreateString(input_name(i, name)), s));
        continue;
      }
      auto it = o_.weights.find(name);
      if (it == o_.weights.end()) {
        missing.push_back(name);
        continue;
      }
      const size_t want = value_bytes(arg, "argument \"" + name + "\"");
      if (it->second.size() != want) {
        fail("weight \"" + name + "\": expected " + std::to_string(want) + " bytes, got " +
             std::to_string(it->second.size()));
      }
      arg_blob_[i] = add_blob(name, it->second.data(), it->second.size());
      slots_[arg] = weight_slot(arg, arg_blob_[i]);
    }
    if (!missing.empty()) {
      std::string s;
      for (const auto& m : missing) s += (s.empty() ? "" : ", ") + m;
      fail("no weights given for parameter arguments: " + s);
    }
    emit_block(block);
    return finish();
  }

 private:
  std::string input_name(unsigned i, const std::string& fallback) const {
    return i < o_.input_names.size() ? o_.input_names[i] : fallback;
  }

  size_t value_bytes(mlir::Value v, const std::string& where) {
    auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
    if (!t || !t.hasStaticShape()) fail(where + ": expected a tensor of static shape");
    return static_cast<size_t>(t.getNumElements()) *
           dtype_bytes(dtype_of(t.getElementType(), where));
  }

  flatbuffers::Offset<fb::Slot> slot_table(mlir::Value v, fb::SlotKind kind, uint64_t offset,
                                           uint32_t weight, const std::string& where,
                                           bool splat = false) {
    auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
    if (!t || !t.hasStaticShape()) fail(where + ": expected a tensor of static shape");
    std::vector<int64_t> shape(t.getShape().begin(), t.getShape().end());
    return fb::CreateSlotDirect(fbb_, kind, dtype_of(t.getElementType(), where), &shape, offset,
                                weight, splat);
  }

  int32_t arena_slot(mlir::Value v, int64_t offset, const std::string& where) {
    const size_t bytes = value_bytes(v, where);
    if (offset < 0 && pool_ && pool_->last_use.count(v)) {  // a fused body's intermediate
      offset = static_cast<int64_t>(pool_->take(v, bytes, pool_->last_use.lookup(v)));
      naive_extra_ += align64(bytes);
    } else if (offset < 0) {  // not planned: space of its own after everything so far
      offset = align64(std::max<uint64_t>(arena_, pool_ ? pool_->end : 0));
      arena_ = offset + bytes;
      naive_extra_ += align64(bytes);
      outside_pools_ = std::max<uint64_t>(outside_pools_, offset + bytes);
      // (a body's value that outlives it, placed while its pool is in use: the pool's next
      // blocks go after it)
      if (pool_) pool_->end = std::max<uint64_t>(pool_->end, offset + bytes);
    } else {
      outside_pools_ = std::max<uint64_t>(outside_pools_, offset + bytes);
    }
    arena_ = std::max<uint64_t>(arena_, offset + bytes);
    slot_list_.push_back(slot_table(v, fb::SlotKind::Arena, offset, 0, where));
    slot_bytes_.push_back({offset, static_cast<int64_t>(bytes)});
    const int32_t s = static_cast<int32_t>(slot_list_.size() - 1);
    slots_[v] = s;
    return s;
  }

  int32_t weight_slot(mlir::Value v, uint32_t blob, bool splat = false) {
    slot_list_.push_back(slot_table(v, fb::SlotKind::Weight, 0, blob, "weight", splat));
    splat_ |= splat;
    slot_bytes_.push_back({-1, 0});
    return static_cast<int32_t>(slot_list_.size() - 1);
  }

  int32_t none_slot() {
    if (none_ < 0) {
      slot_list_.push_back(fb::CreateSlot(fbb_, fb::SlotKind::None));
      slot_bytes_.push_back({-1, 0});
      none_ = static_cast<int32_t>(slot_list_.size() - 1);
    }
    return none_;
  }

  uint32_t add_blob(const std::string& name, const void* data, size_t size) {
    const uint64_t off = align64(segment_.size());
    segment_.resize(off + size);
    if (size) std::memcpy(segment_.data() + off, data, size);
    blobs_.push_back(fb::CreateBlobDirect(fbb_, name.c_str(), off, size));
    return static_cast<uint32_t>(blobs_.size() - 1);
  }

  int32_t operand_slot(mlir::Value v, mlir::Operation* user) {
    auto it = slots_.find(v);
    if (it == slots_.end()) fail(op_name(user) + ": operand defined outside the plan");
    return it->second;
  }

  flatbuffers::Offset<fb::Attr> attr(const std::string& where, llvm::StringRef name,
                                     mlir::Attribute a) {
    auto n = fbb_.CreateString(name.str());
    fb::AttrBuilder b(fbb_);
    if (auto i = mlir::dyn_cast<mlir::BoolAttr>(a)) {
      b.add_name(n);
      b.add_kind(fb::AttrKind::Bool);
      b.add_i(i.getValue() ? 1 : 0);
      return b.Finish();
    }
    if (auto i = mlir::dyn_cast<mlir::IntegerAttr>(a)) {
      b.add_name(n);
      const bool is_bool = i.getType().isInteger(1);
      b.add_kind(is_bool ? fb::AttrKind::Bool : fb::AttrKind::Int);
      b.add_i(is_bool ? (i.getValue().getBoolValue() ? 1 : 0) : i.getValue().getSExtValue());
      return b.Finish();
    }
    if (auto f = mlir::dyn_cast<mlir::FloatAttr>(a)) {
      b.add_name(n);
      b.add_kind(fb::AttrKind::Float);
      b.add_f(f.getValueAsDouble());
      return b.Finish();
    }
    fail(where + ": attribute '" + name.str() + "' has a kind the artifact cannot hold");
  }

  flatbuffers::Offset<fb::Attr> array_attr(const std::string& where, llvm::StringRef name,
                                           mlir::Attribute a) {
    std::vector<int64_t> v;
    if (auto d = mlir::dyn_cast<mlir::DenseI64ArrayAttr>(a)) {
      v.assign(d.asArrayRef().begin(), d.asArrayRef().end());
    } else if (auto arr = mlir::dyn_cast<mlir::ArrayAttr>(a)) {
      for (mlir::Attribute e : arr) {
        auto i = mlir::dyn_cast<mlir::IntegerAttr>(e);
        if (!i) fail(where + ": attribute '" + name.str() + "' is not an integer array");
        v.push_back(i.getInt());
      }
    }
    return fb::CreateAttrDirect(fbb_, name.str().c_str(), fb::AttrKind::Ints, 0, 0, &v);
  }

  void emit_block(mlir::Block& block) {
    for (mlir::Operation& op : block) {
      if (mlir::isa<mlir::func::ReturnOp>(op)) {
        std::vector<int32_t> results;
        for (mlir::Value v : op.getOperands()) results.push_back(operand_slot(v, &op));
        finish_outputs(results);
        continue;
      }
      emit_nested(op);
    }
  }

  // The ops of a region's block; returns the slots its scf.yield hands back.
  std::vector<int32_t> emit_region(mlir::Block& block) {
    for (mlir::Operation& op : block) {
      if (mlir::isa<mlir::scf::YieldOp>(op)) {
        std::vector<int32_t> yields;
        for (mlir::Value v : op.getOperands()) yields.push_back(operand_slot(v, &op));
        return yields;
      }
      emit_nested(op);
    }
    fail("a control-flow region does not end in scf.yield");
  }

  void emit_nested(mlir::Operation& op) {
    if (grouped_.count(&op)) return;  // written with its generated group
    if (op.hasAttr("kiln.symbol")) return emit_generated(op);
    if (mlir::isa<ir::FusedOp>(op)) return inline_fused(op);
    emit_one(op);
  }

  // A group with generated code (kiln/codegen/native_code.h): a Generated instruction calling
  // its symbol, then its ops as runtime kernels (the portable form), whose values land in the
  // planned slots of the group's outputs (so yields and outputs are the same slots). A group
  // whose outputs overlap its inputs other than as exact aliases (the memory plan reused bytes
  // the portable form had finished reading) is written in portable form only.
  void emit_generated(mlir::Operation& first) {
    const GeneratedGroup g = generated_group(&first);
    std::vector<int32_t> ins;
    for (mlir::Value v : g.inputs) ins.push_back(operand_slot(v, &first));
    const size_t k = instrs_.size();
    const auto before = last_kernel_;  // (the portable form's ops are written next)
    instrs_.emplace_back();
    for (mlir::Operation* op : g.ops) {
      grouped_.insert(op);
      if (mlir::isa<ir::FusedOp>(op))
        inline_fused(*op);
      else
        emit_one(*op);
    }
    std::vector<int32_t> outs;
    for (mlir::Value v : g.outputs) outs.push_back(operand_slot(v, &first));
    if (!disjoint_or_aliased(outs, ins)) {
      instrs_.erase(instrs_.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
    // Its block form (kiln.fbs: Instruction.block_epilogue) where the plan put the chain's
    // value in the product's bytes, as the code maps them in place.
    flatbuffers::Offset<flatbuffers::String> block;
    if (auto name = first.getAttrOfType<mlir::StringAttr>("kiln.block_symbol")) {
      mlir::Operation* product = first.getPrevNode();
      const bool after_product = product && before.first == product && before.second + 1 == k;
      const int32_t y = after_product ? operand_slot(product->getResult(0), &first) : -1;
      if (y >= 0 && outs.size() == 1 && slot_bytes_[y] == slot_bytes_[outs[0]] &&
          slot_bytes_[y].first >= 0)
        block = fbb_.CreateString(name.str());
    }
    // Its prologue form (Instruction.block_prologue): the product right after it is written
    // next, as one instruction (emit_op), reading the group's one output as its input 0 only.
    flatbuffers::Offset<flatbuffers::String> prologue;
    if (auto name = first.getAttrOfType<mlir::StringAttr>("kiln.prologue_symbol")) {
      mlir::Operation* product = first.getNextNode();
      if (product && g.outputs.size() == 1 && g.outputs[0].hasOneUse() &&
          product->getOperand(0) == g.outputs[0] && block.IsNull())
        prologue = fbb_.CreateString(name.str());
    }
    auto ins_v = fbb_.CreateVector(ins), outs_v = fbb_.CreateVector(outs);
    auto symbol = fbb_.CreateString(g.symbol);
    fb::InstructionBuilder b(fbb_);
    b.add_symbol(symbol);
    if (!block.IsNull()) b.add_block_epilogue(block);
    if (!prologue.IsNull()) b.add_block_prologue(prologue);
    b.add_control(fb::Control::Generated);
    b.add_inputs(ins_v);
    b.add_outputs(outs_v);
    b.add_yields(outs_v);
    b.add_body_size(static_cast<uint32_t>(instrs_.size() - k - 1));
    instrs_[k] = b.Finish();
    generated_ = true;
  }

  // The loader's rule for compiled code: an output shares no byte with another output or an
  // input unless it is that input's exact alias.
  bool disjoint_or_aliased(const std::vector<int32_t>& outs, const std::vector<int32_t>& ins) {
    for (size_t a = 0; a < outs.size(); ++a) {
      const auto [o, on] = slot_bytes_[outs[a]];
      if (o < 0) return false;  // an output must be an arena slot
      for (size_t j = 0; j < outs.size() + ins.size(); ++j) {
        if (j == a) continue;
        const int32_t other = j < outs.size() ? outs[j] : ins[j - outs.size()];
        const auto [i, in] = slot_bytes_[other];
        const bool overlap = i >= 0 && o < i + in && i < o + on;
        if (overlap && (j < outs.size() || i != o || in != on)) return false;
      }
    }
    return true;
  }

  // Result slots of a top-level op on its planned offsets (or space of their own).
  std::vector<int32_t> result_slots(mlir::Operation& op) {
    llvm::ArrayRef<int64_t> offsets;
    if (auto a = op.getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.arena_offsets")) {
      offsets = a.asArrayRef();
    }
    std::vector<int32_t> outs;
    for (unsigned i = 0; i < op.getNumResults(); ++i) {
      if (auto reuse = in_place_.find(op.getResult(i)); reuse != in_place_.end()) {
        slots_[op.getResult(i)] = reuse->second;
        outs.push_back(reuse->second);
        continue;
      }
      int64_t off = i < offsets.size() ? offsets[i] : -1;
      auto planned = planned_.find(op.getResult(i));
      if (planned != planned_.end()) off = planned->second;
      outs.push_back(
          arena_slot(op.getResult(i), off, op_name(&op) + " result " + std::to_string(i)));
    }
    return outs;
  }

  // Values a branch makes and yields take the offsets of the scf.if's results (one branch runs,
  // and nothing live across the scf.if shares those bytes), saving the copy.
  void plan_yields_onto(mlir::Block& block, mlir::Operation& op) {
    auto offsets = op.getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.arena_offsets");
    mlir::Operation* yield = block.getTerminator();
    if (!offsets || !yield) return;
    for (unsigned i = 0; i < yield->getNumOperands() && i < offsets.size(); ++i) {
      mlir::Value v = yield->getOperand(i);
      if (v.getParentBlock() != &block || mlir::isa<mlir::BlockArgument>(v) || offsets[i] < 0)
        continue;
      if (v.getType() != op.getResult(i).getType() || planned_.count(v)) continue;
      planned_[v] = offsets[i];
    }
  }

  // scf.if: an If instruction followed by the then- and else-branch's instructions.
  void emit_if(mlir::scf::IfOp op) {
    const int32_t pred = operand_slot(op.getCondition(), op);
    const std::vector<int32_t> outs = result_slots(*op);
    const size_t k = instrs_.size();
    instrs_.emplace_back();  // the If itself, written once its regions' sizes are known
    plan_yields_onto(*op.thenBlock(), *op);
    const std::vector<int32_t> then_yields = emit_region(*op.thenBlock());
    const size_t then_size = instrs_.size() - k - 1;
    std::vector<int32_t> else_yields;
    if (op.elseBlock()) {
      plan_yields_onto(*op.elseBlock(), *op);
      else_yields = emit_region(*op.elseBlock());
    }
    if (op.getNumResults() > 0 && !op.elseBlock()) fail("scf.if with results has no else-branch");
    const size_t else_size = instrs_.size() - k - 1 - then_size;
    const std::vector<int32_t> ins{pred};
    auto ins_v = fbb_.CreateVector(ins), outs_v = fbb_.CreateVector(outs),
         then_v = fbb_.CreateVector(then_yields), else_v = fbb_.CreateVector(else_yields);
    fb::InstructionBuilder b(fbb_);
    b.add_control(fb::Control::If);
    b.add_inputs(ins_v);
    b.add_outputs(outs_v);
    b.add_yields(then_v);
    b.add_else_yields(else_v);
    b.add_body_size(static_cast<uint32_t>(then_size));
    b.add_else_size(static_cast<uint32_t>(else_size));
    instrs_[k] = b.Finish();
    control_flow_ = true;
  }

  int64_t index_constant(mlir::Value v, const char* what) {
    auto it = index_constants_.find(v);
    if (it == index_constants_.end())
      fail(std::string("scf.for: the ") + what +
           " is not a constant; the runtime runs loops of "
           "a fixed range");
    return it->second;
  }

  // A carried value read only by an update op (the schema's `update` trait: index_add,
  // scatter*, masked_fill) whose result the body yields back in its place is updated in the
  // carried slot itself (the kernels' update_ok): no copy of it into the op's output, none back
  // at the end of the iteration. An LSTM's output sequence, one row per step, is such a value.
  void plan_in_place_updates(mlir::scf::ForOp op, const std::vector<int32_t>& carried) {
    mlir::Operation* yield = op.getBody()->getTerminator();
    for (unsigned k = 0; k < carried.size(); ++k) {
      mlir::BlockArgument a = op.getRegionIterArgs()[k];
      if (!a.hasOneUse()) continue;
      mlir::Operation* user = *a.getUsers().begin();
      const ir::OpSchema* schema = ir::find_op_schema(op_name(user));
      if (!schema || !(schema->traits & ir::kTraitUpdate) || user->getBlock() != op.getBody() ||
          user->getOperand(0) != a || user->getNumResults() != 1 ||
          yield->getOperand(k) != user->getResult(0) || user->getResult(0).getType() != a.getType())
        continue;
      in_place_[user->getResult(0)] = carried[k];
    }
  }

  // scf.for: a For instruction followed by the body's instructions. The carried values (the
  // body's iteration arguments) get slots of their own; the induction variable, where the body
  // reads it as a tensor, a 0-dim int64 slot the executor writes.
  void emit_for(mlir::scf::ForOp op) {
    const int64_t begin = index_constant(op.getLowerBound(), "lower bound");
    const int64_t end = index_constant(op.getUpperBound(), "upper bound");
    const int64_t step = index_constant(op.getStep(), "step");
    if (step <= 0) fail("scf.for: the step must be positive, got " + std::to_string(step));
    std::vector<int32_t> ins, carried;
    for (mlir::Value v : op.getInitArgs()) ins.push_back(operand_slot(v, op));
    const std::vector<int32_t> outs = result_slots(*op);
    for (mlir::BlockArgument a : op.getRegionIterArgs())
      carried.push_back(arena_slot(a, -1, "scf.for carried value"));
    plan_in_place_updates(op, carried);
    induction_[op.getInductionVar()] = -1;
    const size_t k = instrs_.size();
    instrs_.emplace_back();
    const std::vector<int32_t> yields = emit_region(*op.getBody());
    const size_t body_size = instrs_.size() - k - 1;
    const int32_t counter = induction_[op.getInductionVar()];
    auto ins_v = fbb_.CreateVector(ins), outs_v = fbb_.CreateVector(outs),
         yields_v = fbb_.CreateVector(yields), carried_v = fbb_.CreateVector(carried);
    fb::InstructionBuilder b(fbb_);
    b.add_control(fb::Control::For);
    b.add_inputs(ins_v);
    b.add_outputs(outs_v);
    b.add_yields(yields_v);
    b.add_carried(carried_v);
    b.add_body_size(static_cast<uint32_t>(body_size));
    b.add_counter(counter);
    b.add_begin(begin);
    b.add_end(end);
    b.add_step(step);
    instrs_[k] = b.Finish();
    control_flow_ = true;
  }

  // The scalar glue around control flow: bounds (arith.constant), the predicate
  // (tensor.extract of a 0-dim tensor reads that tensor's slot) and the induction variable as
  // a tensor (arith.index_cast + tensor.from_elements: the loop's counter slot). Returns false
  // for any other op.
  bool emit_scalar_glue(mlir::Operation& op) {
    if (auto c = mlir::dyn_cast<mlir::arith::ConstantOp>(op)) {
      auto i = mlir::dyn_cast<mlir::IntegerAttr>(c.getValue());
      if (!i) fail("arith.constant: only integer constants (loop bounds) are supported");
      index_constants_[c.getResult()] = i.getInt();
      return true;
    }
    if (auto e = mlir::dyn_cast<mlir::tensor::ExtractOp>(op)) {
      auto t = mlir::cast<mlir::RankedTensorType>(e.getTensor().getType());
      if (t.getNumElements() != 1) fail("tensor.extract: only from one-element tensors");
      slots_[e.getResult()] = operand_slot(e.getTensor(), &op);
      return true;
    }
    if (auto cast = mlir::dyn_cast<mlir::arith::IndexCastOp>(op)) {
      mlir::Value in = cast.getIn();
      if (induction_.count(in)) {
        induction_alias_[cast.getResult()] = in;
      } else if (index_constants_.count(in)) {
        index_constants_[cast.getResult()] = index_constants_[in];
      } else {
        fail("arith.index_cast: only of a loop's induction variable or a constant");
      }
      return true;
    }
    if (auto from = mlir::dyn_cast<mlir::tensor::FromElementsOp>(op)) {
      auto it = from->getNumOperands() == 1 ? induction_alias_.find(from->getOperand(0))
                                            : induction_alias_.end();
      auto type = mlir::cast<mlir::RankedTensorType>(from.getType());
      if (it == induction_alias_.end() || type.getRank() != 0 ||
          !type.getElementType().isInteger(64))
        fail("tensor.from_elements: only a loop's induction variable as a 0-dim i64 tensor");
      int32_t& counter = induction_[it->second];
      if (counter < 0) counter = arena_slot(from.getResult(), -1, "scf.for counter");
      slots_[from.getResult()] = counter;
      return true;
    }
    return false;
  }

  // One op of a block (or of an inlined fused body).
  void emit_one(mlir::Operation& op) {
    const std::string name = op_name(&op);
    if (mlir::isa<ir::NoneOp>(op)) {
      slots_[op.getResult(0)] = none_slot();
      return;
    }
    if (auto i = mlir::dyn_cast<mlir::scf::IfOp>(op)) return emit_if(i);
    if (auto f = mlir::dyn_cast<mlir::scf::ForOp>(op)) return emit_for(f);
    if (emit_scalar_glue(op)) return;
    if (mlir::isa<ir::ConstantOp>(op)) {
      if (std::optional<std::vector<uint8_t>> one = splat_element_bytes(&op)) {
        // One element stored (format version 3), expanded by the loader.
        const uint32_t blob =
            add_blob("constant" + std::to_string(constants_++), one->data(), one->size());
        slots_[op.getResult(0)] = weight_slot(op.getResult(0), blob, /*splat=*/true);
        return;
      }
      std::vector<uint8_t> bytes = constant_bytes(&op);
      const std::string blob_name = "constant" + std::to_string(constants_++);
      const uint32_t blob = add_blob(blob_name, bytes.data(), bytes.size());
      if (mlir::isa<mlir::DenseResourceElementsAttr>(op.getAttr("value")))
        resource_blobs_[op.getAttr("value").getAsOpaquePointer()] = blob_name;
      slots_[op.getResult(0)] = weight_slot(op.getResult(0), blob);
      return;
    }
    if (name.rfind("kiln.", 0) != 0) fail("op '" + name + "' cannot be run by the runtime");
    if (op.getNumRegions() > 0) fail("op '" + name + "' has regions the runtime cannot run");
    emit_op(op, name.substr(5));
  }

  // A fused body's intermediates (values only its own ops read) in one region after all other
  // slots so far, at `base`: a block is taken again once its last reader has run (never by that
  // reader's own results), and every body starts the region afresh, since bodies run one at a
  // time and none of these values outlives its body.
  struct BodyPool {
    struct Block {
      uint64_t offset, bytes;
      size_t free_after;  // the body op that reads its value last
      mlir::Value value;  // the value it holds now
    };
    uint64_t end = 0;
    std::vector<Block> blocks;
    llvm::DenseMap<mlir::Value, size_t> last_use;  // intermediate -> its last reader
    size_t now = 0;                                // the body op whose results are placed
    mlir::Operation* op = nullptr;                 // that op
    bool in_place = false;  // its kernel may write its result over an operand of its type
    uint64_t take(mlir::Value v, uint64_t bytes, size_t last) {
      Block* best = nullptr;
      for (Block& b : blocks) {
        // Free once its value's last reader has run; or now, when that reader is this op, the
        // value one of its operands of the result's type, and the kernel runs in place (the
        // exact alias the loader accepts).
        const bool free = b.free_after < now ||
                          (in_place && b.free_after == now && b.value.getType() == v.getType() &&
                           llvm::is_contained(op->getOperands(), b.value));
        if (free && b.bytes >= bytes && (!best || b.bytes < best->bytes)) best = &b;
      }
      if (best) {
        best->free_after = last;
        best->value = v;
        return best->offset;
      }
      const uint64_t offset = align64(end);
      end = offset + bytes;
      blocks.push_back({offset, bytes, last, v});
      return offset;
    }
  };

  // A fused elementwise region without compiled code runs its body op by op. The values it
  // yields take the offsets the memory plan gave the fused op's results; the body's
  // intermediates share a region of their own (BodyPool).
  void inline_fused(mlir::Operation& op) {
    mlir::Block& body = op.getRegion(0).front();
    for (unsigned i = 0; i < body.getNumArguments(); ++i) {
      slots_[body.getArgument(i)] = operand_slot(op.getOperand(i), &op);
    }
    mlir::Operation* yield = body.getTerminator();
    if (!yield || op_name(yield) != "kiln.yield")
      fail("kiln.fused: the body does not end in kiln.yield");
    BodyPool pool;
    pool.end = align64(outside_pools_);
    llvm::DenseMap<mlir::Operation*, size_t> index;
    for (mlir::Operation& inner : body) {
      const size_t at = index.size();
      index[&inner] = at;
    }
    for (mlir::Operation& inner : body) {
      for (mlir::Value r : inner.getResults()) {
        size_t last = index[&inner];
        bool internal = true;
        for (mlir::Operation* user : r.getUsers()) {
          internal &= user != yield && user->getBlock() == &body;
          if (internal) last = std::max(last, index[user]);
        }
        if (internal) pool.last_use[r] = last;
      }
    }
    BodyPool* const outer = std::exchange(pool_, &pool);
    if (auto offsets = op.getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.arena_offsets")) {
      for (unsigned i = 0; i < yield->getNumOperands() && i < offsets.size(); ++i) {
        mlir::Value v = yield->getOperand(i);
        // Only a value made inside the body, yielded once, and of the result's type.
        if (v.getParentBlock() != &body || mlir::isa<mlir::BlockArgument>(v)) continue;
        if (v.getType() != op.getResult(i).getType() || planned_.count(v)) continue;
        planned_[v] = offsets[i];
      }
    }
    for (mlir::Operation& inner : body) {
      if (&inner == yield) continue;
      pool.now = index[&inner];
      pool.op = &inner;
      const ir::OpSchema* schema = ir::find_op_schema(op_name(&inner));
      pool.in_place = schema && (schema->traits & ir::kTraitInplace) && inner.getNumResults() == 1;
      emit_one(inner);
    }
    pool_ = outer;
    for (unsigned i = 0; i < yield->getNumOperands(); ++i) {
      slots_[op.getResult(i)] = operand_slot(yield->getOperand(i), yield);
    }
  }

  void emit_op(mlir::Operation& op, const std::string& kernel) {
    const std::string where = op_name(&op);
    std::vector<int32_t> ins;
    for (mlir::Value v : op.getOperands()) ins.push_back(operand_slot(v, &op));
    const std::vector<int32_t> outs = result_slots(op);
    std::vector<flatbuffers::Offset<fb::Attr>> attrs;
    for (mlir::NamedAttribute na : op.getAttrs()) {
      llvm::StringRef n = na.getName().strref();
      if (n.starts_with("kiln.") || n == "operandSegmentSizes") continue;  // pass annotations
      if (mlir::isa<mlir::DenseI64ArrayAttr, mlir::ArrayAttr>(na.getValue())) {
        attrs.push_back(array_attr(where, n, na.getValue()));
      } else if (auto s = mlir::dyn_cast<mlir::StringAttr>(na.getValue())) {
        attrs.push_back(fb::CreateAttrDirect(fbb_, n.str().c_str(), fb::AttrKind::String, 0, 0,
                                             nullptr, s.str().c_str()));
      } else {
        attrs.push_back(attr(where, n, na.getValue()));
      }
    }
    instrs_.push_back(
        fb::CreateInstructionDirect(fbb_, kernel.c_str(), nullptr, &attrs, &ins, &outs));
    last_kernel_ = {&op, instrs_.size() - 1};
  }

  void finish_outputs(const std::vector<int32_t>& results) {
    const size_t num_outputs = o_.num_outputs < 0 ? results.size() : o_.num_outputs;
    if (num_outputs > results.size()) fail("num_outputs exceeds @forward's results");
    for (size_t i = 0; i < num_outputs; ++i) {
      const std::string name =
          i < o_.output_names.size() ? o_.output_names[i] : "output" + std::to_string(i);
      outputs_.push_back(fb::CreateIo(fbb_, fbb_.CreateString(name), results[i]));
    }
    if (results.size() - num_outputs != o_.state_args.size()) {
      fail("@forward returns " + std::to_string(results.size() - num_outputs) +
           " state values, options name " + std::to_string(o_.state_args.size()));
    }
    for (size_t k = 0; k < o_.state_args.size(); ++k) {
      auto it = arg_blob_.find(static_cast<unsigned>(o_.state_args[k]));
      if (it == arg_blob_.end())
        fail("state argument " + std::to_string(o_.state_args[k]) + " is not a weight");
      state_.push_back(fb::CreateStateUpdate(fbb_, results[num_outputs + k], it->second));
    }
  }

  std::vector<uint8_t> finish() {
    std::vector<flatbuffers::Offset<fb::CodeObject>> code;
    for (const CodeBlob& c : o_.code) {
      const uint32_t blob = add_blob("code:" + c.target_triple, c.elf.data(), c.elf.size());
      auto strings = [&](const std::vector<std::string>& list) {
        std::vector<flatbuffers::Offset<flatbuffers::String>> out;
        for (const auto& s : list) out.push_back(fbb_.CreateString(s));
        return out;
      };
      auto feats = strings(c.cpu_features), syms = strings(c.symbols), imports = strings(c.imports);
      code.push_back(
          fb::CreateCodeObjectDirect(fbb_, c.target_triple.c_str(), &feats, blob, &syms, &imports));
    }
    std::vector<flatbuffers::Offset<flatbuffers::String>> feats;
    for (const auto& f : o_.cpu_features) feats.push_back(fbb_.CreateString(f));
    std::vector<flatbuffers::Offset<fb::KeyValue>> meta;
    for (const auto& [k, v] : o_.metadata)
      meta.push_back(fb::CreateKeyValueDirect(fbb_, k.c_str(), v.c_str()));
    std::vector<uint8_t> bytecode;
    if (o_.embed_mlir_bytecode) bytecode = module_bytecode();
    // The oldest format holding what was written.
    const uint32_t version = generated_ || splat_ ? 3 : control_flow_ ? 2 : 1;
    auto root = fb::CreateModelDirect(
        fbb_, version, o_.name.c_str(), o_.producer.c_str(), o_.target_triple.c_str(), &feats,
        &inputs_, &outputs_, &slot_list_, &instrs_, align64(arena_),
        naive_ ? naive_ + naive_extra_ : naive_extra_, &blobs_, &state_, &code,
        o_.embed_mlir_bytecode ? &bytecode : nullptr, &meta);
    fbb_.FinishSizePrefixed(root, fb::ModelIdentifier());
    std::vector<uint8_t> file(fbb_.GetBufferPointer(), fbb_.GetBufferPointer() + fbb_.GetSize());
    file.resize(align64(file.size()), 0);
    file.insert(file.end(), segment_.begin(), segment_.end());
    return file;
  }

  // The module as MLIR bytecode whose weight constants refer to the artifact's blobs (a resource
  // named kArtifactBlobResourcePrefix + blob name, without data) instead of repeating them.
  std::vector<uint8_t> module_bytecode() {
    mlir::OwningOpRef<mlir::ModuleOp> copy(mlir::cast<mlir::ModuleOp>(module_->clone()));
    copy->walk([](mlir::Operation* op) {  // this file's code
      op->removeAttr("kiln.symbol");
      op->removeAttr("kiln.block_symbol");
      op->removeAttr("kiln.prologue_symbol");
    });
    auto& manager = mlir::DenseResourceElementsHandle::getManagerInterface(module_.getContext());
    copy->walk([&](ir::ConstantOp c) {
      auto it = resource_blobs_.find(c.getValue().getAsOpaquePointer());
      if (it == resource_blobs_.end()) return;
      const std::string key = kArtifactBlobResourcePrefix + it->second;
      // The same key again (an earlier save in this context) is the same dataless reference.
      auto* entry = manager.getBlobManager().lookup(key);
      auto handle = entry && !entry->getBlob()
                        ? mlir::DenseResourceElementsHandle(
                              entry, mlir::cast<mlir::BuiltinDialect>(manager.getDialect()))
                        : manager.insert(key);
      if (handle.getKey() != key) fail("resource key '" + key + "' is taken");
      c.setValueAttr(mlir::cast<mlir::ElementsAttr>(
          mlir::DenseResourceElementsAttr::get(mlir::cast<mlir::ShapedType>(c.getType()), handle)));
    });
    std::string s;
    llvm::raw_string_ostream os(s);
    if (mlir::failed(mlir::writeBytecodeToFile(*copy, os))) fail("cannot write MLIR bytecode");
    os.flush();
    return std::vector<uint8_t>(s.begin(), s.end());
  }

  mlir::ModuleOp module_;
  const ArtifactOptions& o_;
  flatbuffers::FlatBufferBuilder fbb_{1 << 16};
  llvm::DenseMap<mlir::Value, int32_t> slots_;
  llvm::DenseMap<mlir::Value, int64_t> planned_;  // fused-body values on their op's offsets
  std::map<unsigned, uint32_t> arg_blob_;
  std::vector<flatbuffers::Offset<fb::Slot>> slot_list_;
  std::vector<flatbuffers::Offset<fb::Instruction>> instrs_;
  std::vector<flatbuffers::Offset<fb::Io>> inputs_, outputs_;
  std::vector<flatbuffers::Offset<fb::Blob>> blobs_;
  std::vector<flatbuffers::Offset<fb::StateUpdate>> state_;
  std::vector<uint8_t> segment_;
  uint64_t arena_ = 0, planned_arena_ = 0, naive_ = 0, naive_extra_ = 0;
  // The end of every slot outside fused bodies' pools (where the next pool starts), and the pool
  // of the body being written (null: none).
  uint64_t outside_pools_ = 0;
  BodyPool* pool_ = nullptr;
  int32_t none_ = -1;
  int constants_ = 0;
  bool control_flow_ = false;  // an If or For was written: format version 2
  // The op the last kernel instruction was written for, and that instruction's index.
  std::pair<mlir::Operation*, size_t> last_kernel_{nullptr, 0};
  bool generated_ = false;              // a Generated instruction was written: format version 3
  bool splat_ = false;                  // a splat weight was written: format version 3
  std::set<mlir::Operation*> grouped_;  // ops written with their generated group
  std::vector<std::pair<int64_t, int64_t>> slot_bytes_;  // per slot: arena offset (-1: none), bytes
  llvm::DenseMap<mlir::Value, int64_t> index_constants_;  // loop bounds
  llvm::DenseMap<mlir::Value, int32_t> in_place_;   // update results written in a carried slot
  llvm::DenseMap<mlir::Value, int32_t> induction_;  // induction variable -> counter slot
  llvm::DenseMap<mlir::Value, mlir::Value> induction_alias_;  // its index_cast -> itself
  std::map<const void*, std::string> resource_blobs_;  // resource attribute -> its blob's name
};

}  // namespace

std::vector<uint8_t> write_artifact(mlir::ModuleOp module, const ArtifactOptions& options) {
  return Writer(module, options).write();
}

void write_artifact_file(mlir::ModuleOp module, const ArtifactOptions& options,
                         const std::string& path) {
  const std::vector<uint8_t> bytes = write_artifact(module, options);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot open \"" + path + "\" for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) fail("cannot write \"" + path + "\"");
}

}  // namespace kiln::codegen
