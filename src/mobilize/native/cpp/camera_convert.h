// camera_convert.h: a camera frame (NV21, NV12, I420 with row strides, or packed RGB/BGR) to a model
// input in one pass, header-only, no OpenCV.  The C++ twin of mobilize.camera.FrameConverter: the same
// geometry (rotation, centre crop, pixel-centre nearest or half-pixel bilinear), the same BT.601
// colour maths folded with mean/std into one affine per channel, the same float32 operations in the
// same order, so nearest output is bit-exact with Python's and bilinear within one LSB.
// Build with -ffp-contract=off (the CMake templates do): a fused multiply-add would round differently.
//
//   auto cfg = mobilize::camera::parse_frame_config(
//       "width=1920 height=1080 layout=nv21 rotation=90 out_h=224 out_w=224 resize=nearest");
//   mobilize::camera::FrameConverter conv(cfg);       // all tables built once, per stream
//   std::vector<float> input(conv.output_elements());  // reused frame after frame
//   conv.convert(frame.data(), frame.size(), input.data());
//
// Layout is handled here, once: output_layout=nhwc writes channels-last straight from the frame, so a
// channels-last program needs no transpose after the converter.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace mobilize {
namespace camera {

enum class Layout { NV21, NV12, I420, RGB, BGR };

struct FrameConfig {
  int width = 0, height = 0;
  Layout layout = Layout::NV21;
  int row_stride = 0;         // bytes per Y (or packed RGB) row; 0 = tightly packed
  int chroma_row_stride = 0;  // 0 = row_stride (nv21/nv12) or row_stride / 2 (i420)
  int rotation = 0;           // degrees clockwise: 0, 90, 180, 270
  bool center_crop = true;    // false: the whole rotated frame, squeezed to the output size
  int crop_h = 0, crop_w = 0; // 0 = the largest centred region with the output's aspect
  int out_h = 224, out_w = 224;
  bool bilinear = false;
  bool video_range = false;   // BT.601 limited range (16..235) instead of full range
  double mean[3] = {0.485, 0.456, 0.406};
  double std[3] = {0.229, 0.224, 0.225};
  bool bgr_output = false;
  bool nhwc = false;
  bool uint8_output = false;  // raw 0..255 pixels (mean/std not applied)
};

inline bool is_yuv(Layout l) { return l == Layout::NV21 || l == Layout::NV12 || l == Layout::I420; }

inline Layout parse_layout(const std::string& s) {
  if (s == "nv21") return Layout::NV21;
  if (s == "nv12") return Layout::NV12;
  if (s == "i420") return Layout::I420;
  if (s == "rgb") return Layout::RGB;
  if (s == "bgr") return Layout::BGR;
  throw std::invalid_argument("unknown frame layout '" + s + "' (nv21, nv12, i420, rgb, bgr)");
}

inline void parse_triple(const std::string& s, double* out) {
  std::stringstream ss(s);
  std::string item;
  int i = 0;
  while (std::getline(ss, item, ',')) {
    if (i == 3) break;
    out[i++] = std::strtod(item.c_str(), nullptr);
  }
  if (i != 3) throw std::invalid_argument("expected three comma-separated numbers, got '" + s + "'");
}

// "key=value key=value ..." as mobilize.camera.frames.native_config() writes it (FrameConfig's field names).
inline FrameConfig parse_frame_config(const std::string& text) {
  FrameConfig c;
  std::stringstream ss(text);
  std::string pair;
  while (ss >> pair) {
    size_t eq = pair.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("frame config item without '=': " + pair);
    std::string k = pair.substr(0, eq), v = pair.substr(eq + 1);
    auto num = [&] { return std::atoi(v.c_str()); };
    if (k == "width") c.width = num();
    else if (k == "height") c.height = num();
    else if (k == "layout") c.layout = parse_layout(v);
    else if (k == "row_stride") c.row_stride = num();
    else if (k == "chroma_row_stride") c.chroma_row_stride = num();
    else if (k == "rotation") c.rotation = num();
    else if (k == "crop") c.center_crop = v != "none";
    else if (k == "crop_h") c.crop_h = num();
    else if (k == "crop_w") c.crop_w = num();
    else if (k == "out_h") c.out_h = num();
    else if (k == "out_w") c.out_w = num();
    else if (k == "resize") c.bilinear = v == "bilinear";
    else if (k == "color_range") c.video_range = v == "video";
    else if (k == "mean") parse_triple(v, c.mean);
    else if (k == "std") parse_triple(v, c.std);
    else if (k == "channel_order") c.bgr_output = v == "bgr";
    else if (k == "output_layout") c.nhwc = v == "nhwc";
    else if (k == "output_dtype") c.uint8_output = v == "uint8";
    else throw std::invalid_argument("unknown frame config key '" + k + "'");
  }
  return c;
}

class FrameConverter {
 public:
  explicit FrameConverter(const FrameConfig& cfg) : cfg_(cfg) { build(); }

