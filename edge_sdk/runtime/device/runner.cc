// edge-runner: the minimal on-device runner for edge-sdk models.
//
// Why a C++ program: a Pi needs no Python to run a model. It links only libtvm_runtime.so and
// libtvm_ffi.so (from the apache-tvm wheels, in ../lib next to this binary) and loads a Relax VM
// executable exported with export_library plus a params file written by
// tvm.runtime.save_param_dict_to_file (keys "p0000", "p0001", ... in call order).
//
//   edge-runner --lib model.so --params params.bin --input in.npy [--output out.npy]
//               [--warmup W] [--repeat N] [--min-time-ms T] [--threads K]
//               [--expect golden_output.npy [--rtol R] [--atol A] [--segments N:A,...]] [--profile]
//
// At load, a VM with "infer_transform_params" (weights stored untransformed, see lower.py) gets
// them transformed once, and "infer" runs each inference in place of main (load_ms includes it).
// It calls main(input, params sorted by key...) once (first_ms), W more untimed times, then at
// least N timed times and until T ms have been spent, and prints ONE JSON line on stdout.
// With --expect, the output is compared with that .npy as numpy.allclose does
// (|out - want| <= atol + rtol * |want|, NaN never close); the JSON gains a "golden" entry, and a
// mismatch is reported on stderr with exit code 3. A model with several outputs returns them as one flat
// tensor (compiler/models outputs.py): --segments N1:A1,N2:A2,... checks its consecutive slices of N1,
// N2 ... values each with its own atol (the manifest's outputs[i].atol, relative to that output's range),
// and the "golden" entry gains "segments": [{"mismatches", "max_abs_err"}, ...]. Deploy runs a package's golden check this way on
// the device, which then needs no Python.
// With --profile, N more runs follow with every VM call timed (runner_profile.h); the JSON gains
// a "profile" entry. The plain latencies above are measured without the hook.
// Errors: one message on stderr, exit code 2 (usage), 3 (golden mismatch) or 1 (anything else).
// `edge-runner --kernel cand.so --args ...` times one kernel instead (tuning; runner_kernel.h).
#include <dlpack/dlpack.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include "runner_kernel.h"
#include "runner_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// The wheel versions, passed by bundle.py (the headers' own macros lag the post releases).
#ifndef EDGE_TVM_VERSION
#define EDGE_TVM_VERSION "unknown"
#endif
#ifndef EDGE_TVM_FFI_VERSION
#define EDGE_TVM_FFI_VERSION "unknown"
#endif

namespace {

namespace ffi = tvm::ffi;
using Clock = std::chrono::steady_clock;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Segment {
  size_t size;
  double atol;
};

struct Options {
  std::string lib, params, input, output, expect;
  std::vector<Segment> segments;  // --segments: per-output atol over consecutive slices of the flat output
  int warmup = 1, repeat = 10, threads = 1;
  bool profile = false;
  double min_time_ms = 0, rtol = 1e-5, atol = 1e-8;  // numpy.allclose defaults
};

double ParseNonNegative(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= 0))
    throw UsageError(flag + ": expected a number >= 0, got '" + v + "'");
  return x;
}

int ParseInt(const std::string& flag, const std::string& v, int lo) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > 1000000)
    throw UsageError(flag + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return static_cast<int>(x);
}

std::vector<Segment> ParseSegments(const std::string& flag, const std::string& v) {
  std::vector<Segment> out;
  std::stringstream items(v);
  std::string item;
  while (std::getline(items, item, ',')) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) throw UsageError(flag + ": expected N:ATOL,N:ATOL,..., got '" + v + "'");
    std::string n = item.substr(0, colon);
    char* end = nullptr;
    unsigned long long size = std::strtoull(n.c_str(), &end, 10);
    if (n.empty() || *end != '\0' || size < 1 || n[0] == '-')
      throw UsageError(flag + ": expected a slice size >= 1, got '" + n + "'");
    out.push_back({static_cast<size_t>(size), ParseNonNegative(flag, item.substr(colon + 1))});
  }
  if (out.empty()) throw UsageError(flag + ": expected N:ATOL,N:ATOL,..., got '" + v + "'");
  return out;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help")
      throw UsageError(
          "usage: edge-runner --lib model.so --params params.bin --input in.npy [--output out.npy]"
          " [--warmup W] [--repeat N] [--min-time-ms T] [--threads K]"
          " [--expect golden.npy [--rtol R] [--atol A] [--segments N:A,...]] [--profile]");
    if (a == "--profile") {
      o.profile = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(a + ": missing value (or unknown option)");
    std::string v = argv[++i];
    if (a == "--lib") o.lib = v;
    else if (a == "--params") o.params = v;
    else if (a == "--input") o.input = v;
    else if (a == "--output") o.output = v;
    else if (a == "--expect") o.expect = v;
    else if (a == "--rtol") o.rtol = ParseNonNegative(a, v);
    else if (a == "--atol") o.atol = ParseNonNegative(a, v);
    else if (a == "--segments") o.segments = ParseSegments(a, v);
    else if (a == "--warmup") o.warmup = ParseInt(a, v, 0);
    else if (a == "--repeat") o.repeat = ParseInt(a, v, 1);
    else if (a == "--threads") o.threads = ParseInt(a, v, 1);
    else if (a == "--min-time-ms") o.min_time_ms = ParseNonNegative(a, v);
    else {
      throw UsageError("unknown option '" + a + "'");
    }
  }
  if (o.lib.empty() || o.params.empty() || o.input.empty())
    throw UsageError("--lib, --params and --input are required");
  return o;
}

