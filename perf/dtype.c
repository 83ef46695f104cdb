/* dtype.c - datatype and op names as nccl-tests spells them, and the element encodings the
 * checks need: integers wrap to their width, floats (including half, bfloat16 and both fp8
 * formats) are encoded with round-to-nearest-even, here independently of the library. */
#include <math.h>
#include <string.h>

#include "common.h"

struct dtype_info {
  const char* name;
  size_t size;
  int is_float, is_signed;
};

static const struct dtype_info dtypes[loomNumTypes] = {
    [loomInt8] = {"int8", 1, 0, 1},         [loomUint8] = {"uint8", 1, 0, 0},
    [loomInt32] = {"int32", 4, 0, 1},       [loomUint32] = {"uint32", 4, 0, 0},
    [loomInt64] = {"int64", 8, 0, 1},       [loomUint64] = {"uint64", 8, 0, 0},
    [loomFloat16] = {"half", 2, 1, 1},      [loomFloat32] = {"float", 4, 1, 1},
    [loomFloat64] = {"double", 8, 1, 1},    [loomBfloat16] = {"bfloat16", 2, 1, 1},
    [loomFloat8e4m3] = {"f8e4m3", 1, 1, 1}, [loomFloat8e5m2] = {"f8e5m2", 1, 1, 1},
};

/* Other spellings people type: Loom's and NCCL's enum names, shortened. */
static const struct {
  const char* alias;
  loomDataType_t type;
} aliases[] = {
    {"char", loomInt8},
    {"int", loomInt32},
    {"float16", loomFloat16},
    {"fp16", loomFloat16},
    {"float32", loomFloat32},
    {"fp32", loomFloat32},
    {"float64", loomFloat64},
    {"fp64", loomFloat64},
    {"bf16", loomBfloat16},
    {"fp8e4m3", loomFloat8e4m3},
    {"float8e4m3", loomFloat8e4m3},
    {"e4m3", loomFloat8e4m3},
    {"fp8e5m2", loomFloat8e5m2},
    {"float8e5m2", loomFloat8e5m2},
    {"e5m2", loomFloat8e5m2},
};

static const char* const op_names[PERF_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "mulsum"};

const char* dtype_name(loomDataType_t t) {
  return dtypes[t].name;
}
size_t dtype_size(loomDataType_t t) {
  return dtypes[t].size;
}
int dtype_is_float(loomDataType_t t) {
  return dtypes[t].is_float;
}
int dtype_is_signed(loomDataType_t t) {
  return dtypes[t].is_signed;
}
const char* op_name(int op) {
  return op_names[op];
}

int dtype_parse(const char* s) {
  if (strcmp(s, "all") == 0) return PERF_ALL;
  for (int t = 0; t < loomNumTypes; t++)
    if (strcmp(s, dtypes[t].name) == 0) return t;
  for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
    if (strcmp(s, aliases[i].alias) == 0) return (int)aliases[i].type;
  return -2;
}

int op_parse(const char* s) {
  if (strcmp(s, "all") == 0) return PERF_ALL;
  for (int o = 0; o < PERF_NUM_OPS; o++)
    if (strcmp(s, op_names[o]) == 0) return o;
  return -2;
}

/* ---- Small floats: exponent bits, mantissa bits, bias, whether the top exponent is inf/NaN ----
 */

struct small_fmt {
  int ebits, mbits, bias, ieee_top;
};

static const struct small_fmt fmt_half = {5, 10, 15, 1};
static const struct small_fmt fmt_bf16 = {8, 7, 127, 1};
static const struct small_fmt fmt_e4m3 = {4, 3, 7, 0}; /* no inf; S.1111.111 is NaN; max 448 */
static const struct small_fmt fmt_e5m2 = {5, 2, 15, 1};

static const struct small_fmt* small_fmt_of(loomDataType_t t) {
  switch (t) {
    case loomFloat16:
      return &fmt_half;
    case loomBfloat16:
      return &fmt_bf16;
    case loomFloat8e4m3:
      return &fmt_e4m3;
    case loomFloat8e5m2:
      return &fmt_e5m2;
    default:
      return NULL;
  }
}

