// In-place writes and tensors sharing memory under tracing: an alias of the same geometry (a
// detach) takes the written value, as eager sees it; a view of another shape, or the base of a
// written view, read after the write is refused by name — never a stale value in the trace
// (found by the differential trace fuzzer, fuzz/trace_diff.cpp).
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/trace/trace.h"
#include "trace_test_util.h"

using namespace kiln;

namespace {

jit::TraceOptions quiet() {
  jit::TraceOptions o;
  o.warn_on_read_back = false;
  return o;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}

}  // namespace

TEST(TraceAliasing, DetachedAliasSeesALaterInPlaceWrite) {
  auto fn = [](const TensorList& in) {
    Tensor t = in[0] * 2.0;
    Tensor alias = t.detach();
    Tensor before = alias + 1.0;  // reads the alias before the write
    t.add_(3.0);
    return TensorList{before, alias * 1.0};  // ... and after: eager sees t + 3
  };
  const Tensor x = ones({2, 3});
  jit::TracedFunction traced = jit::trace(fn, {x}, quiet());
  const Tensor x2 = full({2, 3}, -0.5);
  const TensorList want = fn({x2}), got = traced({x2});
  EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-6);
  EXPECT_LE(max_abs_diff(got[1], want[1]), 1e-6);
}

TEST(TraceAliasing, BaseReadAfterAWriteThroughAViewIsRefused) {
  auto through_view = [](const TensorList& in) {
    Tensor t = in[0].clone();
    Tensor view = t.transpose(0, 1);
    view.mul_(2.0);
    return TensorList{t};
  };
  try {
    jit::trace(through_view, {ones({2, 3})}, quiet());
    ADD_FAILURE() << "a stale base was traced";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mul_"), std::string::npos) << m;
    EXPECT_NE(m.find("clone the view"), std::string::npos) << m;
  }
  // The view itself, read after its own write, is fine; so is the base when nothing wrote
  // through a view.
  auto view_only = [](const TensorList& in) {
    Tensor t = in[0].clone();
    Tensor view = t.transpose(0, 1);
    view.mul_(2.0);
    return TensorList{view + 1.0};
  };
  jit::TracedFunction traced = jit::trace(view_only, {ones({2, 3})}, quiet());
  const Tensor x2 = full({2, 3}, 1.5);
  EXPECT_LE(max_abs_diff(traced({x2})[0], view_only({x2})[0]), 1e-6);
}

TEST(TraceAliasing, ViewReadAfterAWriteToItsBaseIsRefused) {
  auto fn = [](const TensorList& in) {
    Tensor t = in[0].clone();
    Tensor row = t.narrow(0, 0, 1);
    Tensor early = row * 1.0;
    t.add_(1.0);
    return TensorList{early, row * 1.0};
  };
  EXPECT_THROW(jit::trace(fn, {ones({2, 3})}, quiet()), Error);
}

TEST(TraceAliasing, DisjointViewsOfOneStorageStayUsable) {
  auto fn = [](const TensorList& in) {
    Tensor t = in[0].clone();
    Tensor first = t.narrow(0, 0, 1), second = t.narrow(0, 1, 1);
    first.mul_(2.0);
    return TensorList{second + 1.0, first * 1.0};
  };
  jit::TracedFunction traced = jit::trace(fn, {ones({2, 3})}, quiet());
  const Tensor x2 = full({2, 3}, -0.5);
  const TensorList want = fn({x2}), got = traced({x2});
  EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-6);
  EXPECT_LE(max_abs_diff(got[1], want[1]), 1e-6);
}

// A captured parameter written through a view of it (a masked update of one row) would be written
// back stale: refused at the end of the trace, naming the op.
TEST(TraceAliasing, CaptureWrittenThroughAViewIsRefused) {
  Tensor w = ones({4, 3});
  auto fn = [&](const TensorList& in) {
    Tensor y = in[0] * w;
    Tensor row = w.narrow(0, 0, 1);
    row.mul_(2.0);
    return TensorList{y};
  };
  jit::TraceOptions o = quiet();
  o.named_captures = {{"w", w}};
  try {
    jit::trace(fn, {ones({4, 3})}, o);
    FAIL() << "a capture written through a view was traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("captured tensor"), std::string::npos) << e.what();
  }
}
