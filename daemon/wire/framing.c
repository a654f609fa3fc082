/* framing.c - frames on the wire: a 4-byte little-endian length, then one protobuf message.
 *
 * The length is checked against the maximum frame before the caller allocates anything. Decoding
 * uses protobuf-c, which refuses truncated or malformed input; every string field of the bytes is
 * then checked for NUL bytes and UTF-8 (proto/rules.c); what the message means is checked
 * afterwards by the validators (validate.c). The fuzz target drives these functions directly. */
#include <stdlib.h>
#include <string.h>

#include "tsd_wire.h"
#include "ts_rules.h"

uint32_t tsd_frame_length(const uint8_t h[TSD_FRAME_HEADER]) {
  return (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
}

int tsd_frame_check(uint32_t len, int64_t max_frame, ts_error *err) {
  if (len == 0)
    return ts_error_set(err, TS_PROTOCOL, "empty frame; a frame holds one Request message");
  if ((int64_t)len > max_frame)
    return ts_error_set(err, TS_LIMIT,
                        "frame of %u bytes exceeds the maximum frame of %lld bytes; send data "
                        "in chunks",
                        len, (long long)max_frame);
  return TS_OK;
}

int tsd_request_decode(const uint8_t *buf, size_t len, Tshard__Request **out, ts_error *err) {
  *out = tshard__request__unpack(NULL, len, buf);
  if (!*out)
    return ts_error_set(err, TS_PROTOCOL,
                        "the frame of %zu bytes is not a valid tshard.Request message", len);
  return TS_OK;
}

int tsd_request_check_strings(const uint8_t *buf, size_t len, ts_error *err) {
  return ts_wire_strings_check(&tshard__request__descriptor, buf, len, err);
}

/* Drops the unknown fields of a message and of every message inside it (the members of a oneof
 * only when they are its case). Their bytes came from the unpack, with the default allocator.
 * Returns false when one of them had the invalid number 0. */
static bool strip_unknown(ProtobufCMessage *m) {
  if (!m)
    return true;
  bool valid = true;
  for (unsigned i = 0; i < m->n_unknown_fields; i++) {
    valid = valid && m->unknown_fields[i].tag != 0;
    free(m->unknown_fields[i].data);
  }
  free(m->unknown_fields);
  m->unknown_fields = NULL;
  m->n_unknown_fields = 0;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned f = 0; f < d->n_fields; f++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[f];
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
      continue;
    char *base = (char *)m;
    if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)(base + fd->quantifier_offset) != fd->id)
      continue;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + fd->quantifier_offset);
      ProtobufCMessage **arr = *(ProtobufCMessage ***)(base + fd->offset);
      for (size_t k = 0; k < n; k++)
        valid = strip_unknown(arr[k]) && valid;
    } else {
      valid = strip_unknown(*(ProtobufCMessage **)(base + fd->offset)) && valid;
    }
  }
  return valid;
}

bool tsd_request_strip_unknown(Tshard__Request *req) { return !req || strip_unknown(&req->base); }

void tsd_request_free(Tshard__Request **req) {
  if (req && *req) {
    tshard__request__free_unpacked(*req, NULL);
    *req = NULL;
  }
}

static int pack_frame(const Tshard__Response *resp, uint8_t **frame, size_t *len, ts_error *err) {
  size_t n = tshard__response__get_packed_size(resp);
  if (n > UINT32_MAX)
    return ts_error_set(err, TS_LIMIT, "answer of %zu bytes does not fit a frame", n);
  uint8_t *f = malloc(n + TSD_FRAME_HEADER);
  if (!f)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for an answer of %zu bytes", n);
  f[0] = (uint8_t)n;
  f[1] = (uint8_t)(n >> 8);
  f[2] = (uint8_t)(n >> 16);
  f[3] = (uint8_t)(n >> 24);
  tshard__response__pack(resp, f + TSD_FRAME_HEADER);
  *frame = f;
  *len = n + TSD_FRAME_HEADER;
  return TS_OK;
}

int tsd_response_frame(const Tshard__Response *resp, uint8_t **frame, size_t *len, ts_error *err) {
  /* A message cut at the size of ts_error may end inside a UTF-8 character; clients decode it as
   * a protobuf string, so only its well-formed part is sent. */
  Tshard__Response cut;
  size_t mlen = resp->message ? strlen(resp->message) : 0;
  size_t ok = mlen ? ts_utf8_valid_prefix(resp->message, mlen) : 0;
  char *msg = NULL;
  if (ok != mlen) {
    msg = strndup(resp->message, ok);
    cut = *resp;
    cut.message = msg ? msg : "";
    resp = &cut;
  }
  int rc = pack_frame(resp, frame, len, err);
  free(msg);
  return rc;
}

int tsd_error_frame(uint64_t id, int status, const char *message, uint8_t **frame, size_t *len) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  r.id = id;
  r.status = status;
  r.message = (char *)(message ? message : "");
  return tsd_response_frame(&r, frame, len, NULL);
}
