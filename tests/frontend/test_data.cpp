// kiln::data: the IDX/MNIST reader on files written here byte by byte (plain and gzip via zlib),
// the real Fashion-MNIST files when installed, transforms, and the DataLoader's determinism,
// coverage, drop_last, prefetch bound, error propagation and shutdown.
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

#include "kiln/data.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<unsigned char>;

// Scratch files live in tmpfs when there is one (the tests write hundreds of small files) and
// are removed at exit.
fs::path tmp_dir() {
  static const struct Dir {
    fs::path path;
    Dir() {
      const fs::path base =
          fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
      path = base / ("kiln_test_data_" + std::to_string(static_cast<long>(::getpid())));
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

Bytes idx_bytes(uint8_t type, std::vector<uint32_t> dims, const Bytes& payload) {
  Bytes b{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

std::string write_file(const std::string& name, const Bytes& b) {
  const std::string p = (tmp_dir() / name).string();
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  return p;
}

std::string write_gz(const std::string& name, const Bytes& b) {
  const std::string p = (tmp_dir() / name).string();
  gzFile f = gzopen(p.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (!b.empty()) {
    EXPECT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), int(b.size()));
  }
  gzclose(f);
  return p;
}

Bytes read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// Expects kiln::Error whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, std::vector<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << fragments[0];
  } catch (const kiln::Error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message '" << e.what() << "' lacks '" << f << "'";
  }
}

// 3 images of 2x3 pixels: pixel (n, r, c) = 40n + 7r + c.
Bytes image_payload() {
  Bytes p;
  for (int n = 0; n < 3; ++n)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) p.push_back(static_cast<unsigned char>(40 * n + 7 * r + c));
  return p;
}

}  // namespace

TEST(DataIdx, ReadsImagesAndLabels) {
  for (bool gz : {false, true}) {
    const Bytes img = idx_bytes(0x08, {3, 2, 3}, image_payload());
    const Bytes lab = idx_bytes(0x08, {3}, {7, 0, 9});
    const std::string ip = gz ? write_gz("img.gz", img) : write_file("img", img);
    const std::string lp = gz ? write_gz("lab.gz", lab) : write_file("lab", lab);
    Tensor images = read_mnist_images(ip);
    ASSERT_EQ(images.sizes(), (Dims{3, 1, 2, 3}));
    ASSERT_EQ(images.dtype(), DType::Float32);
    for (int n = 0; n < 3; ++n)
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c)
          EXPECT_FLOAT_EQ(images.data_ptr<float>()[n * 6 + r * 3 + c],
                          (40 * n + 7 * r + c) / 255.0f);
    Tensor labels = read_mnist_labels(lp);
    ASSERT_EQ(labels.sizes(), (Dims{3}));
    ASSERT_EQ(labels.dtype(), DType::Int64);
    EXPECT_EQ(labels.data_ptr<int64_t>()[0], 7);
    EXPECT_EQ(labels.data_ptr<int64_t>()[1], 0);
    EXPECT_EQ(labels.data_ptr<int64_t>()[2], 9);
    // read_idx keeps the raw type.
    Tensor raw = read_idx(ip);
    EXPECT_EQ(raw.dtype(), DType::UInt8);
    EXPECT_EQ(raw.sizes(), (Dims{3, 2, 3}));
    EXPECT_EQ(raw.data_ptr<uint8_t>()[17], 40 * 2 + 7 + 2);
  }
}

