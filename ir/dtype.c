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

double sc_load_f64(sc_dtype t, const void *data, int64_t i) {
  switch (t) {
  case SC_DTYPE_F32: return ((const float *)data)[i];
  case SC_DTYPE_F64: return ((const double *)data)[i];
  case SC_DTYPE_F16: return sc_f16_to_f32(((const uint16_t *)data)[i]);
  case SC_DTYPE_BF16: return sc_bf16_to_f32(((const uint16_t *)data)[i]);
  case SC_DTYPE_U64: return (double)((const uint64_t *)data)[i];
  default: return (double)sc_load_i64(t, data, i);
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
  case SC_DTYPE_F32: case SC_DTYPE_F64: case SC_DTYPE_F16: case SC_DTYPE_BF16: {
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
  case SC_DTYPE_F32: case SC_DTYPE_F64: case SC_DTYPE_F16: case SC_DTYPE_BF16:
    sc_store_f64(t, data, i, (double)v);
    return;
  default: return;
  }
}
