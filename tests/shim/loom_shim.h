// loom_shim.h - thin C++ helpers over the C API for the tests: assertion
// macros that print loomGetLastError, RAII guards, datatype facts.
#ifndef LOOM_TESTS_SHIM_H
#define LOOM_TESTS_SHIM_H

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "loom.h"

#define ASSERT_LOOM_OK(call)                                                      \
  do {                                                                            \
    loomResult_t r_ = (call);                                                     \
    ASSERT_EQ(r_, loomSuccess) << #call << ": " << loomGetErrorString(r_) << ": " \
                               << loomGetLastError(NULL);                         \
  } while (0)
#define EXPECT_LOOM_OK(call)                                                      \
  do {                                                                            \
    loomResult_t r_ = (call);                                                     \
    EXPECT_EQ(r_, loomSuccess) << #call << ": " << loomGetErrorString(r_) << ": " \
                               << loomGetLastError(NULL);                         \
  } while (0)

namespace shim {

inline size_t dtype_size(loomDataType_t t) {
  switch (t) {
    case loomInt8:
    case loomUint8:
    case loomFloat8e4m3:
    case loomFloat8e5m2:
      return 1;
    case loomFloat16:
    case loomBfloat16:
      return 2;
    case loomInt32:
    case loomUint32:
    case loomFloat32:
      return 4;
    case loomInt64:
    case loomUint64:
    case loomFloat64:
      return 8;
    default:
      return 0;
  }
}

inline const char* dtype_name(loomDataType_t t) {
  static const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",  "uint64",
                                "float16", "float32", "float64", "bfloat16", "f8e4m3", "f8e5m2"};
  return (unsigned)t < 12 ? names[t] : "unknown";
}

inline const char* op_name(loomRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return (unsigned)op < 5 ? names[op] : "premulsum";
}

inline bool is_float(loomDataType_t t) {
  return t == loomFloat16 || t == loomFloat32 || t == loomFloat64 || t == loomBfloat16 ||
         t == loomFloat8e4m3 || t == loomFloat8e5m2;
}
inline bool is_unsigned(loomDataType_t t) {
  return t == loomUint8 || t == loomUint32 || t == loomUint64;
}

// Destroys a communicator at scope exit unless released.
class CommGuard {
 public:
  explicit CommGuard(loomComm_t c = nullptr) : c_(c) {}
  ~CommGuard() {
    if (c_) loomCommDestroy(c_);
  }
  CommGuard(const CommGuard&) = delete;
  CommGuard& operator=(const CommGuard&) = delete;
  loomComm_t get() const { return c_; }
  loomComm_t release() {
    loomComm_t c = c_;
    c_ = nullptr;
    return c;
  }

 private:
  loomComm_t c_;
};

class StreamGuard {
 public:
  StreamGuard() {
    if (loomStreamCreate(&s_) != loomSuccess) s_ = nullptr;
  }
  ~StreamGuard() {
    if (s_) loomStreamDestroy(s_);
  }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  loomStream_t get() const { return s_; }

 private:
  loomStream_t s_ = nullptr;
};

}  // namespace shim

#endif
