// kiln::save/load (round trips of every dtype, 0-dim, empty, non-contiguous and shared-storage
// tensors, value trees; every truncation and byte flip of a small file is an error), .npy (files
// written by real NumPy 1.24 under tests/data/serialize, byte-exact comparison of kiln's writer
// with NumPy's), and .safetensors (files assembled byte by byte here per the format spec).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "kiln/kiln.h"
#include "kiln/serialize.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// Scratch files live in tmpfs when there is one (the tests write hundreds of small files) and
// are removed at exit.
fs::path tmp_dir() {
  static const struct Dir {
    fs::path path;
    Dir() {
      const fs::path base =
          fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
      path = base / ("kiln_test_serialize_" + std::to_string(static_cast<long>(::getpid())));
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}
std::string tmp(const std::string& name) {
  return (tmp_dir() / name).string();
}
std::string fixture(const std::string& name) {
  // KILN_TEST_DATA_DIR comes from CMake: __FILE__ may be relative (ccache base_dir).
  return (fs::path(KILN_TEST_DATA_DIR) / "serialize" / name).string();
}
Bytes read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}
std::string write_all(const std::string& name, const Bytes& b) {
  const std::string p = tmp(name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  return p;
}
template <typename Fn>
void expect_error(Fn&& fn, std::vector<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragments[0] << "'";
  } catch (const kiln::Error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message '" << e.what() << "' lacks '" << f << "'";
  }
}

// Bitwise CRC-32 (IEEE, reflected 0xEDB88320), independent of zlib.
uint32_t crc32_ref(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A tensor of `dtype` whose element i (row-major) is pattern(i), exactly representable.
double pattern(int64_t i, DType dt) {
  if (dt == DType::Bool) return i % 3 == 0;
  if (dt == DType::UInt8) return (i * 37) % 256;
  if (dt == DType::Int8) return (i * 37) % 256 - 128;
  return (i % 2 ? -1.0 : 1.0) * (i * 0.75 + 0.5);
}
Tensor patterned(Dims sizes, DType dt) {
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Float64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<double>()[i] = pattern(i, dt);
  return t.to(dt);
}
// Element values (as double) in row-major order, whatever the layout.
std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

const DType kAllDTypes[] = {DType::Float32,  DType::Float64, DType::Float16,
                            DType::BFloat16, DType::Int8,    DType::UInt8,
                            DType::Int32,    DType::Int64,   DType::Bool};

}  // namespace

// ------------------------------------------------------------------------- kiln::save / load

TEST(Serialize, RoundTripsEveryDTypeZeroDimAndEmpty) {
  for (DType dt : kAllDTypes) {
    for (Dims sizes : {Dims{2, 3}, Dims{}, Dims{0, 3}, Dims{4, 0, 2}, Dims{7}}) {
      Tensor t = patterned(sizes, dt);
      const std::string p = tmp("rt.kiln");
      save(Value(t), p);
      Tensor r = load(p).to_tensor();
      ASSERT_EQ(r.dtype(), dt);
      ASSERT_EQ(r.sizes(), sizes);
      EXPECT_EQ(r.strides(), t.strides());
      EXPECT_EQ(values(r), values(t)) << dtype_name(dt) << " " << sizes;
      EXPECT_FALSE(r.requires_grad());
    }
  }
}

TEST(Serialize, NonContiguousViewsKeepTheirGeometry) {
  Tensor base = patterned({2, 3, 4}, DType::Float32);
  Tensor v = base.permute({2, 0, 1}).slice(0, 1, 4, 2);  // [2, 2, 3], strides (2, 12, 4), offset 1
  ASSERT_FALSE(v.is_contiguous());
  save(Value(v), tmp("nc.kiln"));
  Tensor r = load(tmp("nc.kiln")).to_tensor();
  EXPECT_EQ(r.sizes(), v.sizes());
  EXPECT_EQ(r.strides(), v.strides());
  EXPECT_EQ(r.storage_offset(), v.storage_offset());
  EXPECT_EQ(values(r), values(v));
  // expanded (stride 0) tensors too
  Tensor e = tensor({1.0, 2.0}).unsqueeze(0).expand({3, 2});
  Tensor re = load_from_bytes(save_to_bytes(Value(e))).to_tensor();
  EXPECT_EQ(re.strides(), (Dims{0, 1}));
  EXPECT_EQ(values(re), values(e));
}

TEST(Serialize, SharedStorageIsStoredOnceAndStaysShared) {
  Tensor base = patterned({1000}, DType::Float32);
  Tensor a = base.slice(0, 10, 500);
  Tensor b = base.view({40, 25}).t();
  Tensor c = patterned({1000}, DType::Float32);  // same values, different storage
  Value v(Value::List{Value(a), Value(b), Value(c), Value(base)});
  const Bytes bytes = save_to_bytes(v);
  // two storages of 4000 bytes, not four
  EXPECT_LT(bytes.size(), 2 * 4000u + 1000u);
  EXPECT_GE(bytes.size(), 2 * 4000u);
  auto l = load_from_bytes(bytes).to_tensor_list();
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].impl()->storage(), l[1].impl()->storage());
  EXPECT_EQ(l[0].impl()->storage(), l[3].impl()->storage());
  EXPECT_NE(l[0].impl()->storage(), l[2].impl()->storage());
  EXPECT_EQ(l[0].storage_offset(), 10);
  EXPECT_EQ(l[1].strides(), (Dims{1, 25}));
  EXPECT_EQ(values(l[0]), values(a));
  EXPECT_EQ(values(l[1]), values(b));
  EXPECT_EQ(values(l[2]), values(c));
  // A write through one loaded view shows in the other.
  Tensor a2 = l[0];
  fill_(a2, 42.0);
  EXPECT_EQ(l[3].data_ptr<float>()[10], 42.0f);
  EXPECT_EQ(l[1].contiguous().data_ptr<float>()[10 / 25 + (10 % 25) * 40], 42.0f);
  EXPECT_EQ(l[2].data_ptr<float>()[10], static_cast<float>(pattern(10, DType::Float32)));
}