TEST(DataIdx, OtherTypeCodesAreBigEndian) {
  // int8: 0xFF = -1
  Tensor i8 = read_idx(write_file("i8", idx_bytes(0x09, {2}, {0xFF, 0x05})));
  EXPECT_EQ(i8.dtype(), DType::Int8);
  EXPECT_EQ(i8.data_ptr<int8_t>()[0], -1);
  EXPECT_EQ(i8.data_ptr<int8_t>()[1], 5);
  // int16 0xFFFE = -2, 0x0102 = 258 (widened to int32)
  Tensor i16 = read_idx(write_file("i16", idx_bytes(0x0B, {2}, {0xFF, 0xFE, 0x01, 0x02})));
  EXPECT_EQ(i16.dtype(), DType::Int32);
  EXPECT_EQ(i16.data_ptr<int32_t>()[0], -2);
  EXPECT_EQ(i16.data_ptr<int32_t>()[1], 258);
  // int32 0x01020304, float32 1.5 = 0x3FC00000, float64 -2.25 = 0xC002000000000000
  Tensor i32 = read_idx(write_file("i32", idx_bytes(0x0C, {1, 1}, {1, 2, 3, 4})));
  EXPECT_EQ(i32.sizes(), (Dims{1, 1}));
  EXPECT_EQ(i32.data_ptr<int32_t>()[0], 0x01020304);
  Tensor f32 = read_idx(write_file("f32", idx_bytes(0x0D, {1}, {0x3F, 0xC0, 0, 0})));
  EXPECT_EQ(f32.data_ptr<float>()[0], 1.5f);
  Tensor f64 = read_idx(write_file("f64", idx_bytes(0x0E, {1}, {0xC0, 0x02, 0, 0, 0, 0, 0, 0})));
  EXPECT_EQ(f64.data_ptr<double>()[0], -2.25);
  // zero examples is a valid (empty) file
  Tensor empty_imgs = read_mnist_images(write_file("e", idx_bytes(0x08, {0, 28, 28}, {})));
  EXPECT_EQ(empty_imgs.sizes(), (Dims{0, 1, 28, 28}));
}

TEST(DataIdx, CorruptHeadersNameFileAndProblem) {
  const Bytes good = idx_bytes(0x08, {3, 2, 3}, image_payload());
  std::string p;
  p = write_file("badmagic", [&] {
    Bytes b = good;
    b[0] = 1;
    return b;
  }());
  expect_error([&] { read_idx(p); }, {p, "bad magic", "0x01000803"});
  p = write_file("badtype", [&] {
    Bytes b = good;
    b[2] = 0x07;
    return b;
  }());
  expect_error([&] { read_idx(p); }, {p, "type code"});
  p = write_file("zerodims", [&] {
    Bytes b = good;
    b[3] = 0;
    return b;
  }());
  expect_error([&] { read_idx(p); }, {p, "0 dims"});
  p = write_file("hugedim", idx_bytes(0x08, {0x80000000u, 1, 1}, {}));
  expect_error([&] { read_idx(p); }, {p, "larger than 2^31"});
  p = write_file("overflow", idx_bytes(0x0E, {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF}, {}));
  expect_error([&] { read_idx(p); }, {p, "more than 2^40"});
  p = write_file("shortdata", idx_bytes(0x08, {3, 2, 3}, Bytes(17, 1)));
  expect_error([&] { read_idx(p); }, {p, "truncated", "18 data bytes"});
  p = write_gz("shortdata.gz", idx_bytes(0x08, {3, 2, 3}, Bytes(17, 1)));
  expect_error([&] { read_idx(p); }, {p, "truncated", "got 17"});
  // A tiny gzip whose header claims 2 GiB must fail on the data, not on allocation.
  p = write_gz("liar.gz", idx_bytes(0x08, {0x7FFFFFFF}, Bytes(10, 1)));
  expect_error([&] { read_idx(p); }, {p, "truncated"});
  p = write_file("trailing", [&] {
    Bytes b = good;
    b.push_back(0);
    b.push_back(0);
    return b;
  }());
  expect_error([&] { read_idx(p); }, {p, "2 unexpected bytes"});
  p = write_file("lab_range", idx_bytes(0x08, {3}, {1, 10, 2}));
  expect_error([&] { read_mnist_labels(p); }, {p, "label 10 at index 1"});
  p = write_file("img_as_lab", good);
  expect_error([&] { read_mnist_labels(p); }, {p, "expected MNIST labels"});
  expect_error(
      [&] {
        read_mnist_images(write_file("lab_as_img", idx_bytes(0x08, {2}, {1, 2})));
      },
      {"expected MNIST images"});
  expect_error([&] { read_idx((tmp_dir() / "does_not_exist").string()); },
               {"does_not_exist", "cannot open"});
}

