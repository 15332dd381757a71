// frame_loop.h: camera frame -> model input -> ExecuTorch forward -> top-k, each stage timed; shared by
// the emitted app (app_executorch.cpp) and the native benchmark (bench_executorch.cpp --frame_config).
//
// The input tensor is allocated once, in the dim order the program declares, and the converter writes
// into it directly: a channels-last program gets NHWC from the converter, with no transpose after it.
#pragma once

#include "camera_convert.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mobilize {
namespace frames {

inline int64_t clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The program's input 0 decides the output size, layout and dtype of the converter.
struct FrameInput {
  camera::FrameConfig config;
  std::vector<uint8_t> storage;  // the one buffer the converter writes and the program reads
  executorch::extension::TensorPtr tensor;
};

inline FrameInput make_frame_input(executorch::extension::module::Module& module, const std::string& method,
                                   camera::FrameConfig cfg) {
  auto meta = module.method_meta(method);
  if (!meta.ok()) throw std::runtime_error("cannot read method '" + method + "'");
  auto info = meta->input_tensor_meta(0);
  if (!info.ok()) throw std::runtime_error("input 0 of '" + method + "' is not a tensor");
  std::vector<int64_t> sizes(info->sizes().begin(), info->sizes().end());
  std::vector<int64_t> order(info->dim_order().begin(), info->dim_order().end());
  if (sizes.size() != 4 || sizes[0] != 1 || sizes[1] != 3)
    throw std::invalid_argument("frames feed one (1,3,H,W) image input; this program's input 0 is not one");
  auto dtype = info->scalar_type();
  if (dtype != executorch::aten::ScalarType::Float && dtype != executorch::aten::ScalarType::Byte)
    throw std::invalid_argument("frames make float32 or uint8 inputs; this program takes another dtype");
  cfg.out_h = static_cast<int>(sizes[2]);
  cfg.out_w = static_cast<int>(sizes[3]);
  cfg.nhwc = order == std::vector<int64_t>{0, 2, 3, 1};
  cfg.uint8_output = dtype == executorch::aten::ScalarType::Byte;
  if (!cfg.nhwc) order = {0, 1, 2, 3};
  FrameInput in{cfg, {}, nullptr};
  in.storage.resize(static_cast<size_t>(3 * sizes[2] * sizes[3]) * (cfg.uint8_output ? 1 : 4));
  using Stride = executorch::aten::StridesType;
  const Stride h = static_cast<Stride>(sizes[2]), w = static_cast<Stride>(sizes[3]);
  std::vector<Stride> strides = cfg.nhwc ? std::vector<Stride>{3 * h * w, 1, 3 * w, 3}
                                         : std::vector<Stride>{3 * h * w, h * w, w, 1};
  in.tensor = executorch::extension::make_tensor_ptr(
      std::vector<executorch::aten::SizesType>(sizes.begin(), sizes.end()), in.storage.data(),
      std::vector<executorch::aten::DimOrderType>(order.begin(), order.end()), strides, dtype);
  return in;
}

// Every whole frame in a file (several may sit back to back).
inline std::vector<std::vector<uint8_t>> read_frames(const std::string& path, size_t frame_nbytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot open frame file " + path);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.empty() || data.size() % frame_nbytes)
    throw std::invalid_argument(path + " has " + std::to_string(data.size()) + " bytes, not a whole number of " +
                                std::to_string(frame_nbytes) + "-byte frames");
  std::vector<std::vector<uint8_t>> frames;
  for (size_t at = 0; at < data.size(); at += frame_nbytes)
    frames.emplace_back(data.begin() + static_cast<std::ptrdiff_t>(at),
                        data.begin() + static_cast<std::ptrdiff_t>(at + frame_nbytes));
  return frames;
}

// (class, score) of the k largest entries of a float output, read through its strides.
inline std::vector<std::pair<int64_t, float>> top_k(const executorch::aten::Tensor& out, size_t k,
                                                    std::vector<float>& scores, std::vector<int64_t>& rank) {
  if (out.scalar_type() != executorch::aten::ScalarType::Float) throw std::runtime_error("expected a float32 output");
  const float* data = out.const_data_ptr<float>();
  size_t n = static_cast<size_t>(out.numel());
  scores.resize(n);
  // Logical (row-major) order, whatever dim order the program wrote: class i is element i as Python sees it.
  const auto sizes = out.sizes();
  const auto strides = out.strides();
  const size_t dims = sizes.size();
  for (size_t i = 0; i < n; ++i) {
    size_t rest = i, at = 0;
    for (size_t d = dims; d-- > 0;) {
      at += (rest % static_cast<size_t>(sizes[d])) * static_cast<size_t>(strides[d]);
      rest /= static_cast<size_t>(sizes[d]);
    }
    scores[i] = data[at];
  }
  rank.resize(n);
  std::iota(rank.begin(), rank.end(), 0);
  k = std::min(k, n);
  std::partial_sort(rank.begin(), rank.begin() + static_cast<std::ptrdiff_t>(k), rank.end(),
                    [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  std::vector<std::pair<int64_t, float>> top;
  for (size_t i = 0; i < k; ++i) top.emplace_back(rank[i], scores[static_cast<size_t>(rank[i])]);
  return top;
}

struct StageTimes {
  std::vector<int64_t> convert, infer, answer, total;
  int64_t loop_ns = 0;
  std::vector<std::pair<int64_t, float>> first_top;  // the answer on the first frame (first run)
  int64_t first_run_ns = 0;
};

// `warmup` untimed frames, then `iterations` timed ones, cycling through `frames`.
inline StageTimes run_frames(executorch::extension::module::Module& module, const std::string& method,
                             const camera::FrameConverter& conv, FrameInput& input,
                             const std::vector<std::vector<uint8_t>>& frames, int64_t warmup, int64_t iterations) {
  std::vector<executorch::runtime::EValue> args{executorch::runtime::EValue(*input.tensor)};
  std::vector<float> scores;
  std::vector<int64_t> rank;
  StageTimes st;
  std::vector<std::pair<int64_t, float>> top;
  auto one = [&](size_t i, int64_t* stamps) {
    const std::vector<uint8_t>& f = frames[i % frames.size()];
    int64_t a = clock_ns();
    conv.convert(f.data(), f.size(), input.storage.data());
    int64_t b = clock_ns();
    auto result = module.execute(method, args);
    if (!result.ok()) throw std::runtime_error("forward failed on a frame");
    int64_t c = clock_ns();
    top = top_k(result->at(0).toTensor(), 5, scores, rank);
    int64_t d = clock_ns();
    if (stamps) { stamps[0] = b - a; stamps[1] = c - b; stamps[2] = d - c; }
  };
  int64_t t0 = clock_ns();
  one(0, nullptr);
  st.first_run_ns = clock_ns() - t0;
  st.first_top = top;
  for (int64_t i = 0; i < warmup; ++i) one(static_cast<size_t>(i), nullptr);
  int64_t stamps[3];
  int64_t start = clock_ns();
  for (int64_t i = 0; i < iterations; ++i) {
    int64_t a = clock_ns();
    one(static_cast<size_t>(i), stamps);
    st.total.push_back(clock_ns() - a);
    st.convert.push_back(stamps[0]);
    st.infer.push_back(stamps[1]);
    st.answer.push_back(stamps[2]);
  }
  st.loop_ns = clock_ns() - start;
  return st;
}

inline double median_ms(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : static_cast<double>(v[v.size() / 2]) / 1e6;
}

inline double share_pct(const std::vector<int64_t>& stage, const std::vector<int64_t>& total) {
  double s = static_cast<double>(std::accumulate(stage.begin(), stage.end(), int64_t{0}));
  double t = static_cast<double>(std::accumulate(total.begin(), total.end(), int64_t{0}));
  return t > 0 ? 100.0 * s / t : 0.0;
}

}  // namespace frames
}  // namespace mobilize