TEST(Serialize, ValueTreesAndStateDicts) {
  Tensor w = patterned({3, 2}, DType::Float32).requires_grad_();
  Value::Dict opt{{"lr", Value(0.125)},
                  {"step", Value(int64_t{-7})},
                  {"nesterov", Value(true)},
                  {"name", Value("sgd \"momentum\"\n")},
                  {"none", Value()},
                  {"grad", Value(Tensor())},
                  {"betas", Value(Value::List{Value(0.9), Value(0.999)})}};
  Value root;
  root.insert("model",
              Value(NamedTensors{{"fc.weight", w}, {"fc.bias", patterned({2}, DType::Float32)}}));
  root.insert("optimizer", Value(std::move(opt)));
  root.insert("epoch", Value(3));
  save(root, tmp("tree.kiln"));
  Value r = load(tmp("tree.kiln"));
  ASSERT_TRUE(r.is_dict());
  ASSERT_EQ(r.to_dict().size(), 3u);
  EXPECT_EQ(r.to_dict()[0].first, "model");  // insertion order kept
  EXPECT_EQ(r.at("epoch").to_int(), 3);
  const Value& o = r.at("optimizer");
  EXPECT_EQ(o.at("lr").to_double(), 0.125);
  EXPECT_EQ(o.at("step").to_int(), -7);
  EXPECT_TRUE(o.at("nesterov").to_bool());
  EXPECT_EQ(o.at("name").to_string(), "sgd \"momentum\"\n");
  EXPECT_TRUE(o.at("none").is_none());
  EXPECT_FALSE(o.at("grad").to_tensor().defined());
  EXPECT_EQ(o.at("betas").to_list()[1].to_double(), 0.999);
  NamedTensors sd = r.at("model").to_named_tensors();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "fc.weight");
  EXPECT_TRUE(sd[0].second.requires_grad());
  EXPECT_TRUE(sd[0].second.is_leaf());
  EXPECT_EQ(values(sd[0].second), values(w));
  // std::map in and out
  std::map<std::string, Tensor> m{{"b", tensor({1.0})}, {"a", tensor({2.0})}};
  auto back = load_from_bytes(save_to_bytes(Value(m))).to_tensor_map();
  EXPECT_EQ(back.at("a").item<double>(), 2.0);
  EXPECT_THROW(r.at("missing"), kiln::Error);
  EXPECT_THROW(r.at("epoch").to_string(), kiln::Error);
  EXPECT_THROW(Value(Value::Dict{{"k", Value(1)}, {"k", Value(2)}}), kiln::Error);
  // Nesting is bounded on save (and on load).
  Value deep;
  for (int i = 0; i < 200; ++i) deep = Value(Value::List{deep});
  expect_error([&] { save_to_bytes(deep); }, {"nested deeper"});
}