  const FrameConfig& config() const { return cfg_; }
  size_t frame_nbytes() const { return frame_nbytes_; }
  size_t output_elements() const { return 3 * static_cast<size_t>(n_); }
  size_t output_nbytes() const { return output_elements() * (cfg_.uint8_output ? 1 : 4); }

  // One whole frame (every plane, rows x stride each; the last row's padding may be missing) into
  // `out` (output_nbytes() bytes: float32, or uint8 with output_dtype=uint8).  No allocation.
  void convert(const uint8_t* frame, size_t size, void* out) const {
    if (size != frame_nbytes_ && size != frame_nbytes_ - last_row_padding_)
      throw std::invalid_argument("frame has " + std::to_string(size) + " bytes, expected " +
                                  std::to_string(frame_nbytes_));
    const uint8_t* planes[3];
    if (!is_yuv(cfg_.layout)) {
      planes[0] = frame; planes[1] = frame + 1; planes[2] = frame + 2;
    } else {
      const uint8_t* chroma = frame + static_cast<size_t>(stride_) * cfg_.height;
      planes[0] = frame;
      if (cfg_.layout == Layout::I420) {
        planes[1] = chroma; planes[2] = chroma + static_cast<size_t>(chroma_stride_) * (cfg_.height / 2);
      } else if (cfg_.layout == Layout::NV21) {
        planes[1] = chroma + 1; planes[2] = chroma;
      } else {
        planes[1] = chroma; planes[2] = chroma + 1;
      }
    }
    run(planes, out);
  }

 private:
  FrameConfig cfg_;
  int n_ = 0, taps_ = 1, stride_ = 0, chroma_stride_ = 0;
  size_t frame_nbytes_ = 0, last_row_padding_ = 0;
  // Where a pixel reads is separable whatever the rotation: offset = part(output row) + part(output
  // column), for plane 0 (luma) and planes 1, 2 (chroma), per axis tap; so are the bilinear weights.
  // Small per-axis tables stay in L1 where per-pixel ones (4 taps x 3 channels) streamed from memory.
  std::vector<int32_t> row_luma_[2], row_chroma_[2], col_luma_[2], col_chroma_[2];
  std::vector<double> row_w_[2], col_w_[2];
  double gain_[3] = {1.0, 1.0, 1.0};
  // Scratch for one output row, allocated once: samples (3 planes), channel sums, bilinear weights.
  // Like the Python converter, one converter per thread.
  mutable std::vector<float> samples_, acc_, blend_row_;
  float coef_[3][3];   // per output channel, the three source planes' coefficients in summation order
  int order_[3][3];    // bilinear: which plane each coefficient multiplies
  float bias_[3], lo_[3], hi_[3], offset_[3], source_offset_[3];
  bool clip_ = false;

  // The per-frame loops, instantiated per output kind so the inner loop has no branches on it.
  template <bool NHWC, bool U8>
  void store(void* out, int c, int p, float v) const {
    size_t i = NHWC ? static_cast<size_t>(p) * 3 + c : static_cast<size_t>(c) * n_ + p;
    if (U8) static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v);  // v >= 0.5: truncation rounds
    else static_cast<float*>(out)[i] = v;
  }

  // Row by row: gather one output row's samples (the only scattered reads), then the arithmetic runs over
  // contiguous arrays, which the compiler vectorises.
  template <bool NHWC, bool U8>
  void store_row(void* out, int i) const {
    const int w = cfg_.out_w;
    for (int c = 0; c < 3; ++c) {
      const float* a = acc_.data() + static_cast<size_t>(c) * w;
      for (int j = 0; j < w; ++j) store<NHWC, U8>(out, c, i * w + j, a[j]);
    }
  }