TEST(DataIdx, EveryTruncationAndByteFlipIsAnErrorOrValid) {
  const Bytes good = idx_bytes(0x08, {3, 2, 3}, image_payload());
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string p = write_file("trunc", Bytes(good.begin(), good.begin() + n));
    EXPECT_THROW(read_idx(p), kiln::Error) << "truncated to " << n;
  }
  const Bytes gz = read_all(write_gz("g.gz", good));
  for (size_t n = 0; n < gz.size(); ++n) {
    const std::string p = write_file("trunc.gz", Bytes(gz.begin(), gz.begin() + n));
    // A gzip cut inside its 18-byte frame may still hold a complete IDX file that the reader
    // recovers; anything else must be an error, never a crash.
    try {
      Tensor t = read_idx(p);
      EXPECT_EQ(t.numel(), 18);
    } catch (const kiln::Error&) {
    }
  }
  std::mt19937 gen(7);
  for (int trial = 0; trial < 100; ++trial) {
    Bytes b = gz;
    b[gen() % b.size()] ^= static_cast<unsigned char>(1 + gen() % 255);
    const std::string p = write_file("flip.gz", b);
    try {
      (void)read_idx(p);  // the gzip CRC catches payload flips; header flips may still parse
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

TEST(DataMNIST, RealFashionMnistFiles) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(root + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << root << " not installed";
  for (auto mode : {MNIST::Mode::kTrain, MNIST::Mode::kTest}) {
    MNIST ds(root, mode);
    const int64_t n = mode == MNIST::Mode::kTrain ? 60000 : 10000;
    ASSERT_EQ(ds.size(), n);
    EXPECT_EQ(ds.images().sizes(), (Dims{n, 1, 28, 28}));
    EXPECT_EQ(ds.targets().sizes(), (Dims{n}));
    EXPECT_EQ(ds.targets().dtype(), DType::Int64);
    // Fashion-MNIST is balanced: n/10 examples of each of the 10 classes.
    std::vector<int64_t> count(10, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t l = ds.targets().data_ptr<int64_t>()[i];
      ASSERT_TRUE(l >= 0 && l < 10);
      ++count[l];
    }
    for (int64_t c : count) EXPECT_EQ(c, n / 10);
    float lo = 1, hi = 0;
    const float* px = ds.images().data_ptr<float>();
    for (int64_t i = 0; i < ds.images().numel(); ++i)
      lo = std::min(lo, px[i]), hi = std::max(hi, px[i]);
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);
    Example e = ds.get(5);
    EXPECT_EQ(e.data.sizes(), (Dims{1, 28, 28}));
    EXPECT_EQ(e.target.dim(), 0);
  }
}

TEST(DataTransforms, NormalizePerChannelAndScalar) {
  // [C=2, H=1, W=2]
  Tensor x = tensor({1.0, 2.0, 3.0, 5.0}).view({2, 1, 2});
  transforms::Normalize norm({1.0, 3.0}, {0.5, 2.0});
  Tensor y = norm(x);
  ASSERT_EQ(y.sizes(), (Dims{2, 1, 2}));
  const float want[] = {0.0f, 2.0f, 0.0f, 1.0f};  // (1-1)/.5, (2-1)/.5, (3-3)/2, (5-3)/2
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.contiguous().data_ptr<float>()[i], want[i]);
  // Same transform on a batch [N=2, C, H, W].
  Tensor yb = norm(stack({x, x}, 0)).contiguous();
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(yb.data_ptr<float>()[i], want[i % 4]);
  Tensor z = transforms::Normalize(0.5, 0.25)(x).contiguous();
  EXPECT_FLOAT_EQ(z.data_ptr<float>()[3], (5.0f - 0.5f) / 0.25f);
  // uint8 input becomes float32
  Tensor u = transforms::Normalize(0, 1)(ones({2}, TensorOptions(DType::UInt8)));
  EXPECT_EQ(u.dtype(), DType::Float32);
  EXPECT_THROW(transforms::Normalize({1, 2, 3}, {1, 1, 1})(x), kiln::Error);
  EXPECT_THROW(transforms::Normalize(0, 0), kiln::Error);

  auto base =
      std::make_shared<TensorDataset>(stack({x, x * 2.0}, 0), tensor({3.0, 4.0}, DType::Int64));
  auto mapped = std::make_shared<MapDataset>(base, norm);
  Example e = mapped->get(1);
  EXPECT_FLOAT_EQ(e.data.contiguous().data_ptr<float>()[1], (4.0f - 1.0f) / 0.5f);
  EXPECT_EQ(e.target.item<int64_t>(), 4);
}

