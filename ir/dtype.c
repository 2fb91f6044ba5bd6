/* dtype.c — dtype table and element conversions. */
#include "dtype.h"

#include <math.h>
#include <string.h>

static const struct {
  const char *name;
  int32_t onnx;
  unsigned size;
  unsigned flags;
} dtypes[SC_DTYPE_COUNT] = {
#define X(e, s, o, b, f) {s, o, b, f},
    SC_DTYPES(X)
#undef X
};

_Static_assert(sizeof dtypes / sizeof dtypes[0] == SC_DTYPE_COUNT,
               "dtype table matches enum");

const char *sc_dtype_name(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT ? dtypes[t].name : "?";
}
sc_dtype sc_dtype_parse(const char *name) {
  for (int i = 0; i < SC_DTYPE_COUNT; i++)
    if (strcmp(dtypes[i].name, name) == 0) return (sc_dtype)i;
  return SC_DTYPE_COUNT;
}
unsigned sc_dtype_size(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT ? dtypes[t].size : 0;
}
bool sc_dtype_is_float(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT && (dtypes[t].flags & SC_DTF_FLOAT);
}
bool sc_dtype_is_int(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT && (dtypes[t].flags & SC_DTF_INT);
}
bool sc_dtype_is_signed(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT && (dtypes[t].flags & SC_DTF_SIGNED);
}
bool sc_dtype_is_numeric(sc_dtype t) {
  return sc_dtype_is_float(t) || sc_dtype_is_int(t) || t == SC_DTYPE_BOOL;
}
bool sc_dtype_is_narrow(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT && (dtypes[t].flags & SC_DTF_NARROW);
}
sc_dtype sc_dtype_compute(sc_dtype t) {
  if (t == SC_DTYPE_F16 || t == SC_DTYPE_BF16) return SC_DTYPE_F32;
  if (!sc_dtype_is_narrow(t)) return t;
  if (sc_dtype_is_float(t)) return SC_DTYPE_F32;
  return sc_dtype_is_signed(t) ? SC_DTYPE_I8 : SC_DTYPE_U8;
}
unsigned sc_dtype_file_bits(sc_dtype t) {
  switch (t) {
  case SC_DTYPE_U4: case SC_DTYPE_I4: case SC_DTYPE_F4E2M1: return 4;
  case SC_DTYPE_U2: case SC_DTYPE_I2: return 2;
  default: return 8 * sc_dtype_size(t);
  }
}
bool sc_dtype_holds(sc_dtype file, sc_dtype want) {
  if (file == want) return true;
  if (want == SC_DTYPE_BF16) return file == SC_DTYPE_U16;
  if (sc_dtype_is_narrow(want))
    return file == (sc_dtype_is_signed(want) ? SC_DTYPE_I8 : SC_DTYPE_U8);
  return false;
}
uint64_t sc_dtype_file_bytes(sc_dtype t, uint64_t n) {
  unsigned bits = sc_dtype_file_bits(t);
  return bits >= 8 ? n * (bits / 8) : (n * bits + 7) / 8;
}
void sc_narrow_unpack(sc_dtype t, const uint8_t *file, uint64_t n, uint8_t *mem) {
  unsigned bits = sc_dtype_file_bits(t), per = 8 / bits, mask = (1u << bits) - 1;
  for (uint64_t i = 0; i < n; i++) {
    uint8_t c = bits >= 8 ? file[i] : (uint8_t)((file[i / per] >> (bits * (i % per))) & mask);
    mem[i] = sc_dtype_is_int(t) ? (uint8_t)sc_narrow_wrap(t, c) : c;
  }
}
void sc_narrow_pack(sc_dtype t, const uint8_t *mem, uint64_t n, uint8_t *file) {
  unsigned bits = sc_dtype_file_bits(t), per = 8 / bits, mask = (1u << bits) - 1;
  if (bits >= 8) {
    memcpy(file, mem, (size_t)n);
    return;
  }
  memset(file, 0, (size_t)sc_dtype_file_bytes(t, n));
  for (uint64_t i = 0; i < n; i++)
    file[i / per] |= (uint8_t)((mem[i] & mask) << (bits * (i % per)));
}
sc_dtype sc_dtype_from_onnx(int32_t onnx) {
  for (int i = 1; i < SC_DTYPE_COUNT; i++)
    if (dtypes[i].onnx == onnx) return (sc_dtype)i;
  return SC_DTYPE_COUNT;
}
int32_t sc_dtype_to_onnx(sc_dtype t) {
  return (unsigned)t < SC_DTYPE_COUNT ? dtypes[t].onnx : 0;
}

