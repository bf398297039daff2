#pragma once
// The engine under every elementwise kernel (private to runtime/src/kernels/elementwise*.cpp).
//
// An op computes in one "compute" type T (float for float16/bfloat16) and produces R (T, or bool
// for comparisons). Operands keep their own dtypes and strides: plan_loop collapses the dims and
// for_each_strided splits the rows over threads; per row, operands whose dtype is T and whose
// stride is 1 element (or 0: broadcast scalar) are used in place, the others are converted through
// small stack blocks. So the common case (same dtype, contiguous or scalar-broadcast) runs the
// kernel straight over memory, and every mix of dtypes and strides still works.

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/tensor.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kiln::kernels::ew {

// Elements per conversion block (stack scratch per operand: kBlock * sizeof(T)).
inline constexpr int64_t kBlock = 512;

template <typename T>
struct OpMathT {
  using type = T;
};
template <>
struct OpMathT<Half> {
  using type = float;
};
template <>
struct OpMathT<BFloat16> {
  using type = float;
};
template <typename T>
using OpMath = typename OpMathT<T>::type;

inline DType opmath_dtype(DType t) {
  return (t == DType::Float16 || t == DType::BFloat16) ? DType::Float32 : t;
}

// Calls fn(T{}) for the compute type of dtype t (float16/bfloat16 -> float).
template <typename Fn>
decltype(auto) visit_compute(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float64:
      return fn(double{});
    case DType::Int8:
      return fn(int8_t{});
    case DType::UInt8:
      return fn(uint8_t{});
    case DType::Int32:
      return fn(int32_t{});
    case DType::Int64:
      return fn(int64_t{});
    case DType::Bool:
      return fn(bool{});
    default:
      return fn(float{});
  }
}

// Value conversion with PyTorch's semantics (bool: nonzero, NaN counts as nonzero).
template <typename To, typename From>
inline To cvt(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return cvt<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, double>) {
      return To(static_cast<float>(v));
    } else {
      return To(static_cast<float>(v));
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// dst[0..n) = convert(src[i * stride_bytes]) from dtype st.
template <typename T>
void load_convert(T* dst, const char* src, int64_t sb, DType st, int64_t n) {
  if (sb == 0) {
    T v{};
    visit_dtype(st, [&](auto s) {
      using S = decltype(s);
      v = cvt<T>(*reinterpret_cast<const S*>(src));
    });
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
    return;
  }
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, float>) {
    if (st == DType::Float16 && sb == 2) {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
      }
      for (; i < n; ++i) dst[i] = Half::to_float(s[i]);
      return;
    }
  }
#endif
  visit_dtype(st, [&](auto s) {
    using S = decltype(s);
    if (sb == static_cast<int64_t>(sizeof(S))) {
      const S* p = reinterpret_cast<const S*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = cvt<T>(p[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = cvt<T>(*reinterpret_cast<const S*>(src + i * sb));
    }
  });
}

// dst[i * stride_bytes] (dtype dt) = convert(src[i]).
template <typename R>
void store_convert(char* dst, int64_t sb, DType dt, const R* src, int64_t n) {
#if defined(__F16C__)
  if constexpr (std::is_same_v<R, float>) {
    if (dt == DType::Float16 && sb == 2) {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
      }
      for (; i < n; ++i) d[i] = Half::from_float(src[i]);
      return;
    }
  }
#endif
  visit_dtype(dt, [&](auto d) {
    using D = decltype(d);
    if (sb == static_cast<int64_t>(sizeof(D))) {
      D* p = reinterpret_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i] = cvt<D>(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<D*>(dst + i * sb) = cvt<D>(src[i]);
    }
  });
}

// Outputs of at least the target's stream_store_bytes are written with non-temporal stores (see
// run_typed); KILN_EW_NO_STREAM=1 turns them off (for measuring their effect).
bool streaming_disabled();

