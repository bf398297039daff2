// The target description: host detection (cpuid + XCR0 on x86, HWCAP on arm64, cache sizes from
// sysfs), the presets, the spec parser, and the active description the kernels read.

#include "kiln/runtime/target.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "kiln/runtime/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace kiln::rt {

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Scalar:
      return "scalar";
    case VectorIsa::Avx2:
      return "avx2";
    case VectorIsa::Avx512:
      return "avx512";
    case VectorIsa::Neon:
      return "neon";
  }
  return "?";
}

namespace {

constexpr std::string_view kOp = "target";

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// sysfs size strings: "32K", "1024K", "32M".
int64_t parse_cache_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (v <= 0) return 0;
  if (*end == 'K') return v << 10;
  if (*end == 'M') return v << 20;
  if (*end == 'G') return v << 30;
  return v;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// Cache sizes of CPU 0 from sysfs; fields stay as given where sysfs says nothing (containers).
void read_caches(TargetDescription& t) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = read_line(dir + "level");
    if (level.empty()) break;
    const std::string type = read_line(dir + "type");
    const int64_t size = parse_cache_size(read_line(dir + "size"));
    if (size <= 0 || type == "Instruction") continue;
    if (level == "1") t.l1d_bytes = size;
    if (level == "2") t.l2_bytes = size;
    if (level == "3") t.l3_bytes = size;
  }
}

#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}
bool bit(unsigned v, int i) {
  return (v >> i) & 1u;
}

void detect_x86(TargetDescription& t) {
  const Regs r0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &r0.b, 4), std::memcpy(vendor + 4, &r0.d, 4),
      std::memcpy(vendor + 8, &r0.c, 4);
  const std::string v(vendor);
  t.vendor = v == "GenuineIntel" ? "Intel" : v == "AuthenticAMD" ? "AMD" : v;
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string b(brand);
    b.erase(0, b.find_first_not_of(' '));
    b.erase(b.find_last_not_of(' ') + 1);
    t.model = b;
  }
  const Regs r1 = cpuid(1);
  const bool osxsave = bit(r1.c, 27);
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t(hi) << 32) | lo;
  }
  const bool ymm = (xcr0 & 0x6) == 0x6;            // SSE + AVX state
  const bool zmm = (xcr0 & 0xe6) == 0xe6;          // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  const Regs r7 = r0.a >= 7 ? cpuid(7, 0) : Regs{};
  const Regs r71 = r0.a >= 7 ? cpuid(7, 1) : Regs{};
  CpuFeatures& f = t.features;
  f.sse4_2 = bit(r1.c, 20);
  f.avx = ymm && bit(r1.c, 28);
  f.fma = ymm && bit(r1.c, 12);
  f.f16c = ymm && bit(r1.c, 29);
  f.avx2 = ymm && bit(r7.b, 5);
  f.avx512f = zmm && bit(r7.b, 16);
  f.avx512dq = zmm && bit(r7.b, 17);
  f.avx512bw = zmm && bit(r7.b, 30);
  f.avx512vl = zmm && bit(r7.b, 31);
  f.avx512_vnni = zmm && bit(r7.c, 11);
  f.avx512_bf16 = zmm && bit(r71.a, 5);
  f.avx_vnni = ymm && bit(r71.a, 4);
  f.amx_tile = tiles && bit(r7.d, 24);
  f.amx_int8 = tiles && bit(r7.d, 25);
  f.amx_bf16 = tiles && bit(r7.d, 22);
  if (f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl) {
    t.isa = VectorIsa::Avx512, t.vector_bits = 512, t.vector_registers = 32;
  } else if (f.avx2 && f.fma) {
    t.isa = VectorIsa::Avx2, t.vector_bits = 256, t.vector_registers = 16;
  } else {
    t.isa = VectorIsa::Scalar, t.vector_bits = 128, t.vector_registers = 16;
  }
}
#elif defined(__aarch64__)
void detect_arm(TargetDescription& t) {
  t.vendor = "ARM";
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  t.features.neon = true;
  t.features.fma = true;
  t.features.dotprod = (hw >> 20) & 1ul;  // HWCAP_ASIMDDP
  t.features.i8mm = (hw2 >> 13) & 1ul;    // HWCAP2_I8MM
  t.isa = VectorIsa::Neon, t.vector_bits = 128, t.vector_registers = 32;
}
#endif

