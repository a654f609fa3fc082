/* args.c - option parsing and output helpers of the tshard CLI. Options are "--name VALUE",
 * "--name=VALUE" or bare "--flag"; everything else is positional. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Options that take no value: they never swallow the next argument. */
static const char *const flags[] = {"--json",    "--ascii",     "--unicode",      "--keep",
                                    "--help",    "--explain",   "--keep-partial", "--per-node",
                                    "--verbose", "--overwrite", "--relabel",      NULL};

static bool is_flag(const char *arg) {
  for (int i = 0; flags[i]; i++)
    if (strcmp(arg, flags[i]) == 0)
      return true;
  return false;
}

const char *cli_opt(const cli_args *a, const char *name) {
  size_t n = strlen(name);
  for (int i = 1; i < a->argc; i++) {
    const char *s = a->argv[i];
    if (strncmp(s, "--", 2) != 0 || strncmp(s + 2, name, n) != 0)
      continue;
    if (s[2 + n] == '=')
      return s + 3 + n;
    if (s[2 + n] == '\0' && i + 1 < a->argc)
      return a->argv[i + 1];
  }
  return NULL;
}

int cli_opt_all(const cli_args *a, const char *name, const char **out, int max) {
  size_t n = strlen(name);
  int k = 0;
  for (int i = 1; i < a->argc; i++) {
    const char *s = a->argv[i];
    if (strncmp(s, "--", 2) != 0 || strncmp(s + 2, name, n) != 0)
      continue;
    const char *v = NULL;
    if (s[2 + n] == '=')
      v = s + 3 + n;
    else if (s[2 + n] == '\0' && i + 1 < a->argc)
      v = a->argv[++i];
    if (v && k < max)
      out[k] = v;
    k += v != NULL;
  }
  return k;
}

bool cli_flag(const cli_args *a, const char *name) {
  for (int i = 1; i < a->argc; i++)
    if (strncmp(a->argv[i], "--", 2) == 0 && strcmp(a->argv[i] + 2, name) == 0)
      return true;
  return false;
}

const char *cli_positional(const cli_args *a, int index) {
  if (a->parsed)
    return index < a->npos ? a->pos[index] : NULL;
  for (int i = 1; i < a->argc; i++) {
    const char *s = a->argv[i];
    if (strncmp(s, "--", 2) == 0) {
      if (!strchr(s, '=') && !is_flag(s))
        i++; /* skip the option's value */
      continue;
    }
    if (index-- == 0)
      return s;
  }
  return NULL;
}

int cli_parse_shape(const char *text, int *ndim, int64_t *shape, ts_error *err) {
  *ndim = 0;
  if (!text)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "missing --shape (e.g. --shape 1024,512)");
  if (*text == '\0' || strcmp(text, "[]") == 0 || strcmp(text, "scalar") == 0)
    return TS_OK;
  const char *p = text + (*text == '[' ? 1 : 0);
  for (;;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0)
      return ts_error_set(err, TS_BAD_SHAPE,
                          "--shape '%s': expected sizes >= 0 separated by commas, e.g. 1024,512",
                          text);
    if (*ndim == TS_MAX_DIMS)
      return ts_error_set(err, TS_BAD_SHAPE, "--shape '%s': at most %d dims", text, TS_MAX_DIMS);
    shape[(*ndim)++] = v;
    p = end;
    if (*p == ',')
      p++;
    else if (*p == '\0' || (*p == ']' && p[1] == '\0'))
      return TS_OK;
    else
      return ts_error_set(err, TS_BAD_SHAPE,
                          "--shape '%s': unexpected '%c'; expected sizes separated by commas", text,
                          *p);
  }
}

char *cli_read_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      if (cap > (2u << 20)) {
        free(buf);
        fclose(f);
        errno = EFBIG;
        return NULL;
      }
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, 4096, f);
    len += n;
    if (n < 4096)
      break;
  }
  fclose(f);
  buf[len] = '\0';
  *out_len = len;
  return buf;
}

int cli_fail(int status, const char *msg) {
  fprintf(stderr, "tshard: %s\n", msg);
  return status;
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

void cli_json_lines(FILE *f, const char *list) {
  fputc('[', f);
  for (const char *p = list; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t k = nl ? (size_t)(nl - p) : strlen(p);
    char *one = strndup(p, k);
    fputs(p == list ? "" : ", ", f);
    cli_json_string(f, one ? one : "");
    free(one);
    p += k + (nl != NULL);
  }
  fputc(']', f);
}