// ---- .npy ----------------------------------------------------------------------------------
struct Npy {
  std::vector<int64_t> shape;
  DLDataType dtype;
  std::string data;
};

std::string HeaderValue(const std::string& header, const std::string& key, const std::string& path) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw Failure(path + ": .npy header has no '" + key + "'");
  size_t colon = header.find(':', k);
  size_t start = header.find_first_not_of(" ", colon + 1);
  size_t end = header[start] == '(' ? header.find(')', start) + 1
             : header[start] == '\'' ? header.find('\'', start + 1) + 1
                                     : header.find_first_of(",}", start);
  return header.substr(start, end - start);
}

// Input tensors are float32, int8 or uint8; an --expect file may also hold float64, int16/32/64, uint16.
Npy ReadNpy(const std::string& path, bool any_numeric = false) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Failure(path + ": cannot open input file: " + std::strerror(errno));
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0)
    throw Failure(path + ": not a .npy file (bad magic)");
  int major = static_cast<unsigned char>(all[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(all[8]) | (static_cast<unsigned char>(all[9]) << 8);
    hstart = 10;
  } else {
    if (all.size() < 12) throw Failure(path + ": truncated .npy header");
    hlen = 0;
    for (int b = 3; b >= 0; --b) hlen = (hlen << 8) | static_cast<unsigned char>(all[8 + b]);
    hstart = 12;
  }
  if (hstart + hlen > all.size()) throw Failure(path + ": truncated .npy header");
  std::string header = all.substr(hstart, hlen);
  std::string descr = HeaderValue(header, "descr", path);
  std::string order = HeaderValue(header, "fortran_order", path);
  std::string shape = HeaderValue(header, "shape", path);
  Npy n;
  if (descr == "'<f4'") n.dtype = DLDataType{kDLFloat, 32, 1};
  else if (descr == "'|i1'" || descr == "'<i1'") n.dtype = DLDataType{kDLInt, 8, 1};
  else if (descr == "'|u1'" || descr == "'<u1'") n.dtype = DLDataType{kDLUInt, 8, 1};
  else if (any_numeric && descr == "'<f8'") n.dtype = DLDataType{kDLFloat, 64, 1};
  else if (any_numeric && descr == "'<i2'") n.dtype = DLDataType{kDLInt, 16, 1};
  else if (any_numeric && descr == "'<i4'") n.dtype = DLDataType{kDLInt, 32, 1};
  else if (any_numeric && descr == "'<i8'") n.dtype = DLDataType{kDLInt, 64, 1};
  else if (any_numeric && descr == "'<u2'") n.dtype = DLDataType{kDLUInt, 16, 1};
  else
    throw Failure(path + ": unsupported input dtype " + descr +
                  " (the runner reads float32 '<f4', int8 '|i1' or uint8 '|u1')");
  if (order != "False") throw Failure(path + ": Fortran-order arrays are not supported; save a C-order array");
  std::string dims = shape.substr(1, shape.size() - 2);
  std::stringstream ss(dims);
  std::string item;
  int64_t count = 1;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    n.shape.push_back(std::stoll(item));
    count *= n.shape.back();
  }
  size_t nbytes = static_cast<size_t>(count) * (n.dtype.bits / 8);
  if (all.size() - hstart - hlen != nbytes)
    throw Failure(path + ": data size " + std::to_string(all.size() - hstart - hlen) +
                  " bytes does not match shape " + shape + " (" + std::to_string(nbytes) + " bytes)");
  n.data = all.substr(hstart + hlen);
  return n;
}