float sc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; exp--; }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t sc_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = (int32_t)((x >> 23) & 0xff);
  uint32_t man = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)h;
}

float sc_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t sc_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

float sc_f32_to_tf32(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7f800000) == 0x7f800000) return f;
  x = (x + 0x1000) & ~(uint32_t)0x1fff; /* the magnitude's half unit: ties away */
  memcpy(&f, &x, 4);
  return f;
}

double sc_load_f64(sc_dtype t, const void *data, int64_t i) {
  switch (t) {
  case SC_DTYPE_F32: return ((const float *)data)[i];
  case SC_DTYPE_F64: return ((const double *)data)[i];
  case SC_DTYPE_F16: return sc_f16_to_f32(((const uint16_t *)data)[i]);
  case SC_DTYPE_BF16: return sc_bf16_to_f32(((const uint16_t *)data)[i]);
  case SC_DTYPE_U64: return (double)((const uint64_t *)data)[i];
  default:
    if (sc_dtype_is_narrow(t) && sc_dtype_is_float(t))
      return sc_narrow_decode(t, ((const uint8_t *)data)[i]);
    return (double)sc_load_i64(t, data, i);
  }
}

int64_t sc_load_i64(sc_dtype t, const void *data, int64_t i) {
  switch (t) {
  case SC_DTYPE_I8: return ((const int8_t *)data)[i];
  case SC_DTYPE_U8: return ((const uint8_t *)data)[i];
  case SC_DTYPE_BOOL: return ((const uint8_t *)data)[i] != 0;
  case SC_DTYPE_I16: return ((const int16_t *)data)[i];
  case SC_DTYPE_U16: return ((const uint16_t *)data)[i];
  case SC_DTYPE_I32: return ((const int32_t *)data)[i];
  case SC_DTYPE_U32: return ((const uint32_t *)data)[i];
  case SC_DTYPE_I64: return ((const int64_t *)data)[i];
  case SC_DTYPE_U64: return (int64_t)((const uint64_t *)data)[i];
  case SC_DTYPE_I4: case SC_DTYPE_U4: case SC_DTYPE_I2: case SC_DTYPE_U2:
    return sc_narrow_wrap(t, ((const uint8_t *)data)[i]);
  case SC_DTYPE_F32: case SC_DTYPE_F64: case SC_DTYPE_F16: case SC_DTYPE_BF16:
  case SC_DTYPE_F8E4M3FN: case SC_DTYPE_F8E4M3FNUZ: case SC_DTYPE_F8E5M2:
  case SC_DTYPE_F8E5M2FNUZ: case SC_DTYPE_F4E2M1: case SC_DTYPE_F8E8M0: {
    double v = sc_load_f64(t, data, i);
    if (isnan(v)) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
  }
  default: return 0;
  }
}

void sc_store_f64(sc_dtype t, void *data, int64_t i, double v) {
  switch (t) {
  case SC_DTYPE_F32: ((float *)data)[i] = (float)v; return;
  case SC_DTYPE_F64: ((double *)data)[i] = v; return;
  case SC_DTYPE_F16: ((uint16_t *)data)[i] = sc_f32_to_f16((float)v); return;
  case SC_DTYPE_BF16: ((uint16_t *)data)[i] = sc_f32_to_bf16((float)v); return;
  case SC_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0; return;
  default: {
    if (sc_dtype_is_narrow(t)) { /* float → narrow float or int, as Cast */
      ((uint8_t *)data)[i] = sc_narrow_encode(t, (float)v);
      return;
    }
    int64_t x;
    if (isnan(v)) x = 0;
    else if (v >= 9.2233720368547758e18) x = INT64_MAX;
    else if (v <= -9.2233720368547758e18) x = INT64_MIN;
    else x = (int64_t)v;
    sc_store_i64(t, data, i, x);
  }
  }
}