namespace {

// Example i: data = [i, i*i] (float64), target = i (int64). get() sleeps a pseudo-random time so
// worker completion order is scrambled; counts calls and the peak number of concurrent get()s.
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    KILN_CHECK(i != fail_at_, "SlowDataset", "example ", i, " is broken");
    ++calls;
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 13 * 40));
    return {tensor({double(i), double(i * i)}, DType::Float64),
            scalar_tensor(double(i), DType::Int64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
};

std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) {
    std::vector<int64_t> ids;
    const int64_t b = batch.data.size(0);
    EXPECT_EQ(batch.data.sizes(), (Dims{b, 2}));
    EXPECT_EQ(batch.target.sizes(), (Dims{b}));
    for (int64_t k = 0; k < b; ++k) {
      const int64_t id = batch.target.data_ptr<int64_t>()[k];
      EXPECT_EQ(batch.data.data_ptr<double>()[2 * k], double(id));
      EXPECT_EQ(batch.data.data_ptr<double>()[2 * k + 1], double(id * id));
      ids.push_back(id);
    }
    out.push_back(ids);
  }
  return out;
}

}  // namespace

TEST(DataLoader, SequentialBatchesAndDropLast) {
  auto ds = std::make_shared<SlowDataset>(23);
  DataLoader keep(ds, {.batch_size = 5});
  EXPECT_EQ(keep.size(), 5);
  auto batches = run_epoch(keep);
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(batches[4], (std::vector<int64_t>{20, 21, 22}));
  for (int b = 0; b < 4; ++b)
    for (int k = 0; k < 5; ++k) EXPECT_EQ(batches[b][k], 5 * b + k);
  DataLoader drop(ds, {.batch_size = 5, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(drop.size(), 4);
  auto dropped = run_epoch(drop);
  ASSERT_EQ(dropped.size(), 4u);
  EXPECT_EQ(dropped.back(), (std::vector<int64_t>{15, 16, 17, 18, 19}));
  // batch larger than the dataset
  DataLoader big(ds, {.batch_size = 100, .drop_last = true});
  EXPECT_EQ(run_epoch(big).size(), 0u);
}

TEST(DataLoader, ShuffleCoversEveryIndexOncePerEpoch) {
  auto ds = std::make_shared<SlowDataset>(37);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 11, .num_workers = 2});
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (auto& b : run_epoch(loader)) order.insert(order.end(), b.begin(), b.end());
    ASSERT_EQ(order.size(), 37u);
    std::set<int64_t> seen(order.begin(), order.end());
    EXPECT_EQ(seen.size(), 37u);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), 36);
    std::vector<int64_t> identity(37);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_NE(order, identity);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);  // a new permutation each epoch
  EXPECT_NE(orders[1], orders[2]);
  EXPECT_EQ(loader.epoch(), 3u);
}

