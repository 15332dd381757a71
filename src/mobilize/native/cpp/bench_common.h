// What both native benchmarks share: speed_benchmark_torch's flags, the timed loop, its lines,
// and the machine-readable "#mobilize" lines that mobilize parses (everything else is for people).
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor_file.h"

namespace mobilize {

// A bad flag or input choice (exit code 2); anything else that fails is exit code 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// gflags-style command line: --name=value, --name value, or --name for a boolean.
class Flags {
 public:
  Flags(int argc, char** argv, const std::map<std::string, std::string>& defaults,
        const std::vector<std::string>& booleans)
      : values_(defaults) {
    for (const auto& b : booleans) booleans_[b] = true;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "' (flags start with --)");
      std::string name = arg.substr(2), value;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (booleans_.count(name)) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        throw UsageError("flag --" + name + " needs a value");
      }
      if (!values_.count(name)) throw UsageError("unknown flag --" + name + usage());
      values_[name] = value;
    }
  }

  std::string str(const std::string& name) const { return values_.at(name); }
  int64_t integer(const std::string& name) const {
    const std::string& v = values_.at(name);
    char* end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end) throw UsageError("--" + name + " needs an integer, got '" + v + "'");
    return n;
  }
  bool boolean(const std::string& name) const {
    const std::string& v = values_.at(name);
    return v == "true" || v == "1" || v == "True";
  }

 private:
  std::string usage() const {
    std::string s = " (known:";
    for (const auto& kv : values_) s += " --" + kv.first;
    return s + ")";
  }
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> booleans_;
};

// speed_benchmark_torch's flags, plus mobilize's file options.
inline std::map<std::string, std::string> common_flag_defaults() {
  return {{"model", ""},         {"input_dims", ""},       {"input_type", "float"},
          {"input_memory_format", "contiguous_format"},    {"no_inputs", "false"},
          {"use_bundled_input", "-1"},                     {"print_output", "false"},
          {"warmup", "10"},      {"iter", "100"},          {"report_pep", "false"},
          {"pthreadpool_size", "0"},                       {"use_caching_allocator", "false"},
          {"input_file", ""},    {"output_file", ""}};
}
inline std::vector<std::string> common_booleans() {
  return {"no_inputs", "print_output", "report_pep", "use_caching_allocator"};
}

inline std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) parts.push_back(item);
  return parts;
}

// --input_dims "1,3,224,224;1,10" with --input_type "float;int64"
struct InputSpec {
  std::vector<int64_t> sizes;
  int32_t dtype = 6;
};
inline std::vector<InputSpec> parse_input_dims(const std::string& dims, const std::string& types) {
  std::vector<InputSpec> specs;
  std::vector<std::string> groups = split(dims, ';'), names = split(types, ';');
  if (names.size() == 1 && groups.size() > 1) names.assign(groups.size(), names[0]);
  if (names.size() != groups.size()) throw UsageError("--input_type needs one type per --input_dims group");
  for (size_t i = 0; i < groups.size(); ++i) {
    InputSpec spec;
    for (const auto& d : split(groups[i], ',')) spec.sizes.push_back(std::stoll(d));
    spec.dtype = dtype_code(names[i]);
    specs.push_back(spec);
  }
  return specs;
}

// A tensor of ones, as speed_benchmark_torch makes for --input_dims (mobilize passes --input_file
// with the seeded inputs its Python harness would use, so the two runners see the same numbers).
inline RawTensor ones(const InputSpec& spec) {
  RawTensor t;
  t.dtype = spec.dtype;
  t.sizes = spec.sizes;
  size_t elem = element_size(spec.dtype);
  t.data.assign(static_cast<size_t>(t.numel()) * elem, 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint8_t* p = t.data.data() + i * elem;
    switch (spec.dtype) {
      case 6: { float v = 1.0f; std::memcpy(p, &v, 4); break; }
      case 7: { double v = 1.0; std::memcpy(p, &v, 8); break; }
      case 5: { uint16_t v = 0x3c00; std::memcpy(p, &v, 2); break; }
      case 15: { uint16_t v = 0x3f80; std::memcpy(p, &v, 2); break; }
      case 4: { int64_t v = 1; std::memcpy(p, &v, 8); break; }
      case 3: { int32_t v = 1; std::memcpy(p, &v, 4); break; }
      case 2: { int16_t v = 1; std::memcpy(p, &v, 2); break; }
      default: *p = 1;
    }
  }
  return t;
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Peak resident memory of this program.  Linux: VmHWM, because getrusage's ru_maxrss survives exec
// and would count the Python process that forked this one.
inline long peak_rss_kb() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status) {
    char line[256];
    long kb = -1;
    while (std::fgets(line, sizeof line, status))
      if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    std::fclose(status);
    if (kb >= 0) return kb;
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
#ifdef __APPLE__
  return usage.ru_maxrss / 1024;  // bytes on macOS
#else
  return usage.ru_maxrss;
#endif
}