#if defined(__AVX2__)
inline constexpr bool kHaveStreamStores = true;
// Copies `bytes` from src (L1-resident scratch) to dst with non-temporal stores where aligned.
inline void stream_store(char* dst, const void* src_v, int64_t bytes) {
  const char* src = static_cast<const char*>(src_v);
  const int64_t head =
      std::min<int64_t>(bytes, (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31);
  std::memcpy(dst, src, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + 32 <= bytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
}
inline void stream_fence() {
  _mm_sfence();
}
#else
inline constexpr bool kHaveStreamStores = false;
inline void stream_store(char* dst, const void* src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}
inline void stream_fence() {}
#endif

// Drops size-1 dims and sorts the others so that operand 0's byte strides decrease (ties:
// operand 1's, ...), keeping the dims of all operands in correspondence.
template <size_t N>
void reorder_dims(Dims& shape, std::array<Dims, N>& bytes) {
  const size_t r = shape.size();
  if (r > 64) return;
  size_t perm[64];
  size_t m = 0;
  for (size_t i = 0; i < r; ++i) {
    if (shape[i] != 1) perm[m++] = i;
  }
  auto inner_than = [&](size_t a, size_t b) {  // should dim a come after (inside) dim b?
    for (size_t k = 0; k < N; ++k) {
      const int64_t sa = std::abs(bytes[k][a]), sb = std::abs(bytes[k][b]);
      if (sa != sb) return sa < sb;
    }
    return false;
  };
  bool changed = m != r;
  for (size_t i = 1; i < m; ++i) {  // stable insertion sort
    const size_t v = perm[i];
    size_t j = i;
    while (j > 0 && inner_than(perm[j - 1], v)) {
      perm[j] = perm[j - 1];
      --j;
      changed = true;
    }
    perm[j] = v;
  }
  if (!changed) return;
  Dims s2(m);
  for (size_t i = 0; i < m; ++i) s2[i] = shape[perm[i]];
  shape = std::move(s2);
  for (size_t k = 0; k < N; ++k) {
    Dims b2(m);
    for (size_t i = 0; i < m; ++i) b2[i] = bytes[k][perm[i]];
    bytes[k] = std::move(b2);
  }
}

// True when some operand walks the inner dim with a large stride (a transposed operand): then
// rows are processed in tiles so that the cache lines it touches get reused across rows.
template <size_t N>
bool needs_tiling(const LoopPlan<N>& p) {
  const size_t rank = p.shape.size();
  if (rank < 2 || p.shape[rank - 1] < 32 || p.shape[rank - 2] < 8) return false;
  for (size_t k = 0; k < N; ++k) {
    if (std::abs(p.strides[k][rank - 1]) > 16) return true;
  }
  return false;
}

// Copies a tile column by column: dst[t * m + c] = src_t[c * stride] for rows t (each src_t a row
// start), reading down the rows, which is the contiguous direction of a transposed operand.
template <typename E>
void gather_tile(E* dst, char* const* row_ptr, size_t rows, int64_t stride, int64_t m) {
  for (int64_t c = 0; c < m; ++c) {
    for (size_t t = 0; t < rows; ++t) {
      dst[t * m + c] = *reinterpret_cast<const E*>(row_ptr[t] + c * stride);
    }
  }
}

// Like for_each_strided, but over tiles of kTileRows rows x kTileCols columns. Inputs that walk
// the rows with a large stride (transposed) are first copied into an L1 tile in their own
// contiguous direction, so every cache line they touch is read once, whole.
template <size_t N, typename Row>
void for_each_tiled(const LoopPlan<N>& p, const std::array<int64_t, N>& items, const Row& row) {
  constexpr int64_t kTileRows = 32, kTileCols = 64;
  const size_t rank = p.shape.size();
  const int64_t n = p.shape[rank - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= p.shape[d];
  std::array<int64_t, N> s;
  std::array<bool, N> staged;
  for (size_t k = 0; k < N; ++k) {
    s[k] = p.strides[k][rank - 1];
    staged[k] = k > 0 && std::abs(s[k]) > 16 &&
                (items[k] == 1 || items[k] == 2 || items[k] == 4 || items[k] == 8);
  }
  const int64_t groups = (rows + kTileRows - 1) / kTileRows;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (kTileRows * n));
  parallel_for(0, groups, grain, [&](int64_t gb, int64_t ge) {
    std::array<char*, N> ptrs[kTileRows];
    alignas(64) char tiles[N][kTileRows * kTileCols * 8];
    for (int64_t g = gb; g < ge; ++g) {
      const int64_t r0 = g * kTileRows, r1 = std::min(rows, r0 + kTileRows);
      const size_t nr = static_cast<size_t>(r1 - r0);
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r;
        std::array<char*, N>& q = ptrs[r - r0];
        for (size_t k = 0; k < N; ++k) q[k] = p.base[k];
        for (size_t d = rank - 1; d-- > 0;) {
          const int64_t i = rem % p.shape[d];
          rem /= p.shape[d];
          for (size_t k = 0; k < N; ++k) q[k] += i * p.strides[k][d];
        }
      }
      for (int64_t c0 = 0; c0 < n; c0 += kTileCols) {
        const int64_t m = std::min(kTileCols, n - c0);
        std::array<int64_t, N> st = s;
        for (size_t k = 0; k < N; ++k) {
          if (!staged[k]) continue;
          char* rp[kTileRows];
          for (size_t t = 0; t < nr; ++t) rp[t] = ptrs[t][k] + c0 * s[k];
          switch (items[k]) {
            case 1:
              gather_tile(reinterpret_cast<uint8_t*>(tiles[k]), rp, nr, s[k], m);
              break;
            case 2:
              gather_tile(reinterpret_cast<uint16_t*>(tiles[k]), rp, nr, s[k], m);
              break;
            case 4:
              gather_tile(reinterpret_cast<uint32_t*>(tiles[k]), rp, nr, s[k], m);
              break;
            default:
              gather_tile(reinterpret_cast<uint64_t*>(tiles[k]), rp, nr, s[k], m);
              break;
          }
          st[k] = items[k];
        }
        for (size_t t = 0; t < nr; ++t) {
          std::array<char*, N> q = ptrs[t];
          for (size_t k = 0; k < N; ++k) {
            q[k] = staged[k] ? tiles[k] + static_cast<int64_t>(t) * m * items[k] : q[k] + c0 * s[k];
          }
          row(q.data(), st.data(), m);
        }
      }
    }
  });
}

// An input operand: data, dtype and element strides already broadcast to the iteration shape.
struct In {
  const char* data = nullptr;
  DType dtype = DType::Float32;
  Dims strides;
};

// Runs kernel k over the iteration space out.sizes(), input j computed in type Ts[j]:
//   k(R* out, const void* const* in, const bool* scalar, int64_t n)
// computes n outputs; in[j] points at n contiguous Ts[j] values, or at one value when scalar[j]
// (only when kScalarOK; otherwise broadcast inputs are expanded into a block first).
template <typename R, bool kScalarOK, typename... Ts, typename K>
void run_typed(TensorImpl& out, const std::array<In, sizeof...(Ts)>& ins, const K& k) {
  if (out.numel() == 0) return;
  constexpr size_t NI = sizeof...(Ts);
  constexpr size_t N = NI + 1;
  std::array<Dims, N> bytes;
  std::array<char*, N> base;
  bytes[0] = out.strides();
  for (auto& v : bytes[0]) v *= static_cast<int64_t>(out.itemsize());
  base[0] = static_cast<char*>(out.data());
  for (size_t j = 0; j < NI; ++j) {
    bytes[j + 1] = ins[j].strides;
    const int64_t item = static_cast<int64_t>(dtype_size(ins[j].dtype));
    for (auto& v : bytes[j + 1]) v *= item;
    base[j + 1] = const_cast<char*>(ins[j].data);
  }
  // Order dims by the output's strides (then the first input's), outermost first, so a
  // transposed output with equally transposed inputs still runs contiguous rows.
  Dims shape = out.sizes();
  reorder_dims<N>(shape, bytes);
  const auto plan = plan_loop<N>(shape, base, bytes);
  const DType out_dt = out.dtype();
  // Outputs much larger than the caches bypass them (no read-for-ownership, no eviction of the
  // inputs' lines): the kernel fills a small L1 block that is then streamed out.
  const bool tiled = needs_tiling(plan);
  // (Not for tiled loops: their rows are short and each would need its own fence.)
  const bool stream =
      !tiled && out_dt == dtype_of<R> && out.is_contiguous() &&
      static_cast<int64_t>(out.nbytes()) >= rt::target_params().stream_store_bytes &&
      kHaveStreamStores && !streaming_disabled();
  std::array<DType, NI> in_dt;
  for (size_t j = 0; j < NI; ++j) in_dt[j] = ins[j].dtype;
  static constexpr std::array<DType, NI> kT = {dtype_of<Ts>...};
  static constexpr std::array<int64_t, NI> kTs = {static_cast<int64_t>(sizeof(Ts))...};
  constexpr DType kR = dtype_of<R>;
  constexpr int64_t kRs = sizeof(R);
  using Seq = std::index_sequence_for<Ts...>;

  // Rows that need conversion, expansion of broadcast inputs or streaming stores go through
  // stack blocks; kept out of line so that the direct path has a small frame (rows can be short).
  auto slow_row = [&](char** p, const int64_t* s, int64_t n, bool out_direct,
                      const std::array<bool, NI>& direct, const std::array<bool, NI>& sc)
      __attribute__((noinline)) {
    std::array<const void*, NI> in;
    alignas(64) unsigned char buf[NI][kBlock * 8];
    alignas(64) unsigned char sval[NI][16];
    alignas(64) R obuf[kBlock];
    [&]<size_t... J>(std::index_sequence<J...>) {
      (((sc[J] && !direct[J])
            ? load_convert<Ts>(reinterpret_cast<Ts*>(sval[J]), p[J + 1], 0, in_dt[J], 1)
            : void()),
       ...);
    }
    (Seq{});
    for (int64_t off = 0; off < n; off += kBlock) {
      const int64_t m = std::min<int64_t>(kBlock, n - off);
      [&]<size_t... J>(std::index_sequence<J...>) {
        ((in[J] = sc[J]       ? (direct[J] ? static_cast<const void*>(p[J + 1])
                                           : static_cast<const void*>(sval[J]))
                  : direct[J] ? static_cast<const void*>(p[J + 1] + off * s[J + 1])
                              : (load_convert<Ts>(reinterpret_cast<Ts*>(buf[J]),
                                                  p[J + 1] + off * s[J + 1], s[J + 1], in_dt[J], m),
                                 static_cast<const void*>(buf[J]))),
         ...);
      }
      (Seq{});
      if (out_direct && stream) {
        k(obuf, in.data(), sc.data(), m);
        stream_store(p[0] + off * s[0], obuf, m * kRs);
      } else if (out_direct) {
        k(reinterpret_cast<R*>(p[0] + off * s[0]), in.data(), sc.data(), m);
      } else {
        k(obuf, in.data(), sc.data(), m);
        store_convert<R>(p[0] + off * s[0], s[0], out_dt, obuf, m);
      }
    }
    if (stream) stream_fence();
  };
  auto row = [&](char** p, const int64_t* s, int64_t n) {
    // Classify operands for this row: used in place, or converted through a block.
    const bool out_direct = out_dt == kR && s[0] == kRs;
    bool all_direct = out_direct && !stream;
    std::array<bool, NI> direct, sc;
    for (size_t j = 0; j < NI; ++j) {
      sc[j] = kScalarOK && s[j + 1] == 0;
      direct[j] = in_dt[j] == kT[j] && (s[j + 1] == kTs[j] || sc[j]);
      all_direct = all_direct && direct[j];
    }
    if (all_direct) {
      std::array<const void*, NI> in;
      for (size_t j = 0; j < NI; ++j) in[j] = p[j + 1];
      k(reinterpret_cast<R*>(p[0]), in.data(), sc.data(), n);
      return;
    }
    slow_row(p, s, n, out_direct, direct, sc);
  };
  if (tiled) {
    std::array<int64_t, N> items;
    items[0] = static_cast<int64_t>(out.itemsize());
    for (size_t j = 0; j < NI; ++j) items[j + 1] = static_cast<int64_t>(dtype_size(in_dt[j]));
    for_each_tiled(plan, items, row);
  } else {
    for_each_strided(plan, row);
  }
}

namespace detail {
template <typename T, size_t>
using Same = T;
template <size_t NI, typename T, typename R, bool kScalarOK, typename K, size_t... J>
void run_uniform(TensorImpl& out, const std::array<In, NI>& ins, const K& k,
                 std::index_sequence<J...>) {
  run_typed<R, kScalarOK, Same<T, J>...>(
      out, ins, [&](R* o, const void* const* in, const bool* sc, int64_t n) {
        const T* tin[NI] = {static_cast<const T*>(in[J])...};
        k(o, tin, sc, n);
      });
}
}  // namespace detail

// All inputs computed in T: k(R* out, const T* const* in, const bool* scalar, int64_t n).
template <size_t NI, typename T, typename R, bool kScalarOK, typename K>
void run(TensorImpl& out, const std::array<In, NI>& ins, const K& k) {
  detail::run_uniform<NI, T, R, kScalarOK>(out, ins, k, std::make_index_sequence<NI>{});
}

// ---- argument checking shared by all elementwise ops ------------------------------------------

// Checks `out` against the expected shape and result dtype, and that it overlaps no input except
// exactly. Returns normally when fine; throws kiln::Error naming `op` otherwise.
void check_out(std::string_view op, const TensorImpl& out, std::span<const int64_t> shape,
               DType result, std::span<const TensorImpl* const> inputs);

inline In make_in(const TensorImpl& t, std::span<const int64_t> shape, std::string_view op) {
  return In{static_cast<const char*>(t.data()), t.dtype(), broadcast_strides(t, shape, op)};
}
// A scalar operand already converted to T (v must outlive the run).
template <typename T>
In make_scalar_in(const T* v, size_t rank) {
  return In{reinterpret_cast<const char*>(v), dtype_of<T>, Dims(rank, 0)};
}

template <typename T>
T scalar_as(const Scalar& s) {
  if constexpr (std::is_same_v<T, bool>) {
    return s.to_double() != 0.0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(s.to_double());
  } else {
    return s.is_floating() ? static_cast<T>(static_cast<int64_t>(s.d)) : static_cast<T>(s.i);
  }
}

// out[i] = f(a[i], b[i]) with either side possibly a broadcast scalar; the branches give the
// compiler four simple loops to vectorize.
template <typename T, typename R, typename F>
struct BinaryLoop {
  F f;
  void operator()(R* out, const T* const* in, const bool* sc, int64_t n) const {
    const T* a = in[0];
    const T* b = in[1];
    if (!sc[0] && !sc[1]) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    } else if (!sc[0]) {
      const T bv = b[0];
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
    } else if (!sc[1]) {
      const T av = a[0];
      for (int64_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
    } else {
      const R v = f(a[0], b[0]);
      for (int64_t i = 0; i < n; ++i) out[i] = v;
    }
  }
};

// A binary operand: a tensor, or (t == nullptr) a scalar.
struct BinOperand {
  const TensorImpl* t = nullptr;
  Scalar s;
};

// The In for an operand; a scalar is converted to T into `storage`.
template <typename T>
In operand_in(const BinOperand& o, T& storage, std::span<const int64_t> shape,
              std::string_view op) {
  if (o.t) return make_in(*o.t, shape, op);
  storage = scalar_as<T>(o.s);
  return make_scalar_in(&storage, shape.size());
}

template <typename T, typename R, typename F>
void run_binary(TensorImpl& out, const BinOperand& a, const BinOperand& b,
                std::span<const int64_t> shape, std::string_view op, F f) {
  T sa{}, sb{};
  const std::array<In, 2> ins{operand_in<T>(a, sa, shape, op), operand_in<T>(b, sb, shape, op)};
  run<2, T, R, true>(out, ins, BinaryLoop<T, R, F>{f});
}

// Comparison and logical ops (elementwise_compare.cpp): compute in `compute`, write bool.
void run_compare(BinaryOp op, DType compute, TensorImpl& out, const BinOperand& a,
                 const BinOperand& b, std::span<const int64_t> shape, std::string_view name);

// The dtype PyTorch's result_type gives x with scalars (clamp's bounds).
DType result_type_with_scalars(const TensorImpl& x, std::span<const Scalar> scalars);

// Wrapping integer arithmetic (no signed-overflow UB); plain arithmetic for floats and bool.
template <typename T>
inline T wadd(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return a + b;
  }
}
template <typename T>
inline T wsub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <typename T>
inline T wmul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    if constexpr (sizeof(T) < sizeof(int)) {
      return static_cast<T>(static_cast<U>(static_cast<unsigned>(a) * static_cast<unsigned>(b)));
    } else {
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else {
    return a * b;
  }
}

}  // namespace kiln::kernels::ew
