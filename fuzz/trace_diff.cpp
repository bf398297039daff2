// kiln_trace_fuzz: the differential trace fuzzer (issue #28). Random small programs over kiln's
// ops — pointwise and broadcasting binary ops, reductions, views (transpose, unsqueeze, reshape,
// narrow), matmul, softmax, in-place writes (through views too), values read back with item(),
// kiln::cond / kiln::loop, random numbers — run eagerly, traced and interpreted, JIT-compiled,
// saved and run by the runtime, and (every K-th program) AOT-compiled to a shared object. Each
// backend runs the traced inputs and a fresh input set; any result beyond tolerance, or any
// error other than a GuardError where the program read a value back, fails with the program
// printed.
//
//   kiln_trace_fuzz [--seed S] [--count N | --minutes M] [--aot-every K] [--verbose]
//
// CTest runs a fixed set of seeds; `--minutes 60` is the long mode. Random programs are compared
// eagerly, interpreted and compiled under the same manual_seed; saved and AOT code carry their
// own generator state, so those backends skip them.

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/control_flow.h"
#include "kiln/jit/aot.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/aot_model.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/trace.h"

namespace kiln::fuzz {
namespace {

enum class Op {
  Unary,
  Binary,
  Reduce,
  View,
  Matmul,
  Softmax,
  Inplace,
  InplaceView,
  ReadBack,
  Cond,
  Loop,
  Rand,
  Linear,
  Cat,
  Normalize,
  IndexSelect,
  Expand,
  Permute,
  Dropout,
  MaskedFill,
};

const char* const kUnary[] = {"relu",     "tanh",       "sigmoid",   "neg",     "abs",  "sin",
                              "exp_tanh", "square",     "log1p_abs", "gelu",    "silu", "erf",
                              "cos",      "leaky_relu", "clamp",     "sqrt_abs"};
const char* const kBinary[] = {"add",      "sub",     "mul",     "maximum",
                               "div_abs1", "minimum", "pow_abs", "where_gt"};
const char* const kNormalize[] = {"layer_norm", "log_softmax", "cumsum", "logsumexp"};
const char* const kReduce[] = {"sum", "mean", "amax"};
const char* const kView[] = {"transpose", "unsqueeze", "flatten", "narrow"};

struct Step {
  Op op;
  int kind = 0;
  int a = 0, b = 0;
  int64_t d0 = 0, d1 = 0, n = 0;
  bool keep = false;
};

struct Program {
  uint64_t seed = 0;
  std::vector<Dims> inputs;
  std::vector<Step> steps;
  std::vector<int> outputs;
  TensorList weights;  // Linear's, captured by the trace
  bool random = false, reads_back = false;

