#include <sstream>

#include "kiln/nn/activation.h"
#include "kiln/nn_ops.h"

namespace kiln::nn {

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "dropout probability has to be between 0 and 1, got ",
             p);
}
Tensor Dropout::forward(const Tensor& input) {
  return kiln::dropout(input, p, is_training());
}
std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p << ", inplace=False";
  return os.str();
}

}  // namespace kiln::nn
