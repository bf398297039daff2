// Registry entries of the run-time checks (kiln.guard).

#include "common.h"
#include "kiln/runtime/kernels/guard.h"

namespace kiln::rt::ops {

namespace {
struct GuardParams : KernelParams {
  double value = 0;
  std::string where;
};
std::unique_ptr<KernelParams> decode_guard(const AttrMap& a) {
  auto p = std::make_unique<GuardParams>();
  p->value = a.f("value");
  p->where = std::string(a.s("where"));
  return p;
}
void run_guard(const KernelCall& c) {
  const auto& p = params<GuardParams>(c);
  kernels::guard(in(c, 0), p.value, p.where);
}
}  // namespace

void register_checks(Registry& r) {
  r.add(with_signature({.name = "guard", .decode = decode_guard, .run = run_guard}));
}

}  // namespace kiln::rt::ops
