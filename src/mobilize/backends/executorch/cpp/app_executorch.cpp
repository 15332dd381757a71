// A minimal ExecuTorch app for a .pte (or a .bpte bundled program) written by mobilize: load it with
// the XNNPACK delegate, feed one input (the bundled one, or a raw float32 file), print the top-5
// outputs and the latency.  Start your own app from here.
//
//   ./build/app [MODEL.pte|MODEL.bpte] [INPUT.raw]
//   ./build/app --frame [FRAME.nv21] [--iter N] [MODEL.pte]   camera frame -> top-5, each stage timed
//   (defaults: the artifact, input and frame this project was emitted for, see model_info.h)
#include "bpte.h"
#include "frame_loop.h"
#include "model_info.h"
#include "tensor_file.h"

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using executorch::extension::module::Module;
namespace et = executorch::runtime;

// A camera frame, converted into the program's input buffer (allocated once, in its dim order), run,
// answered: top-5, each stage's median and share, and speed_benchmark_torch's summary line.
int run_frames(Module& module, const std::string& model_path, const std::string& frame_path, int64_t iterations) {
  namespace fr = mobilize::frames;
  if (std::string(MOBILIZE_FRAME_CONFIG).empty())
    throw std::invalid_argument("this app was emitted for an input that is not one (1,3,H,W) image: no frame mode");
  fr::FrameInput input = fr::make_frame_input(module, "forward", mobilize::camera::parse_frame_config(MOBILIZE_FRAME_CONFIG));
  mobilize::camera::FrameConverter conv(input.config);
  std::vector<std::vector<uint8_t>> frames = fr::read_frames(frame_path, conv.frame_nbytes());
  fr::StageTimes st = fr::run_frames(module, "forward", conv, input, frames, 5, iterations);
  const auto& c = input.config;
  std::printf("model: %s\nframe: %s (%dx%d, rotation %d -> %dx%d %s %s, %s)\n", model_path.c_str(), frame_path.c_str(),
              c.width, c.height, c.rotation, c.out_h, c.out_w, c.nhwc ? "nhwc" : "nchw",
              c.uint8_output ? "uint8" : "float32", c.bilinear ? "bilinear" : "nearest");
  for (size_t i = 0; i < st.first_top.size(); ++i)
    std::printf("  #%zu  class %lld  score %.4f\n", i + 1, (long long)st.first_top[i].first, st.first_top[i].second);
  std::printf("top-1: %lld\n", (long long)st.first_top[0].first);
  std::vector<int64_t> stages(st.total.size());
  for (size_t i = 0; i < stages.size(); ++i) stages[i] = st.convert[i] + st.infer[i] + st.answer[i];
  std::printf("stage      p50 ms   share\n");
  const std::pair<const char*, const std::vector<int64_t>*> rows[] = {
      {"convert", &st.convert}, {"infer", &st.infer}, {"answer", &st.answer}};
  for (const auto& row : rows)
    std::printf("%-8s %8.3f  %5.1f%%\n", row.first, fr::median_ms(*row.second), fr::share_pct(*row.second, stages));
  std::printf("frame to answer: p50 %.3f ms over %zu frames\n", fr::median_ms(st.total), st.total.size());
  double us = static_cast<double>(st.loop_ns) / 1e3 / static_cast<double>(st.total.size());
  std::printf("Main run finished. Microseconds per iter: %.3f. Iters per second: %.3f\n", us, 1e6 / us);
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string frame_path;
  bool frame_mode = false;
  int64_t iterations = 50;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--frame") {
      frame_mode = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') frame_path = argv[++i];
    } else if (arg == "--iter" && i + 1 < argc) {
      iterations = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else {
      positional.push_back(arg);
    }
  }
  const std::string model_path = positional.size() > 0 ? positional[0] : MOBILIZE_MODEL_PATH;
  const std::string raw_path = positional.size() > 1 ? positional[1] : "";
  try {
    et::runtime_init();
    std::vector<uint8_t> file = mobilize::read_file_bytes(model_path);
    std::unique_ptr<Module> module;
    mobilize::bpte::Bundle bundle;
    std::vector<uint8_t> program;  // a .bpte's program, kept alive for the module
    if (mobilize::bpte::is_bundled(file)) {
      bundle = mobilize::bpte::read(file);
      program.resize((bundle.program.size() + 63) / 64 * 64 + 64);
      uint8_t* aligned = program.data() + (64 - reinterpret_cast<uintptr_t>(program.data()) % 64) % 64;
      std::copy(bundle.program.begin(), bundle.program.end(), aligned);
      module = std::make_unique<Module>(
          std::make_unique<executorch::extension::BufferDataLoader>(aligned, bundle.program.size()));
    } else {
      module = std::make_unique<Module>(model_path);
    }
    if (module->load_method("forward") != et::Error::Ok) throw std::runtime_error("cannot load " + model_path);
    if (frame_mode) return run_frames(*module, model_path, frame_path.empty() ? MOBILIZE_FRAME_PATH : frame_path, iterations);

    // One input: the bundled one (a .bpte), else a raw row-major float32 file.
    mobilize::RawTensor input;
    std::string input_name;
    if (raw_path.empty() && !bundle.cases.empty()) {
      input = bundle.cases[0].inputs.at(0);
      input_name = "bundled input 0";
    } else {
      input_name = raw_path.empty() ? MOBILIZE_INPUT_PATH : raw_path;
      input = mobilize::read_raw_file(input_name, MOBILIZE_INPUT_DIMS, 6);
    }
    // The program may expect another dim order (channels-last): lay the data out as it declares.
    auto meta = module->method_meta("forward");
    auto info = meta->input_tensor_meta(0);
    std::vector<int64_t> order(info->dim_order().begin(), info->dim_order().end());
    if (order.size() != input.sizes.size()) {
      order.resize(input.sizes.size());
      std::iota(order.begin(), order.end(), 0);
    }
    std::vector<int64_t> strides = mobilize::strides_for_dim_order(input.sizes, order);
    std::vector<uint8_t> laid_out(input.data.size());
    mobilize::strided_copy(input.data.data(), laid_out.data(), input.sizes, strides, 4, true);
    auto tensor = executorch::extension::make_tensor_ptr(
        std::vector<executorch::aten::SizesType>(input.sizes.begin(), input.sizes.end()), laid_out.data(),
        std::vector<executorch::aten::DimOrderType>(order.begin(), order.end()),
        std::vector<executorch::aten::StridesType>(strides.begin(), strides.end()));

    auto result = module->forward(tensor);
    if (!result.ok()) throw std::runtime_error(std::string("forward failed: ") + et::to_string(result.error()));
    const executorch::aten::Tensor& out = result->at(0).toTensor();
    if (out.scalar_type() != executorch::aten::ScalarType::Float) throw std::runtime_error("expected a float32 output");
    std::vector<int64_t> out_sizes(out.sizes().begin(), out.sizes().end());
    std::vector<int64_t> out_strides(out.strides().begin(), out.strides().end());
    std::vector<float> scores(static_cast<size_t>(out.numel()));  // copied: the next run reuses the buffer
    mobilize::strided_copy(static_cast<const uint8_t*>(out.const_data_ptr()), reinterpret_cast<uint8_t*>(scores.data()),
                           out_sizes, out_strides, 4, false);

    std::vector<double> times_ms;
    for (int i = 0; i < 23; ++i) {  // 3 warm-up runs, then 20 timed ones
      auto t0 = std::chrono::steady_clock::now();
      auto r = module->forward(tensor);
      auto t1 = std::chrono::steady_clock::now();
      if (!r.ok()) throw std::runtime_error("forward failed");
      if (i >= 3) times_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(times_ms.begin(), times_ms.end());

    std::vector<int64_t> rank(scores.size());
    std::iota(rank.begin(), rank.end(), 0);
    size_t k = std::min<size_t>(5, rank.size());
    std::partial_sort(rank.begin(), rank.begin() + k, rank.end(),
                      [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    std::printf("model: %s\ninput: %s\n", model_path.c_str(), input_name.c_str());
    for (size_t i = 0; i < k; ++i)
      std::printf("  #%zu  class %lld  score %.4f\n", i + 1, (long long)rank[i], scores[rank[i]]);
    std::printf("top-1: %lld\n", (long long)rank[0]);
    if (input_name == "bundled input 0" && !bundle.cases[0].expected_outputs.empty()) {
      // A bundled program carries the expected output: check this runtime against it.
      std::vector<double> expected = mobilize::as_doubles(bundle.cases[0].expected_outputs[0]);
      double worst = 0;
      for (size_t i = 0; i < std::min(expected.size(), scores.size()); ++i)
        worst = std::max(worst, std::fabs(expected[i] - scores[i]));
      int64_t expected_top = std::max_element(expected.begin(), expected.end()) - expected.begin();
      std::printf("bundled expected top-1: %lld (max abs difference %.3g)\n", (long long)expected_top, worst);
    }
    std::printf("latency: %.3f ms (median of %zu runs)\n", times_ms[times_ms.size() / 2], times_ms.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
