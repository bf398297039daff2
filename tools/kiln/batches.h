#pragma once
// Samples along the batch axis of a .npy file, cut into batches of a model input's shape (the
// CLI's --calibration, --sqnr-input and quant-report --input).

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/serialize.h"

namespace kiln::cli {

// Throws kiln::Error naming `option` and the expected shape [N, ...] and dtype; warns about
// samples that do not fill a last batch.
inline std::vector<Tensor> read_batches(const std::string& path, const Dims& expected, DType dtype,
                                        const char* who, const char* option) {
  KILN_CHECK(!expected.empty(), who, option, ": the model's input is a scalar");
  const Tensor x = read_npy(path);
  std::ostringstream want;
  want << dtype << " of shape [N";
  for (size_t i = 1; i < expected.size(); ++i) want << ", " << expected[i];
  want << "] (N samples of the input " << expected << ")";
  bool ok = x.dim() == static_cast<int64_t>(expected.size()) && x.dtype() == dtype;
  for (size_t i = 1; ok && i < expected.size(); ++i)
    ok = x.size(static_cast<int64_t>(i)) == expected[i];
  KILN_CHECK(ok, who, option, " ", path, ": expected ", want.str(), ", got ", x.dtype(), " ",
             x.sizes());
  const int64_t batch = expected[0];
  const int64_t batches = x.size(0) / batch;
  KILN_CHECK(batches >= 1, who, option, " ", path, ": ", x.size(0),
             " samples, fewer than one batch of ", batch);
  if (batches * batch != x.size(0))
    std::fprintf(stderr,
                 "kiln %s: warning: the last %lld samples of %s do not fill a batch of %lld and "
                 "are left out\n",
                 who, static_cast<long long>(x.size(0) - batches * batch), path.c_str(),
                 static_cast<long long>(batch));
  std::vector<Tensor> out;
  for (int64_t i = 0; i < batches; ++i) out.push_back(x.narrow(0, i * batch, batch).contiguous());
  return out;
}

}  // namespace kiln::cli