TargetDescription detect_host() {
  TargetDescription t;
  t.name = "host";
#if defined(__x86_64__)
  detect_x86(t);
#elif defined(__aarch64__)
  detect_arm(t);
#endif
  read_caches(t);
  t.cpus = usable_cpus();
  return t;
}

// ---- Presets: CPU classes named as LLVM names them (`kiln compile --cpu`) -----------------------

struct Preset {
  const char* name;
  const char* vendor;
  VectorIsa isa;
  int64_t l1d, l2, l3;
  CpuFeatures (*features)();
};

CpuFeatures avx2_features() {
  CpuFeatures f;
  f.sse4_2 = f.avx = f.fma = f.f16c = f.avx2 = true;
  return f;
}
CpuFeatures avx512_features() {
  CpuFeatures f = avx2_features();
  f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = true;
  return f;
}
CpuFeatures avx512_vnni_features() {
  CpuFeatures f = avx512_features();
  f.avx512_vnni = true;
  return f;
}
CpuFeatures zen4_features() {
  CpuFeatures f = avx512_vnni_features();
  f.avx512_bf16 = true;
  return f;
}
CpuFeatures amx_features() {
  CpuFeatures f = zen4_features();
  f.avx_vnni = f.amx_tile = f.amx_int8 = f.amx_bf16 = true;
  return f;
}
CpuFeatures no_features() {
  return CpuFeatures{};
}
CpuFeatures neon_features() {
  CpuFeatures f;
  f.neon = f.fma = true;
  return f;
}
CpuFeatures neon_dot_features() {
  CpuFeatures f = neon_features();
  f.dotprod = true;
  return f;
}
CpuFeatures neon_i8mm_features() {
  CpuFeatures f = neon_dot_features();
  f.i8mm = true;
  return f;
}

constexpr int64_t K = 1 << 10, M = 1 << 20;
// Per-core L1d and L2; L3 of one slice (a CCX on AMD, the mesh's share on Intel is the whole LLC).
const Preset kPresets[] = {
    {"x86-64", "", VectorIsa::Scalar, 32 * K, 256 * K, 8 * M, no_features},
    {"x86-64-v3", "", VectorIsa::Avx2, 32 * K, 256 * K, 8 * M, avx2_features},
    {"haswell", "Intel", VectorIsa::Avx2, 32 * K, 256 * K, 8 * M, avx2_features},
    {"skylake", "Intel", VectorIsa::Avx2, 32 * K, 256 * K, 8 * M, avx2_features},
    {"alderlake", "Intel", VectorIsa::Avx2, 48 * K, 1280 * K, 30 * M,
     [] {
       CpuFeatures f = avx2_features();
       f.avx_vnni = true;
       return f;
     }},
    {"znver2", "AMD", VectorIsa::Avx2, 32 * K, 512 * K, 16 * M, avx2_features},
    {"znver3", "AMD", VectorIsa::Avx2, 32 * K, 512 * K, 32 * M, avx2_features},
    {"x86-64-v4", "", VectorIsa::Avx512, 32 * K, 1 * M, 16 * M, avx512_features},
    {"skylake-avx512", "Intel", VectorIsa::Avx512, 32 * K, 1 * M, 32 * M, avx512_features},
    {"cascadelake", "Intel", VectorIsa::Avx512, 32 * K, 1 * M, 32 * M, avx512_vnni_features},
    {"icelake-server", "Intel", VectorIsa::Avx512, 48 * K, 1280 * K, 48 * M, avx512_vnni_features},
    {"sapphirerapids", "Intel", VectorIsa::Avx512, 48 * K, 2 * M, 105 * M, amx_features},
    {"emeraldrapids", "Intel", VectorIsa::Avx512, 48 * K, 2 * M, 320 * M, amx_features},
    {"znver4", "AMD", VectorIsa::Avx512, 32 * K, 1 * M, 32 * M, zen4_features},
    {"znver5", "AMD", VectorIsa::Avx512, 48 * K, 1 * M, 32 * M, zen4_features},
    {"generic-arm64", "", VectorIsa::Neon, 32 * K, 256 * K, 4 * M, neon_features},
    {"cortex-a76", "ARM", VectorIsa::Neon, 64 * K, 256 * K, 4 * M, neon_dot_features},
    {"neoverse-n1", "ARM", VectorIsa::Neon, 64 * K, 1 * M, 32 * M, neon_dot_features},
    {"neoverse-v1", "ARM", VectorIsa::Neon, 64 * K, 1 * M, 32 * M, neon_i8mm_features},
    {"neoverse-n2", "ARM", VectorIsa::Neon, 64 * K, 1 * M, 32 * M, neon_i8mm_features},
};

