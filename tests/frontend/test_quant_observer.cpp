// Observers: hand-computed parameters, PyTorch 1.13's observers on the same batches (Debian's
// python3-torch, run at test time; skipped where it is missing), and the percentile observer
// ignoring an outlier that a min-max observer follows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using quant::ObserverOptions;
using quant::QParams;
using quant::QScheme;

Tensor from(const std::vector<float>& v, Dims sizes) {
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Float32));
  std::copy(v.begin(), v.end(), t.data_ptr<float>());
  return t;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale, float shift = 0.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(shift, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(QuantObserver, HandComputedParameters) {
  const Tensor x = from({-1.0f, 0.5f, 2.0f}, {3});
  // uint8 affine: scale 3 / 255, zero point 0 - round(-1 / scale) = 85.
  quant::MinMaxObserver affine;
  affine(x);
  QParams p = affine.calculate_qparams();
  EXPECT_FLOAT_EQ(values(p.scale)[0], 3.0f / 255.0f);
  EXPECT_EQ(values(p.zero_point)[0], 85);
  EXPECT_EQ(p.scale.dim(), 0);
  EXPECT_EQ(p.quant_min, 0);
  EXPECT_EQ(p.quant_max, 255);
  // int8 symmetric with reduce_range: [-64, 63], scale 2 / 63.5, zero point 0.
  ObserverOptions o;
  o.dtype = DType::Int8, o.qscheme = QScheme::PerTensorSymmetric, o.reduce_range = true;
  quant::MinMaxObserver sym(o);
  sym(x);
  p = sym.calculate_qparams();
  EXPECT_FLOAT_EQ(values(p.scale)[0], 2.0f / 63.5f);
  EXPECT_EQ(values(p.zero_point)[0], 0);
  EXPECT_EQ(p.quant_min, -64);
  // uint8 symmetric: zero point 128.
  o.dtype = DType::UInt8, o.reduce_range = false;
  quant::MinMaxObserver usym(o);
  usym(x);
  EXPECT_EQ(values(usym.calculate_qparams().zero_point)[0], 128);
  // Nothing observed: scale 1, zero point 0; all zeros: scale epsilon.
  EXPECT_EQ(values(quant::MinMaxObserver().calculate_qparams().scale)[0], 1.0);
  quant::MinMaxObserver z;
  z(zeros({4}));
  EXPECT_FLOAT_EQ(values(z.calculate_qparams().scale)[0], std::numeric_limits<float>::epsilon());
  // The parameters feed quantize: -1 / s = -85 -> 0, 0.25 / s = 21.25 -> 106, 2 / s = 170 -> 255.
  const QParams q = affine.calculate_qparams();
  EXPECT_EQ(values(quantize(from({-1.0f, 0.25f, 2.0f}, {3}), q.scale, q.zero_point, q.dtype)),
            (std::vector<double>{0, 106, 255}));
}

TEST(QuantObserver, BadOptionsAreNamed) {
  ObserverOptions o;
  o.dtype = DType::Float32;
  EXPECT_THROW(quant::MinMaxObserver{o}, Error);
  o.dtype = DType::Int8;
  o.quant_min = -10;
  EXPECT_THROW(quant::MinMaxObserver{o}, Error);  // quant_max missing
  o.quant_max = 200;
  try {
    quant::MinMaxObserver{o};
    ADD_FAILURE() << "a range past int8's was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("within int8's [-128, 127], got [-10, 200]"),
              std::string::npos)
        << e.what();
  }
  o = {};
  o.qscheme = QScheme::PerChannelAffine;
  EXPECT_THROW(quant::MinMaxObserver{o}, Error);
  o.ch_axis = 3;
  quant::PerChannelMinMaxObserver pc(o);
  EXPECT_THROW(pc(zeros({2, 3})), Error);  // ch_axis out of range
}

