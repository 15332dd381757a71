// speed_benchmark_torch for the ExecuTorch runtime from the installed wheel (XNNPACK delegate,
// optimized and quantized kernels, threadpool): a .pte, or the program inside a .bpte with its
// bundled inputs, loaded and timed from C++ with no Python in the process.
//
//   bench_executorch --model m.pte --input_dims 1,3,224,224 --iter 200 --pthreadpool_size 1
//   Starting benchmark.
//   Running warmup runs.
//   Main runs.
//   Main run finished. Microseconds per iter: 812.405. Iters per second: 1230.913
//   #mobilize load_ns=... first_run_ns=... loop_ns=... peak_rss_kb=... threads=1
//   #mobilize times_ns 811234 809876 ...
//
// --describe_inputs prints what the program declares ("#mobilize declared ...") and exits.
// --frame_config "key=value ..." --frame_file F: camera frames (F holds one or more back to back) are
// converted into the input buffer (camera_convert.h), run and answered (top-5) per iteration, and each
// stage is timed ("#mobilize stage_ns convert|infer|answer ...").
#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bpte.h"
#include "frame_loop.h"

// The wheel ships libexecutorch_threadpool.so but not its header: its two entry points used here.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace et = executorch::runtime;
using executorch::extension::module::Module;
using mobilize::RawTensor;

namespace {

template <typename T>
T check(et::Result<T> result, const std::string& what) {
  if (!result.ok())
    throw std::runtime_error(what + " failed: ExecuTorch error " + et::to_string(result.error()));
  return std::move(result.get());
}

void check(et::Error error, const std::string& what) {
  if (error != et::Error::Ok) throw std::runtime_error(what + " failed: ExecuTorch error " + et::to_string(error));
}

// Inputs in the dim order the program declares (ExecuTorch does not convert: an NCHW buffer
// handed to a channels-last program gives wrong numbers silently).
struct Inputs {
  std::vector<std::shared_ptr<std::vector<uint8_t>>> storage;
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<et::EValue> values;
};

Inputs make_inputs(const std::vector<RawTensor>& raws, const et::MethodMeta& meta) {
  Inputs in;
  for (size_t i = 0; i < raws.size(); ++i) {
    const RawTensor& raw = raws[i];
    if (raw.scalar) {
      if (raw.dtype == 4) { int64_t v; std::memcpy(&v, raw.data.data(), 8); in.values.emplace_back(v); }
      else if (raw.dtype == 11) in.values.emplace_back(raw.data[0] != 0);
      else { double v; std::memcpy(&v, raw.data.data(), 8); in.values.emplace_back(v); }
      continue;
    }
    std::vector<int64_t> order;
    if (i < meta.num_inputs() && meta.input_tag(i).ok() && meta.input_tag(i).get() == et::Tag::Tensor) {
      auto info = check(meta.input_tensor_meta(i), "reading input " + std::to_string(i));
      if (info.dim_order().size() == raw.sizes.size()) order.assign(info.dim_order().begin(), info.dim_order().end());
    }
    if (order.empty())
      for (size_t d = 0; d < raw.sizes.size(); ++d) order.push_back(static_cast<int64_t>(d));
    std::vector<int64_t> strides = mobilize::strides_for_dim_order(raw.sizes, order);
    auto buffer = std::make_shared<std::vector<uint8_t>>(raw.data.size());
    mobilize::strided_copy(raw.data.data(), buffer->data(), raw.sizes, strides, mobilize::element_size(raw.dtype), true);
    std::vector<executorch::aten::SizesType> sizes(raw.sizes.begin(), raw.sizes.end());
    std::vector<executorch::aten::DimOrderType> dim_order(order.begin(), order.end());
    std::vector<executorch::aten::StridesType> et_strides(strides.begin(), strides.end());
    in.tensors.push_back(executorch::extension::make_tensor_ptr(
        sizes, buffer->data(), dim_order, et_strides, static_cast<executorch::aten::ScalarType>(raw.dtype)));
    in.storage.push_back(buffer);
    in.values.emplace_back(*in.tensors.back());
  }
  return in;
}

// Outputs in logical row-major order (whatever dim order the program wrote them in).
std::vector<RawTensor> to_raw(const std::vector<et::EValue>& outputs) {
  std::vector<RawTensor> out;
  for (const et::EValue& v : outputs) {
    RawTensor raw;
    if (v.isTensor()) {
      const executorch::aten::Tensor& t = v.toTensor();
      raw.dtype = static_cast<int32_t>(t.scalar_type());
      raw.sizes.assign(t.sizes().begin(), t.sizes().end());
      std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
      size_t elem = mobilize::element_size(raw.dtype);
      raw.data.resize(static_cast<size_t>(raw.numel()) * elem);
      mobilize::strided_copy(static_cast<const uint8_t*>(t.const_data_ptr()), raw.data.data(), raw.sizes, strides,
                             elem, false);
    } else if (v.isInt()) {
      raw.dtype = 4;
      int64_t x = v.toInt();
      raw.data.resize(8);
      std::memcpy(raw.data.data(), &x, 8);
    } else if (v.isDouble()) {
      raw.dtype = 7;
      double x = v.toDouble();
      raw.data.resize(8);
      std::memcpy(raw.data.data(), &x, 8);
    } else if (v.isBool()) {
      raw.dtype = 11;
      raw.data.assign(1, v.toBool() ? 1 : 0);
    } else if (v.isNone()) {
      continue;
    } else {
      throw std::runtime_error("cannot flatten an ExecuTorch output of tag " + std::to_string(static_cast<int>(v.tag)));
    }
    out.push_back(std::move(raw));
  }
  return out;
}

void describe(const et::MethodMeta& meta) {
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    if (!meta.input_tag(i).ok() || meta.input_tag(i).get() != et::Tag::Tensor) {
      std::printf("#mobilize declared %zu not-a-tensor\n", i);
      continue;
    }
    auto info = check(meta.input_tensor_meta(i), "reading input " + std::to_string(i));
    std::string dims, order;
    for (size_t d = 0; d < info.sizes().size(); ++d) dims += (d ? "," : "") + std::to_string(info.sizes()[d]);
    for (size_t d = 0; d < info.dim_order().size(); ++d) order += (d ? "," : "") + std::to_string(info.dim_order()[d]);
    std::printf("#mobilize declared %zu shape=%s dtype=%s dim_order=%s\n", i, dims.c_str(),
                mobilize::dtype_name(static_cast<int32_t>(info.scalar_type())), order.c_str());
  }
}