int vector_bits_of(VectorIsa isa) {
  return isa == VectorIsa::Avx512 ? 512 : isa == VectorIsa::Avx2 ? 256 : 128;
}
int vector_registers_of(VectorIsa isa) {
  return isa == VectorIsa::Avx512 || isa == VectorIsa::Neon ? 32 : 16;
}

// The features an ISA needs (those the kernels of that family execute).
std::vector<std::pair<const char*, bool CpuFeatures::*>> required_features(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Avx512:
      return {{"avx2", &CpuFeatures::avx2},         {"fma", &CpuFeatures::fma},
              {"avx512f", &CpuFeatures::avx512f},   {"avx512dq", &CpuFeatures::avx512dq},
              {"avx512bw", &CpuFeatures::avx512bw}, {"avx512vl", &CpuFeatures::avx512vl}};
    case VectorIsa::Avx2:
      return {{"avx2", &CpuFeatures::avx2}, {"fma", &CpuFeatures::fma}};
    case VectorIsa::Neon:
      return {{"neon", &CpuFeatures::neon}};
    case VectorIsa::Scalar:
      return {};
  }
  return {};
}

bool isa_is_x86(VectorIsa isa) {
  return isa == VectorIsa::Avx2 || isa == VectorIsa::Avx512;
}

int64_t parse_size(std::string_view key, std::string_view v) {
  int64_t n = 0;
  size_t i = 0;
  for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) {
    n = n * 10 + (v[i] - '0');
    KILN_CHECK(n <= (int64_t(1) << 40), kOp, key, ": expected a size up to 1T, got '", v, "'");
  }
  int64_t scale = 1;
  if (i + 1 == v.size() && (v[i] == 'K' || v[i] == 'k'))
    scale = K, ++i;
  else if (i + 1 == v.size() && (v[i] == 'M' || v[i] == 'm'))
    scale = M, ++i;
  KILN_CHECK(i == v.size() && i > 0 && n > 0, kOp, key,
             ": expected a positive size in bytes (suffix K or M allowed), got '", v, "'");
  const int64_t bytes = n * scale;
  KILN_CHECK(bytes >= 4 * K, kOp, key, ": expected at least 4K, got '", v, "'");
  return bytes;
}

std::string size_str(int64_t b) {
  if (b % M == 0) return std::to_string(b / M) + " MiB";
  if (b % K == 0) return std::to_string(b / K) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

const TargetDescription& host_target() {
  static const TargetDescription host = detect_host();
  return host;
}

std::vector<std::string> preset_target_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

TargetDescription preset_target(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    TargetDescription t;
    t.name = p.name;
    t.vendor = p.vendor;
    t.isa = p.isa;
    t.features = p.features();
    t.vector_bits = vector_bits_of(p.isa);
    t.vector_registers = vector_registers_of(p.isa);
    t.l1d_bytes = p.l1d, t.l2_bytes = p.l2, t.l3_bytes = p.l3;
    t.cpus = host_target().cpus;
    return t;
  }
  std::string known = "host";
  for (const Preset& p : kPresets) known += std::string(", ") + p.name;
  fail(kOp, "expected a CPU name (", known, "), got '", name, "'");
}

TargetDescription parse_target(std::string_view spec) {
  // The name may be left out ("l2=1M": the host, overridden).
  size_t comma = spec.find(',');
  std::string_view name = spec.substr(0, comma);
  std::string_view rest = comma == std::string_view::npos ? "" : spec.substr(comma + 1);
  if (name.find('=') != std::string_view::npos) name = "", rest = spec;
  TargetDescription t = name == "host" || name.empty() ? host_target() : preset_target(name);
  while (!rest.empty()) {
    const size_t next = rest.find(',');
    const std::string_view item = rest.substr(0, next);
    rest = next == std::string_view::npos ? "" : rest.substr(next + 1);
    const size_t eq = item.find('=');
    KILN_CHECK(eq != std::string_view::npos, kOp, "expected key=value after the CPU name, got '",
               item, "' in '", spec, "'");
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "l1d") {
      t.l1d_bytes = parse_size(key, value);
    } else if (key == "l2") {
      t.l2_bytes = parse_size(key, value);
    } else if (key == "l3") {
      t.l3_bytes = parse_size(key, value);
    } else if (key == "cpus") {
      int n = 0;
      bool digits = !value.empty() && value.size() <= 4;
      for (char c : value) digits = digits && c >= '0' && c <= '9', n = n * 10 + (c - '0');
      KILN_CHECK(digits && n >= 1 && n <= 4096, kOp, "cpus: expected 1..4096, got '", value, "'");
      t.cpus = n;
    } else if (key == "isa") {
      VectorIsa isa = VectorIsa::Scalar;
      if (value == "avx512")
        isa = VectorIsa::Avx512;
      else if (value == "avx2")
        isa = VectorIsa::Avx2;
      else if (value == "neon")
        isa = VectorIsa::Neon;
      else
        KILN_CHECK(value == "scalar", kOp, "isa: expected avx512, avx2, neon or scalar, got '",
                   value, "'");
      // Lowering the ISA keeps the extensions that still apply; raising it needs its features.
      t.isa = isa;
      for (const auto& [feature, member] : required_features(isa)) {
        (void)feature;
        t.features.*member = true;
      }
      t.vector_bits = vector_bits_of(isa);
      t.vector_registers = vector_registers_of(isa);
    } else {
      fail(kOp, "expected one of the keys isa, l1d, l2, l3, cpus, got '", key, "' in '", spec, "'");
    }
  }
  return t;
}

