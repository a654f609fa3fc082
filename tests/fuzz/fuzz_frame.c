/* fuzz_frame.c - libFuzzer target for what tshardd does with bytes from a client before any
 * handler runs: frame lengths (checked against the maximum frame), protobuf decoding of the
 * Request and the check of its strings (NUL bytes, UTF-8), and the validators of every operation
 * (names, dtypes, shapes, attributes in text and message form against the shape and world, layouts,
 * strategies, chunk bounds), then the answer frame of a refusal. The input is a stream of frames,
 * as a connection would deliver it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tsd_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const tsd_limits lim = {.world_size = 4, .max_frame = 1 << 16};
  size_t pos = 0;
  while (size - pos >= TSD_FRAME_HEADER) {
    uint32_t len = tsd_frame_length(data + pos);
    pos += TSD_FRAME_HEADER;
    ts_error err;
    if (tsd_frame_check(len, lim.max_frame, &err) != TS_OK || len > size - pos)
      break; /* the daemon answers and closes the connection */
    Tshard__Request *req = NULL;
    int rc = tsd_request_decode(data + pos, len, &req, &err);
    if (rc == TS_OK)
      rc = tsd_request_check_strings(data + pos, len, &err);
    pos += len;
    const tsd_op *op = NULL;
    if (rc == TS_OK)
      rc = tsd_request_validate(req, &lim, &op, &err);
    if (rc == TS_OK && (!op || op != tsd_op_find((int)req->op_case)))
      abort(); /* a valid request has its own entry in the table */
    if (rc != TS_OK) {
      uint8_t *frame = NULL;
      size_t flen = 0;
      if (tsd_error_frame(req ? req->id : 0, rc, err.msg, &frame, &flen) == TS_OK) {
        Tshard__Response *back =
            tshard__response__unpack(NULL, flen - TSD_FRAME_HEADER, frame + TSD_FRAME_HEADER);
        if (!back || back->status != rc || tsd_frame_length(frame) != flen - TSD_FRAME_HEADER)
          abort(); /* our own answer must decode to what we said */
        tshard__response__free_unpacked(back, NULL);
        free(frame);
      }
    } else {
      tsd_scope scope = tsd_op_scope(op, req);
      if (scope != TSD_SCOPE_LOOP && scope != TSD_SCOPE_CATALOG && scope != TSD_SCOPE_LOCAL &&
          scope != TSD_SCOPE_COLLECTIVE)
        abort();
    }
    tsd_request_free(&req);
  }
  return 0;
}
