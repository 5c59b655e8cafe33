// edge-runner --kernel: time one compiled kernel (a MetaSchedule candidate) on the device.
//
// Why in edge-runner: tuning for a Pi must time candidates with what the Pi runs (libtvm_runtime's
// thread pool, the device's CPU), and the device has no Python and no TVM RPC server; the runtime
// bundle already puts this binary there.
//
//   edge-runner --kernel cand.so [--func main] --args '[[[64, 64], "float32"], ...]'
//               [--warmup W] [--number K] [--repeat R] [--min-repeat-ms M] [--threads T] [--seed S]
//
// It loads the library (ffi::Module::LoadFromFile, as for model.so), allocates one CPU tensor per
// argument (64-byte aligned) filled with deterministic pseudo-random values (floats in [-1, 1),
// integers over their full width, bools 0/1; the same for a given --seed), calls the function
// max(W, 1) times untimed (the first call is reported as first_ms), then R repeats of K calls
// each, timed with steady_clock. With M > 0, K first grows (as in TVM's time_evaluator) until one
// repeat takes at least M ms. Prints ONE JSON line:
//   {"func", "args": [[shape, dtype]...], "warmup", "number", "repeat", "threads", "pool_threads",
//    "load_ms", "first_ms", "run_secs": [seconds per call, one per repeat], "median_secs", ...}
// Errors: one message on stderr, exit code 2 (usage: bad --args, bad numbers) or 1 (anything else:
// the library does not load, no such function, the call fails).
#pragma once

#include <dlpack/dlpack.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace edge_kernel {

namespace ffi = tvm::ffi;
using Clock = std::chrono::steady_clock;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ArgSpec {
  std::vector<int64_t> shape;
  std::string dtype_name;
  DLDataType dtype;
};

struct Options {
  std::string lib, func = "main", args_json;
  int warmup = 1, number = 3, repeat = 3, threads = 1;
  double min_repeat_ms = 0;
  uint64_t seed = 0;
  std::vector<ArgSpec> args;
};

// True when argv asks for the kernel mode (runner.cc hands over to Main then).
inline bool Requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--kernel") == 0) return true;
  return false;
}

// ---- --args: a JSON list of [shape, dtype] pairs (only arrays, integers and strings) ----------
class ArgsParser {
 public:
  explicit ArgsParser(const std::string& s) : s_(s) {}

  std::vector<ArgSpec> Parse() {
    std::vector<ArgSpec> out;
    Expect('[');
    if (Peek() == ']') Fail("the list is empty; give one [shape, dtype] per kernel argument");
    while (true) {
      out.push_back(Pair(out.size()));
      if (Peek() == ',') { ++i_; continue; }
      Expect(']');
      break;
    }
    if (Peek() != '\0') Fail("unexpected text after the list");
    return out;
  }

 private:
  ArgSpec Pair(size_t k) {
    ArgSpec a;
    Expect('[');
    Expect('[');
    if (Peek() != ']') {
      while (true) {
        a.shape.push_back(Int(k));
        if (Peek() == ',') { ++i_; continue; }
        break;
      }
    }
    Expect(']');
    Expect(',');
    a.dtype_name = Str();
    a.dtype = ParseDType(a.dtype_name, k);
    Expect(']');
    return a;
  }