void sc_store_i64(sc_dtype t, void *data, int64_t i, int64_t v) {
  switch (t) {
  case SC_DTYPE_I8: ((int8_t *)data)[i] = (int8_t)v; return;
  case SC_DTYPE_U8: ((uint8_t *)data)[i] = (uint8_t)v; return;
  case SC_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0; return;
  case SC_DTYPE_I16: ((int16_t *)data)[i] = (int16_t)v; return;
  case SC_DTYPE_U16: ((uint16_t *)data)[i] = (uint16_t)v; return;
  case SC_DTYPE_I32: ((int32_t *)data)[i] = (int32_t)v; return;
  case SC_DTYPE_U32: ((uint32_t *)data)[i] = (uint32_t)v; return;
  case SC_DTYPE_I64: ((int64_t *)data)[i] = v; return;
  case SC_DTYPE_U64: ((uint64_t *)data)[i] = (uint64_t)v; return;
  case SC_DTYPE_I4: case SC_DTYPE_U4: case SC_DTYPE_I2: case SC_DTYPE_U2:
    ((uint8_t *)data)[i] = (uint8_t)sc_narrow_wrap(t, v);
    return;
  case SC_DTYPE_F32: case SC_DTYPE_F64: case SC_DTYPE_F16: case SC_DTYPE_BF16:
  case SC_DTYPE_F8E4M3FN: case SC_DTYPE_F8E4M3FNUZ: case SC_DTYPE_F8E5M2:
  case SC_DTYPE_F8E5M2FNUZ: case SC_DTYPE_F4E2M1: case SC_DTYPE_F8E8M0:
    sc_store_f64(t, data, i, (double)v);
    return;
  default: return;
  }
}

/* ---- narrow types ----
 *
 * A float format: `man` mantissa bits, exponent `bias`, the total width
 * `bits`, and how it spends its top codes (kind). Rounding works on the
 * magnitude a: with E = max(exponent of a, 1 - bias) the representable
 * values near a are the multiples of q = 2^(E - man), so a * 2^(man - E)
 * (exact: a power of two) rounded to the nearest even integer, times q, is
 * the RNE result. The same steps, written with integer and float ops, are
 * the CPU (codegen/cpu/emit.c) and CUDA (cuda_prelude) implementations. */
bool sc_minifloat_of(sc_dtype t, sc_minifloat *f) {
  switch (t) {
  case SC_DTYPE_F8E4M3FN: *f = (sc_minifloat){3, 7, 8, SC_MF_FN, 448.0f}; return true;
  case SC_DTYPE_F8E4M3FNUZ: *f = (sc_minifloat){3, 8, 8, SC_MF_FNUZ, 240.0f}; return true;
  case SC_DTYPE_F8E5M2: *f = (sc_minifloat){2, 15, 8, SC_MF_IEEE, 57344.0f}; return true;
  case SC_DTYPE_F8E5M2FNUZ: *f = (sc_minifloat){2, 16, 8, SC_MF_FNUZ, 57344.0f}; return true;
  case SC_DTYPE_F4E2M1: *f = (sc_minifloat){1, 1, 4, SC_MF_NONE, 6.0f}; return true;
  default: return false;
  }
}

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
/* 2^k for -126 <= k <= 127 */
static float pow2f(int k) { return bits_f32((uint32_t)(k + 127) << 23); }

static int narrow_int_bits(sc_dtype t) {
  return t == SC_DTYPE_U4 || t == SC_DTYPE_I4 ? 4 : 2;
}

double sc_narrow_max(sc_dtype t) {
  sc_minifloat f;
  if (sc_minifloat_of(t, &f)) return f.max;
  if (t == SC_DTYPE_F8E8M0) return 0x1p127;
  int n = narrow_int_bits(t);
  return sc_dtype_is_signed(t) ? (1 << (n - 1)) - 1 : (1 << n) - 1;
}

int64_t sc_narrow_wrap(sc_dtype t, int64_t v) {
  int n = narrow_int_bits(t);
  uint64_t low = (uint64_t)v & ((1u << n) - 1);
  if (sc_dtype_is_signed(t) && (low >> (n - 1))) return (int64_t)low - (1 << n);
  return (int64_t)low;
}

