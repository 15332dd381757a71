// A minimal LibTorch app for a TorchScript (.pt) or lite-interpreter (.ptl) file written by mobilize:
// load it, feed one input (the file's bundled input, or a raw float32 file), print the top-5
// outputs and the latency.  Start your own app from here.
//
//   ./build/app [MODEL] [INPUT.raw]
//   (defaults: the artifact and input this project was emitted for, see model_info.h)
#include "model_info.h"
#include "tensor_file.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#if MOBILIZE_LITE
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>
#else
#include <torch/script.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string model_path = argc > 1 ? argv[1] : MOBILIZE_MODEL_PATH;
  const std::string raw_path = argc > 2 ? argv[2] : "";
  try {
#if MOBILIZE_LITE
    torch::jit::mobile::Module model = torch::jit::_load_for_mobile(model_path);
    at::NoGradGuard no_grad;
#else
    torch::jit::Module model = torch::jit::load(model_path);
    model.eval();
    c10::InferenceMode inference;
#endif
    std::vector<c10::IValue> inputs;
    std::string input_name;
    if (raw_path.empty() && model.find_method("get_all_bundled_inputs")) {
      // Bundled inputs: a list of input tuples saved inside the file.
      c10::IValue first = model.run_method("get_all_bundled_inputs").toList().get(0);
      inputs = first.toTupleRef().elements().vec();
      input_name = "bundled input 0";
    } else {
      const std::string path = raw_path.empty() ? MOBILIZE_INPUT_PATH : raw_path;
      mobilize::RawTensor raw = mobilize::read_raw_file(path, MOBILIZE_INPUT_DIMS, 6);
      inputs.push_back(at::from_blob(raw.data.data(), raw.sizes, at::kFloat).clone());
      input_name = path;
    }

    at::Tensor out = model.forward(inputs).toTensor().to(at::kFloat).contiguous().reshape(-1);
    std::vector<double> times_ms;
    for (int i = 0; i < 23; ++i) {  // 3 warm-up runs, then 20 timed ones
      auto t0 = std::chrono::steady_clock::now();
      model.forward(inputs);
      auto t1 = std::chrono::steady_clock::now();
      if (i >= 3) times_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(times_ms.begin(), times_ms.end());

    const float* scores = out.data_ptr<float>();
    std::vector<int64_t> order(static_cast<size_t>(out.numel()));
    std::iota(order.begin(), order.end(), 0);
    size_t k = std::min<size_t>(5, order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    std::printf("model: %s\ninput: %s\n", model_path.c_str(), input_name.c_str());
    for (size_t i = 0; i < k; ++i)
      std::printf("  #%zu  class %lld  score %.4f\n", i + 1, (long long)order[i], scores[order[i]]);
    std::printf("top-1: %lld\n", (long long)order[0]);
    std::printf("latency: %.3f ms (median of %zu runs, %d thread(s))\n", times_ms[times_ms.size() / 2], times_ms.size(),
                at::get_num_threads());
    return 0;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
