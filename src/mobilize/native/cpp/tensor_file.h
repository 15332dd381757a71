// Tensor lists on disk, shared by mobilize (Python) and its native programs.  No dependencies.
//
// Layout (little-endian), written by mobilize/native/tensorfile.py and by --output_file:
//   "MBT1"  uint32 count
//   per tensor: uint32 dtype (c10/ExecuTorch ScalarType code: 0 uint8, 1 int8, 2 int16, 3 int32,
//               4 int64, 5 float16, 6 float32, 7 float64, 11 bool, 15 bfloat16),
//               uint32 ndim, int64 sizes[ndim], uint64 nbytes, data (logical row-major order)
//
// A "raw" input (read_raw_file) is just the bytes of one tensor in row-major order, as an app
// would fill it from a camera frame; its shape and type come from the model or the command line.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace mobilize {

struct RawTensor {
  int32_t dtype = 6;
  std::vector<int64_t> sizes;
  std::vector<uint8_t> data;  // logical row-major order
  bool scalar = false;        // a plain Int/Bool/Double value (ExecuTorch EValue), not a tensor

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

inline size_t element_size(int32_t dtype) {
  switch (dtype) {
    case 0: case 1: case 11: return 1;
    case 2: case 5: case 15: return 2;
    case 3: return 4;
    case 4: return 8;
    case 6: return 4;
    case 7: return 8;
    default: throw std::runtime_error("unsupported tensor dtype code " + std::to_string(dtype));
  }
}

inline const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case 0: return "uint8";
    case 1: return "int8";
    case 2: return "int16";
    case 3: return "int32";
    case 4: return "int64";
    case 5: return "float16";
    case 6: return "float32";
    case 7: return "float64";
    case 11: return "bool";
    case 15: return "bfloat16";
    default: return "unknown";
  }
}

inline int32_t dtype_code(const std::string& name) {
  // --input_type spellings (speed_benchmark_torch) and torch names.
  if (name == "float" || name == "float32") return 6;
  if (name == "double" || name == "float64") return 7;
  if (name == "half" || name == "float16") return 5;
  if (name == "bfloat16") return 15;
  if (name == "int64" || name == "long") return 4;
  if (name == "int32" || name == "int") return 3;
  if (name == "int16") return 2;
  if (name == "int8") return 1;
  if (name == "uint8") return 0;
  if (name == "bool") return 11;
  throw std::runtime_error("unknown --input_type '" + name + "'");
}

inline std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

namespace detail {
template <typename T>
T take(const std::vector<uint8_t>& buf, size_t& pos) {
  if (pos + sizeof(T) > buf.size()) throw std::runtime_error("tensor file is truncated");
  T value;
  std::memcpy(&value, buf.data() + pos, sizeof(T));
  pos += sizeof(T);
  return value;
}
template <typename T>
void put(std::ofstream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof(T));
}
}  // namespace detail

inline std::vector<RawTensor> read_tensor_file(const std::string& path) {
  std::vector<uint8_t> buf = read_file_bytes(path);
  if (buf.size() < 8 || std::memcmp(buf.data(), "MBT1", 4) != 0)
    throw std::runtime_error(path + " is not a mobilize tensor file (no MBT1 header)");
  size_t pos = 4;
  uint32_t count = detail::take<uint32_t>(buf, pos);
  std::vector<RawTensor> tensors(count);
  for (auto& t : tensors) {
    t.dtype = static_cast<int32_t>(detail::take<uint32_t>(buf, pos));
    uint32_t ndim = detail::take<uint32_t>(buf, pos);
    for (uint32_t d = 0; d < ndim; ++d) t.sizes.push_back(detail::take<int64_t>(buf, pos));
    uint64_t nbytes = detail::take<uint64_t>(buf, pos);
    if (pos + nbytes > buf.size() || nbytes != static_cast<uint64_t>(t.numel()) * element_size(t.dtype))
      throw std::runtime_error(path + ": tensor data does not match its header");
    t.data.assign(buf.begin() + pos, buf.begin() + pos + nbytes);
    pos += nbytes;
  }
  return tensors;
}