  void gather_row(const uint8_t* const* planes, int i, int ti, int tj, float* x) const {
    const int w = cfg_.out_w;
    const uint8_t* p0 = planes[0] + row_luma_[ti][i];
    const uint8_t* p1 = planes[1] + row_chroma_[ti][i];
    const uint8_t* p2 = planes[2] + row_chroma_[ti][i];
    const int32_t* cl = col_luma_[tj].data();
    const int32_t* cc = col_chroma_[tj].data();
    for (int j = 0; j < w; ++j) {
      x[j] = static_cast<float>(p0[cl[j]]);
      x[w + j] = static_cast<float>(p1[cc[j]]);
      x[2 * w + j] = static_cast<float>(p2[cc[j]]);
    }
  }

  template <bool NHWC, bool U8, bool CLIP>
  void nearest_loop(const uint8_t* const* planes, void* out) const {
    const int w = cfg_.out_w;
    float* x = samples_.data();
    for (int i = 0; i < cfg_.out_h; ++i) {
      gather_row(planes, i, 0, 0, x);
      for (int c = 0; c < 3; ++c) {
        // converter.py's float32 operations in its order; a zero coefficient adds +0, which changes nothing
        const float c0 = coef_[c][0], c1 = coef_[c][1], c2 = coef_[c][2], bias = bias_[c], lo = lo_[c], hi = hi_[c];
        float* a = acc_.data() + static_cast<size_t>(c) * w;
        for (int j = 0; j < w; ++j) {
          float d = x[j] * c0 + x[w + j] * c1 + x[2 * w + j] * c2;
          d = d + bias;
          if (CLIP) d = std::min(std::max(d, lo), hi);
          a[j] = d;
        }
      }
      store_row<NHWC, U8>(out, i);
    }
  }

  template <bool NHWC, bool U8, bool CLIP>
  void bilinear_loop(const uint8_t* const* planes, void* out) const {
    const int w = cfg_.out_w;
    float* x = samples_.data();
    float* blend = blend_row_.data();
    for (int i = 0; i < cfg_.out_h; ++i) {
      for (int ti = 0, t = 0; ti < 2; ++ti) {
        for (int tj = 0; tj < 2; ++tj, ++t) {  // taps in Python's order: row tap outer, column tap inner
          gather_row(planes, i, ti, tj, x);
          for (int k = 0; k < 3; ++k) {
            const float so = source_offset_[k];
            for (int j = 0; j < w; ++j) x[k * w + j] = x[k * w + j] - so;
          }
          // Python's blend table: float32(float32(w_row * w_col) * gain), rounded the same way here.
          const double wr = row_w_[ti][i];
          const double* wc = col_w_[tj].data();
          for (int j = 0; j < w; ++j) blend[j] = static_cast<float>(wr * wc[j]);
          for (int c = 0; c < 3; ++c) {
            // converter.py's order: scaled terms, then unit ones (x * 1 is x), then zero ones (adding +-0)
            const float* x0 = x + order_[c][0] * w;
            const float* x1 = x + order_[c][1] * w;
            const float* x2 = x + order_[c][2] * w;
            const float c0 = coef_[c][0], c1 = coef_[c][1], c2 = coef_[c][2];
            const double gain = gain_[c];
            float* a = acc_.data() + static_cast<size_t>(c) * w;
            for (int j = 0; j < w; ++j) {
              float d = x0[j] * c0 + x1[j] * c1 + x2[j] * c2;
              if (CLIP) d = std::min(std::max(d, 0.f), 255.f);
              d = d * static_cast<float>(static_cast<double>(blend[j]) * gain);
              a[j] = t == 0 ? d : a[j] + d;
            }
          }
        }
      }
      for (int c = 0; c < 3; ++c) {
        float* a = acc_.data() + static_cast<size_t>(c) * w;
        const float offset = offset_[c];
        for (int j = 0; j < w; ++j) a[j] = a[j] + offset;
      }
      store_row<NHWC, U8>(out, i);
    }
  }

  template <bool NHWC, bool U8>
  void dispatch(const uint8_t* const* planes, void* out) const {
    if (taps_ == 1) clip_ ? nearest_loop<NHWC, U8, true>(planes, out) : nearest_loop<NHWC, U8, false>(planes, out);
    else clip_ ? bilinear_loop<NHWC, U8, true>(planes, out) : bilinear_loop<NHWC, U8, false>(planes, out);
  }

  void run(const uint8_t* const* planes, void* out) const {
    if (cfg_.nhwc) cfg_.uint8_output ? dispatch<true, true>(planes, out) : dispatch<true, false>(planes, out);
    else cfg_.uint8_output ? dispatch<false, true>(planes, out) : dispatch<false, false>(planes, out);
  }

  struct Axis { std::vector<int> pos[2]; std::vector<double> w[2]; int taps; };