  std::string str() const {
    std::ostringstream s;
    s << "program (seed " << seed << "):\n";
    for (size_t i = 0; i < inputs.size(); ++i) s << "  v" << i << " = input " << inputs[i] << "\n";
    int v = static_cast<int>(inputs.size());
    for (const Step& st : steps) {
      s << "  v" << v++ << " = ";
      switch (st.op) {
        case Op::Unary:
          s << kUnary[st.kind] << "(v" << st.a << ")";
          break;
        case Op::Binary:
          s << kBinary[st.kind] << "(v" << st.a << ", v" << st.b << " or its mean)";
          break;
        case Op::Reduce:
          s << kReduce[st.kind] << "(v" << st.a << ", dim " << st.d0
            << (st.keep ? ", keepdim)" : ")");
          break;
        case Op::View:
          s << kView[st.kind] << "(v" << st.a << ", " << st.d0 << ", " << st.d1 << ", " << st.n
            << ")";
          break;
        case Op::Matmul:
          s << "matmul(v" << st.a << ", v" << st.a << "^T)";
          break;
        case Op::Softmax:
          s << "softmax(v" << st.a << ", " << st.d0 << ")";
          break;
        case Op::Inplace:
          s << "clone(v" << st.a << ").add_(v" << st.b << " or its mean)";
          break;
        case Op::InplaceView:
          s << "t = clone(v" << st.a << "); t.transpose(" << st.d0 << ", " << st.d1
            << ").mul_(2).add_(1); t";
          break;
        case Op::ReadBack:
          s << "r = v" << st.a << ".sum().item(); r > 0.37 ? relu(v" << st.b << ") : v" << st.b
            << " * r";
          break;
        case Op::Cond:
          s << "cond(sum(v" << st.a << ") > 0.37, v" << st.b << " * 2 + mean(v" << st.a << "), v"
            << st.b << " - 1)";
          break;
        case Op::Loop:
          s << "loop(" << st.n << ", c * 0.5 + i + sin(c), carry v" << st.a << ")";
          break;
        case Op::Rand:
          s << "v" << st.a << " + rand_like(v" << st.a << ")";
          break;
        case Op::Linear:
          s << "linear(v" << st.a << ", w" << st.b << " " << weights[st.b].sizes() << ")";
          break;
        case Op::Cat:
          s << "cat(v" << st.a << ", tanh(v" << st.a << "), dim " << st.d0 << ")";
          break;
        case Op::Normalize:
          s << kNormalize[st.kind] << "(v" << st.a << ", dim " << st.d0
            << (st.keep ? ", keepdim)" : ")");
          break;
        case Op::IndexSelect:
          s << "index_select(v" << st.a << ", " << st.d0 << ", [last, 0])";
          break;
        case Op::Expand:
          s << "v" << st.a << ".unsqueeze(0).expand(2, ...)";
          break;
        case Op::Permute:
          s << "v" << st.a << ".permute(reversed)";
          break;
        case Op::Dropout:
          s << "dropout(v" << st.a << ", 0.3)";
          break;
        case Op::MaskedFill:
          s << "t = clone(v" << st.a << "); masked_fill_(t, t > 0, 0.5); t";
          break;
      }
      s << "\n";
    }
    s << "  return";
    for (int o : outputs) s << " v" << o;
    return s.str() + "\n";
  }
};

// What a branch compares a sum with. Not 0: sums that are 0 or whole numbers by construction
// (of a layer norm's or x - mean(x)'s output, of softmax rows) land within rounding of 0 or an
// integer, where backends that sum in different orders may take different branches — a property
// of the program, not a bug (the first long run's one mismatch was such a sum, ~1e-7).
constexpr double kThreshold = 0.37;

bool broadcastable(const Dims& a, const Dims& b) {
  for (size_t k = 1; k <= std::min(a.size(), b.size()); ++k) {
    const int64_t x = a[a.size() - k], y = b[b.size() - k];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// b broadcasts to a's shape (an in-place operand).
bool broadcasts_to(const Dims& b, const Dims& a) {
  if (b.size() > a.size()) return false;
  for (size_t k = 1; k <= b.size(); ++k)
    if (b[b.size() - k] != a[a.size() - k] && b[b.size() - k] != 1) return false;
  return true;
}

Tensor unary(int kind, const Tensor& x) {
  switch (kind) {
    case 0:
      return relu(x);
    case 1:
      return tanh(x);
    case 2:
      return sigmoid(x);
    case 3:
      return neg(x);
    case 4:
      return abs(x);
    case 5:
      return sin(x);
    case 6:
      return exp(tanh(x));
    case 7:
      return x * x;
    case 8:
      return log1p(abs(x));
    case 9:
      return gelu(x);
    case 10:
      return silu(x);
    case 11:
      return erf(x);
    case 12:
      return cos(x);
    case 13:
      return leaky_relu(x, 0.1);
    case 14:
      return clamp(x, -0.5, 0.5);
    default:
      return sqrt(abs(x));
  }
}

Tensor binary(int kind, const Tensor& a, const Tensor& b0) {
  const Tensor b = broadcastable(a.sizes(), b0.sizes()) ? b0 : b0.mean();
  switch (kind) {
    case 0:
      return a + b;
    case 1:
      return a - b;
    case 2:
      return a * b;
    case 3:
      return maximum(a, b);
    case 4:
      return a / (abs(b) + 1.0);
    case 5:
      return minimum(a, b);
    case 6:
      return pow(abs(a) + 0.5, clamp(b, -2.0, 2.0));
    default:
      return where(gt(a, b), a, b);
  }
}

// One step on the values so far (the program's semantics; eager, and recorded under tracing).
Tensor apply_step(const Step& st, const TensorList& v, const TensorList& weights) {
  const Tensor& a = v[st.a];
  switch (st.op) {
    case Op::Linear:
      return linear(a, weights[st.b]);
    case Op::Cat:
      return cat({a, tanh(a)}, st.d0);
    case Op::Normalize:
      switch (st.kind) {
        case 0: {
          const int64_t last[] = {a.size(-1)};
          return layer_norm(a, last);
        }
        case 1:
          return log_softmax(a, st.d0);
        case 2:
          return cumsum(a, st.d0);
        default: {
          const int64_t d[] = {st.d0};
          return logsumexp(a, d, st.keep);
        }
      }
    case Op::IndexSelect:
      return index_select(a, st.d0,
                          tensor({static_cast<double>(a.size(st.d0) - 1), 0.0}, DType::Int64));
    case Op::Expand: {
      Dims sizes{2};
      for (int64_t d : a.sizes()) sizes.push_back(d);
      return a.unsqueeze(0).expand(sizes);
    }
    case Op::Permute: {
      Dims order;
      for (int64_t d = a.dim() - 1; d >= 0; --d) order.push_back(d);
      return a.permute(order);
    }
    case Op::Dropout:
      return dropout(a, 0.3, true);
    case Op::MaskedFill: {
      Tensor t = a.clone();
      masked_fill_(t, gt(t, zeros({})), 0.5);
      return t;
    }
    case Op::Unary:
      return unary(st.kind, a);
    case Op::Binary:
      return binary(st.kind, a, v[st.b]);
    case Op::Reduce: {
      if (a.dim() == 0) return a * 1.0;
      const int64_t d[] = {st.d0};
      if (st.kind == 0) return a.sum({st.d0}, st.keep);
      if (st.kind == 1) return a.mean({st.d0}, st.keep);
      return amax(a, d, st.keep);
    }
    case Op::View:
      switch (st.kind) {
        case 0:
          return a.transpose(st.d0, st.d1);
        case 1:
          return a.unsqueeze(st.d0);
        case 2:
          return a.reshape({-1});
        default:
          return a.narrow(st.d0, st.d1, st.n);
      }
    case Op::Matmul:  // a 1-D operand is a dot product
      return a.dim() == 1 ? matmul(a, a) : matmul(a, a.transpose(-1, -2));
    case Op::Softmax:
      return softmax(a, st.d0);
    case Op::Inplace: {
      Tensor t = a.clone();
      const Tensor& b = v[st.b];
      t.add_(broadcasts_to(b.sizes(), t.sizes()) ? b : b.mean());
      return t;
    }
    case Op::InplaceView: {
      Tensor t = a.clone();
      Tensor view = t.transpose(st.d0, st.d1);
      view.mul_(2.0);
      view.add_(1.0);
      return t;
    }
    case Op::ReadBack: {
      const double r = a.sum().item<double>();
      return r > kThreshold ? relu(v[st.b]) : v[st.b] * r;
    }
    case Op::Cond: {
      const Tensor& b = v[st.b];
      return cond(
          gt(a.sum(), full({}, kThreshold)), [&] { return TensorList{b * 2.0 + a.mean()}; },
          [&] { return TensorList{b - 1.0}; })[0];
    }
    case Op::Loop:
      return loop(st.n,
                  [](const Tensor& i, const TensorList& c) {
                    return TensorList{c[0] * 0.5 + i.to(DType::Float32) + sin(c[0])};
                  },
                  {a})[0];
    case Op::Rand:
      return a + rand(a.sizes());
  }
  return a;
}

TensorList run(const Program& p, const TensorList& inputs) {
  TensorList v = inputs;
  for (const Step& st : p.steps) v.push_back(apply_step(st, v, p.weights));
  TensorList out;
  for (int o : p.outputs) out.push_back(v[o]);
  return out;
}

TensorList random_inputs(const Program& p, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  TensorList in;
  for (const Dims& s : p.inputs) {
    Tensor t = empty(s);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = d(g);
    in.push_back(t);
  }
  return in;
}

// A program of 3 to 12 steps over 1 to 3 inputs whose shapes share a base shape (some dims 1, so
// binary ops broadcast); each step is checked by running it on example inputs as it is drawn.
Program generate(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(g() % static_cast<uint64_t>(n)); };
  Program p;
  p.seed = seed;
  Dims base;
  for (int64_t r = 1 + pick(3), k = 0; k < r; ++k) base.push_back(1 + pick(5));
  for (int64_t i = 0, n = 1 + pick(3); i < n; ++i) {
    Dims s = base;
    for (int64_t& d : s)
      if (pick(4) == 0) d = 1;
    p.inputs.push_back(s);
  }
  TensorList v = random_inputs(p, g);
  const int64_t num_steps = 3 + pick(10);
  autograd::NoGradGuard no_grad;
  for (int64_t k = 0; k < num_steps; ++k) {
    Step st;
    st.a = static_cast<int>(pick(static_cast<int64_t>(v.size())));
    st.b = static_cast<int>(pick(static_cast<int64_t>(v.size())));
    const Tensor& a = v[st.a];
    const int64_t rank = a.dim();
    if (pick(10) < 4 && rank >= 1) {  // the second family of ops
      const int64_t kind = pick(8);
      if (kind == 0) {
        st.op = Op::Linear;
        std::normal_distribution<float> d(0.0f, 0.5f);
        Tensor w = empty({1 + pick(4), a.size(-1)});
        for (int64_t i = 0; i < w.numel(); ++i) w.data_ptr<float>()[i] = d(g);
        st.b = static_cast<int>(p.weights.size());
        p.weights.push_back(w);
      } else if (kind == 1) {
        st.op = Op::Cat, st.d0 = pick(rank);
      } else if (kind == 2) {
        st.op = Op::Normalize, st.kind = static_cast<int>(pick(4)), st.d0 = pick(rank);
        st.keep = pick(2);
      } else if (kind == 3) {
        st.op = Op::IndexSelect, st.d0 = pick(rank);
      } else if (kind == 4) {
        st.op = rank < 5 ? Op::Expand : Op::Permute;
      } else if (kind == 5) {
        st.op = Op::Permute;
      } else if (kind == 6) {
        st.op = Op::Dropout;
        p.random = true;
      } else {
        st.op = Op::MaskedFill;
      }
    } else if (const int64_t roll = pick(100); roll < 20) {
      st.op = Op::Unary, st.kind = static_cast<int>(pick(std::size(kUnary)));
    } else if (roll < 40) {
      st.op = Op::Binary, st.kind = static_cast<int>(pick(std::size(kBinary)));
    } else if (roll < 48) {
      st.op = Op::Reduce, st.kind = static_cast<int>(pick(3)), st.keep = pick(2);
      st.d0 = rank ? pick(rank) : 0;
    } else if (roll < 60) {
      st.op = Op::View, st.kind = static_cast<int>(pick(4));
      if (st.kind == 0 && rank < 2) st.kind = 2;
      if (st.kind == 3 && rank < 1) st.kind = 1;
      if (st.kind == 1 && rank >= 5) st.kind = 2;
      if (st.kind == 0) st.d0 = pick(rank), st.d1 = pick(rank);
      if (st.kind == 1) st.d0 = pick(rank + 1);
      if (st.kind == 3) {
        st.d0 = pick(rank);
        const int64_t size = a.size(st.d0);
        st.d1 = pick(size);
        st.n = 1 + pick(size - st.d1);
      }
    } else if (roll < 64 && rank >= 1) {
      st.op = Op::Matmul;
    } else if (roll < 68 && rank >= 1) {
      st.op = Op::Softmax, st.d0 = pick(rank);
    } else if (roll < 74) {
      st.op = Op::Inplace;
    } else if (roll < 78 && rank >= 2) {
      st.op = Op::InplaceView, st.d0 = pick(rank), st.d1 = pick(rank);
    } else if (roll < 83) {
      st.op = Op::ReadBack;
      p.reads_back = true;
    } else if (roll < 89) {
      st.op = Op::Cond;
    } else if (roll < 94) {
      st.op = Op::Loop, st.n = pick(4);
    } else if (roll < 97) {
      st.op = Op::Rand;
      p.random = true;
    } else {
      st.op = Op::Unary, st.kind = 1;
    }
    try {
      v.push_back(apply_step(st, v, p.weights));
    } catch (const Error& e) {  // a combination the generator should not draw: a bug here
      std::fprintf(stderr, "generator (seed %llu): step %lld: %s\n", (unsigned long long)seed,
                   (long long)k, e.what());
      std::abort();
    }
    p.steps.push_back(st);
  }
  const int last = static_cast<int>(v.size()) - 1;
  p.outputs.push_back(last);
  const int other = static_cast<int>(p.inputs.size() + pick(static_cast<int64_t>(p.steps.size())));
  if (other != last) p.outputs.push_back(other);
  return p;
}

struct Stats {
  int64_t programs = 0, comparisons = 0, guard_refusals = 0, trace_refusals = 0, aot = 0;
  int64_t failures = 0;
};

double max_rel_error(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(DType::Float64), w = want.to(DType::Float64);
  const double scale = std::max(1.0, amax(abs(w)).item<double>());
  const Tensor diff = abs(g - w);
  // NaN where eager is NaN is agreement; anywhere else it is a mismatch.
  const Tensor both_nan = logical_and(ne(g, g), ne(w, w));
  return amax(where(both_nan, zeros_like(diff), where(ne(diff, diff), full_like(diff, 1e30), diff)))
             .item<double>() /
         scale;
}

class Runner {
 public:
  Runner(int aot_every, bool verbose) : aot_every_(aot_every), verbose_(verbose) {
    dir_ = std::filesystem::temp_directory_path() / ("kiln-trace-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~Runner() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const Stats& stats() const { return stats_; }

  void check(uint64_t seed) {
    const Program p = generate(seed);
    ++stats_.programs;
    std::mt19937_64 g(seed ^ 0x9e3779b97f4a7c15ull);
    const TensorList a = random_inputs(p, g), b = random_inputs(p, g);
    auto fn = [&p](const TensorList& in) { return run(p, in); };
    jit::TraceOptions quiet;
    quiet.warn_on_read_back = false;
    manual_seed(11);
    jit::TracedFunction traced;
    TensorList traced_eager;
    try {
      traced = jit::trace(fn, a, quiet, &traced_eager);
    } catch (const Error& e) {
      ++stats_.trace_refusals;  // a refusal with a message is never a wrong number
      if (verbose_)
        std::printf("trace refused (seed %llu): %s\n", (unsigned long long)seed, e.what());
      return;
    }
    manual_seed(11);
    const TensorList want_a = fn(a);
    compare(p, "trace-time eager", traced_eager, want_a);
    jit::CompileOptions co;
    co.disk_cache = false;
    std::optional<jit::CompiledFunction> compiled;
    attempt(p, "jit compile", [&] { compiled.emplace(jit::compile(traced, co)); });
    for (int set = 0; set < 2; ++set) {
      const TensorList& in = set == 0 ? a : b;
      const std::string tag = set == 0 ? " (traced inputs)" : " (new inputs)";
      manual_seed(11);
      const TensorList want = fn(in);
      attempt(p, "interpreter" + tag, [&] {
        manual_seed(11);
        compare(p, "interpreter" + tag, traced(in), want);
      });
      if (compiled) {
        attempt(p, "jit" + tag, [&] {
          manual_seed(11);
          compare(p, "jit" + tag, (*compiled)(in), want);
        });
      }
    }
    if (p.random) return;
    attempt(p, "saved artifact", [&] {
      auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
      rt::Session session(model);
      for (int set = 0; set < 2; ++set) {
        const TensorList& in = set == 0 ? a : b;
        std::vector<const TensorImpl*> ptrs;
        for (const Tensor& t : in) ptrs.push_back(t.impl());
        const TensorList want = fn(in);
        attempt(p, "saved artifact", [&] {
          TensorList got;
          for (const TensorImplPtr& t : session.run(ptrs)) got.push_back(Tensor(t));
          compare(p, set == 0 ? "saved (traced inputs)" : "saved (new inputs)", got, want);
        });
      }
    });
    if (aot_every_ > 0 && stats_.programs % aot_every_ == 0)
      attempt(p, "aot", [&] { aot(p, traced, fn, b); });
  }

 private:
  void aot(const Program& p, const jit::TracedFunction& traced,
           const std::function<TensorList(const TensorList&)>& fn, const TensorList& in) {
    ++stats_.aot;
    jit::AotOptions o;
    o.emit = "so";
    o.output = (dir_ / ("libp" + std::to_string(p.seed) + ".so")).string();
    jit::compile_aot(traced, o);
    void* lib = dlopen(o.output.c_str(), RTLD_NOW | RTLD_LOCAL);
    KILN_CHECK(lib, "aot", "dlopen: ", dlerror());
    struct Close {
      void* lib;
      ~Close() { dlclose(lib); }
    } close{lib};
    auto run_fn =
        reinterpret_cast<int (*)(const void* const*, void* const*)>(dlsym(lib, "model_run"));
    auto info_fn = reinterpret_cast<const kiln_model_info* (*)()>(dlsym(lib, "model_info"));
    auto take_error = reinterpret_cast<char* (*)()>(dlsym(lib, "model_take_error"));
    auto free_error = reinterpret_cast<void (*)(char*)>(dlsym(lib, "model_free_error"));
    KILN_CHECK(run_fn && info_fn && take_error && free_error, "aot", "model_* symbols missing");
    const kiln_model_info& info = *info_fn();
    std::vector<const void*> ins;
    TensorList contiguous;
    for (const Tensor& t : in) contiguous.push_back(t.contiguous());
    for (const Tensor& t : contiguous) ins.push_back(t.data());
    TensorList outs;
    std::vector<void*> out_ptrs;
    for (int32_t i = 0; i < info.num_outputs; ++i) {
      const std::vector<int64_t> shape(info.outputs[i].shape,
                                       info.outputs[i].shape + info.outputs[i].rank);
      outs.push_back(empty(shape, TensorOptions(DType(info.outputs[i].dtype))));
      out_ptrs.push_back(outs.back().data());
    }
    if (run_fn(ins.data(), out_ptrs.data()) != 0) {
      char* m = take_error();
      const std::string text = m ? m : "";
      free_error(m);
      if (p.reads_back && text.find("guard") != std::string::npos) {
        ++stats_.guard_refusals;
        return;
      }
      fail("aot", "model_run failed: ", text);
    }
    compare(p, "aot (new inputs)", outs, fn(in));
  }

  template <typename F>
  void attempt(const Program& p, const std::string& what, F f) {
    try {
      f();
    } catch (const GuardError& e) {
      if (p.reads_back) {
        ++stats_.guard_refusals;
        if (verbose_)
          std::printf("%s: guard (seed %llu): %s\n", what.c_str(), (unsigned long long)p.seed,
                      e.what());
        return;
      }
      report(p, what + ": unexpected GuardError: " + e.what());
    } catch (const std::exception& e) {
      report(p, what + ": " + e.what());
    }
  }

  void compare(const Program& p, const std::string& what, const TensorList& got,
               const TensorList& want) {
    ++stats_.comparisons;
    if (got.size() != want.size()) {
      report(p, what + ": " + std::to_string(got.size()) + " results, eager " +
                    std::to_string(want.size()));
      return;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i].sizes() != want[i].sizes()) {
        std::ostringstream s;
        s << what << ": result " << i << " has shape " << got[i].sizes() << ", eager "
          << want[i].sizes();
        report(p, s.str());
        continue;
      }
      const double err = max_rel_error(got[i], want[i]);
      if (!(err <= 1e-4)) {
        std::ostringstream s;
        s << what << ": result " << i << " differs from eager by " << err << " (relative)";
        report(p, s.str());
      }
    }
  }

  void report(const Program& p, const std::string& message) {
    ++stats_.failures;
    std::printf("MISMATCH %s\n%s\n", message.c_str(), p.str().c_str());
    std::fflush(stdout);
  }

  int aot_every_;
  bool verbose_;
  std::filesystem::path dir_;
  Stats stats_;
};

}  // namespace
}  // namespace kiln::fuzz

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t count = 100;
  double minutes = 0;
  int aot_every = 20;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed")
      seed = std::stoull(value());
    else if (a == "--count")
      count = std::stoll(value());
    else if (a == "--minutes")
      minutes = std::stod(value());
    else if (a == "--aot-every")
      aot_every = std::stoi(value());
    else if (a == "--verbose")
      verbose = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--seed S] [--count N | --minutes M] [--aot-every K] [--verbose]\n",
                   argv[0]);
      return 2;
    }
  }
  kiln::fuzz::Runner runner(aot_every, verbose);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int64_t k = 0; minutes > 0 ? elapsed() < minutes * 60 : k < count; ++k) {
    runner.check(seed + k);
    if (minutes > 0 && (k + 1) % 500 == 0) {  // the long mode reports as it goes
      std::printf("... %lld programs, %lld mismatches, %.0f s\n", (long long)(k + 1),
                  (long long)runner.stats().failures, elapsed());
      std::fflush(stdout);
    }
  }
  const kiln::fuzz::Stats& s = runner.stats();
  std::printf(
      "%lld programs (seeds %llu..), %lld comparisons, %lld AOT-compiled, %lld guard "
      "refusals, %lld trace refusals, %lld mismatches in %.1f s (%.0f programs/hour)\n",
      (long long)s.programs, (unsigned long long)seed, (long long)s.comparisons, (long long)s.aot,
      (long long)s.guard_refusals, (long long)s.trace_refusals, (long long)s.failures, elapsed(),
      s.programs / elapsed() * 3600);
  return s.failures == 0 ? 0 : 1;
}
