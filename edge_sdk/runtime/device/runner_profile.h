// edge-runner --profile: time every call the Relax VM makes (kernels and builtins).
//
// Why the instrument hook and not TVM's profiler: TVM 0.27 has no VirtualMachineProfiler any more
// (no "vm_profiler_load_executable", no "profile" function in libtvm_runtime), but every VM keeps
// "set_instrument": a packed function called before and after each Call instruction with
// (func, func_symbol, before_run, ret_value, args...). We timestamp around each call. Kernels are
// called synchronously and return when their parallel loop is done, so wall time per call is right.
//
// One kernel (PrimFunc) may serve several layers (same shapes), so times are kept per call site:
// (symbol, k) is the k-th call of that symbol within one inference, which the compiler records per
// layer in the manifest ("kernels": [{"name", "call"}]). Output (inside the runner's JSON line):
//   "profile": {"runs": R, "run_ms": [...], "median_run_ms": m,
//               "kernels": [{"kernel", "calls", "total_ms", "mean_ms"}],          per symbol
//               "sites": [{"kernel", "call", "calls", "total_ms", "mean_ms"}]}    per call site
// mean_ms is per call; builtins (vm.builtin.*) appear in "kernels" only.
#pragma once

#include <tvm/ffi/any.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace edge_profile {

using Clock = std::chrono::steady_clock;

struct Stat {
  std::string name;
  int call = -1;  // site index within one run; -1 for the per-symbol totals
  long count = 0;
  double total_ms = 0;
};

class CallTimer {
 public:
  // The packed function to hand to the VM's "set_instrument" (it shares ownership of the timer,
  // so the VM may keep it).
  static tvm::ffi::Function Hook(std::shared_ptr<CallTimer> self) {
    return tvm::ffi::Function::FromPacked([self](tvm::ffi::PackedArgs args, tvm::ffi::Any* rv) {
      std::string name = args[1].cast<tvm::ffi::String>();
      bool before = args[2].cast<bool>();
      auto& open = self->open_;
      if (before) {
        open.push_back({std::move(name), Clock::now()});
      } else if (!open.empty()) {
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - open.back().t0).count();
        self->Record(open.back().name, ms);
        open.pop_back();
      }
      *rv = 0;  // VMInstrumentReturnKind::kNoOp: run the call
    });
  }

  // Call before each inference: site indices count from 0 again.
  void StartRun() {
    seen_.clear();
    open_.clear();
  }

  std::string Json(const std::vector<double>& run_ms, double median_run_ms) const {
    std::ostringstream js;
    js.precision(6);
    js << std::fixed << "{\"runs\": " << run_ms.size() << ", \"run_ms\": [";
    for (size_t i = 0; i < run_ms.size(); ++i) js << (i ? ", " : "") << run_ms[i];
    js << "], \"median_run_ms\": " << median_run_ms << ", \"kernels\": [";
    for (size_t i = 0; i < totals_.size(); ++i) Entry(js << (i ? ", " : ""), totals_[i]);
    js << "], \"sites\": [";
    for (size_t i = 0; i < sites_.size(); ++i) Entry(js << (i ? ", " : ""), sites_[i]);
    js << "]}";
    return js.str();
  }

 private:
  struct Open {
    std::string name;
    Clock::time_point t0;
  };

  static void Entry(std::ostream& js, const Stat& s) {
    js << "{\"kernel\": \"" << s.name << "\"";  // symbols are C identifiers or dotted names: no escaping
    if (s.call >= 0) js << ", \"call\": " << s.call;
    js << ", \"calls\": " << s.count << ", \"total_ms\": " << s.total_ms
       << ", \"mean_ms\": " << (s.count ? s.total_ms / s.count : 0.0) << "}";
  }

  void Record(const std::string& name, double ms) {
    auto t = total_index_.find(name);
    if (t == total_index_.end()) {
      t = total_index_.emplace(name, totals_.size()).first;
      totals_.push_back({name, -1, 0, 0});
    }
    totals_[t->second].count += 1;
    totals_[t->second].total_ms += ms;
    if (name.rfind("vm.builtin.", 0) == 0) return;  // allocation, views, shape checks: no sites
    int k = seen_[name]++;
    auto key = std::make_pair(name, k);
    auto s = site_index_.find(key);
    if (s == site_index_.end()) {
      s = site_index_.emplace(key, sites_.size()).first;
      sites_.push_back({name, k, 0, 0});
    }
    sites_[s->second].count += 1;
    sites_[s->second].total_ms += ms;
  }

  std::vector<Open> open_;
  std::unordered_map<std::string, int> seen_;
  std::vector<Stat> totals_, sites_;
  std::unordered_map<std::string, size_t> total_index_;
  std::map<std::pair<std::string, int>, size_t> site_index_;
};

// `repeat` runs of `call` with the VM's instrument hook (set through `set_instrument`) timing every
// call; the hook stays set and keeps the timer alive. Returns the "profile" JSON object.
template <typename F>
std::string ProfileRuns(const tvm::ffi::Function& set_instrument, F& call, int repeat) {
  auto timer = std::make_shared<CallTimer>();
  set_instrument(CallTimer::Hook(timer));
  std::vector<double> run_ms;
  for (int i = 0; i < repeat; ++i) {
    timer->StartRun();
    auto t0 = Clock::now();
    call();
    run_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::vector<double> v = run_ms;
  std::sort(v.begin(), v.end());
  double median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return timer->Json(run_ms, median);
}

}  // namespace edge_profile