  Axis axis(int n_out, int start, int length) const {
    Axis ax;
    ax.taps = cfg_.bilinear ? 2 : 1;
    double ratio = static_cast<double>(length) / n_out;
    for (int i = 0; i < n_out; ++i) {
      double centre = (static_cast<double>(i) + 0.5) * ratio;
      if (!cfg_.bilinear) {
        ax.pos[0].push_back(start + std::min(static_cast<int>(std::floor(centre)), length - 1));
        continue;
      }
      double f = std::min(std::max(centre - 0.5, 0.0), static_cast<double>(length - 1));
      int lo = static_cast<int>(std::floor(f));
      int hi = std::min(lo + 1, length - 1);
      double w_hi = f - lo;
      ax.pos[0].push_back(start + lo); ax.w[0].push_back(1.0 - w_hi);
      ax.pos[1].push_back(start + hi); ax.w[1].push_back(w_hi);
    }
    return ax;
  }

  void build() {
    const FrameConfig& c = cfg_;
    const bool yuv = is_yuv(c.layout);
    if (c.width < 1 || c.height < 1 || (yuv && (c.width % 2 || c.height % 2)))
      throw std::invalid_argument("bad frame size " + std::to_string(c.width) + "x" + std::to_string(c.height));
    if (c.rotation % 90 || c.rotation < 0 || c.rotation >= 360) throw std::invalid_argument("bad rotation");
    int row_bytes = c.width * (yuv ? 1 : 3);
    stride_ = c.row_stride ? c.row_stride : row_bytes;
    if (stride_ < row_bytes) throw std::invalid_argument("row_stride is smaller than a row");
    int chroma_row_bytes = 0;
    if (yuv) {
      chroma_row_bytes = c.layout == Layout::I420 ? c.width / 2 : c.width;
      chroma_stride_ = c.chroma_row_stride ? c.chroma_row_stride : (c.layout == Layout::I420 ? stride_ / 2 : stride_);
      if (chroma_stride_ < chroma_row_bytes) throw std::invalid_argument("chroma_row_stride is smaller than a row");
    }
    frame_nbytes_ = static_cast<size_t>(stride_) * c.height +
                    static_cast<size_t>(chroma_stride_) * (c.height / 2) * (c.layout == Layout::I420 ? 2 : 1);
    last_row_padding_ = static_cast<size_t>(yuv ? chroma_stride_ - chroma_row_bytes : stride_ - row_bytes);
    const bool turned = c.rotation == 90 || c.rotation == 270;
    const int rot_h = turned ? c.width : c.height, rot_w = turned ? c.height : c.width;
    int crop_h = rot_h, crop_w = rot_w;
    if (c.center_crop && c.crop_h > 0) {
      crop_h = c.crop_h; crop_w = c.crop_w;
    } else if (c.center_crop) {
      if (static_cast<int64_t>(c.out_w) * rot_h <= static_cast<int64_t>(c.out_h) * rot_w)
        crop_w = std::min(rot_w, static_cast<int>(std::nearbyint(static_cast<double>(int64_t(rot_h) * c.out_w) / c.out_h)));
      else
        crop_h = std::min(rot_h, static_cast<int>(std::nearbyint(static_cast<double>(int64_t(rot_w) * c.out_h) / c.out_w)));
    }
    if (crop_h > rot_h || crop_w > rot_w || c.out_h > crop_h || c.out_w > crop_w || c.out_h < 1 || c.out_w < 1)
      throw std::invalid_argument("the output is larger than the crop, or the crop than the frame");
    const int top = (rot_h - crop_h) / 2, left = (rot_w - crop_w) / 2;
    n_ = c.out_h * c.out_w;
    samples_.assign(3 * static_cast<size_t>(c.out_w), 0.f);
    acc_.assign(3 * static_cast<size_t>(c.out_w), 0.f);
    blend_row_.assign(static_cast<size_t>(c.out_w), 0.f);
    Axis rows = axis(c.out_h, top, crop_h), cols = axis(c.out_w, left, crop_w);
    const int step = c.layout == Layout::I420 ? 1 : 2, px = yuv ? 1 : 3;
    // Each rotated axis lands on one source axis: 'r' (source row) or 'q' (source column), maybe flipped.
    const bool i_is_row = c.rotation == 0 || c.rotation == 180, i_flip = c.rotation == 180 || c.rotation == 270;
    const bool j_flip = c.rotation == 90 || c.rotation == 180;
    auto part = [&](bool source_row, int v, bool chroma) -> int32_t {
      if (!yuv) return source_row ? v * stride_ : v * 3;
      if (!chroma) return source_row ? v * stride_ : v * px;
      return source_row ? (v / 2) * chroma_stride_ : (v / 2) * step;
    };
    taps_ = rows.taps * cols.taps;
    for (int t = 0; t < rows.taps; ++t) {
      for (int i = 0; i < c.out_h; ++i) {
        int v = rows.pos[t][i];
        if (i_flip) v = (i_is_row ? c.height : c.width) - 1 - v;  // 180: h-1-ri (row); 270: w-1-ri (column)
        row_luma_[t].push_back(part(i_is_row, v, false));
        row_chroma_[t].push_back(part(i_is_row, v, true));
        if (c.bilinear) row_w_[t].push_back(rows.w[t][i]);
      }
      for (int j = 0; j < c.out_w; ++j) {
        int v = cols.pos[t][j];
        if (j_flip) v = (i_is_row ? c.width : c.height) - 1 - v;  // 90: h-1-rj (row); 180: w-1-rj (column)
        col_luma_[t].push_back(part(!i_is_row, v, false));
        col_chroma_[t].push_back(part(!i_is_row, v, true));
        if (c.bilinear) col_w_[t].push_back(cols.w[t][j]);
      }
    }
    colour(yuv);
  }