inline long minor_faults() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

struct LoopTimes {
  std::vector<int64_t> ns;
  int64_t loop_ns = 0;
  long minor_faults = 0;  // page faults during the timed loop (memory the allocator gave back and took again)
};

// N individually timed runs; the loop's wall time is speed_benchmark_torch's figure.
template <typename Fn>
LoopTimes timed_loop(Fn&& fn, int64_t iterations) {
  LoopTimes t;
  t.ns.resize(static_cast<size_t>(iterations));
  long faults = minor_faults();
  int64_t start = now_ns();
  for (int64_t i = 0; i < iterations; ++i) {
    int64_t t0 = now_ns();
    fn();
    t.ns[static_cast<size_t>(i)] = now_ns() - t0;
  }
  t.loop_ns = now_ns() - start;
  t.minor_faults = minor_faults() - faults;
  return t;
}

// The original lines, then the "#mobilize" lines mobilize computes its statistics from.
inline void report(const LoopTimes& t, bool report_pep, int64_t load_ns, int64_t first_run_ns, int threads) {
  double us_per_iter = static_cast<double>(t.loop_ns) / 1e3 / static_cast<double>(t.ns.size());
  std::printf("Main run finished. Microseconds per iter: %.3f. Iters per second: %.3f\n", us_per_iter,
              1e6 / us_per_iter);
  if (report_pep) {
    for (int64_t ns : t.ns)
      std::printf("PyTorchObserver {\"type\": \"NET\", \"unit\": \"us\", \"metric\": \"latency\", \"value\": \"%.3f\"}\n",
                  static_cast<double>(ns) / 1e3);
  }
  std::printf("#mobilize load_ns=%lld first_run_ns=%lld loop_ns=%lld loop_minor_faults=%ld peak_rss_kb=%ld threads=%d\n",
              static_cast<long long>(load_ns), static_cast<long long>(first_run_ns),
              static_cast<long long>(t.loop_ns), t.minor_faults, peak_rss_kb(), threads);
  std::printf("#mobilize times_ns");
  for (int64_t ns : t.ns) std::printf(" %lld", static_cast<long long>(ns));
  std::printf("\n");
  std::fflush(stdout);
}

inline void report_input(size_t index, const RawTensor& t) {
  std::string dims;
  for (size_t d = 0; d < t.sizes.size(); ++d) dims += (d ? "," : "") + std::to_string(t.sizes[d]);
  std::printf("#mobilize input %zu shape=%s dtype=%s\n", index, dims.c_str(), dtype_name(t.dtype));
}

inline void print_tensor(size_t index, const RawTensor& t) {
  std::string dims;
  for (size_t d = 0; d < t.sizes.size(); ++d) dims += (d ? "," : "") + std::to_string(t.sizes[d]);
  std::printf("Output %zu: shape [%s] %s\n", index, dims.c_str(), dtype_name(t.dtype));
  std::vector<double> v = as_doubles(t);
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.6g", i % 8 ? " " : (i ? "\n  " : "  "), v[i]);
  std::printf("\n");
}

// The speed benchmark both runners share (speed_benchmark_torch's and executor_runner's order): one first run,
// timed and its outputs copied at once by `keep` (ExecuTorch's later runs overwrite its planned buffers), --warmup
// untimed runs, --iter timed runs, the report; then --print_output / --output_file from the first run's outputs.
template <typename Run, typename Keep>
void speed_benchmark(Run&& run, Keep&& keep, const Flags& flags, int64_t load_ns, int threads) {
  std::printf("Starting benchmark.\n");
  int64_t f0 = now_ns();
  auto output = run();
  int64_t first_run_ns = now_ns() - f0;
  std::vector<RawTensor> first = keep(output);
  std::printf("Running warmup runs.\n");
  std::fflush(stdout);
  for (int64_t i = 0; i < flags.integer("warmup"); ++i) run();
  std::printf("Main runs.\n");
  std::fflush(stdout);
  int64_t iterations = flags.integer("iter");
  if (iterations < 1) throw UsageError("--iter must be at least 1");
  LoopTimes times = timed_loop([&] { run(); }, iterations);
  report(times, flags.boolean("report_pep"), load_ns, first_run_ns, threads);
  if (flags.boolean("print_output"))
    for (size_t i = 0; i < first.size(); ++i) print_tensor(i, first[i]);
  if (!flags.str("output_file").empty()) write_tensor_file(flags.str("output_file"), first);
}

// main for both runners: `bench` runs the benchmark and returns the exit status; a UsageError exits 2, any other
// exception 1, each as one line "error: ..." on stderr (`message` words it: LibTorch's c10::Error without its backtrace).
template <typename Bench, typename Message>
int guarded_main(Bench&& bench, Message&& message) {
  try {
    return bench();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", message(e).c_str());
  }
  return 1;
}

}  // namespace mobilize