namespace {
// A small file: {"x": [2,3] f32, "v": a view of x, "s": "hi", "n": 5}.
Bytes small_file() {
  Tensor x = patterned({2, 3}, DType::Float32);
  Value v;
  v.insert("x", Value(x));
  v.insert("v", Value(x.select(1, 1)));
  v.insert("s", Value("hi"));
  v.insert("n", Value(5));
  return save_to_bytes(v);
}
void fix_crc(Bytes& b) {
  uint64_t n, t;
  std::memcpy(&n, b.data() + 16, 8);
  std::memcpy(&t, b.data() + 24, 8);
  if (n > b.size() / 24 || t > b.size()) return;  // the loader rejects these sizes first
  const uint32_t c = crc32_ref(b.data() + 16, 32 + 24 * n + t - 16);
  std::memcpy(b.data() + 12, &c, 4);
}
}  // namespace

TEST(Serialize, EveryTruncationAndEveryByteFlipIsAnError) {
  const Bytes good = small_file();
  ASSERT_NO_THROW(load_from_bytes(good));
  ASSERT_LT(good.size(), 400u);
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(load_from_bytes(Bytes(good.begin(), good.begin() + n)), kiln::Error) << n;
  std::mt19937 gen(3);
  for (size_t i = 0; i < good.size(); ++i) {
    Bytes b = good;
    b[i] ^= static_cast<uint8_t>(1 + gen() % 255);
    EXPECT_THROW(load_from_bytes(b), kiln::Error) << "flip at byte " << i;
  }
  Bytes longer = good;
  longer.push_back(0);
  expect_error([&] { load_from_bytes(longer, "f.kiln"); }, {"f.kiln", "trailing"});
  expect_error([&] { load(tmp("nope.kiln")); }, {"nope.kiln", "cannot open"});
}

