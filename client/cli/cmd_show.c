/* cmd_show.c - `tshard show`: draws where the slices of a tensor live. Given --attr and --shape it
 * draws that attribute without a daemon. --json prints the same as data: the tensor (its name
 * and dtype when a daemon holds it, null otherwise), its canonical attribute, and the box
 * [lo, hi) of every mesh position's slice with the world rank holding it. */
#include <langinfo.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "show.h"

/* Unicode when the locale's character set is UTF-8 (and the user did not ask for ASCII). */
static bool want_unicode(const cli_args *a) {
  if (cli_flag(a, "ascii"))
    return false;
  if (cli_flag(a, "unicode"))
    return true;
  setlocale(LC_CTYPE, "");
  const char *cs = nl_langinfo(CODESET);
  return cs && (strcmp(cs, "UTF-8") == 0 || strcmp(cs, "utf8") == 0);
}

static int parse_dims(const char *text, int ndim, show_opts *o, ts_error *err) {
  /* a 1-D view is one row of blocks along the columns */
  o->dims[0] = ndim > 1 ? 0 : -1;
  o->dims[1] = ndim > 1 ? 1 : ndim - 1;
  if (!text)
    return TS_OK;
  char *end;
  int first = (int)strtol(text, &end, 10);
  o->dims[0] = -1;
  o->dims[1] = first;
  if (*end == ',') {
    o->dims[0] = first;
    o->dims[1] = (int)strtol(end + 1, &end, 10);
  }
  if (*end)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "--dims '%s': expected D or D,D (e.g. 0,2)",
                        text);
  return TS_OK;
}

static void json_dims(const int64_t *v, int n) {
  printf("[");
  for (int d = 0; d < n; d++)
    printf("%s%lld", d ? ", " : "", (long long)v[d]);
  printf("]");
}

static void json_or_null(const char *s) {
  if (s)
    cli_json_string(stdout, s);
  else
    printf("null");
}

/* --json: the tensor, its attribute and every mesh position's slice. */
static int show_json(const char *name, const char *dtype, int ndim, const int64_t *shape,
                     const ts_attr *attr, ts_error *err) {
  ts_geom *g = NULL;
  int rc = ts_geom_create(attr, ndim, shape, &g, err);
  if (rc)
    return rc;
  char text[4096];
  ts_attr_format(attr, text, sizeof text);
  printf("{\"name\": ");
  json_or_null(name);
  printf(", \"dtype\": ");
  json_or_null(dtype);
  printf(", \"shape\": ");
  json_dims(shape, ndim);
  printf(", \"attr\": ");
  cli_json_string(stdout, text);
  printf(", \"slices\": [");
  int64_t positions = 1;
  for (int m = 0; m < attr->mesh_ndim; m++)
    positions *= attr->mesh_shape[m];
  for (int64_t i = 0; i < positions; i++) {
    ts_box b;
    ts_geom_index_box(g, i, &b);
    printf("%s{\"rank\": %d, \"lo\": ", i ? ", " : "", attr->ranks ? attr->ranks[i] : (int)i);
    json_dims(b.lo, ndim);
    printf(", \"hi\": ");
    json_dims(b.hi, ndim);
    printf("}");
  }
  printf("]}\n");
  ts_geom_destroy(&g);
  return TS_OK;
}

/* Draws a tensor of the given shape under the attribute text (name and dtype: the daemon's
 * tensor, NULL when drawn without one), or with --json prints it as data. */
int cli_draw(const cli_args *a, const char *name, const char *dtype, int ndim, const int64_t *shape,
             const char *attr_text) {
  ts_error err;
  show_opts o = {.unicode = want_unicode(a)};
  const char *w = cli_opt(a, "width");
  o.width = w ? atoi(w) : 0;
  if (o.width < 0 || o.width > 1000)
    return cli_fail(CLI_USAGE, "--width: expected 1..1000 columns");
  if (parse_dims(cli_opt(a, "dims"), ndim, &o, &err))
    return cli_fail(CLI_USAGE, err.msg);
  ts_attr *attr = NULL;
  int rc = ts_attr_parse(attr_text, &attr, &err);
  if (!rc)
    rc = ts_attr_validate(attr, ndim, shape, 0, &err);
  if (!rc)
    rc = ts_attr_normalize(attr, ndim, &err);
  if (!rc)
    rc = a->json ? show_json(name, dtype, ndim, shape, attr, &err)
                 : cli_show_draw(stdout, ndim, shape, attr, &o, &err);
  ts_attr_destroy(&attr);
  return rc ? cli_fail(CLI_FAILED, err.msg) : CLI_OK;
}

int cli_cmd_show(cli_args *a) {
  const char *attr = cli_opt(a, "attr"), *name = cli_positional(a, 0);
  if (name && !attr)
    return cli_cmd_show_tensor(a, name);
  if (!attr)
    return cli_fail(CLI_USAGE, "show needs a tensor NAME, or --attr ATTR --shape SHAPE (see tshard "
                               "show --help)");
  ts_error err;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  if (cli_parse_shape(cli_opt(a, "shape"), &ndim, shape, &err))
    return cli_fail(CLI_USAGE, err.msg);
  return cli_draw(a, NULL, NULL, ndim, shape, attr);
}