std::string NpyDescr(DLDataType t) {
  char kind = t.code == kDLFloat ? 'f' : t.code == kDLInt ? 'i' : t.code == kDLUInt ? 'u'
            : t.code == kDLBool ? 'b' : '?';
  if (kind == '?' || t.lanes != 1) throw Failure("output dtype is not representable in .npy");
  int bytes = (t.bits + 7) / 8;
  return std::string(bytes == 1 ? "|" : "<") + kind + std::to_string(bytes);
}

std::string ShapeStr(const std::vector<int64_t>& s, bool py) {
  std::string r = py ? "(" : "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  if (py && s.size() == 1) r += ",";
  return r + (py ? ")" : "]");
}

void WriteNpy(const std::string& path, DLDataType dt, const std::vector<int64_t>& shape,
              const std::string& bytes) {
  std::string header = "{'descr': '" + NpyDescr(dt) + "', 'fortran_order': False, 'shape': " +
                       ShapeStr(shape, true) + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw Failure(path + ": cannot write output: " + std::strerror(errno));
    f.write("\x93NUMPY\x01\x00", 8);
    char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    f.write(len, 2);
    f << header;
    f.write(bytes.data(), bytes.size());
    if (!f) throw Failure(path + ": short write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Failure(path + ": cannot rename output: " + std::strerror(errno));
}

std::string DTypeName(DLDataType t) {
  std::string base = t.code == kDLFloat ? "float" : t.code == kDLInt ? "int"
                   : t.code == kDLUInt ? "uint" : t.code == kDLBool ? "bool" : "unknown";
  return t.code == kDLBool ? base : base + std::to_string(t.bits);
}

// ---- golden check ---------------------------------------------------------------------------
std::vector<double> AsDoubles(const char* p, DLDataType t, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const char* q = p + i * (t.bits / 8);
    if (t.code == kDLFloat && t.bits == 32) { float v; std::memcpy(&v, q, 4); out[i] = v; }
    else if (t.code == kDLFloat && t.bits == 64) { double v; std::memcpy(&v, q, 8); out[i] = v; }
    else if (t.code == kDLInt && t.bits == 8) out[i] = static_cast<int8_t>(*q);
    else if (t.code == kDLInt && t.bits == 16) { int16_t v; std::memcpy(&v, q, 2); out[i] = v; }
    else if (t.code == kDLInt && t.bits == 32) { int32_t v; std::memcpy(&v, q, 4); out[i] = v; }
    else if (t.code == kDLInt && t.bits == 64) { int64_t v; std::memcpy(&v, q, 8); out[i] = static_cast<double>(v); }
    else if (t.code == kDLUInt && t.bits == 8) out[i] = static_cast<uint8_t>(*q);
    else if (t.code == kDLUInt && t.bits == 16) { uint16_t v; std::memcpy(&v, q, 2); out[i] = v; }
    else throw Failure("cannot compare outputs of dtype " + std::to_string(t.code) + ":" + std::to_string(t.bits));
  }
  return out;
}

struct Golden {
  bool ok = true;
  double max_abs_err = 0;
  size_t mismatches = 0, count = 0;
  std::vector<std::pair<size_t, double>> segments;  // (mismatches, max abs err) per --segments slice
};

Golden CompareGolden(const Options& o, const std::vector<int64_t>& shape, DLDataType dt, const char* data) {
  Npy want = ReadNpy(o.expect, true);
  if (want.shape != shape)
    throw Mismatch("golden check FAILED: output shape " + ShapeStr(shape, false) + " differs from " + o.expect +
                   " shape " + ShapeStr(want.shape, false));
  Golden g;
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  g.count = n;
  std::vector<double> got = AsDoubles(data, dt, n), ref = AsDoubles(want.data.data(), want.dtype, n);
  std::vector<Segment> segs = o.segments.empty() ? std::vector<Segment>{{n, o.atol}} : o.segments;
  size_t total = 0;
  for (const Segment& s : segs) total += s.size;
  if (total != n)
    throw UsageError("--segments: the slices hold " + std::to_string(total) + " values, the output " +
                     std::to_string(n));
  size_t i = 0;
  for (const Segment& s : segs) {
    size_t bad = 0;
    double worst = 0;
    for (size_t end = i + s.size; i < end; ++i) {
      double err = std::fabs(got[i] - ref[i]);
      if (!(err <= s.atol + o.rtol * std::fabs(ref[i]))) ++bad;  // false for NaN
      if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
    }
    g.mismatches += bad;
    g.max_abs_err = std::max(g.max_abs_err, worst);
    g.segments.emplace_back(bad, worst);
  }
  g.ok = g.mismatches == 0;
  return g;
}