  void colour(bool yuv) {
    const FrameConfig& c = cfg_;
    const double KR = 0.299, KB = 0.114, KG = 1.0 - KR - KB;
    double m[3][3], so[3] = {0.0, 0.0, 0.0};
    if (yuv) {
      double y0 = c.video_range ? 16.0 : 0.0, yg = c.video_range ? 255.0 / 219.0 : 1.0;
      double cg = c.video_range ? 255.0 / 224.0 : 1.0;
      double rows[3][3] = {{1.0, 0.0, 2.0 * (1.0 - KR)},
                           {1.0, -2.0 * KB * (1.0 - KB) / KG, -2.0 * KR * (1.0 - KR) / KG},
                           {1.0, 2.0 * (1.0 - KB), 0.0}};
      for (int r = 0; r < 3; ++r) {
        m[r][0] = rows[r][0] * yg; m[r][1] = rows[r][1] * cg; m[r][2] = rows[r][2] * cg;
      }
      so[0] = y0; so[1] = 128.0; so[2] = 128.0;
    } else {
      for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 3; ++k) m[r][k] = (c.layout == Layout::BGR ? (r + k == 2) : (r == k)) ? 1.0 : 0.0;
    }
    double gain[3], offset[3];
    for (int r = 0; r < 3; ++r) {
      gain[r] = c.uint8_output ? 1.0 : 1.0 / (255.0 * c.std[r]);
      offset[r] = c.uint8_output ? 0.5 : -c.mean[r] / c.std[r];
    }
    if (c.bgr_output) {
      std::swap(m[0], m[2]); std::swap(gain[0], gain[2]); std::swap(offset[0], offset[2]);
    }
    clip_ = yuv;
    for (int r = 0; r < 3; ++r) {
      offset_[r] = static_cast<float>(offset[r]);
      source_offset_[r] = static_cast<float>(so[r]);
      if (taps_ == 1) {  // nearest: samples straight to output units, clipped to the gamut in output units
        double s[3] = {m[r][0] * gain[r], m[r][1] * gain[r], m[r][2] * gain[r]};
        for (int k = 0; k < 3; ++k) coef_[r][k] = static_cast<float>(s[k]);
        bias_[r] = static_cast<float>(offset[r] - (s[0] * so[0] + s[1] * so[1] + s[2] * so[2]));
        lo_[r] = static_cast<float>(offset[r]);
        hi_[r] = static_cast<float>(255.0 * gain[r] + offset[r]);
      } else {  // bilinear: colour in pixel units; scaled terms first, then unit terms (plain adds in Python)
        int n = 0;
        for (int kind = 0; kind < 3; ++kind)  // 0: scaled, 1: unit, 2: zero
          for (int k = 0; k < 3; ++k)
            if ((m[r][k] == 0.0 ? 2 : m[r][k] == 1.0 ? 1 : 0) == kind) {
              order_[r][n] = k;
              coef_[r][n++] = static_cast<float>(m[r][k]);
            }
      }
    }
    for (int r = 0; r < 3; ++r) gain_[r] = gain[r];
  }
};

}  // namespace camera
}  // namespace mobilize