TEST(DataLoader, DeterministicAcrossWorkersAndSeeds) {
  auto ds = std::make_shared<SlowDataset>(50);
  auto epochs = [&](int workers, uint64_t seed, bool drop_last) {
    DataLoader loader(ds, {.batch_size = 6,
                           .shuffle = true,
                           .seed = seed,
                           .drop_last = drop_last,
                           .num_workers = workers});
    std::vector<std::vector<std::vector<int64_t>>> out;
    for (int e = 0; e < 2; ++e) out.push_back(run_epoch(loader));
    return out;
  };
  const auto ref = epochs(0, 5, false);
  EXPECT_EQ(ref[0].size(), 9u);
  for (int w : {1, 2, 4}) EXPECT_EQ(epochs(w, 5, false), ref) << w << " workers";
  EXPECT_NE(epochs(0, 6, false), ref);
  EXPECT_EQ(epochs(3, 6, false), epochs(0, 6, false));
  const auto dropped = epochs(3, 5, true);
  ASSERT_EQ(dropped[0].size(), 8u);
  for (int e = 0; e < 2; ++e)
    for (int b = 0; b < 8; ++b) EXPECT_EQ(dropped[e][b], ref[e][b]);
  // set_epoch replays an epoch exactly
  DataLoader replay(ds, {.batch_size = 6, .shuffle = true, .seed = 5, .num_workers = 2});
  replay.set_epoch(1);
  EXPECT_EQ(run_epoch(replay), ref[1]);
  // The permutation itself is a fixed function of (n, seed, epoch).
  EXPECT_EQ(epoch_permutation(10, true, 3, 0), epoch_permutation(10, true, 3, 0));
  EXPECT_NE(epoch_permutation(10, true, 3, 0), epoch_permutation(10, true, 3, 1));
}

TEST(DataLoader, TensorDatasetBatchesAreIndexSelects) {
  Tensor x = arange(0, 30, 1, DType::Float32).view({10, 3});
  Tensor y = arange(0, 10, 1, DType::Int64);
  auto ds = std::make_shared<TensorDataset>(x, y);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 2, .num_workers = 2});
  int64_t total = 0;
  for (auto& b : loader) {
    for (int64_t k = 0; k < b.data.size(0); ++k) {
      const int64_t id = b.target.data_ptr<int64_t>()[k];
      for (int j = 0; j < 3; ++j) EXPECT_EQ(b.data.data_ptr<float>()[k * 3 + j], id * 3 + j);
    }
    total += b.data.size(0);
  }
  EXPECT_EQ(total, 10);
  EXPECT_THROW(ds->get(10), kiln::Error);
  EXPECT_THROW(TensorDataset(x, arange(0, 9, 1, DType::Int64)), kiln::Error);
}

TEST(DataLoader, PrefetchIsBoundedAndShutdownIsClean) {
  auto ds = std::make_shared<SlowDataset>(400);
  {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 2, .prefetch_factor = 2});
    auto it = loader.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // consumed 1 batch; at most 2 * 2 = 4 batches loaded or loading beyond it
    EXPECT_LE(ds->calls.load(), (1 + 4) * 2);
    ++it;
    ++it;
    // destroyed mid-epoch with workers blocked on the full queue
  }
  const int64_t after = ds->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds->calls.load(), after);  // workers are gone
  DataLoader loader(ds, {.batch_size = 3, .num_workers = 3});
  int n = 0;
  for (auto& b : loader) {
    (void)b;
    if (++n == 5) break;  // the iterator (and its workers) dies here
  }
  // A new epoch ends the old one; the old iterator then refuses to advance.
  auto it1 = loader.begin();
  auto it2 = loader.begin();
  EXPECT_THROW(++it1, kiln::Error);
  EXPECT_EQ((*it2).target.data_ptr<int64_t>()[0], 0);
}

TEST(DataLoader, WorkerErrorsSurfaceAtTheirBatch) {
  for (int workers : {0, 2}) {
    auto ds = std::make_shared<SlowDataset>(20, /*fail_at=*/9);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    int seen = 0;
    try {
      for (auto& b : loader) {
        (void)b;
        ++seen;
      }
      ADD_FAILURE() << "no error";
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find("example 9 is broken"), std::string::npos);
    }
    EXPECT_EQ(seen, 2) << workers << " workers";  // batches 0 and 1 arrive, batch 2 fails
  }
}
