/* opmap.c - the op mapper: the one table of the program ops. Each entry names the op, its
 * category, its arity, whether it needs floats, the C expression of an elementwise op (for floats
 * and for integers) and the generator of its category (gen_*.c) that emits its kernel. Adding an
 * op is one entry here (plus its scalar rule in tsp_eval for constant folding and padding).
 * Also the dtypes' C types and the scalar evaluator shared by constant folding and the padding
 * analysis (bucket.c). */
#include <math.h>
#include <string.h>

#include "internal.h"

#define EW TSP_CAT_ELEMENTWISE
#define GEW tsp_gen_elementwise
static const tsp_opdef table[TSP_OP_COUNT] = {
    [TSP_OP_INPUT] = {"input", TSP_CAT_INPUT, 0, false, NULL, NULL, NULL},
    [TSP_OP_CONST] = {"const", TSP_CAT_CONST, 0, false, NULL, NULL, NULL},
    [TSP_OP_ADD] = {"add", EW, 2, false, "(%a + %b)", "(%a + %b)", GEW},
    [TSP_OP_SUB] = {"sub", EW, 2, false, "(%a - %b)", "(%a - %b)", GEW},
    [TSP_OP_MUL] = {"mul", EW, 2, false, "(%a * %b)", "(%a * %b)", GEW},
    [TSP_OP_DIV] = {"div", EW, 2, false, "(%a / %b)", "(%b == 0 ? 0 : %a / %b)", GEW},
    [TSP_OP_POW] = {"pow", EW, 2, true, "pow%f(%a, %b)", NULL, GEW},
    [TSP_OP_MAX] = {"max", EW, 2, false, "((%a != %a || %a > %b) ? %a : %b)", "(%a > %b ? %a : %b)",
                    GEW},
    [TSP_OP_MIN] = {"min", EW, 2, false, "((%a != %a || %a < %b) ? %a : %b)", "(%a < %b ? %a : %b)",
                    GEW},
    [TSP_OP_NEG] = {"neg", EW, 1, false, "(-%a)", "(-%a)", GEW},
    [TSP_OP_ABS] = {"abs", EW, 1, false, "fabs%f(%a)", "(%a < 0 ? -%a : %a)", GEW},
    [TSP_OP_EXP] = {"exp", EW, 1, true, "exp%f(%a)", NULL, GEW},
    [TSP_OP_LOG] = {"log", EW, 1, true, "log%f(%a)", NULL, GEW},
    [TSP_OP_SQRT] = {"sqrt", EW, 1, true, "sqrt%f(%a)", NULL, GEW},
    [TSP_OP_RSQRT] = {"rsqrt", EW, 1, true, "(1 / sqrt%f(%a))", NULL, GEW},
    [TSP_OP_TANH] = {"tanh", EW, 1, true, "tanh%f(%a)", NULL, GEW},
    [TSP_OP_SIGMOID] = {"sigmoid", EW, 1, true, "(1 / (1 + exp%f(-%a)))", NULL, GEW},
    [TSP_OP_RELU] = {"relu", EW, 1, false, "(%a > 0 ? %a : 0)", "(%a > 0 ? %a : 0)", GEW},
    [TSP_OP_GELU] = {"gelu", EW, 1, true,
                     "(0.5%F * %a * (1 + erf%f(%a * 0.70710678118654752440%F)))", NULL, GEW},
    [TSP_OP_WHERE] = {"where", EW, 3, false, "(%a ? %b : %c)", "(%a ? %b : %c)", GEW},
    [TSP_OP_EQ] = {"eq", EW, 2, false, "(%a == %b)", "(%a == %b)", GEW},
    [TSP_OP_NE] = {"ne", EW, 2, false, "(%a != %b)", "(%a != %b)", GEW},
    [TSP_OP_LT] = {"lt", EW, 2, false, "(%a < %b)", "(%a < %b)", GEW},
    [TSP_OP_LE] = {"le", EW, 2, false, "(%a <= %b)", "(%a <= %b)", GEW},
    [TSP_OP_GT] = {"gt", EW, 2, false, "(%a > %b)", "(%a > %b)", GEW},
    [TSP_OP_GE] = {"ge", EW, 2, false, "(%a >= %b)", "(%a >= %b)", GEW},
    [TSP_OP_CAST] = {"cast", EW, 1, false, "%a", "%a", GEW},
    [TSP_OP_COPY] = {"copy", EW, 1, false, "%a", "%a", GEW},
    [TSP_OP_SUM] = {"sum", TSP_CAT_REDUCE, 1, false, NULL, NULL, tsp_gen_reduce},
    [TSP_OP_MEAN] = {"mean", TSP_CAT_REDUCE, 1, true, NULL, NULL, tsp_gen_reduce},
    [TSP_OP_RMAX] = {"reduce_max", TSP_CAT_REDUCE, 1, false, NULL, NULL, tsp_gen_reduce},
    [TSP_OP_RMIN] = {"reduce_min", TSP_CAT_REDUCE, 1, false, NULL, NULL, tsp_gen_reduce},
    [TSP_OP_EINSUM] = {"einsum", TSP_CAT_EINSUM, -1, false, NULL, NULL, tsp_gen_einsum},
    [TSP_OP_RESHAPE] = {"reshape", TSP_CAT_LAYOUT, 1, false, NULL, NULL, NULL},
    [TSP_OP_TRANSPOSE] = {"transpose", TSP_CAT_LAYOUT, 1, false, NULL, NULL, NULL},
    [TSP_OP_SLICE] = {"slice", TSP_CAT_LAYOUT, 1, false, NULL, NULL, NULL},
    [TSP_OP_WINDOW] = {"window", TSP_CAT_LAYOUT, 1, false, NULL, NULL, NULL},
    [TSP_OP_ASSIGN] = {"assign", TSP_CAT_ASSIGN, 2, false, NULL, NULL, NULL},
};