  int64_t Int(size_t k) {
    Peek();
    size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-')) ++i_;
    std::string t = s_.substr(start, i_ - start);
    char* end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || v < 0 || v > (1LL << 40))
      Fail("argument " + std::to_string(k) + ": a shape holds integers >= 0, got '" + t + "'");
    return v;
  }

  std::string Str() {
    Expect('"');
    size_t end = s_.find('"', i_);
    if (end == std::string::npos) Fail("unterminated string");
    std::string v = s_.substr(i_, end - i_);
    i_ = end + 1;
    return v;
  }

  static DLDataType ParseDType(const std::string& name, size_t k) {
    auto bits_of = [&](const std::string& prefix) -> int {
      if (name.rfind(prefix, 0) != 0) return -1;
      std::string b = name.substr(prefix.size());
      return b == "8" ? 8 : b == "16" ? 16 : b == "32" ? 32 : b == "64" ? 64 : 0;
    };
    if (name == "bool") return DLDataType{kDLBool, 8, 1};
    int b;
    if ((b = bits_of("float")) >= 16) return DLDataType{kDLFloat, static_cast<uint8_t>(b), 1};
    if ((b = bits_of("uint")) > 0) return DLDataType{kDLUInt, static_cast<uint8_t>(b), 1};
    if ((b = bits_of("int")) > 0) return DLDataType{kDLInt, static_cast<uint8_t>(b), 1};
    throw UsageError("--args: argument " + std::to_string(k) + ": unsupported dtype '" + name +
                     "' (float16/32/64, int8..int64, uint8..uint64, bool)");
  }

  char Peek() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  void Expect(char c) {
    if (Peek() != c) Fail(std::string("expected '") + c + "' at offset " + std::to_string(i_));
    ++i_;
  }
  [[noreturn]] void Fail(const std::string& why) {
    throw UsageError("--args: " + why + " (want JSON like '[[[64, 64], \"float32\"], [[64], \"int8\"]]')");
  }

  const std::string& s_;
  size_t i_ = 0;
};

inline int ParseInt(const std::string& flag, const std::string& v, int lo) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > 100000000)
    throw UsageError(flag + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return static_cast<int>(x);
}

inline Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) throw UsageError(a + ": missing value (or unknown option)");
    std::string v = argv[++i];
    if (a == "--kernel") o.lib = v;
    else if (a == "--func") o.func = v;
    else if (a == "--args") o.args_json = v;
    else if (a == "--warmup") o.warmup = ParseInt(a, v, 0);
    else if (a == "--number") o.number = ParseInt(a, v, 1);
    else if (a == "--repeat") o.repeat = ParseInt(a, v, 1);
    else if (a == "--threads") o.threads = ParseInt(a, v, 1);
    else if (a == "--seed") o.seed = static_cast<uint64_t>(ParseInt(a, v, 0));
    else if (a == "--min-repeat-ms") {
      char* end = nullptr;
      o.min_repeat_ms = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.min_repeat_ms >= 0 && o.min_repeat_ms <= 1e6))
        throw UsageError(a + ": expected a number of ms >= 0, got '" + v + "'");
    } else {
      throw UsageError("unknown option '" + a + "' in --kernel mode (usage: edge-runner --kernel cand.so "
                       "[--func main] --args JSON [--warmup W] [--number K] [--repeat R] [--min-repeat-ms M] "
                       "[--threads T] [--seed S])");
    }
  }
  if (o.lib.empty() || o.func.empty()) throw UsageError("--kernel needs a library path and --func a name");
  if (o.args_json.empty()) throw UsageError("--kernel needs --args (one [shape, dtype] per kernel argument)");
  o.args = ArgsParser(o.args_json).Parse();
  return o;
}