namespace {
const std::pair<const char*, bool CpuFeatures::*> kFeatureNames[] = {
    {"sse4.2", &CpuFeatures::sse4_2},
    {"avx", &CpuFeatures::avx},
    {"fma", &CpuFeatures::fma},
    {"f16c", &CpuFeatures::f16c},
    {"avx2", &CpuFeatures::avx2},
    {"avx512f", &CpuFeatures::avx512f},
    {"avx512dq", &CpuFeatures::avx512dq},
    {"avx512bw", &CpuFeatures::avx512bw},
    {"avx512vl", &CpuFeatures::avx512vl},
    {"avx512vnni", &CpuFeatures::avx512_vnni},
    {"avx512bf16", &CpuFeatures::avx512_bf16},
    {"avxvnni", &CpuFeatures::avx_vnni},
    {"amx-tile", &CpuFeatures::amx_tile},
    {"amx-int8", &CpuFeatures::amx_int8},
    {"amx-bf16", &CpuFeatures::amx_bf16},
    {"neon", &CpuFeatures::neon},
    {"dotprod", &CpuFeatures::dotprod},
    {"i8mm", &CpuFeatures::i8mm},
};
}  // namespace

bool has_feature(const TargetDescription& t, std::string_view llvm_name) {
  for (const auto& [name, member] : kFeatureNames)
    if (llvm_name == name) return t.features.*member;
  std::string known;
  for (const auto& [name, member] : kFeatureNames)
    known += (known.empty() ? "" : ", ") + std::string(name);
  fail("CPU feature", "unknown CPU feature \"", llvm_name, "\" (expected one of ", known, ")");
}

std::vector<std::string> missing_host_features(std::string_view list) {
  std::vector<std::string> missing;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view f = list.substr(0, comma);
    list = comma == std::string_view::npos ? "" : list.substr(comma + 1);
    if (!f.empty() && !has_feature(host_target(), f)) missing.emplace_back(f);
  }
  return missing;
}

std::vector<std::string> missing_features(const TargetDescription& t,
                                          const TargetDescription& host) {
  // An arm64 host has NEON (detection sets it); an x86 one never does.
  const bool host_arm = host.features.neon;
  if (t.isa == VectorIsa::Neon && !host_arm) return {"neon (an arm64 CPU)"};
  if (isa_is_x86(t.isa) && host_arm)
    return {std::string(vector_isa_name(t.isa)) + " (an x86-64 CPU)"};
  std::vector<std::string> missing;
  for (const auto& [feature, member] : required_features(t.isa))
    if (!(host.features.*member)) missing.emplace_back(feature);
  return missing;
}

// ---- The active description ----------------------------------------------------------------

