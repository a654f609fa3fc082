/* cast_plan.c - where a reshard that changes the dtype converts its values (casts in transit).
 *
 * A narrowing cast of a source without partial placements converts before the wire: every rank
 * converts its source slice, so the narrow bytes travel; so does any cast to a partial target
 * from a non-partial source (the ranks that hold no summand then fill the identity of the target
 * dtype: INT32_MIN, not -inf, for a max into i32). Every other cast converts after it: the pieces
 * travel (and partial sources reduce) in the source dtype, and each target rank converts its new
 * slice. A partial source to a partial target is refused: its summands would be converted one by
 * one, which is not the conversion of their reduction. The plan of the reshard is made for the
 * dtype on the wire, so its costs are the bytes that really move. A complex source casts to a
 * complex dtype only (a real one would drop the imaginary part). Pure: `tshard plan` and the
 * store decide the same way. */
#include "ts_plan.h"

static bool has_partial(const ts_attr *a) {
  for (int m = 0; a && m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      return true;
  return false;
}

int ts_cast_wire_dtype(ts_dtype from, ts_dtype to, const ts_attr *src, const ts_attr *tgt,
                       ts_dtype *wire, ts_error *err) {
  if (!ts_dtype_valid((int)from) || !ts_dtype_valid((int)to))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "cast from dtype %d to %d: valid dtypes are " TS_DTYPE_NAMES, (int)from,
                        (int)to);
  if (ts_dtype_is_complex(from) && !ts_dtype_is_complex(to))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "cast from %s to %s would discard the imaginary part: a complex tensor "
                        "casts to c64 and c128 only",
                        ts_dtype_name(from), ts_dtype_name(to));
  int rc = ts_attr_check_dtype(tgt, to, err);
  if (rc)
    return rc;
  bool partial = has_partial(src), to_partial = has_partial(tgt);
  if (from != to && partial && to_partial)
    return ts_error_set(err, TS_UNSUPPORTED,
                        "a cast from a partial source to a partial target would convert each "
                        "summand, not their reduction; cast to a non-partial attribute, or "
                        "reshard without the cast");
  *wire = (ts_dtype_size(to) < ts_dtype_size(from) || to_partial) && !partial ? to : from;
  return TS_OK;
}
