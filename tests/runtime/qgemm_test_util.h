#pragma once
// The integer microkernel families this CPU runs, for tests that check each against the
// reference (test_qgemm.cpp, test_qlinear_dynamic.cpp).

#include <vector>

#include "kiln/runtime/kernels/qgemm.h"

namespace qgemm_test {

inline std::vector<kiln::kernels::QGemmIsa> isas() {
  using kiln::kernels::QGemmIsa;
  std::vector<QGemmIsa> v{QGemmIsa::Portable};
  for (QGemmIsa isa : {QGemmIsa::Avx2, QGemmIsa::AvxVnni, QGemmIsa::Avx512Vnni, QGemmIsa::Amx,
                       QGemmIsa::NeonI8mm, QGemmIsa::NeonDot})
    if (kiln::kernels::qgemm_isa_available(isa)) v.push_back(isa);
  return v;
}

// Restores Auto when the test ends (also when it fails).
struct IsaGuard {
  ~IsaGuard() { kiln::kernels::set_qgemm_isa(kiln::kernels::QGemmIsa::Auto); }
};

}  // namespace qgemm_test
