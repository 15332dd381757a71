// speed_benchmark_torch for the installed LibTorch: a TorchScript (.pt) or lite-interpreter (.ptl)
// file loaded and timed from C++, with no Python in the process.
//
//   bench_torch --model m.pt --use_bundled_input 0 --iter 200 --pthreadpool_size 1
//   Starting benchmark.
//   Running warmup runs.
//   Main runs.
//   Main run finished. Microseconds per iter: 812.405. Iters per second: 1230.913
//   #mobilize load_ns=... first_run_ns=... loop_ns=... peak_rss_kb=... threads=1
//   #mobilize times_ns 811234 809876 ...
#include <ATen/Parallel.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>
#include <torch/script.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench_common.h"

using mobilize::RawTensor;

namespace {

at::Tensor to_torch(const RawTensor& raw, bool channels_last) {
  auto options = at::TensorOptions().dtype(static_cast<at::ScalarType>(raw.dtype));
  at::Tensor t = at::from_blob(const_cast<uint8_t*>(raw.data.data()), raw.sizes, options).clone();
  if (channels_last && t.dim() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
  return t;
}

RawTensor to_raw(at::Tensor t) {
  if (t.is_quantized()) t = t.dequantize();
  t = t.cpu().contiguous();
  RawTensor raw;
  raw.dtype = static_cast<int32_t>(t.scalar_type());
  raw.sizes.assign(t.sizes().begin(), t.sizes().end());
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  raw.data.assign(p, p + t.numel() * t.element_size());
  return raw;
}

// The tensors of an output, in the order mobilize's Python runtimes flatten them.
void flatten(const c10::IValue& v, std::vector<RawTensor>& out) {
  if (v.isTensor()) {
    out.push_back(to_raw(v.toTensor()));
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) flatten(e, out);
  } else if (v.isList()) {
    for (const c10::IValue e : v.toList()) flatten(e, out);
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) flatten(kv.value(), out);
  } else if (v.isNone()) {
  } else if (v.isInt()) {
    out.push_back(to_raw(at::scalar_tensor(v.toInt(), at::kLong)));
  } else if (v.isDouble()) {
    out.push_back(to_raw(at::scalar_tensor(v.toDouble(), at::kDouble)));
  } else if (v.isBool()) {
    out.push_back(to_raw(at::scalar_tensor(v.toBool(), at::kBool)));
  } else {
    throw std::runtime_error("cannot flatten an output of type " + v.tagKind());
  }
}

std::vector<c10::IValue> bundled_input(const c10::IValue& all, int64_t index) {
  c10::List<c10::IValue> list = all.toList();
  if (index < 0 || index >= static_cast<int64_t>(list.size()))
    throw mobilize::UsageError("--use_bundled_input " + std::to_string(index) + " is out of range: the file bundles " +
                             std::to_string(list.size()) + " input(s)");
  c10::IValue one = list.get(index);
  if (one.isTuple()) return one.toTupleRef().elements().vec();
  return {one};
}

}  // namespace

int bench(int argc, char** argv) {
  auto defaults = mobilize::common_flag_defaults();
  defaults["lite"] = "auto";
  mobilize::Flags flags(argc, argv, defaults, mobilize::common_booleans());
  const std::string path = flags.str("model");
  if (flags.boolean("use_caching_allocator"))
    std::fprintf(stderr, "note: --use_caching_allocator changes nothing here "
                         "(desktop LibTorch builds have no CPU caching allocator)\n");
  if (path.empty()) throw mobilize::UsageError("--model is required");
  std::string lite_flag = flags.str("lite");
  bool lite = lite_flag == "auto" ? path.size() > 4 && path.substr(path.size() - 4) == ".ptl" : flags.boolean("lite");
  int64_t threads = flags.integer("pthreadpool_size");
  if (threads > 0) at::set_num_threads(static_cast<int>(threads));

  int64_t t0 = mobilize::now_ns();
  std::optional<torch::jit::Module> script;
  std::optional<torch::jit::mobile::Module> mobile;
  if (lite) {
    mobile.emplace(torch::jit::_load_for_mobile(path));
  } else {
    script.emplace(torch::jit::load(path));
    script->eval();
  }
  int64_t load_ns = mobilize::now_ns() - t0;

  bool channels_last = flags.str("input_memory_format") == "channels_last";
  std::vector<c10::IValue> inputs;
  if (flags.boolean("no_inputs")) {
  } else if (flags.integer("use_bundled_input") >= 0) {
    const char* method = "get_all_bundled_inputs";
    bool has = lite ? mobile->find_method(method).has_value() : script->find_method(method).has_value();
    if (!has) throw mobilize::UsageError(path + " has no bundled inputs (export with bundled inputs)");
    c10::IValue all = lite ? mobile->run_method(method) : script->run_method(method);
    inputs = bundled_input(all, flags.integer("use_bundled_input"));
  } else if (!flags.str("input_file").empty()) {
    for (const auto& raw : mobilize::read_tensor_file(flags.str("input_file")))
      inputs.push_back(to_torch(raw, channels_last));
  } else if (!flags.str("input_dims").empty()) {
    for (const auto& spec : mobilize::parse_input_dims(flags.str("input_dims"), flags.str("input_type")))
      inputs.push_back(to_torch(mobilize::ones(spec), channels_last));
  } else {
    throw mobilize::UsageError("no inputs: give --input_dims, --input_file, --use_bundled_input N or --no_inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].isTensor()) mobilize::report_input(i, to_raw(inputs[i].toTensor()));

  // The Python runtimes run TorchScript under inference_mode and the lite interpreter under no_grad.
  std::optional<c10::InferenceMode> inference;
  std::optional<torch::NoGradGuard> no_grad;
  if (lite) no_grad.emplace(); else inference.emplace();
  auto run = [&]() -> c10::IValue { return lite ? mobile->forward(inputs) : script->forward(inputs); };

  auto keep = [](const c10::IValue& output) {
    std::vector<RawTensor> outputs;
    flatten(output, outputs);
    return outputs;
  };
  mobilize::speed_benchmark(run, keep, flags, load_ns, at::get_num_threads());
  return 0;
}

int main(int argc, char** argv) {
  return mobilize::guarded_main([&] { return bench(argc, argv); }, [](const std::exception& e) {
    const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
    return std::string(torch_error ? torch_error->what_without_backtrace() : e.what());
  });
}