// ---- model --------------------------------------------------------------------------------
// Host memory for the input tensor, aligned as TVM's kernels assume (kAllocAlignment = 64).
struct CPUAlloc {
  void AllocData(DLTensor* t) {
    size_t n = std::max<size_t>(ffi::GetDataSize(*t), 1);
    t->data = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (!t->data) throw Failure("out of memory for the input tensor");
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size();
  return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

ffi::Tensor AsTensor(const ffi::Any& rv) {
  if (auto t = rv.as<ffi::Tensor>()) return *t;
  if (auto arr = rv.as<ffi::Array<ffi::Any>>()) {
    if (arr->size() == 1) return AsTensor((*arr)[0]);
    throw Failure("main returned " + std::to_string(arr->size()) + " outputs; the runner expects one tensor");
  }
  throw Failure("main returned a " + rv.GetTypeKey() + ", not a tensor");
}

int Run(const Options& o) {
  // The thread pool reads TVM_NUM_THREADS when it is first created (at the first parallel
  // kernel), so it must be set before anything runs.
  setenv("TVM_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
  // The pool's default (kBig, 0 threads) uses only the cores of the highest max frequency that
  // sysfs lists: under qemu-user that is the host's (2 here), so --threads 4 ran 2 workers. Ask for
  // o.threads workers on the big cores: on a Pi 3 (4 equal cores) the same as the default.
  if (auto cfg = ffi::Function::GetGlobal("runtime.config_threadpool")) (*cfg)(1, o.threads);
  Npy in = ReadNpy(o.input);

  auto t0 = Clock::now();
  ffi::Module lib = ffi::Module::LoadFromFile(o.lib);
  auto load_exec = lib->GetFunction("vm_load_executable");
  if (!load_exec) throw Failure(o.lib + ": not a Relax VM executable (no vm_load_executable)");
  ffi::Module vm = (*load_exec)().cast<ffi::Module>();
  auto init = vm->GetFunction("vm_initialization");
  if (!init) throw Failure(o.lib + ": VM has no vm_initialization");
  (*init)(static_cast<int>(kDLCPU), 0, 2);  // CPU device 0, pooled allocator
  auto load_params = ffi::Function::GetGlobal("runtime.LoadParamsFromFile");
  if (!load_params) throw Failure("libtvm_runtime has no runtime.LoadParamsFromFile");
  auto params = (*load_params)(ffi::String(o.params)).cast<ffi::Map<ffi::String, ffi::Tensor>>();
  auto main_fn = vm->GetFunction("main");
  if (!main_fn) throw Failure(o.lib + ": VM has no function 'main'");
  std::vector<std::string> keys;
  for (const auto& kv : params) keys.push_back(std::string(kv.first));
  std::sort(keys.begin(), keys.end());
  ffi::Shape xshape(in.shape);
  ffi::Tensor x = ffi::Tensor::FromNDAlloc(CPUAlloc(), xshape, in.dtype, DLDevice{kDLCPU, 0});
  std::memcpy(x.data_ptr(), in.data.data(), in.data.size());
  std::vector<ffi::Tensor> held{x};
  // Weights stored as they are and transformed once here (lower.split_load_transforms): then
  // infer(x, *infer_transform_params(stored)) is what each inference runs; else main(x, *stored).
  ffi::Function run_fn = main_fn.value();
  auto transform_fn = vm->GetFunction("infer_transform_params");
  auto infer_fn = vm->GetFunction("infer");
  if (transform_fn && infer_fn) {
    ffi::Array<ffi::Tensor> stored;
    for (const auto& k : keys) stored.push_back(params[k]);
    auto ready = (*transform_fn)(stored).cast<ffi::Array<ffi::Tensor>>();
    for (const auto& t : ready) held.push_back(t);
    run_fn = infer_fn.value();
  } else {
    for (const auto& k : keys) held.push_back(params[k]);
  }
  double load_ms = MsSince(t0);
  std::vector<ffi::AnyView> args(held.begin(), held.end());

  ffi::Any rv;
  auto call = [&] { run_fn.CallPacked(args.data(), static_cast<int32_t>(args.size()), &rv); };
  t0 = Clock::now();
  call();
  double first_ms = MsSince(t0);
  for (int i = 0; i < o.warmup; ++i) call();
  std::vector<double> lat;
  auto start = Clock::now();
  while (static_cast<int>(lat.size()) < o.repeat || (MsSince(start) < o.min_time_ms && lat.size() < 100000)) {
    auto t = Clock::now();
    call();
    lat.push_back(MsSince(t));
  }
  double median = Median(lat);
  std::string profile_json;
  if (o.profile) {
    auto set_instrument = vm->GetFunction("set_instrument");
    if (!set_instrument) throw Failure("this libtvm_runtime's VM has no set_instrument: cannot --profile");
    profile_json = edge_profile::ProfileRuns(*set_instrument, call, o.repeat);
  }

  // What the runtime's pool actually uses (it read TVM_NUM_THREADS when it started).
  int64_t pool_threads = -1;
  if (auto nt = ffi::Function::GetGlobal("runtime.NumThreads")) pool_threads = (*nt)().cast<int64_t>();
  ffi::Tensor out = AsTensor(rv);
  std::vector<int64_t> oshape(out.shape().begin(), out.shape().end());
  DLDataType odt = out.dtype();
  if (out.device().device_type != kDLCPU || !out.IsContiguous())
    throw Failure("output is not a contiguous CPU tensor");
  const char* p = static_cast<const char*>(out.data_ptr()) + out.byte_offset();
  if (!o.output.empty())
    WriteNpy(o.output, odt, oshape, std::string(p, ffi::GetDataSize(static_cast<size_t>(out.numel()), odt)));
  Golden golden;
  if (!o.expect.empty()) golden = CompareGolden(o, oshape, odt, p);

  std::ostringstream js;
  js.precision(6);
  js << std::fixed << "{\"load_ms\": " << load_ms << ", \"first_ms\": " << first_ms
     << ", \"latencies_ms\": [";
  for (size_t i = 0; i < lat.size(); ++i) js << (i ? ", " : "") << lat[i];
  js << "], \"median_ms\": " << median << ", \"threads\": " << o.threads << ", \"pool_threads\": " << pool_threads
     << ", \"warmup\": " << o.warmup << ", \"num_params\": " << keys.size()
     << ", \"output_shape\": " << ShapeStr(oshape, false) << ", \"output_dtype\": \""
     << DTypeName(odt) << "\", \"tvm_version\": \"" << EDGE_TVM_VERSION
     << "\", \"tvm_ffi_version\": \"" << EDGE_TVM_FFI_VERSION << "\"";
  if (!o.expect.empty()) {
    js.precision(9);
    js << std::scientific << ", \"golden\": {\"ok\": " << (golden.ok ? "true" : "false") << ", \"max_abs_err\": ";
    if (std::isfinite(golden.max_abs_err)) js << golden.max_abs_err; else js << "null";
    js << ", \"mismatches\": " << golden.mismatches << ", \"count\": " << golden.count << ", \"rtol\": " << o.rtol
       << ", \"atol\": " << o.atol;
    if (!o.segments.empty()) {
      js << ", \"segments\": [";
      for (size_t k = 0; k < golden.segments.size(); ++k) {
        js << (k ? ", " : "") << "{\"mismatches\": " << golden.segments[k].first << ", \"atol\": "
           << o.segments[k].atol << ", \"max_abs_err\": ";
        if (std::isfinite(golden.segments[k].second)) js << golden.segments[k].second; else js << "null";
        js << "}";
      }
      js << "]";
    }
    js << "}";
  }
  if (!profile_json.empty()) js << ", \"profile\": " << profile_json;
  js << "}";
  std::cout << js.str() << std::endl;
  if (!golden.ok) {
    std::ostringstream msg;
    msg.precision(3);
    msg << "golden check FAILED: " << golden.mismatches << " of " << golden.count << " output values differ from "
        << o.expect << " by more than atol=" << o.atol << " + rtol=" << o.rtol << " * |expected| (max abs err "
        << golden.max_abs_err << ")";
    throw Mismatch(msg.str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (edge_kernel::Requested(argc, argv)) return edge_kernel::Main(argc, argv);
  try {
    return Run(ParseArgs(argc, argv));
  } catch (const UsageError& e) {
    std::cerr << "edge-runner: " << e.what() << std::endl;
    return 2;
  } catch (const Mismatch& e) {
    std::cerr << "edge-runner: " << e.what() << std::endl;
    return 3;
  } catch (const ffi::Error& e) {
    std::cerr << "edge-runner: TVM error: " << e.kind() << ": " << e.message() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "edge-runner: " << e.what() << std::endl;
    return 1;
  }
}
