// Read an ExecuTorch bundled program (.bpte) with no flatbuffers library: the program bytes inside
// it and its test cases (inputs and expected outputs), following bundled_program_schema.fbs
// ("BP08": BundledProgram{version, method_test_suites, program}).  The ExecuTorch wheel does not
// ship the bundled-program runtime library, and these few tables are all a benchmark needs.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor_file.h"

namespace mobilize {
namespace bpte {

class Buffer {
 public:
  explicit Buffer(const std::vector<uint8_t>& bytes) : b_(bytes) {}
  template <typename T>
  T read(size_t pos) const {
    if (pos + sizeof(T) > b_.size()) throw std::runtime_error("bundled program is truncated or corrupt");
    T v;
    std::memcpy(&v, b_.data() + pos, sizeof(T));
    return v;
  }
  const uint8_t* at(size_t pos, size_t n) const {
    if (pos + n > b_.size()) throw std::runtime_error("bundled program is truncated or corrupt");
    return b_.data() + pos;
  }

 private:
  const std::vector<uint8_t>& b_;
};

// One flatbuffer table: fields by id through its vtable.
struct Table {
  const Buffer* buf;
  size_t pos;

  uint16_t field(int id) const {
    size_t vtable = pos - static_cast<int64_t>(buf->read<int32_t>(pos));
    uint16_t vsize = buf->read<uint16_t>(vtable);
    size_t slot = 4 + 2 * static_cast<size_t>(id);
    return slot < vsize ? buf->read<uint16_t>(vtable + slot) : 0;
  }
  template <typename T>
  T scalar(int id, T fallback) const {
    uint16_t off = field(id);
    return off ? buf->read<T>(pos + off) : fallback;
  }
  size_t indirect(int id) const {  // position of the object an offset field points to (0: absent)
    uint16_t off = field(id);
    if (!off) return 0;
    return pos + off + buf->read<uint32_t>(pos + off);
  }
  Table table(int id) const { return Table{buf, indirect(id)}; }
  bool has(int id) const { return field(id) != 0; }
  // A vector: (position of its first element, length).
  std::pair<size_t, uint32_t> vector(int id) const {
    size_t v = indirect(id);
    if (!v) return {0, 0};
    return {v + 4, buf->read<uint32_t>(v)};
  }
  std::vector<Table> tables(int id) const {
    auto [start, n] = vector(id);
    std::vector<Table> out;
    for (uint32_t i = 0; i < n; ++i) {
      size_t p = start + 4 * static_cast<size_t>(i);
      out.push_back(Table{buf, p + buf->read<uint32_t>(p)});
    }
    return out;
  }
  std::string string(int id) const {
    auto [start, n] = vector(id);
    return n ? std::string(reinterpret_cast<const char*>(buf->at(start, n)), n) : std::string();
  }
};

enum ValueKind : uint8_t { kNone = 0, kTensor = 1, kInt = 2, kBool = 3, kDouble = 4 };

struct Case {
  std::vector<RawTensor> inputs;            // logical row-major order
  std::vector<RawTensor> expected_outputs;  // logical row-major order
};

struct Bundle {
  std::vector<uint8_t> program;  // the .pte inside
  std::vector<Case> cases;       // of the method asked for
};

inline bool is_bundled(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 8 && bytes[4] == 'B' && bytes[5] == 'P';
}

inline RawTensor read_value(const Table& value) {
  uint8_t kind = value.scalar<uint8_t>(0, kNone);
  Table v = value.table(1);
  RawTensor t;
  if (kind == kTensor) {
    t.dtype = v.scalar<int8_t>(0, 6);
    auto [sizes_at, ndim] = v.vector(1);
    for (uint32_t d = 0; d < ndim; ++d) t.sizes.push_back(v.buf->read<int32_t>(sizes_at + 4 * d));
    auto [order_at, norder] = v.vector(3);
    std::vector<int64_t> order;
    for (uint32_t d = 0; d < norder; ++d) order.push_back(v.buf->read<uint8_t>(order_at + d));
    if (order.empty())
      for (uint32_t d = 0; d < ndim; ++d) order.push_back(d);
    auto [data_at, nbytes] = v.vector(2);
    size_t elem = element_size(t.dtype);
    if (nbytes != static_cast<uint32_t>(t.numel()) * elem) throw std::runtime_error("bundled tensor has the wrong size");
    t.data.resize(nbytes);
    // Stored in its dim order (physical); hand it out in logical order.
    strided_copy(v.buf->at(data_at, nbytes), t.data.data(), t.sizes, strides_for_dim_order(t.sizes, order), elem, false);
  } else if (kind == kInt) {
    t.scalar = true;
    t.dtype = 4;
    int64_t x = v.scalar<int64_t>(0, 0);
    t.data.resize(8);
    std::memcpy(t.data.data(), &x, 8);
  } else if (kind == kBool) {
    t.scalar = true;
    t.dtype = 11;
    t.data.assign(1, v.scalar<uint8_t>(0, 0));
  } else if (kind == kDouble) {
    t.scalar = true;
    t.dtype = 7;
    double x = v.scalar<double>(0, 0.0);
    t.data.resize(8);
    std::memcpy(t.data.data(), &x, 8);
  } else {
    throw std::runtime_error("bundled value of unknown kind " + std::to_string(kind));
  }
  return t;
}

inline Bundle read(const std::vector<uint8_t>& bytes, const std::string& method = "forward") {
  if (!is_bundled(bytes)) throw std::runtime_error("not an ExecuTorch bundled program (no 'BP' identifier)");
  Buffer buf(bytes);
  Table root{&buf, buf.read<uint32_t>(0)};
  Bundle bundle;
  auto [program_at, program_len] = root.vector(2);
  if (!program_len) throw std::runtime_error("bundled program holds no program");
  const uint8_t* program = buf.at(program_at, program_len);
  bundle.program.assign(program, program + program_len);
  for (const Table& suite : root.tables(1)) {
    if (suite.string(0) != method) continue;
    for (const Table& tc : suite.tables(1)) {
      Case c;
      for (const Table& v : tc.tables(0)) c.inputs.push_back(read_value(v));
      for (const Table& v : tc.tables(1)) c.expected_outputs.push_back(read_value(v));
      bundle.cases.push_back(std::move(c));
    }
  }
  return bundle;
}

}  // namespace bpte
}  // namespace mobilize