TEST(Serialize, StructuralChecksNameTheProblem) {
  // A file holding one [2, 3] f32 tensor: tree at byte 56 = tag, dtype, requires_grad, u32 ndim,
  // sizes, strides, i64 offset, u64 storage index.
  const Bytes good = save_to_bytes(Value(patterned({2, 3}, DType::Float32)));
  auto patch = [&](size_t at, const void* v, size_t n) {
    Bytes b = good;
    std::memcpy(b.data() + at, v, n);
    fix_crc(b);
    return b;
  };
  const uint64_t huge = uint64_t{1} << 60;
  expect_error([&] { load_from_bytes(patch(16, &huge, 8)); }, {"table of", "storages"});
  expect_error([&] { load_from_bytes(patch(24, &huge, 8)); }, {"value tree of"});
  const uint8_t tag = 99, dt = 42, two = 2;
  expect_error([&] { load_from_bytes(patch(56, &tag, 1)); }, {"unknown tag 99"});
  expect_error([&] { load_from_bytes(patch(57, &dt, 1)); }, {"unknown dtype code 42"});
  expect_error([&] { load_from_bytes(patch(58, &two, 1)); }, {"requires_grad flag"});
  const uint32_t rank = 1000;
  expect_error([&] { load_from_bytes(patch(59, &rank, 4)); }, {"rank 1000"});
  const int64_t big = 3, neg = -1, bigstride = int64_t{1} << 62;
  expect_error([&] { load_from_bytes(patch(63, &big, 8)); }, {"reaches byte 36", "has 24"});
  expect_error([&] { load_from_bytes(patch(63, &neg, 8)); }, {"negative size"});
  expect_error([&] { load_from_bytes(patch(79, &bigstride, 8)); }, {"overflow"});
  expect_error([&] { load_from_bytes(patch(95, &big, 8)); }, {"reaches byte"});  // offset
  expect_error([&] { load_from_bytes(patch(103, &big, 8)); }, {"storage index 3"});
  const uint64_t misaligned = 65;
  expect_error([&] { load_from_bytes(patch(32, &misaligned, 8)); }, {"not 64-aligned"});
  Bytes flipped = good;
  flipped.back() ^= 1;
  expect_error([&] { load_from_bytes(flipped, "d.kiln"); }, {"d.kiln", "storage 0", "checksum"});
  Bytes badmagic = good;
  badmagic[0] = 'X';
  expect_error([&] { load_from_bytes(badmagic); }, {"bad magic"});
  Bytes v2 = good;
  v2[8] = 2;
  expect_error([&] { load_from_bytes(v2); }, {"unsupported format version 2"});
  // bool storages hold only 0/1
  Bytes b = save_to_bytes(Value(patterned({4}, DType::Bool)));
  uint64_t off;
  std::memcpy(&off, b.data() + 32, 8);
  b[off + 1] = 7;
  uint32_t c = crc32_ref(b.data() + off, 4);
  std::memcpy(b.data() + 48, &c, 4);
  fix_crc(b);
  expect_error([&] { load_from_bytes(b); }, {"bool data", "is 7"});
}

// ------------------------------------------------------------------------------------- .npy