static uint32_t small_nan(const struct small_fmt* f) {
  uint32_t top = (1u << f->ebits) - 1;
  return (top << f->mbits) | (f->ieee_top ? 1u << (f->mbits - 1) : (1u << f->mbits) - 1);
}

/* Round-to-nearest-even of x into the format; overflow gives inf (NaN for e4m3). */
static uint32_t small_encode(double x, const struct small_fmt* f) {
  if (isnan(x)) return small_nan(f);
  uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0;
  double a = fabs(x);
  if (a == 0.0) return sign;
  int e;
  frexp(a, &e);
  int exp = e - 1, emin = 1 - f->bias;
  uint32_t one = 1u << f->mbits;
  if (exp < emin) { /* subnormal: the mantissa counts units of 2^(emin - mbits) */
    uint32_t q = (uint32_t)nearbyint(ldexp(a, f->mbits - emin));
    return sign | q; /* q == one lands on the smallest normal, as it should */
  }
  uint32_t q = (uint32_t)nearbyint(ldexp(a, f->mbits - exp));
  if (q == 2 * one) {
    q = one;
    exp++;
  }
  uint32_t field = (uint32_t)(exp + f->bias), top = (1u << f->ebits) - 1;
  int over = f->ieee_top ? field >= top : (field > top || (field == top && q - one == one - 1));
  if (over) return f->ieee_top ? sign | (top << f->mbits) : sign | small_nan(f);
  return sign | (field << f->mbits) | (q - one);
}

static double small_decode(uint32_t bits, const struct small_fmt* f) {
  uint32_t mant = bits & ((1u << f->mbits) - 1);
  uint32_t field = (bits >> f->mbits) & ((1u << f->ebits) - 1);
  int neg = (bits >> (f->ebits + f->mbits)) & 1;
  uint32_t top = (1u << f->ebits) - 1;
  double v;
  if (f->ieee_top && field == top)
    v = mant ? NAN : INFINITY;
  else if (!f->ieee_top && field == top && mant == (1u << f->mbits) - 1)
    v = NAN;
  else if (field == 0)
    v = ldexp((double)mant, 1 - f->bias - f->mbits);
  else
    v = ldexp((double)(mant | (1u << f->mbits)), (int)field - f->bias - f->mbits);
  return neg ? -v : v;
}

/* ---- Elements ---- */

void dtype_store(loomDataType_t t, void* dst, int64_t v) {
  const struct small_fmt* f = small_fmt_of(t);
  if (f) {
    uint32_t bits = small_encode((double)v, f);
    if (dtypes[t].size == 1) {
      uint8_t b = (uint8_t)bits;
      memcpy(dst, &b, 1);
    } else {
      uint16_t h = (uint16_t)bits;
      memcpy(dst, &h, 2);
    }
    return;
  }
  if (t == loomFloat32) {
    float x = (float)v;
    memcpy(dst, &x, sizeof(x));
  } else if (t == loomFloat64) {
    double x = (double)v;
    memcpy(dst, &x, sizeof(x));
  } else { /* integers: the low bytes of the two's complement value */
    uint64_t u = (uint64_t)v;
    uint8_t b1 = (uint8_t)u;
    uint32_t b4 = (uint32_t)u;
    if (dtypes[t].size == 1)
      memcpy(dst, &b1, 1);
    else if (dtypes[t].size == 4)
      memcpy(dst, &b4, 4);
    else
      memcpy(dst, &u, 8);
  }
}

static double float_load(loomDataType_t t, const void* p) {
  const struct small_fmt* f = small_fmt_of(t);
  if (f) {
    if (dtypes[t].size == 1) return small_decode(*(const uint8_t*)p, f);
    uint16_t h;
    memcpy(&h, p, 2);
    return small_decode(h, f);
  }
  if (t == loomFloat32) {
    float x;
    memcpy(&x, p, sizeof(x));
    return x;
  }
  double x;
  memcpy(&x, p, sizeof(x));
  return x;
}

int dtype_equal(loomDataType_t t, const void* a, const void* b) {
  if (!dtypes[t].is_float) return memcmp(a, b, dtypes[t].size) == 0;
  return float_load(t, a) == float_load(t, b); /* NaN never equals */
}
