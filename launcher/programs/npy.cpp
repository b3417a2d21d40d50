#include "launcher/programs/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pn::npy {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// The value text of 'key' in the header dict, up to the next top-level comma or brace.
std::string dict_value(const std::string& path, const std::string& h, const std::string& key) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) fail(path, "npy header has no '" + key + "': " + h);
  size_t p = h.find(':', k);
  if (p == std::string::npos) fail(path, "malformed npy header: " + h);
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  size_t e = p;
  if (h[p] == '(') {
    e = h.find(')', p);
    if (e == std::string::npos) fail(path, "malformed shape in npy header: " + h);
    return h.substr(p, e - p + 1);
  }
  while (e < h.size() && h[e] != ',' && h[e] != '}') ++e;
  std::string v = h.substr(p, e - p);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

bool little_endian_host() {
  const uint16_t one = 1;
  char c;
  std::memcpy(&c, &one, 1);
  return c == 1;
}

void write_raw(const std::string& path, const std::string& descr, const void* data,
               size_t bytes, const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // Pad with spaces so that magic + version + length + header is a multiple of 64, then '\n'.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 65535) fail(path, "npy header too long");
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, "cannot open for writing");
  const uint16_t len = uint16_t(dict.size());
  f.write("\x93NUMPY\x01\x00", 8);
  const char lb[2] = {char(len & 0xff), char(len >> 8)};
  f.write(lb, 2);
  f.write(dict.data(), std::streamsize(dict.size()));
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!f) fail(path, "write failed");
}

}  // namespace

size_t Array::numel() const {
  size_t n = 1;
  for (int64_t s : shape) n *= size_t(s);
  return n;
}

Array read(const std::string& path) {
  if (!little_endian_host()) fail(path, "big-endian hosts are not supported");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open (does the file exist?)");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    fail(path, "not a .npy file (bad magic string)");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t hlen = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) fail(path, "truncated npy header");
    hlen = b[0] | (uint32_t(b[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) fail(path, "truncated npy header");
    hlen = b[0] | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
  } else {
    fail(path, "unsupported npy format version " + std::to_string(major));
  }
  std::string h(hlen, '\0');
  if (!f.read(h.data(), hlen)) fail(path, "truncated npy header");
  Array a;
  std::string descr = dict_value(path, h, "descr");
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"'))
    fail(path, "unsupported dtype " + descr + " (structured dtypes are not supported)");
  a.descr = descr.substr(1, descr.size() - 2);
  const std::string fo = dict_value(path, h, "fortran_order");
  if (fo == "True")
    fail(path, "Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  if (fo != "False") fail(path, "malformed fortran_order '" + fo + "'");
  std::string shape = dict_value(path, h, "shape");
  std::stringstream ss(shape.substr(1, shape.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    try {
      size_t used = 0;
      const long long v = std::stoll(item.substr(b), &used);
      if (v < 0) throw std::invalid_argument("negative");
      a.shape.push_back(v);
    } catch (const std::exception&) {
      fail(path, "malformed shape " + shape);
    }
  }
  size_t itemsize = 0;
  if (a.descr == "<f4") itemsize = 4;
  else if (a.descr == "<f8") itemsize = 8;
  else if (a.descr == "|b1" || a.descr == "|u1" || a.descr == "<u1" || a.descr == "u1" ||
           a.descr == "b1")
    itemsize = 1;
  else
    fail(path, "unsupported dtype '" + a.descr +
                   "' (need little-endian float32 '<f4', float64 '<f8', bool or uint8)");
  a.bytes.resize(a.numel() * itemsize);
  if (!f.read(a.bytes.data(), std::streamsize(a.bytes.size())))
    fail(path, "truncated data: expected " + std::to_string(a.bytes.size()) + " bytes for shape " +
                   shape);
  return a;
}

std::vector<float> read_float32(const std::string& path, std::vector<int64_t>* shape) {
  Array a = read(path);
  if (a.descr != "<f4") fail(path, "dtype '" + a.descr + "' where float32 ('<f4') is needed");
  std::vector<float> v(a.numel());
  std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
  if (shape) *shape = a.shape;
  return v;
}

std::vector<uint8_t> read_mask(const std::string& path, std::vector<int64_t>* shape) {
  Array a = read(path);
  std::vector<uint8_t> m(a.numel());
  if (a.descr == "<f4") {
    for (size_t i = 0; i < m.size(); ++i) {
      float v;
      std::memcpy(&v, a.bytes.data() + 4 * i, 4);
      m[i] = v != 0.0f;
    }
  } else if (a.descr.size() >= 2 && a.descr.substr(a.descr.size() - 2) == "b1") {
    for (size_t i = 0; i < m.size(); ++i) m[i] = a.bytes[i] != 0;
  } else if (a.descr.size() >= 2 && a.descr.substr(a.descr.size() - 2) == "u1") {
    for (size_t i = 0; i < m.size(); ++i) m[i] = a.bytes[i] != 0;
  } else {
    fail(path, "mask dtype '" + a.descr + "' (need bool, uint8 or float32)");
  }
  if (shape) *shape = a.shape;
  return m;
}

void write_float32(const std::string& path, const float* data,
                   const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t s : shape) n *= size_t(s);
  write_raw(path, "<f4", data, n * sizeof(float), shape);
}

void write_float64(const std::string& path, const double* data,
                   const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t s : shape) n *= size_t(s);
  write_raw(path, "<f8", data, n * sizeof(double), shape);
}

}  // namespace pn::npy