float sc_narrow_decode(sc_dtype t, uint8_t code) {
  sc_minifloat f;
  if (t == SC_DTYPE_F8E8M0)
    return code == 0xff ? NAN : code == 0 ? 0x1p-127f : pow2f(code - 127);
  if (!sc_minifloat_of(t, &f)) return (float)sc_narrow_wrap(t, code);
  int eb = f.bits - 1 - f.man; /* exponent bits */
  unsigned mag = code & ((1u << (f.bits - 1)) - 1), sign = (code >> (f.bits - 1)) & 1;
  unsigned e = mag >> f.man, m = mag & ((1u << f.man) - 1);
  if (f.kind == SC_MF_FNUZ && code == 0x80) return NAN;
  if (f.kind == SC_MF_FN && mag == 0x7f) return sign ? -NAN : NAN;
  if (f.kind == SC_MF_IEEE && e == (1u << eb) - 1) {
    float v = m ? NAN : INFINITY;
    return sign ? -v : v;
  }
  float v = e ? (float)((1u << f.man) + m) * pow2f((int)e - f.bias - f.man)
              : (float)m * pow2f(1 - f.bias - f.man);
  return sign ? -v : v;
}

float sc_narrow_round(sc_dtype t, float x) {
  sc_minifloat f;
  uint32_t u = f32_bits(x);
  if (t == SC_DTYPE_F8E8M0) { /* round up, saturate: exponent bits only */
    uint32_t e = (u >> 23) & 0xff;
    if (e == 0xff) return NAN;
    /* 2^-127 (an f32 subnormal: exponent field 0, a fraction) is code 0
     * itself, so that rounding is idempotent */
    if ((u & 0x7fffff) && e < 0xfe && (u & 0x7fffffff) != 0x00400000) e++;
    return e ? bits_f32(e << 23) : 0x1p-127f;
  }
  if (!sc_minifloat_of(t, &f)) {
    if (isnan(x)) return 0;
    float r = truncf(x), lo = sc_dtype_is_signed(t) ? -(float)sc_narrow_max(t) - 1 : 0;
    return r >= lo && r <= (float)sc_narrow_max(t) ? r + 0.0f : 0;
  }
  bool neg = u >> 31;
  if (isnan(x)) {
    if (f.kind == SC_MF_NONE) return neg ? 0.0f : -0.0f; /* ml_dtypes' choice */
    return x;
  }
  float a = fabsf(x);
  int E = (int)((f32_bits(a) >> 23) & 0xff) - 127;
  if (E < 1 - f.bias) E = 1 - f.bias;
  float r = E > 127 ? a /* inf */ : rintf(a * pow2f(f.man - E)) * pow2f(E - f.man);
  if (r > f.max) r = f.kind == SC_MF_IEEE ? INFINITY : f.kind == SC_MF_NONE ? f.max : NAN;
  if (f.kind == SC_MF_FNUZ && r == 0) return 0.0f;
  return neg ? -r : r;
}

uint8_t sc_narrow_encode(sc_dtype t, float x) {
  sc_minifloat f;
  float r = sc_narrow_round(t, x);
  uint32_t u = f32_bits(r);
  if (t == SC_DTYPE_F8E8M0) return (uint8_t)((u >> 23) & 0xff);
  if (!sc_minifloat_of(t, &f)) return (uint8_t)(int)r; /* the value, sign-extended */
  unsigned sign = (u >> 31) << (f.bits - 1);
  if (isnan(r)) {
    if (f.kind == SC_MF_FNUZ) return 0x80;
    return (uint8_t)(sign | (f.kind == SC_MF_FN ? 0x7f : 0x7e));
  }
  if (isinf(r)) return (uint8_t)(sign | 0x7c);
  uint32_t a = u & 0x7fffffff;
  int e = (int)(a >> 23) - 127 + f.bias;
  unsigned code = e >= 1 ? ((unsigned)e << f.man) | ((a >> (23 - f.man)) & ((1u << f.man) - 1))
                         : (unsigned)(bits_f32(a) * pow2f(f.bias - 1 + f.man));
  return (uint8_t)(sign | code);
}

float sc_e8m0_prepare(float x, sc_e8m0_round mode, bool saturate) {
  uint32_t u = f32_bits(x), e = (u >> 23) & 0xff;
  bool frac = (u & 0x7fffff) != 0;
  if (e == 0xff) return x;
  switch (mode) {
  case SC_E8M0_UP: return !saturate && frac && e == 0xfe ? NAN : x;
  case SC_E8M0_DOWN: return bits_f32(e << 23);
  case SC_E8M0_NEAREST: {
    bool g = (u >> 22) & 1, r = (u >> 21) & 1, s = (u & 0x1fffff) != 0;
    if (g && (r || s || e > 0) && !(saturate && e == 0xfe)) e++;
    return e == 0xff ? NAN : bits_f32(e << 23);
  }
  }
  return x;
}
