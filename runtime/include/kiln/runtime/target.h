#pragma once
// The target description: what the kernels may assume about the CPU they run on (vector ISA and
// extensions, register count, cache sizes, usable CPUs) and the few parameters derived from it
// (GEMM blocking, conv tiling, cache-fit thresholds). Read once from the host (cpuid, sysfs),
// or given explicitly: a preset named like LLVM's CPUs (`znver3`, `sapphirerapids`, ...) with
// optional overrides, for `kiln compile --cpu`, for tests of a heuristic, and for KILN_CPU.
//
// Every cache-dependent constant of the kernels comes from `target_params()`; the derivation
// rules live in one file (src/target_params.cpp) and docs/target.md tabulates what each CPU class
// gets and why.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

enum class VectorIsa : uint8_t { Scalar, Avx2, Avx512, Neon };
const char* vector_isa_name(VectorIsa isa);

// Instruction-set extensions beyond the base ISA. x86 flags are set only when the OS also saves
// the registers they use (XCR0); AMX additionally needs arch_prctl permission, requested by the
// kernels that use it.
struct CpuFeatures {
  bool sse4_2 = false, avx = false;
  bool fma = false, f16c = false, avx2 = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  bool neon = false, dotprod = false, i8mm = false;
};

struct TargetDescription {
  std::string name;    // "host" or the preset it came from
  std::string vendor;  // "AMD", "Intel", "ARM", ... ("" when unknown)
  std::string model;   // the CPU's brand string ("" for presets)
  VectorIsa isa = VectorIsa::Scalar;
  CpuFeatures features;
  int vector_bits = 128;         // widest vector the kernels use
  int vector_registers = 16;     // architectural vector registers at that width
  int64_t l1d_bytes = 32 << 10;  // per core
  int64_t l2_bytes = 256 << 10;  // per core (private L2; a shared L2 divided by its sharers)
  int64_t l3_bytes = 8 << 20;    // last level, as seen by one core (shared: the whole slice)
  int cpus = 1;                  // CPUs this process may run on (affinity mask)
};

// What the kernels read: derived once per description (see target_params.cpp for the rules).
struct GemmBlocking {
  int64_t kc = 0;           // K block: the A sliver (MR x kc) stays in L1
  int64_t mc = 0;           // rows of the packed A block shared by the threads, multiple of MR
  int64_t nc = 0;           // columns of one thread's packed B block (L2), multiple of NR
  int64_t kc_packed_b = 0;  // K block against a B packed once for few rows of A (0: kc)
};
struct TargetParams {
  GemmBlocking gemm_avx512, gemm_avx2, gemm_neon, gemm_portable;
  int64_t l1_panel_bytes = 0;     // an operand panel re-read per sliver stays under this (L1)
  int64_t l2_block_bytes = 0;     // an operand block re-read per sliver stays under this (L2)
  int64_t conv_tile_bytes = 0;    // im2col column tile (K x columns) of the GEMM convolution
  int64_t winograd_v_bytes = 0;   // Winograd's shared transformed-input block
  int64_t winograd_m_bytes = 0;   // Winograd's per-thread product buffer
  int64_t mbconv_band_bytes = 0;  // a fused inverted-residual block's band buffers
  // Which inverted-residual blocks the compiler fuses (kiln.mbconv) and how they run: in bands
  // from this expanded tensor size (without an expansion: this input size), whole images
  // channels-last up to this size of one image's expanded tensor.
  int64_t mbconv_banded_min_bytes = 0, mbconv_no_expand_min_bytes = 0;
  int64_t mbconv_whole_image_bytes = 0;
  int64_t depthwise_band_bytes = 0;  // the channel-interleaved depthwise's input band
  int64_t stream_store_bytes = 0;    // elementwise outputs this large bypass the caches

  // The blocking of the GEMM family `isa` selects (Scalar: the portable one).
  const GemmBlocking& gemm(VectorIsa isa) const {
    return isa == VectorIsa::Avx512 ? gemm_avx512
           : isa == VectorIsa::Avx2 ? gemm_avx2
           : isa == VectorIsa::Neon ? gemm_neon
                                    : gemm_portable;
  }
};

// The register tiles of the GEMM microkernels (a property of the kernel code, not of the CPU).
struct MicroTile {
  int mr, nr;
};
// The tile the family of `isa` uses (the kernels check theirs against it).
MicroTile gemm_micro_tile(VectorIsa isa);
GemmBlocking derive_gemm_blocking(const TargetDescription& t, MicroTile tile, bool long_packed_k);
TargetParams derive_target_params(const TargetDescription& t);

// The host, detected once.
const TargetDescription& host_target();

// A preset by name, with the host's CPU count. Throws kiln::Error naming the known presets.
TargetDescription preset_target(std::string_view name);
std::vector<std::string> preset_target_names();

// "host" or a preset name, then comma-separated overrides: isa=avx2|avx512|neon|scalar,
// l1d=/l2=/l3= sizes (bytes, or with K/M suffix), cpus=N. E.g. "znver4,l2=512K,cpus=2".
// Throws kiln::Error on an unknown name or key, or a value out of range.
TargetDescription parse_target(std::string_view spec);

// Whether `t` has the feature named as LLVM names it ("avx2", "avx512f", "avx512vnni",
// "amx-int8", "neon", "dotprod", ...). Throws kiln::Error for a name kiln does not know.
bool has_feature(const TargetDescription& t, std::string_view llvm_name);
// The comma-separated features (LLVM names) the host lacks, e.g. those an AOT-compiled model
// was compiled to use.
std::vector<std::string> missing_host_features(std::string_view comma_separated);

// The ISA features `t` asks for that `host` lacks (empty: its kernels can run there).
std::vector<std::string> missing_features(const TargetDescription& t,
                                          const TargetDescription& host);

// The description the kernels use now: KILN_CPU (a parse_target spec) at first use, else the
// host. An environment spec that cannot run here is refused with a message on stderr (the host
// is used). Cheap: one atomic load.
const TargetDescription& active_target();
const TargetParams& target_params();
// Replaces it for later kernel calls. Throws kiln::Error, naming the missing features, when the
// host cannot run `t`'s ISA (before any kernel runs: never a SIGILL). Kernel state built under the
// previous description (packed weights) keeps the blocking it was packed with.
void set_active_target(const TargetDescription& t);

// Multi-line human-readable form (kiln version --cpu): the description and derived parameters.
std::string describe(const TargetDescription& t);

}  // namespace kiln::rt
