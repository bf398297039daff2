// --kiln-plan-memory on random programs, checked by simulation (independent of how the pass
// reasons): every value writes its own tag over its arena bytes when it is made (a view that
// shares its source's bytes writes the same tag); every read, and every returned value at the
// end, must still find its tag. Two buffers overlapping while both are live would clobber a tag.

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace {

struct Value {
  int64_t n;  // f32 elements, shape [n]
  std::string name;
};

// A random straight-line program over 1-d f32 tensors: elementwise ops (in place allowed),
// softmax (never in place), cat (grows), slice (shrinks), views (aliases).
std::string random_program(std::mt19937& g, int ops) {
  std::ostringstream os;
  std::vector<Value> vals = {{64, "%a"}, {64, "%b"}, {128, "%c"}};
  os << "func.func @f(%a: tensor<64xf32>, %b: tensor<64xf32>, %c: tensor<128xf32>) -> (";
  std::ostringstream body;
  auto ty = [](int64_t n) { return "tensor<" + std::to_string(n) + "xf32>"; };
  auto pick = [&](int64_t want) -> const Value* {
    std::vector<const Value*> c;
    for (const Value& v : vals)
      if (want < 0 || v.n == want) c.push_back(&v);
    if (c.empty()) return nullptr;
    // Prefer recent values so some values die early and others live long.
    std::uniform_int_distribution<size_t> d(0, c.size() - 1);
    size_t i = std::max(d(g), d(g));
    return c[i];
  };
  for (int k = 0; k < ops; ++k) {
    const std::string r = "%v" + std::to_string(k);
    const Value* x = pick(-1);
    switch (g() % 6) {
      case 0:
        body << r << " = kiln.relu " << x->name << " : " << ty(x->n) << " -> " << ty(x->n) << "\n";
        vals.push_back({x->n, r});
        break;
      case 1: {
        const Value* y = pick(x->n);
        body << r << " = kiln.add " << x->name << ", " << y->name << " : " << ty(x->n) << ", "
             << ty(x->n) << "\n";
        vals.push_back({x->n, r});
        break;
      }
      case 2:
        body << r << " = kiln.softmax " << x->name << " {dim = 0 : i64} : (" << ty(x->n) << ") -> "
             << ty(x->n) << "\n";
        vals.push_back({x->n, r});
        break;
      case 3:
        if (x->n <= 256) {
          const Value* y = pick(-1);
          body << r << " = kiln.cat " << x->name << ", " << y->name << " {dim = 0 : i64} : ("
               << ty(x->n) << ", " << ty(y->n) << ") -> " << ty(x->n + y->n) << "\n";
          vals.push_back({x->n + y->n, r});
          break;
        }
        [[fallthrough]];
      case 4:
        body << r << " = kiln.slice " << x->name
             << " {dim = 0 : i64, start = 0 : i64, end = " << x->n / 2
             << " : i64, step = 1 : i64} : (" << ty(x->n) << ") -> " << ty(x->n / 2) << "\n";
        vals.push_back({x->n / 2, r});
        break;
      default:
        body << r << " = kiln.reshape " << x->name << " {shape = array<i64: " << x->n << ">} : ("
             << ty(x->n) << ") -> " << ty(x->n) << "\n";
        vals.push_back({x->n, r});
        break;
    }
  }
  // Return the last value and a random earlier one.
  const Value& last = vals.back();
  const Value& other = vals[g() % vals.size()];
  os << ty(last.n) << ", " << ty(other.n) << ") attributes {kiln.num_inputs = 3 : i64} {\n"
     << body.str() << "return " << last.name << ", " << other.name << " : " << ty(last.n) << ", "
     << ty(other.n) << "\n}\n";
  return os.str();
}

TEST(MemoryPlan, NoLiveValueIsEverClobberedOnRandomPrograms) {
  mlir::DialectRegistry registry;
  kiln::ir::register_dialects(registry);
  mlir::MLIRContext ctx(registry);
  std::mt19937 g(1234);
  int reused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = random_program(g, 4 + trial % 20);
    auto module = mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
    ASSERT_TRUE(module) << text;
    mlir::PassManager pm(&ctx);
    pm.addNestedPass<mlir::func::FuncOp>(kiln::passes::create_plan_memory_pass());
    ASSERT_TRUE(mlir::succeeded(pm.run(*module))) << text;
    auto fn = module->lookupSymbol<mlir::func::FuncOp>("f");
    const int64_t arena = fn->getAttrOfType<mlir::IntegerAttr>("kiln.arena_bytes").getInt();
    const int64_t naive = fn->getAttrOfType<mlir::IntegerAttr>("kiln.naive_bytes").getInt();
    EXPECT_LE(arena, naive);
    reused += arena < naive;

    std::vector<int> mem(arena, -1);                             // tag per byte
    llvm::DenseMap<mlir::Value, std::pair<int64_t, int>> where;  // offset, tag
    int next_tag = 0;
    auto bytes = [](mlir::Value v) {
      return mlir::cast<mlir::RankedTensorType>(v.getType()).getNumElements() * 4;
    };
    auto write = [&](mlir::Value v, int64_t off, int tag) {
      ASSERT_GE(off, 0);
      ASSERT_LE(off + bytes(v), arena) << text;
      EXPECT_EQ(off % 64, 0);
      for (int64_t i = 0; i < bytes(v); ++i) mem[off + i] = tag;
      where[v] = {off, tag};
    };
    auto check = [&](mlir::Value v, const std::string& at) {
      auto [off, tag] = where.lookup(v);
      for (int64_t i = 0; i < bytes(v); ++i) {
        if (mem[off + i] != tag) {
          ADD_FAILURE() << "value clobbered before " << at << " (byte " << off + i << ")\n" << text;
          return false;
        }
      }
      return true;
    };
    auto args = fn->getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.arg_offsets").asArrayRef();
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      write(fn.getArgument(i), args[i], next_tag++);
    bool ok = true;
    for (mlir::Operation& op : fn.getBody().front()) {
      const std::string name = op.getName().getStringRef().str();
      for (mlir::Value v : op.getOperands()) ok = ok && check(v, name);
      if (name == "func.return") break;
      const int64_t off = op.getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.arena_offsets")[0];
      // A reshape's content is its source's: same tag (sharing bytes with it is correct).
      const int tag = name == "kiln.reshape" ? where.lookup(op.getOperand(0)).second : next_tag++;
      write(op.getResult(0), off, tag);
      if (!ok) break;
    }
  }
  EXPECT_GT(reused, 200);  // the planner does reuse memory
}

}  // namespace