// ---- tensors ------------------------------------------------------------------------------
struct AlignedAlloc {
  void AllocData(DLTensor* t) {
    size_t n = std::max<size_t>(ffi::GetDataSize(*t), 1);
    t->data = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (!t->data) throw std::runtime_error("out of memory for a kernel argument");
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

inline uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Deterministic values that cannot be NaN/Inf/denormal (which would change a float kernel's speed).
inline void Fill(ffi::Tensor& t, DLDataType dt, uint64_t& state) {
  size_t n = static_cast<size_t>(t.numel());
  char* p = static_cast<char*>(t.data_ptr());
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = SplitMix(state);
    double u = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;  // [-1, 1)
    if (dt.code == kDLFloat && dt.bits == 32) { float v = static_cast<float>(u); std::memcpy(p + 4 * i, &v, 4); }
    else if (dt.code == kDLFloat && dt.bits == 64) std::memcpy(p + 8 * i, &u, 8);
    else if (dt.code == kDLFloat && dt.bits == 16) {  // sign, exponent 14 ([0.5, 1)), random mantissa
      uint16_t h = static_cast<uint16_t>(((r >> 63) << 15) | (14u << 10) | (r & 0x3ff));
      std::memcpy(p + 2 * i, &h, 2);
    } else if (dt.code == kDLBool) p[i] = static_cast<char>(r & 1);
    else std::memcpy(p + (dt.bits / 8) * i, &r, dt.bits / 8);  // integers: full width, little-endian
  }
}

inline std::string ShapeJson(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

inline int Run(const Options& o) {
  setenv("TVM_NUM_THREADS", std::to_string(o.threads).c_str(), 1);  // before the pool starts
  if (!std::ifstream(o.lib)) throw std::runtime_error(o.lib + ": cannot open the kernel library: " + std::strerror(errno));
  // dlopen searches the library path for a name without '/': make a relative path explicit.
  std::string path = o.lib.find('/') == std::string::npos ? "./" + o.lib : o.lib;
  auto t0 = Clock::now();
  ffi::Module lib = ffi::Module::LoadFromFile(path);
  auto fn = lib->GetFunction(o.func);
  if (!fn) throw std::runtime_error(o.lib + ": no function '" + o.func + "' in the library");
  double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  uint64_t state = o.seed * 0x2545f4914f6cdd1dULL + 1;
  std::vector<ffi::Tensor> held;
  for (const ArgSpec& a : o.args) {
    ffi::Tensor t = ffi::Tensor::FromNDAlloc(AlignedAlloc(), ffi::Shape(a.shape), a.dtype, DLDevice{kDLCPU, 0});
    Fill(t, a.dtype, state);
    held.push_back(t);
  }
  std::vector<ffi::AnyView> args(held.begin(), held.end());
  ffi::Any rv;
  auto call = [&] { fn.value().CallPacked(args.data(), static_cast<int32_t>(args.size()), &rv); };
  auto secs_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };

  t0 = Clock::now();
  call();  // the first call (cold caches, thread pool start) is reported, never timed as a repeat
  double first_ms = secs_since(t0) * 1e3;
  for (int i = 1; i < o.warmup; ++i) call();
  int number = o.number;
  std::vector<double> run_secs;
  while (static_cast<int>(run_secs.size()) < o.repeat) {
    auto t = Clock::now();
    for (int i = 0; i < number; ++i) call();
    double s = secs_since(t);
    // Too short to trust: grow `number` (TVM's time_evaluator rule) and measure this repeat again.
    if (run_secs.empty() && s * 1e3 < o.min_repeat_ms && number < 100000000) {
      double per_call = std::max(s / number, 1e-9);
      number = static_cast<int>(std::min(1e8, std::max(o.min_repeat_ms / 1e3 / per_call + 1, number * 1.618)));
      continue;
    }
    run_secs.push_back(s / number);
  }
  std::vector<double> sorted = run_secs;
  std::sort(sorted.begin(), sorted.end());
  size_t m = sorted.size();
  double median = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  int64_t pool_threads = -1;
  if (auto nt = ffi::Function::GetGlobal("runtime.NumThreads")) pool_threads = (*nt)().cast<int64_t>();

  std::ostringstream js;
  js << "{\"func\": \"" << o.func << "\", \"args\": [";  // names are C identifiers: no escaping
  for (size_t i = 0; i < o.args.size(); ++i)
    js << (i ? ", " : "") << "[" << ShapeJson(o.args[i].shape) << ", \"" << o.args[i].dtype_name << "\"]";
  js << "], \"warmup\": " << o.warmup << ", \"number\": " << number << ", \"repeat\": " << o.repeat
     << ", \"threads\": " << o.threads << ", \"pool_threads\": " << pool_threads << ", \"seed\": " << o.seed;
  js.precision(6);
  js << std::fixed << ", \"load_ms\": " << load_ms << ", \"first_ms\": " << first_ms;
  js.precision(9);
  js << std::scientific << ", \"run_secs\": [";
  for (size_t i = 0; i < run_secs.size(); ++i) js << (i ? ", " : "") << run_secs[i];
  js << "], \"median_secs\": " << median << "}";
  std::cout << js.str() << std::endl;
  return 0;
}

// The whole kernel mode, errors included (exit 2 usage, 1 failure), so runner.cc only dispatches.
inline int Main(int argc, char** argv) {
  try {
    return Run(ParseArgs(argc, argv));
  } catch (const UsageError& e) {
    std::cerr << "edge-runner: " << e.what() << std::endl;
    return 2;
  } catch (const ffi::Error& e) {
    std::cerr << "edge-runner: TVM error: " << e.kind() << ": " << e.message() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "edge-runner: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace edge_kernel