inline void write_tensor_file(const std::string& path, const std::vector<RawTensor>& tensors) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write("MBT1", 4);
  detail::put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    detail::put<uint32_t>(out, static_cast<uint32_t>(t.dtype));
    detail::put<uint32_t>(out, static_cast<uint32_t>(t.sizes.size()));
    for (int64_t s : t.sizes) detail::put<int64_t>(out, s);
    detail::put<uint64_t>(out, static_cast<uint64_t>(t.data.size()));
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  }
  if (!out) throw std::runtime_error("error writing " + path);
}

// One tensor's bytes in row-major order; the file size must match sizes x dtype.
inline RawTensor read_raw_file(const std::string& path, const std::vector<int64_t>& sizes, int32_t dtype) {
  RawTensor t;
  t.dtype = dtype;
  t.sizes = sizes;
  t.data = read_file_bytes(path);
  size_t want = static_cast<size_t>(t.numel()) * element_size(dtype);
  if (t.data.size() != want)
    throw std::runtime_error(path + " has " + std::to_string(t.data.size()) + " bytes; the input needs " +
                             std::to_string(want) + " (" + dtype_name(dtype) + ", row-major)");
  return t;
}

// Copy between a logical row-major buffer and a strided one (strides in elements).
// to_strided: logical -> strided; otherwise strided -> logical.
inline void strided_copy(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& sizes,
                         const std::vector<int64_t>& strides, size_t elem, bool to_strided) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  const size_t nd = sizes.size();
  std::vector<int64_t> index(nd, 0);
  for (int64_t linear = 0; linear < n; ++linear) {
    int64_t offset = 0;
    for (size_t d = 0; d < nd; ++d) offset += index[d] * strides[d];
    if (to_strided)
      std::memcpy(dst + offset * elem, src + linear * elem, elem);
    else
      std::memcpy(dst + linear * elem, src + offset * elem, elem);
    for (size_t d = nd; d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
}

// Strides (in elements) of a dense tensor laid out in dim_order (outermost dimension first).
inline std::vector<int64_t> strides_for_dim_order(const std::vector<int64_t>& sizes,
                                                  const std::vector<int64_t>& dim_order) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t step = 1;
  for (size_t i = dim_order.size(); i-- > 0;) {
    strides[dim_order[i]] = step;
    step *= sizes[dim_order[i]];
  }
  return strides;
}

inline double half_to_double(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * mantissa * (1.0 / (1 << 24));  // subnormal
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  double frac = 1.0 + mantissa / 1024.0;
  return sign * (exponent >= 15 ? frac * static_cast<double>(1 << (exponent - 15))
                                : frac / static_cast<double>(1 << (15 - exponent)));
}

// Float view of a tensor's values (for printing and top-k); integer types are converted.
inline std::vector<double> as_doubles(const RawTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = t.data.data() + i * element_size(t.dtype);
    switch (t.dtype) {
      case 0: out[i] = *p; break;
      case 1: out[i] = static_cast<int8_t>(*p); break;
      case 11: out[i] = *p ? 1.0 : 0.0; break;
      case 2: { int16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      case 3: { int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case 4: { int64_t v; std::memcpy(&v, p, 8); out[i] = static_cast<double>(v); break; }
      case 6: { float v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case 7: { double v; std::memcpy(&v, p, 8); out[i] = v; break; }
      case 15: { uint32_t bits = 0; std::memcpy(reinterpret_cast<uint8_t*>(&bits) + 2, p, 2);
                 float v; std::memcpy(&v, &bits, 4); out[i] = v; break; }
      case 5: { uint16_t h; std::memcpy(&h, p, 2); out[i] = half_to_double(h); break; }
      default: out[i] = 0.0;
    }
  }
  return out;
}

}  // namespace mobilize
