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
  X(BF16, "bf16", 16, 2, SC_DTF_FLOAT)                            \
  X(F8E4M3FN, "f8e4m3fn", 17, 1, SC_DTF_FLOAT | SC_DTF_NARROW)     \
  X(F8E4M3FNUZ, "f8e4m3fnuz", 18, 1, SC_DTF_FLOAT | SC_DTF_NARROW) \
  X(F8E5M2, "f8e5m2", 19, 1, SC_DTF_FLOAT | SC_DTF_NARROW)         \
  X(F8E5M2FNUZ, "f8e5m2fnuz", 20, 1, SC_DTF_FLOAT | SC_DTF_NARROW) \
  X(U4, "u4", 21, 1, SC_DTF_INT | SC_DTF_NARROW)                   \
  X(I4, "i4", 22, 1, SC_DTF_INT | SC_DTF_SIGNED | SC_DTF_NARROW)   \
  X(F4E2M1, "f4e2m1", 23, 1, SC_DTF_FLOAT | SC_DTF_NARROW)         \
  X(F8E8M0, "f8e8m0", 24, 1, SC_DTF_FLOAT | SC_DTF_NARROW)         \
  X(U2, "u2", 25, 1, SC_DTF_INT | SC_DTF_NARROW)                   \
  X(I2, "i2", 26, 1, SC_DTF_INT | SC_DTF_SIGNED | SC_DTF_NARROW)

/* SC_DTF_NARROW: a storage type (float8, float4, 4- and 2-bit integers).
 * In memory an element is one byte holding its code (the float formats'
 * bits, the integers' value, sign-extended); in ONNX files the 4- and 2-bit
 * types are packed (sc_dtype_file_bits). Values compute in
 * sc_dtype_compute(t): f32 for the float formats, i8/u8 for the integers.
 * Only casts, quantization and data movement take them (ir/op_shape.c). */
enum { SC_DTF_FLOAT = 1, SC_DTF_INT = 2, SC_DTF_SIGNED = 4, SC_DTF_NARROW = 8 };

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
bool sc_dtype_is_narrow(sc_dtype t);         /* SC_DTF_NARROW */
/* The dtype registers hold t's values in: F32 for f16, bf16 and the narrow
 * float formats, I8/U8 for the narrow integers, t itself otherwise. */
sc_dtype sc_dtype_compute(sc_dtype t);
/* Bits per element in ONNX files: 4 (u4, i4, f4e2m1) and 2 (u2, i2) are
 * packed, low bits first; 8 * size otherwise. */
unsigned sc_dtype_file_bits(sc_dtype t);
/* Whether an array of dtype `file` (a .npy file's, which has no bfloat16 or
 * narrow types) gives a tensor of dtype `want`: the same dtype, or want's
 * memory form — bfloat16 as u16 bits, the float8/float4 codes as u8, the
 * 4/2-bit integers as i8/u8 values. */
bool sc_dtype_holds(sc_dtype file, sc_dtype want);
/* Bytes n elements of t take in an ONNX file (packed: rounded up). */
uint64_t sc_dtype_file_bytes(sc_dtype t, uint64_t n);
/* n elements between their file form (packed when sc_dtype_file_bits < 8)
 * and their memory form (a byte each; the 4/2-bit integers sign-extended). */
void sc_narrow_unpack(sc_dtype t, const uint8_t *file, uint64_t n, uint8_t *mem);
void sc_narrow_pack(sc_dtype t, const uint8_t *mem, uint64_t n, uint8_t *file);
sc_dtype sc_dtype_from_onnx(int32_t onnx); /* SC_DTYPE_COUNT if unknown */
int32_t sc_dtype_to_onnx(sc_dtype t);

/* Conversions used by folding and printing. */
float sc_f16_to_f32(uint16_t h);
uint16_t sc_f32_to_f16(float f);   /* round to nearest even */
float sc_bf16_to_f32(uint16_t h);
uint16_t sc_f32_to_bf16(float f);  /* round to nearest even */
/* f as a TF32 value (8 exponent bits, 10 mantissa bits: the low 13 bits of
 * the f32 cleared), rounded to nearest with ties away from zero, as PTX's
 * cvt.rna.tf32.f32 rounds; inf and NaN unchanged. What the emulated GPU's
 * f32 products take from their operands when TF32 is allowed. */
float sc_f32_to_tf32(float f);
/* The narrow types (SC_DTF_NARROW), as ml_dtypes and ONNX define them.
 * sc_narrow_decode: the value of a code (a float format's bits, an
 * integer's low bits); exact in f32. sc_narrow_round: x rounded to t's
 * values, still an f32 — floats to nearest even without saturation (an
 * overflow is inf for f8e5m2, NaN for the other float8 formats, the largest
 * magnitude for f4e2m1, which has neither; fnuz formats have no -0;
 * f8e8m0 rounds up and saturates, ONNX Cast's default), integers as Cast
 * does (floats truncate, out of range or NaN give 0; integers wrap).
 * sc_narrow_encode: the code of sc_narrow_round(t, x). sc_narrow_max: the
 * largest finite value (Cast's saturation bound). */
float sc_narrow_decode(sc_dtype t, uint8_t code);
/* A narrow float format other than f8e8m0: `man` mantissa bits, exponent
 * `bias`, total width `bits`, the largest finite value, and what its top
 * codes mean: SC_MF_IEEE (f8e5m2: infinities and NaNs as IEEE), SC_MF_FN
 * (f8e4m3fn: no infinity, S.1111.111 is NaN), SC_MF_FNUZ (no infinity, no
 * -0, 0x80 is NaN), SC_MF_NONE (f4e2m1: neither). */
typedef enum { SC_MF_IEEE, SC_MF_FN, SC_MF_FNUZ, SC_MF_NONE } sc_mf_kind;
typedef struct { int man, bias, bits; sc_mf_kind kind; float max; } sc_minifloat;
bool sc_minifloat_of(sc_dtype t, sc_minifloat *f);
float sc_narrow_round(sc_dtype t, float x);
uint8_t sc_narrow_encode(sc_dtype t, float x);
double sc_narrow_max(sc_dtype t);
/* Cast to f8e8m0 with a round_mode and saturate: x adjusted so that the
 * default conversion (round up, saturate: sc_narrow_round) gives the code
 * the mode asks for (onnx.numpy_helper.to_float8e8m0). */
typedef enum { SC_E8M0_UP, SC_E8M0_DOWN, SC_E8M0_NEAREST } sc_e8m0_round;
float sc_e8m0_prepare(float x, sc_e8m0_round mode, bool saturate);
/* An integer v wrapped to a narrow integer type's range (Cast of an int). */
int64_t sc_narrow_wrap(sc_dtype t, int64_t v);
/* Element i of a buffer of type t, widened. */
double sc_load_f64(sc_dtype t, const void *data, int64_t i);
int64_t sc_load_i64(sc_dtype t, const void *data, int64_t i);
/* Store v (converted as ONNX Cast does) into element i. */
void sc_store_f64(sc_dtype t, void *data, int64_t i, double v);
void sc_store_i64(sc_dtype t, void *data, int64_t i, int64_t v);

#endif
