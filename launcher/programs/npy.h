// A small reader and writer of NumPy .npy files (format versions 1.0 to 3.0), enough for
// pnnorm: little-endian float32 and float64, and bool/uint8 masks; C order only. Every failure
// throws std::runtime_error naming the file and what is wrong with it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pn::npy {

struct Array {
  std::string descr;            // numpy dtype string, e.g. "<f4", "|b1", "|u1"
  std::vector<int64_t> shape;
  std::vector<char> bytes;      // raw data, C order
  size_t numel() const;
};

Array read(const std::string& path);
// float32 data; any other dtype is rejected.
std::vector<float> read_float32(const std::string& path, std::vector<int64_t>* shape);
// Mask: bool, uint8 or float32; nonzero = 1.
std::vector<uint8_t> read_mask(const std::string& path, std::vector<int64_t>* shape);

void write_float32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
void write_float64(const std::string& path, const double* data,
                   const std::vector<int64_t>& shape);

}  // namespace pn::npy
