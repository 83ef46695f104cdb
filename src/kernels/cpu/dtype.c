/* dtype.c - the scalar float16/bfloat16/float8 conversions (element sizes
 * and names are core's: core/dtype.c). The conversions themselves are
 * static inline functions in reduce_impl.h, so that the kernels inline the
 * very same definition and a conversion can never differ between dtype.c
 * and a kernel. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_impl.h"

float half_to_float(uint16_t h) {
  return half_decode(h);
}
uint16_t float_to_half(float f) {
  return half_encode(f);
}
float bf16_to_float(uint16_t h) {
  return bf16_decode(h);
}
uint16_t float_to_bf16(float f) {
  return bf16_encode(f);
}
float fp8e4m3_to_float(uint8_t v) {
  return fp8e4m3_decode(v);
}
uint8_t float_to_fp8e4m3(float f) {
  return fp8e4m3_encode(f);
}
float fp8e5m2_to_float(uint8_t v) {
  return fp8e5m2_decode(v);
}
uint8_t float_to_fp8e5m2(float f) {
  return fp8e5m2_encode(f);
}