// Runs `script` with Debian's python3 + torch; its stdout, or nullopt when they are missing.
std::optional<std::string> run_torch(const std::string& script) {
  const std::string path = ::testing::TempDir() + "kiln_observer_reference.py";
  std::ofstream(path) << script;
  FILE* p = popen(("/usr/bin/python3 " + path + " 2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) return std::nullopt;
  return out;
}

std::string py_list(const std::vector<float>& v) {
  std::ostringstream os;
  os.precision(9);
  os << "[";
  for (float x : v) os << x << ",";
  os << "]";
  return os.str();
}

TEST(QuantObserver, MatchPyTorch113) {
  const std::vector<float> a = randn(2 * 3 * 4 * 5, 1, 1.5f, 0.3f),
                           b = randn(2 * 3 * 4 * 5, 2, 0.7f, -0.2f),
                           c = randn(2 * 3 * 4 * 5, 3, 3.0f, 1.0f);
  std::ostringstream py;
  py << "import torch, warnings\nwarnings.simplefilter('ignore')\n"
     << "from torch.ao.quantization.observer import *\n"
     << "batches = [torch.tensor(v, dtype=torch.float32).reshape(2, 3, 4, 5) for v in ("
     << py_list(a) << "," << py_list(b) << "," << py_list(c) << ")]\n"
     << "observers = [\n"
     << " MinMaxObserver(dtype=torch.quint8, qscheme=torch.per_tensor_affine),\n"
     << " MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric, "
        "reduce_range=True),\n"
     << " MovingAverageMinMaxObserver(averaging_constant=0.25, dtype=torch.quint8),\n"
     << " PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, "
        "qscheme=torch.per_channel_symmetric),\n"
     << " PerChannelMinMaxObserver(ch_axis=1, dtype=torch.quint8, "
        "qscheme=torch.per_channel_affine),\n"
     << " MinMaxObserver(dtype=torch.quint8, quant_min=0, quant_max=100),\n"
     << "]\n"
     << "for o in observers:\n"
     << "  for x in batches: o(x)\n"
     << "  s, z = o.calculate_qparams()\n"
     << "  print(' '.join('%.9g' % v for v in s.tolist()), '|', ' '.join(str(int(v)) for v in "
        "z.tolist()))\n";
  const std::optional<std::string> torch_out = run_torch(py.str());
  if (!torch_out) GTEST_SKIP() << "python3 with torch is not installed";

  std::vector<std::unique_ptr<quant::Observer>> ours;
  ObserverOptions o;
  ours.push_back(std::make_unique<quant::MinMaxObserver>(o));
  o.dtype = DType::Int8, o.qscheme = QScheme::PerTensorSymmetric, o.reduce_range = true;
  ours.push_back(std::make_unique<quant::MinMaxObserver>(o));
  o = {};
  o.averaging_constant = 0.25;
  ours.push_back(std::make_unique<quant::MovingAverageMinMaxObserver>(o));
  o = {};
  o.dtype = DType::Int8, o.qscheme = QScheme::PerChannelSymmetric, o.ch_axis = 0;
  ours.push_back(std::make_unique<quant::PerChannelMinMaxObserver>(o));
  o = {};
  o.qscheme = QScheme::PerChannelAffine, o.ch_axis = 1;
  ours.push_back(std::make_unique<quant::PerChannelMinMaxObserver>(o));
  o = {};
  o.quant_min = 0, o.quant_max = 100;
  ours.push_back(std::make_unique<quant::MinMaxObserver>(o));

  std::istringstream lines(*torch_out);
  for (size_t k = 0; k < ours.size(); ++k) {
    SCOPED_TRACE("observer " + std::to_string(k));
    for (const auto& v : {a, b, c}) (*ours[k])(from(v, {2, 3, 4, 5}));
    const QParams p = ours[k]->calculate_qparams();
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << *torch_out;
    std::istringstream in(line.substr(0, line.find('|')));
    std::istringstream zin(line.substr(line.find('|') + 1));
    const std::vector<double> s = values(p.scale), z = values(p.zero_point);
    for (size_t i = 0; i < s.size(); ++i) {
      double ts = 0, tz = 0;
      ASSERT_TRUE(in >> ts) << line;
      ASSERT_TRUE(zin >> tz) << line;
      EXPECT_NEAR(s[i], ts, 1e-7 * ts) << "scale " << i;
      EXPECT_EQ(z[i], tz) << "zero point " << i;
    }
    double extra = 0;
    EXPECT_FALSE(in >> extra) << "torch has more channels: " << line;
  }
}

// 20000 values of N(0, 1) and one at 50: min-max stretches the range to 50, the 99.99th
// percentile keeps about +-3.9 (within a bin of the histogram).
TEST(QuantObserver, PercentileIgnoresOutliers) {
  std::vector<float> v = randn(20000, 5, 1.0f);
  v.push_back(50.0f);
  ObserverOptions o;
  o.dtype = DType::Int8, o.qscheme = QScheme::PerTensorSymmetric;
  quant::MinMaxObserver minmax(o);
  quant::PercentileObserver pct(o);
  for (size_t i = 0; i < v.size(); i += 5000) {  // several batches: the histogram re-bins
    const size_t n = std::min<size_t>(5000, v.size() - i);
    const Tensor x = from(std::vector<float>(v.begin() + i, v.begin() + i + n), {int64_t(n)});
    minmax(x);
    pct(x);
  }
  const double s_minmax = values(minmax.calculate_qparams().scale)[0];
  const double s_pct = values(pct.calculate_qparams().scale)[0];
  EXPECT_NEAR(s_minmax, 50.0 / 127.5, 1e-6);
  // The 99.99th percentile of |N(0, 1)| over 20000 draws: about 3.9 (3.5 to 4.4 covers the
  // sampling spread and one bin of 54 / 2048).
  EXPECT_GT(s_pct * 127.5, 3.5);
  EXPECT_LT(s_pct * 127.5, 4.4);
}

// Quantization-aware training: the fake-quantized weights' gradient passes where the weight is in
// the observed range; freezing the observer keeps the parameters while the weights move.
TEST(QuantObserver, FakeQuantizeForQuantizationAwareTraining) {
  ObserverOptions o;
  o.dtype = DType::Int8, o.qscheme = QScheme::PerChannelSymmetric, o.ch_axis = 0;
  quant::FakeQuantize fq(std::make_shared<quant::PerChannelMinMaxObserver>(o));
  EXPECT_EQ(values(fq.qparams().scale), (std::vector<double>{1.0}));  // nothing observed yet
  Tensor w = from(randn(12, 9, 0.5f), {3, 4}).requires_grad_();
  Tensor y = fq(w);
  const QParams p = fq.qparams();
  ASSERT_EQ(p.scale.numel(), 3);
  // Symmetric per row: each row's largest magnitude maps to 127.5 steps. The gradient is 1 except
  // where that rounds (to even) out of [-128, 127]: at a row's positive maximum, 127.5 -> 128.
  sum(y).backward();
  const std::vector<double> wv = values(w.detach()), sv = values(p.scale), g1 = values(w.grad());
  for (size_t i = 0; i < wv.size(); ++i) {
    const double q = std::nearbyint(double(float(wv[i]) / float(sv[i / 4])));
    EXPECT_EQ(g1[i], q >= -128 && q <= 127 ? 1.0 : 0.0) << "element " << i;
  }
  EXPECT_GE(std::count(g1.begin(), g1.end(), 1.0), 9);
  EXPECT_EQ(max(abs(y - dequantize(quantize(w, p.scale, p.zero_point, DType::Int8, 0), p.scale,
                                   p.zero_point, 0)))
                .item<float>(),
            0.0f);
  // Frozen: doubled weights fall out of range, clamp, and lose their gradient there.
  fq.enable_observer(false);
  Tensor w2 = (w.detach() * 2.0).requires_grad_();
  sum(fq(w2)).backward();
  EXPECT_EQ(values(fq.qparams().scale), values(p.scale));
  const std::vector<double> g = values(w2.grad());
  EXPECT_LT(std::count(g.begin(), g.end(), 1.0), 12);
  EXPECT_GT(std::count(g.begin(), g.end(), 0.0), 0);
  fq.enable_fake_quant(false);
  EXPECT_EQ(fq(w2).impl(), w2.impl());
}

}  // namespace
}  // namespace kiln