TEST(Npy, ReadsFilesWrittenByNumPy) {
  Tensor f4 = read_npy(fixture("f4_2x3.npy"));
  ASSERT_EQ(f4.dtype(), DType::Float32);
  ASSERT_EQ(f4.sizes(), (Dims{2, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(f4.data_ptr<float>()[i * 3 + j], 0.5f * (3 * i + j) - 1);
  Tensor f8 = read_npy(fixture("f8_3x4_fortran.npy"));
  ASSERT_EQ(f8.sizes(), (Dims{3, 4}));
  ASSERT_TRUE(f8.is_contiguous());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(f8.data_ptr<double>()[i * 4 + j], i * 10 + j + 0.25);
  Tensor i4 = read_npy(fixture("i4_2x3x4_fortran.npy"));
  ASSERT_EQ(i4.dtype(), DType::Int32);
  ASSERT_EQ(i4.sizes(), (Dims{2, 3, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(i4.data_ptr<int32_t>()[i * 12 + j * 4 + k], 100 * i + 10 * j + k - 50);
  Tensor f2 = read_npy(fixture("f2_5.npy"));
  ASSERT_EQ(f2.dtype(), DType::Float16);
  EXPECT_EQ(values(f2), (std::vector<double>{-2, -0.5, 0, 1.5, 65504}));
  EXPECT_EQ(values(read_npy(fixture("i1_4.npy"))), (std::vector<double>{-128, -1, 0, 127}));
  EXPECT_EQ(values(read_npy(fixture("u1_4.npy"))), (std::vector<double>{0, 1, 128, 255}));
  Tensor i8 = read_npy(fixture("i8_3.npy"));
  EXPECT_EQ(i8.data_ptr<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(i8.data_ptr<int64_t>()[2], INT64_MAX);
  Tensor b1 = read_npy(fixture("b1_2x2.npy"));
  ASSERT_EQ(b1.dtype(), DType::Bool);
  EXPECT_EQ(values(b1), (std::vector<double>{1, 0, 0, 1}));
  Tensor s = read_npy(fixture("f8_scalar.npy"));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), 3.25);
  EXPECT_EQ(read_npy(fixture("f4_empty_0x3.npy")).sizes(), (Dims{0, 3}));
  for (const char* v : {"i8_v2.npy", "i8_v3.npy"}) {
    Tensor t = read_npy(fixture(v));
    EXPECT_EQ(t.sizes(), (Dims{2, 2}));
    EXPECT_EQ(values(t), (std::vector<double>{1, 2, 3, 4}));
  }
  expect_error([&] { read_npy(fixture("f4_bigendian.npy")); }, {"f4_bigendian.npy", "big-endian"});
  expect_error([&] { read_npy(fixture("c8.npy")); }, {"unsupported descr '<c8'"});
}

TEST(Npy, WriterMatchesNumPyByteForByte) {
  struct Case {
    const char* file;
    Tensor t;
  };
  Tensor f4 = kiln::empty({2, 3}, TensorOptions(DType::Float32));
  for (int i = 0; i < 6; ++i) f4.data_ptr<float>()[i] = 0.5f * i - 1;
  const Case cases[] = {
      {"f4_2x3.npy", f4},
      {"i1_4.npy", tensor({-128, -1, 0, 127}, DType::Int8)},
      {"u1_4.npy", tensor({0, 1, 128, 255}, DType::UInt8)},
      {"b1_2x2.npy", tensor({{1, 0}, {0, 1}}, DType::Bool)},
      {"f8_scalar.npy", scalar_tensor(3.25, DType::Float64)},
      {"f4_empty_0x3.npy", kiln::zeros({0, 3})},
      {"f2_5.npy", tensor({-2, -0.5, 0, 1.5, 65504}, DType::Float16)},
  };
  for (const Case& c : cases) {
    write_npy(tmp("w.npy"), c.t);
    EXPECT_EQ(read_all(tmp("w.npy")), read_all(fixture(c.file))) << c.file;
  }
  // A Fortran-order NumPy file rewritten by kiln is the C-order array NumPy would write.
  Tensor f8 = read_npy(fixture("f8_3x4_fortran.npy"));
  write_npy(tmp("c.npy"), f8.t());  // non-contiguous input
  Tensor back = read_npy(tmp("c.npy"));
  EXPECT_EQ(back.sizes(), (Dims{4, 3}));
  EXPECT_EQ(values(back), values(f8.t()));
}

TEST(Npy, RoundTripsAndRejectsBadFiles) {
  for (DType dt : kAllDTypes) {
    if (dt == DType::BFloat16) {
      expect_error([&] { write_npy(tmp("bf.npy"), patterned({2}, dt)); }, {"bfloat16"});
      continue;
    }
    for (Dims sizes : {Dims{3, 5}, Dims{}, Dims{2, 0}, Dims{2, 1, 3, 1}}) {
      Tensor t = patterned(sizes, dt);
      write_npy(tmp("rt.npy"), t);
      Tensor r = read_npy(tmp("rt.npy"));
      EXPECT_EQ(r.dtype(), dt);
      EXPECT_EQ(r.sizes(), sizes);
      EXPECT_EQ(values(r), values(t));
    }
  }
  const Bytes good = read_all(fixture("f4_2x3.npy"));
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(read_npy(write_all("t.npy", Bytes(good.begin(), good.begin() + n))), kiln::Error)
        << n;
  auto with_header = [&](std::string h) {
    h.resize(117, ' ');
    h += '\n';
    Bytes b{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
    b.insert(b.end(), h.begin(), h.end());
    b.resize(b.size() + 24);
    return write_all("h.npy", b);
  };
  ASSERT_NO_THROW(
      read_npy(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }")));
  expect_error([&] { read_npy(with_header("{'descr': '<f4', 'shape': (2, 3)}")); },
               {"needs the keys"});
  expect_error(
      [&] {
        read_npy(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}"));
      },
      {"unexpected key 'x'"});
  expect_error(
      [&] { read_npy(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}")); },
      {"non-negative integer"});
  expect_error(
      [&] { read_npy(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4)}")); },
      {"truncated", "needs 32 data bytes"});
  expect_error(
      [&] { read_npy(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}")); },
      {"8 unexpected bytes"});
  expect_error(
      [&] { read_npy(with_header("{'descr': '<f4', 'fortran_order': maybe, 'shape': (6,)}")); },
      {"True or False"});
  expect_error(
      [&] { read_npy(with_header("{'descr': '<u4', 'fortran_order': False, 'shape': (6,)}")); },
      {"unsupported descr '<u4'"});
  expect_error(
      [&] {
        read_npy(
            with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, "
                        "99999999999, 99999999999)}"));
      },
      {"overflows"});
  Bytes liar = good;
  liar[8] = 0xFF;  // header length beyond the file
  liar[9] = 0xFF;
  expect_error([&] { read_npy(write_all("l.npy", liar)); }, {"header length 65535"});
  Bytes badbool = read_all(fixture("b1_2x2.npy"));
  badbool.back() = 2;
  expect_error([&] { read_npy(write_all("bb.npy", badbool)); }, {"bool element 3 is 2"});
}

// ------------------------------------------------------------------------------ .safetensors

namespace {
// The file the format spec describes: u64 LE header length, the JSON header padded with spaces to
// a multiple of 8, then the raw little-endian data.
Bytes st_file(std::string header, const Bytes& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  Bytes b(8);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
template <typename T>
void put(Bytes& b, T v) {
  const size_t at = b.size();
  b.resize(at + sizeof v);
  std::memcpy(b.data() + at, &v, sizeof v);
}
Bytes reference_data() {
  Bytes d;
  put<double>(d, -1.5);  // f64 [1]            [0, 8)
  put<float>(d, 2.0f);   // f32 [2]            [8, 16)
  put<float>(d, -0.25f);
  put<int64_t>(d, -3);       // i64 [1]             [16, 24)
  put<int32_t>(d, 7);        // i32 [1,1]           [24, 28)
  put<uint16_t>(d, 0x3C00);  // f16 1.0, -2.0  [28, 32)
  put<uint16_t>(d, 0xC000);
  put<uint16_t>(d, 0x3F80);  // bf16 1.0, -2.0 [32, 36)
  put<uint16_t>(d, 0xC000);
  d.push_back(0xFF);  // i8 -1, u8 255, bool 1 0  [36, 40)
  d.push_back(0xFF);
  d.push_back(1);
  d.push_back(0);
  return d;
}
const char* kReferenceHeader = R"({"__metadata__":{"format":"pt","note":"caf\u00e9 \"q\""},)"
                               R"("f64":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                               R"("w.f32":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                               R"("i64":{"dtype":"I64","shape":[],"data_offsets":[16,24]},)"
                               R"("i32":{"dtype":"I32","shape":[1,1],"data_offsets":[24,28]},)"
                               R"("empty":{"dtype":"F32","shape":[0,5],"data_offsets":[28,28]},)"
                               R"("f16":{"dtype":"F16","shape":[2],"data_offsets":[28,32]},)"
                               R"("bf16":{"shape":[2],"dtype":"BF16","data_offsets":[32,36]},)"
                               R"("i8":{"dtype":"I8","shape":[1],"data_offsets":[36,37]},)"
                               R"("u8":{"dtype":"U8","shape":[1],"data_offsets":[37,38]},)"
                               R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[38,40]}})";
}  // namespace

TEST(Safetensors, ReadsAFileAssembledByHand) {
  const std::string p = write_all("ref.safetensors", st_file(kReferenceHeader, reference_data()));
  SafetensorsFile f = read_safetensors_file(p);
  ASSERT_EQ(f.metadata.size(), 2u);
  EXPECT_EQ(f.metadata[0], (std::pair<std::string, std::string>{"format", "pt"}));
  EXPECT_EQ(f.metadata[1].second, "caf\xc3\xa9 \"q\"");
  ASSERT_EQ(f.tensors.size(), 10u);
  std::map<std::string, Tensor> m(f.tensors.begin(), f.tensors.end());
  EXPECT_EQ(values(m["f64"]), (std::vector<double>{-1.5}));
  EXPECT_EQ(values(m["w.f32"]), (std::vector<double>{2.0, -0.25}));
  EXPECT_EQ(m["i64"].dim(), 0);
  EXPECT_EQ(m["i64"].item<int64_t>(), -3);
  EXPECT_EQ(m["i32"].sizes(), (Dims{1, 1}));
  EXPECT_EQ(m["empty"].sizes(), (Dims{0, 5}));
  EXPECT_EQ(m["f16"].dtype(), DType::Float16);
  EXPECT_EQ(values(m["f16"]), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(m["bf16"].dtype(), DType::BFloat16);
  EXPECT_EQ(values(m["bf16"]), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(values(m["i8"]), (std::vector<double>{-1}));
  EXPECT_EQ(values(m["u8"]), (std::vector<double>{255}));
  EXPECT_EQ(m["b"].dtype(), DType::Bool);
  EXPECT_EQ(values(m["b"]), (std::vector<double>{1, 0}));
  EXPECT_EQ(f.tensors[0].first, "f64");  // data-offset order
}

TEST(Safetensors, WriterProducesTheSpecLayout) {
  NamedTensors t{{"b", tensor({1.0, 2.0})}, {"a", tensor({3.0}, DType::Int64).view({1, 1})}};
  write_safetensors(tmp("w.safetensors"), t, {{"format", "pt"}});
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]}})";
  Bytes data;
  put<float>(data, 1.0f);
  put<float>(data, 2.0f);
  put<int64_t>(data, 3);
  EXPECT_EQ(read_all(tmp("w.safetensors")), st_file(header, data));
  // Round trip of every dtype, 0-dim, empty and non-contiguous tensors; std::map input.
  std::map<std::string, Tensor> all;
  for (DType dt : kAllDTypes) all[std::string(dtype_name(dt))] = patterned({2, 3}, dt);
  all["scalar"] = scalar_tensor(-4.5, DType::Float64);
  all["empty"] = kiln::zeros({3, 0});
  all["strided"] = patterned({4, 6}, DType::Float32).t().slice(0, 1, 6, 2);
  all["name with \"quotes\" and \xc3\xa9"] = tensor({5.0});
  write_safetensors(tmp("all.safetensors"), all);
  NamedTensors back = read_safetensors(tmp("all.safetensors"));
  ASSERT_EQ(back.size(), all.size());
  for (auto& [k, v] : back) {
    ASSERT_TRUE(all.count(k)) << k;
    EXPECT_EQ(v.dtype(), all[k].dtype()) << k;
    EXPECT_EQ(v.sizes(), all[k].sizes()) << k;
    EXPECT_EQ(values(v), values(all[k])) << k;
  }
  const Bytes allb = read_all(tmp("all.safetensors"));
  uint64_t hlen;
  std::memcpy(&hlen, allb.data(), 8);
  EXPECT_EQ(hlen % 8, 0u);  // the data buffer starts 8-byte aligned
  expect_error(
      [&] {
        write_safetensors(tmp("x.safetensors"),
                          NamedTensors{{"a", tensor({1.0})}, {"a", tensor({1.0})}});
      },
      {"duplicate tensor name 'a'"});
  expect_error(
      [&] {
        write_safetensors(tmp("x.safetensors"), NamedTensors{{"__metadata__", tensor({1.0})}});
      },
      {"reserved"});
}

TEST(Safetensors, ValidationNamesTheProblem) {
  const Bytes d8(8, 0);
  auto check = [&](const std::string& header, const Bytes& data, std::vector<std::string> frag) {
    const std::string p = write_all("bad.safetensors", st_file(header, data));
    frag.insert(frag.begin(), p);
    expect_error([&] { read_safetensors(p); }, frag);
  };
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  check("{" + a + "}", Bytes(16, 0), {"cover 8 bytes", "buffer has 16", "trailing"});
  check("{" + a + "}", Bytes(4, 0), {"outside the data buffer of 4 bytes"});
  check(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      d8, {"overlap"});
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8, {"gap", "[0, 4)"});
  check(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8, {"needs 12"});
  check(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", d8,
        {"unsupported dtype 'F8_E4M3'"});
  check(R"({"a":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})", d8,
        {"unsupported dtype 'I16'"});
  check("{" + a + "," + a + "}", d8, {"duplicate key 'a'"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d8, {"reversed"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8,
        {"unexpected key 'x'"});
  check(R"({"a":{"dtype":"F32","shape":[2]}})", d8, {"needs dtype, shape and data_offsets"});
  check(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8,
        {"non-negative integers"});
  check(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8,
        {"non-negative integers"});
  check(R"({"a":{"dtype":"F32","shape":[99999999999,99999999999],"data_offsets":[0,8]}})", d8,
        {"overflows"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}})", d8,
        {"non-negative integers"});
  check(R"({"__metadata__":{"k":1},)" + a + "}", d8, {"__metadata__ value of 'k'"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", d8,
        {"bad JSON", "expected ',' or '}'"});
  check(R"({"a":"x\q"})", d8, {"bad JSON", "invalid escape"});
  check(R"({"a":"\ud800"})", d8, {"unpaired surrogate"});
  check("{\"a\":\"\xff\"}", d8, {"invalid UTF-8"});
  check("[1,2]", d8, {"does not start with '{'"});
  check(R"({"b":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", Bytes{0, 1, 1, 0, 3, 0, 0, 0},
        {"bool element 4 is 3"});
  std::string deep(100, '[');
  check("{\"a\":" + deep + "}", d8, {"nesting deeper than 64"});
  Bytes huge(16, 0);
  huge[7] = 0x10;  // header length 2^60
  const std::string hp = write_all("huge.safetensors", huge);
  expect_error([&] { read_safetensors(hp); }, {"exceeds the limit"});
  Bytes shortlen(8, 0);
  shortlen[0] = 200;
  expect_error([&] { read_safetensors(write_all("s.safetensors", shortlen)); },
               {"truncated", "header length 200"});
}

TEST(Safetensors, EveryTruncationIsAnErrorAndFlipsNeverCrash) {
  const Bytes good = st_file(kReferenceHeader, reference_data());
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(
        read_safetensors(write_all("t.safetensors", Bytes(good.begin(), good.begin() + n))),
        kiln::Error)
        << n;
  std::mt19937 gen(5);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Bytes b = good;
    b[gen() % (b.size() - 40)] ^= static_cast<uint8_t>(1 + gen() % 255);  // in the header
    try {
      (void)read_safetensors(write_all("f.safetensors", b));
    } catch (const kiln::Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 150);  // most header flips break the JSON or its consistency
}

TEST(Serialize, ModuleStateDictRoundTrip) {
  auto a = std::make_shared<nn::Linear>(4, 3);
  auto b = std::make_shared<nn::Linear>(4, 3);
  save(Value(a->state_dict()), tmp("linear.kiln"));  // nn::StateDict converts directly
  nn::StateDict sd;
  for (auto& [k, t] : load(tmp("linear.kiln")).to_named_tensors()) sd.insert(k, t);
  EXPECT_EQ(sd.keys(), a->state_dict().keys());
  b->load_state_dict(sd);
  Tensor x = patterned({2, 4}, DType::Float32);
  EXPECT_EQ(values(b->forward(x)), values(a->forward(x)));
  // and through safetensors
  write_safetensors(tmp("linear.safetensors"), a->state_dict());
  nn::StateDict sd2;
  for (auto& [k, t] : read_safetensors(tmp("linear.safetensors"))) sd2.insert(k, t);
  auto c = std::make_shared<nn::Linear>(4, 3);
  c->load_state_dict(sd2);
  EXPECT_EQ(values(c->forward(x)), values(a->forward(x)));
}