void print_stage(const char* name, const std::vector<int64_t>& ns) {
  std::printf("#mobilize stage_ns %s", name);
  for (int64_t t : ns) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\n");
}

int bench_frames(Module& module, const std::string& method, mobilize::Flags& flags, int64_t load_ns, int threads) {
  namespace fr = mobilize::frames;
  fr::FrameInput input;
  try {
    input = fr::make_frame_input(module, method, mobilize::camera::parse_frame_config(flags.str("frame_config")));
  } catch (const std::invalid_argument& e) {
    throw mobilize::UsageError(e.what());
  }
  mobilize::camera::FrameConverter conv(input.config);
  std::vector<std::vector<uint8_t>> frames = fr::read_frames(flags.str("frame_file"), conv.frame_nbytes());
  int64_t iterations = flags.integer("iter");
  if (iterations < 1) throw mobilize::UsageError("--iter must be at least 1");
  std::printf("Starting benchmark.\nRunning warmup runs.\nMain runs.\n");
  std::fflush(stdout);
  fr::StageTimes st = fr::run_frames(module, method, conv, input, frames, flags.integer("warmup"), iterations);
  mobilize::LoopTimes times;
  times.ns = st.total;
  times.loop_ns = st.loop_ns;
  mobilize::report(times, flags.boolean("report_pep"), load_ns, st.first_run_ns, threads);
  print_stage("convert", st.convert);
  print_stage("infer", st.infer);
  print_stage("answer", st.answer);
  std::printf("#mobilize frame_input layout=%s dtype=%s\n", input.config.nhwc ? "nhwc" : "nchw",
              input.config.uint8_output ? "uint8" : "float32");
  std::printf("#mobilize first_top_k");
  for (const auto& p : st.first_top) std::printf(" %lld:%.9g", static_cast<long long>(p.first), p.second);
  std::printf("\n");
  if (!flags.str("output_file").empty()) {  // the outputs of the last frame
    std::vector<et::EValue> args{et::EValue(*input.tensor)};
    mobilize::write_tensor_file(flags.str("output_file"), to_raw(check(module.execute(method, args), "running")));
  }
  return 0;
}

}  // namespace