namespace {

struct Active {
  TargetDescription target;
  TargetParams params;
};

std::atomic<const Active*> g_active{nullptr};
std::mutex g_active_mu;

// Every description made active stays allocated for the process: kernels hold references across
// a switch (packed weights keep their blocking). The list owns them (reachable, not leaked).
// Called with g_active_mu held.
const Active* make_active(const TargetDescription& t) {
  static auto* owned = new std::vector<std::unique_ptr<const Active>>();
  owned->push_back(std::make_unique<const Active>(Active{t, derive_target_params(t)}));
  return owned->back().get();
}

const Active* initial_active() {
  std::lock_guard<std::mutex> lock(g_active_mu);
  if (const Active* a = g_active.load(std::memory_order_acquire)) return a;
  TargetDescription t = host_target();
  if (const char* env = std::getenv("KILN_CPU"); env && *env) {
    try {
      TargetDescription asked = parse_target(env);
      const std::vector<std::string> missing = missing_features(asked, host_target());
      if (missing.empty()) {
        t = std::move(asked);
      } else {
        std::string list;
        for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
        std::fprintf(stderr, "kiln: KILN_CPU=%s needs %s, which this CPU lacks; using the host's\n",
                     env, list.c_str());
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "kiln: KILN_CPU=%s: %s; using the host's\n", env, e.what());
    }
  }
  const Active* a = make_active(t);
  g_active.store(a, std::memory_order_release);
  return a;
}

const Active& active() {
  const Active* a = g_active.load(std::memory_order_acquire);
  if (a == nullptr) [[unlikely]]
    a = initial_active();
  return *a;
}

}  // namespace

const TargetDescription& active_target() {
  return active().target;
}

const TargetParams& target_params() {
  return active().params;
}

void set_active_target(const TargetDescription& t) {
  const std::vector<std::string> missing = missing_features(t, host_target());
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail(kOp, "expected a description this CPU can run, got '", t.name, "' (",
         vector_isa_name(t.isa), ") needing ", list, ", which ",
         host_target().model.empty() ? "this CPU" : host_target().model, " lacks");
  }
  KILN_CHECK(t.cpus >= 1 && t.l1d_bytes > 0 && t.l2_bytes > 0 && t.l3_bytes > 0, kOp,
             "expected positive cache sizes and cpus, got l1d ", t.l1d_bytes, ", l2 ", t.l2_bytes,
             ", l3 ", t.l3_bytes, ", cpus ", t.cpus);
  std::lock_guard<std::mutex> lock(g_active_mu);
  g_active.store(make_active(t), std::memory_order_release);
}

std::string describe(const TargetDescription& t) {
  std::ostringstream os;
  os << "cpu: " << t.name;
  if (!t.model.empty() || !t.vendor.empty())
    os << " (" << (t.model.empty() ? t.vendor : t.model) << ")";
  os << "\nisa: " << vector_isa_name(t.isa) << ", " << t.vector_bits << "-bit vectors, "
     << t.vector_registers << " registers\nextensions:";
  const CpuFeatures& f = t.features;
  bool any = false;
  for (const auto& [name, member] : kFeatureNames)
    if (f.*member && std::string_view(name) != "sse4.2" && std::string_view(name) != "avx")
      os << ' ' << name, any = true;
  if (!any) os << " none";
  os << "\ncaches: L1d " << size_str(t.l1d_bytes) << ", L2 " << size_str(t.l2_bytes) << ", L3 "
     << size_str(t.l3_bytes) << "\ncpus: " << t.cpus << "\n";
  const TargetParams p = derive_target_params(t);
  auto gemm = [&](const char* name, const GemmBlocking& g) {
    os << "gemm " << name << ": kc " << g.kc << ", mc " << g.mc << ", nc " << g.nc;
    if (g.kc_packed_b) os << ", kc (packed B) " << g.kc_packed_b;
    os << "\n";
  };
  if (t.isa == VectorIsa::Avx512) gemm("avx512 12x32", p.gemm_avx512);
  if (t.isa == VectorIsa::Avx512 || t.isa == VectorIsa::Avx2) gemm("avx2 6x16", p.gemm_avx2);
  if (t.isa == VectorIsa::Neon) gemm("neon 8x12", p.gemm_neon);
  gemm("portable 4x16", p.gemm_portable);
  os << "L1 panel " << size_str(p.l1_panel_bytes) << ", L2 block " << size_str(p.l2_block_bytes)
     << "\nconv: im2col tile " << size_str(p.conv_tile_bytes) << ", Winograd V "
     << size_str(p.winograd_v_bytes) << " / M " << size_str(p.winograd_m_bytes) << ", mbconv band "
     << size_str(p.mbconv_band_bytes) << ", depthwise band " << size_str(p.depthwise_band_bytes)
     << "\nmbconv fused: banded from " << size_str(p.mbconv_banded_min_bytes)
     << " (no expansion: " << size_str(p.mbconv_no_expand_min_bytes) << "), whole images up to "
     << size_str(p.mbconv_whole_image_bytes) << "\nelementwise: non-temporal stores from "
     << size_str(p.stream_store_bytes) << "\n";
  return os.str();
}

}  // namespace kiln::rt