const tsp_opdef *tsp_op(int op) { return op >= 0 && op < TSP_OP_COUNT ? &table[op] : NULL; }

int tsp_op_find(const char *name) {
  for (int i = TSP_OP_ADD; i < TSP_OP_COUNT; i++)
    if (strcmp(table[i].name, name) == 0)
      return i;
  return -1;
}

const char *tsp_ctype(ts_dtype dt) {
  switch (dt) {
  case TS_F32: return "float";
  case TS_F64: return "double";
  case TS_I8: return "int8_t";
  case TS_I32: return "int32_t";
  case TS_I64: return "int64_t";
  case TS_U8: return "uint8_t";
  case TS_F16:
  case TS_BF16: return "uint16_t"; /* the bits; values are computed in float (tsp_ctype_reg) */
  default: return NULL;
  }
}

const char *tsp_ctype_reg(ts_dtype dt) { return tsp_is_half(dt) ? "float" : tsp_ctype(dt); }

bool tsp_is_half(ts_dtype dt) { return dt == TS_F16 || dt == TS_BF16; }

double tsp_round(ts_dtype dt, double v) {
  switch (dt) {
  case TS_F32: return (double)(float)v;
  case TS_F64: return v;
  case TS_F16: return (double)ts_f16_to_f32(ts_f64_to_f16(v));
  case TS_BF16: return (double)ts_bf16_to_f32(ts_f64_to_bf16(v));
  case TS_I8: return isfinite(v) ? (double)(int8_t)(int64_t)v : 0;
  case TS_I32: return isfinite(v) ? (double)(int32_t)(int64_t)v : 0;
  case TS_I64: return isfinite(v) ? (double)(int64_t)v : 0;
  case TS_U8: return isfinite(v) ? (double)(uint8_t)(int64_t)v : 0;
  default: return v;
  }
}

/* dt is the dtype of the operands (the result is rounded by the caller to the node's dtype). */
double tsp_eval(int op, ts_dtype dt, double a, double b, double c) {
  bool fl = ts_dtype_is_float(dt);
  switch (op) {
  case TSP_OP_ADD: return a + b;
  case TSP_OP_SUB: return a - b;
  case TSP_OP_MUL: return a * b;
  case TSP_OP_DIV: return fl ? a / b : (b == 0 ? 0 : trunc(a / b));
  case TSP_OP_POW: return pow(a, b);
  case TSP_OP_MAX: return (a != a || a > b) ? a : b;
  case TSP_OP_MIN: return (a != a || a < b) ? a : b;
  case TSP_OP_NEG: return -a;
  case TSP_OP_ABS: return fabs(a);
  case TSP_OP_EXP: return exp(a);
  case TSP_OP_LOG: return log(a);
  case TSP_OP_SQRT: return sqrt(a);
  case TSP_OP_RSQRT: return 1 / sqrt(a);
  case TSP_OP_TANH: return tanh(a);
  case TSP_OP_SIGMOID: return 1 / (1 + exp(-a));
  case TSP_OP_RELU: return a > 0 ? a : 0;
  case TSP_OP_GELU: return 0.5 * a * (1 + erf(a * 0.70710678118654752440));
  case TSP_OP_WHERE: return a != 0 ? b : c;
  case TSP_OP_EQ: return a == b;
  case TSP_OP_NE: return a != b;
  case TSP_OP_LT: return a < b;
  case TSP_OP_LE: return a <= b;
  case TSP_OP_GT: return a > b;
  case TSP_OP_GE: return a >= b;
  case TSP_OP_CAST:
  case TSP_OP_COPY: return a;
  default: return NAN;
  }
}