int bench(int argc, char** argv) {
  auto defaults = mobilize::common_flag_defaults();
  defaults["describe_inputs"] = "false";
  defaults["method"] = "forward";
  defaults["frame_config"] = "";
  defaults["frame_file"] = "";
  auto booleans = mobilize::common_booleans();
  booleans.push_back("describe_inputs");
  mobilize::Flags flags(argc, argv, defaults, booleans);
  const std::string path = flags.str("model");
  if (flags.boolean("use_caching_allocator"))
    std::fprintf(stderr, "note: --use_caching_allocator changes nothing here "
                         "(ExecuTorch plans its activation memory ahead of time)\n");
  const std::string method = flags.str("method");
  if (path.empty()) throw mobilize::UsageError("--model is required");
  et::runtime_init();

  std::string backends;
  for (size_t i = 0; i < et::get_num_registered_backends(); ++i) {
    auto name = et::get_backend_name(i);
    backends += (i ? "," : "") + std::string(name.ok() ? name.get() : "?");
  }
  std::printf("#mobilize backends %s\n", backends.c_str());

  // XNNPACK binds a program to the pool that exists when it loads: size the pool first.
  auto* pool = executorch::extension::threadpool::get_threadpool();
  int64_t threads = flags.integer("pthreadpool_size");
  if (threads > 0 && pool->get_thread_count() != static_cast<size_t>(threads))
    pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads));

  int64_t t0 = mobilize::now_ns();
  std::vector<uint8_t> file = mobilize::read_file_bytes(path);
  mobilize::bpte::Bundle bundle;
  std::unique_ptr<Module> module;
  // Kept alive (64-byte aligned) for the module: the program inside a .bpte is loaded from memory.
  std::unique_ptr<uint8_t, decltype(&std::free)> program(nullptr, &std::free);
  if (mobilize::bpte::is_bundled(file)) {
    bundle = mobilize::bpte::read(file, method);
    size_t padded = (bundle.program.size() + 63) / 64 * 64;
    program.reset(static_cast<uint8_t*>(std::aligned_alloc(64, padded)));
    std::memcpy(program.get(), bundle.program.data(), bundle.program.size());
    module = std::make_unique<Module>(
        std::make_unique<executorch::extension::BufferDataLoader>(program.get(), bundle.program.size()));
  } else {
    module = std::make_unique<Module>(path);
  }
  file.clear();
  file.shrink_to_fit();
  check(module->load_method(method), "loading method '" + method + "' of " + path);
  int64_t load_ns = mobilize::now_ns() - t0;
  et::MethodMeta meta = check(module->method_meta(method), "reading method '" + method + "'");
  if (flags.boolean("describe_inputs")) {
    describe(meta);
    return 0;
  }

  if (!flags.str("frame_config").empty()) return bench_frames(*module, method, flags, load_ns,
                                                              static_cast<int>(pool->get_thread_count()));

  std::vector<RawTensor> raws;
  if (flags.boolean("no_inputs")) {
  } else if (flags.integer("use_bundled_input") >= 0) {
    int64_t index = flags.integer("use_bundled_input");
    if (bundle.program.empty()) throw mobilize::UsageError(path + " has no bundled inputs (it is not a .bpte)");
    if (index >= static_cast<int64_t>(bundle.cases.size()))
      throw mobilize::UsageError("--use_bundled_input " + std::to_string(index) + " is out of range: the file bundles " +
                               std::to_string(bundle.cases.size()) + " input(s)");
    raws = bundle.cases[static_cast<size_t>(index)].inputs;
  } else if (!flags.str("input_file").empty()) {
    raws = mobilize::read_tensor_file(flags.str("input_file"));
  } else if (!flags.str("input_dims").empty()) {
    for (const auto& spec : mobilize::parse_input_dims(flags.str("input_dims"), flags.str("input_type")))
      raws.push_back(mobilize::ones(spec));
  } else {
    throw mobilize::UsageError("no inputs: give --input_dims, --input_file, --use_bundled_input N or --no_inputs");
  }
  for (size_t i = 0; i < raws.size(); ++i)
    if (!raws[i].scalar) mobilize::report_input(i, raws[i]);
  Inputs inputs = make_inputs(raws, meta);
  auto run = [&]() { return check(module->execute(method, inputs.values), "running '" + method + "'"); };

  // to_raw copies at once: later runs overwrite the planned output buffers
  mobilize::speed_benchmark(run, [](const std::vector<et::EValue>& outputs) { return to_raw(outputs); }, flags,
                            load_ns, static_cast<int>(pool->get_thread_count()));
  return 0;
}

int main(int argc, char** argv) {
  return mobilize::guarded_main([&] { return bench(argc, argv); },
                                [](const std::exception& e) { return std::string(e.what()); });
}
