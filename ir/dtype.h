/* dtype.h — element types of tensors.
 *
 * shardc's own enum; sc_dtype_from_onnx/sc_dtype_to_onnx map to and from
 * ONNX's TensorProto.DataType numbers. Sizes are in bytes per element. */
#ifndef SC_DTYPE_H
#define SC_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

/* X(ENUM, short name used in text IR, ONNX number, bytes, flags) */
#define SC_DTYPES(X)                 \
  X(UNDEF, "undef", 0, 0, 0)         \
  X(F32, "f32", 1, 4, SC_DTF_FLOAT)  \
  X(U8, "u8", 2, 1, SC_DTF_INT)      \
  X(I8, "i8", 3, 1, SC_DTF_INT | SC_DTF_SIGNED) \
  X(U16, "u16", 4, 2, SC_DTF_INT)    \
  X(I16, "i16", 5, 2, SC_DTF_INT | SC_DTF_SIGNED) \
  X(I32, "i32", 6, 4, SC_DTF_INT | SC_DTF_SIGNED) \
  X(I64, "i64", 7, 8, SC_DTF_INT | SC_DTF_SIGNED) \
  X(STRING, "string", 8, 0, 0)       \
  X(BOOL, "bool", 9, 1, 0)           \
  X(F16, "f16", 10, 2, SC_DTF_FLOAT) \
  X(F64, "f64", 11, 8, SC_DTF_FLOAT) \
  X(U32, "u32", 12, 4, SC_DTF_INT)   \
  X(U64, "u64", 13, 8, SC_DTF_INT)   \
  X(C64, "c64", 14, 8, 0)            \
  X(C128, "c128", 15, 16, 0)         \
  X(BF16, "bf16", 16, 2, SC_DTF_FLOAT)

enum { SC_DTF_FLOAT = 1, SC_DTF_INT = 2, SC_DTF_SIGNED = 4 };

typedef enum sc_dtype {
#define X(e, s, o, b, f) SC_DTYPE_##e,
  SC_DTYPES(X)
#undef X
  SC_DTYPE_COUNT
} sc_dtype;

const char *sc_dtype_name(sc_dtype t);       /* "f32" */
sc_dtype sc_dtype_parse(const char *name);   /* SC_DTYPE_COUNT if unknown */
unsigned sc_dtype_size(sc_dtype t);          /* 0 for UNDEF, STRING */
bool sc_dtype_is_float(sc_dtype t);
bool sc_dtype_is_int(sc_dtype t);            /* signed or unsigned integer */
bool sc_dtype_is_signed(sc_dtype t);
/* Types whose tensors shardc can hold and compute on (not string/complex). */
bool sc_dtype_is_numeric(sc_dtype t);
sc_dtype sc_dtype_from_onnx(int32_t onnx); /* SC_DTYPE_COUNT if unknown */
int32_t sc_dtype_to_onnx(sc_dtype t);

/* Conversions used by folding and printing. */
float sc_f16_to_f32(uint16_t h);
uint16_t sc_f32_to_f16(float f);   /* round to nearest even */
float sc_bf16_to_f32(uint16_t h);
uint16_t sc_f32_to_bf16(float f);  /* round to nearest even */
/* Element i of a buffer of type t, widened. */
double sc_load_f64(sc_dtype t, const void *data, int64_t i);
int64_t sc_load_i64(sc_dtype t, const void *data, int64_t i);
/* Store v (converted as ONNX Cast does) into element i. */
void sc_store_f64(sc_dtype t, void *data, int64_t i, double v);
void sc_store_i64(sc_dtype t, void *data, int64_t i, int64_t v);

#endif
