// kiln::npy (the runtime's minimal .npy reader/writer): round trips, files as NumPy writes them,
// and every malformed input rejected with a message instead of a crash.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime/error.h"
#include "kiln/runtime/npy.h"

namespace npy = kiln::npy;
using kiln::DType;

namespace {

// A .npy file built by hand the way NumPy 1.x writes it: magic, version, header length, dict.
std::vector<uint8_t> numpy_file(const std::string& dict, const std::vector<uint8_t>& data,
                                int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::vector<uint8_t> f(prefix + header.size() + data.size());
  std::memcpy(f.data(), "\x93NUMPY", 6);
  f[6] = uint8_t(major);
  for (size_t i = 0; i < prefix - 8; ++i) f[8 + i] = uint8_t(header.size() >> (8 * i));
  std::memcpy(f.data() + prefix, header.data(), header.size());
  if (!data.empty()) std::memcpy(f.data() + prefix + header.size(), data.data(), data.size());
  return f;
}

std::string parse_error(const std::vector<uint8_t>& f) {
  try {
    npy::parse(f.data(), f.size(), "t.npy");
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Npy, ReadsAFileAsNumpyWritesIt) {
  const float v[6] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  std::vector<uint8_t> data(24);
  std::memcpy(data.data(), v, 24);
  for (int major : {1, 2, 3}) {
    const auto f =
        numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, major);
    const npy::Array a = npy::parse(f.data(), f.size(), "t.npy");
    EXPECT_EQ(a.dtype, DType::Float32);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    ASSERT_EQ(a.data.size(), 24u);
    EXPECT_EQ(std::memcmp(a.data.data(), v, 24), 0);
  }
  // Scalars and 1-d shapes: () and (4,).
  const auto s = numpy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
                            std::vector<uint8_t>(8, 1));
  EXPECT_TRUE(npy::parse(s.data(), s.size(), "s").shape.empty());
  const auto one = numpy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }",
                              std::vector<uint8_t>{1, 2, 3, 4});
  EXPECT_EQ(npy::parse(one.data(), one.size(), "o").shape, (std::vector<int64_t>{4}));
}

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  const std::vector<std::pair<DType, std::vector<int64_t>>> cases = {
      {DType::Float32, {3, 4}}, {DType::Float64, {5}},  {DType::Float16, {2, 1, 3}},
      {DType::Int8, {7}},       {DType::UInt8, {0, 3}}, {DType::Int32, {}},
      {DType::Int64, {2, 2}},   {DType::Bool, {9}},
  };
  for (const auto& [dtype, shape] : cases) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint8_t> data(n * kiln::dtype_size(dtype));
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = uint8_t(i * 37 + 1) & (dtype == DType::Bool ? 1 : 0xff);
    const auto bytes = npy::serialize(dtype, shape, data.data());
    EXPECT_EQ((bytes[8] | (bytes[9] << 8)) + 10, 64 * ((bytes[8] | (bytes[9] << 8)) + 10) / 64)
        << "data starts 64-byte aligned";
    const npy::Array a = npy::parse(bytes.data(), bytes.size(), "rt");
    EXPECT_EQ(a.dtype, dtype);
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.data, data);
  }
  const uint16_t bf = 0;
  EXPECT_THROW(npy::serialize(DType::BFloat16, {1}, &bf), kiln::Error);
}

TEST(Npy, RejectsMalformedFilesWithAReason) {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::vector<uint8_t> data(24);
  EXPECT_NE(parse_error({'x', 'y'}).find("bad magic"), std::string::npos);
  auto f = numpy_file(ok, data);
  f.resize(f.size() - 1);  // truncated data
  EXPECT_NE(parse_error(f).find("data holds 23 bytes"), std::string::npos) << parse_error(f);
  f = numpy_file(ok, data);
  f.push_back(0);  // trailing byte
  EXPECT_NE(parse_error(f).find("need 24"), std::string::npos);
  f = numpy_file(ok, data);
  f[8] = 0xff, f[9] = 0xff;  // header length past the end
  EXPECT_NE(parse_error(f).find("runs past the end"), std::string::npos);
  f = numpy_file(ok, data);
  f[6] = 9;
  EXPECT_NE(parse_error(f).find("unsupported format version 9"), std::string::npos);
  EXPECT_NE(
      parse_error(numpy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data))
          .find("big-endian"),
      std::string::npos);
  EXPECT_NE(
      parse_error(numpy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data))
          .find("Fortran-order"),
      std::string::npos);
  EXPECT_NE(
      parse_error(numpy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data))
          .find("unsupported dtype '<c8'"),
      std::string::npos);
  EXPECT_NE(
      parse_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", data))
          .find("non-integer"),
      std::string::npos);
  EXPECT_NE(
      parse_error(numpy_file("{'descr': '<f4', 'fortran_order': False}", data)).find("no 'shape'"),
      std::string::npos);
  // A shape whose byte count overflows 64 bits is refused before any allocation.
  EXPECT_NE(parse_error(numpy_file("{'descr': '<f8', 'fortran_order': False, 'shape': "
                                   "(4294967296, 4294967296, 16), }",
                                   data))
                .find("too large"),
            std::string::npos);
  EXPECT_THROW(npy::read("/nonexistent/x.npy"), kiln::Error);
}
