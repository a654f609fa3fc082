/* usage_check.c - the strict command line: every option a subcommand accepts is read from its usage
 * text in main.c's table (lines starting "  --name"; "  --name VALUE  text" takes a value, a
 * name followed by two spaces is a bare flag), and the positional arguments from the usage line
 * starting with an upper-case word ("  NAME FILE.npy   ..." allows two; a word ending in "..." as
 * in "DIR [NAME...]" takes any number up to CLI_MAX_POS; a lower-case first word is a literal
 * sub-subcommand, as in "  show DIR"). Unknown options, flags
 * given a value, options missing their value and extra positional arguments are refused with
 * exit code 2, suggesting the nearest known option by edit distance. Subcommands added to the
 * table become strict by their usage text alone. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define MAX_KNOWN 64
#define NAME_CAP 32

typedef struct known_opt {
  char name[NAME_CAP];
  bool value;
} known_opt;

typedef struct known_set {
  known_opt opt[MAX_KNOWN];
  int n;
  int max_pos;
  char pos_text[64]; /* "NAME FILE.npy": what the positional line names */
} known_set;

/* Optimal string alignment distance (edits, with adjacent transpositions), capped inputs. */
int cli_edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 40 || lb > 40)
    return 99;
  int d[41][41];
  for (int i = 0; i <= la; i++)
    d[i][0] = i;
  for (int j = 0; j <= lb; j++)
    d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v)
        v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v)
        v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

const char *cli_nearest(const char *word, const char *const *cands, int n) {
  int best = 99, len = (int)strlen(word);
  const char *pick = NULL;
  for (int i = 0; i < n; i++) {
    int dist = cli_edit_distance(word, cands[i]);
    if (dist < best) {
      best = dist;
      pick = cands[i];
    }
  }
  int limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
  return best <= limit ? pick : NULL;
}

/* Reads the options and the positional words of a usage text. */
static void read_usage(const char *usage, known_set *k) {
  memset(k, 0, sizeof *k);
  snprintf(k->opt[k->n++].name, NAME_CAP, "help");
  for (const char *line = usage; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > 4 && strncmp(line, "  --", 4) == 0 && k->n < MAX_KNOWN) {
      const char *p = line + 4, *q = p;
      while (q < line + len && (isalnum((unsigned char)*q) || *q == '-' || *q == '_'))
        q++;
      known_opt *o = &k->opt[k->n++];
      snprintf(o->name, NAME_CAP, "%.*s", (int)(q - p), p);
      /* one space then a word: a placeholder for the value */
      o->value = q + 1 < line + len && q[0] == ' ' && q[1] != ' ';
    } else if (len > 2 && line[0] == ' ' && line[1] == ' ' && isalpha((unsigned char)line[2]) &&
               k->max_pos == 0) {
      const char *p = line + 2;
      int words = 0;
      bool rest = false;
      while (p < line + len && *p != ' ') { /* words separated by one space */
        words++;
        const char *w = p;
        while (p < line + len && *p != ' ')
          p++;
        rest = rest || memmem(w, (size_t)(p - w), "...", 3) != NULL;
        if (p + 1 < line + len && p[0] == ' ' && p[1] != ' ')
          p++;
      }
      k->max_pos = rest ? CLI_MAX_POS : words;
      snprintf(k->pos_text, sizeof k->pos_text, "%.*s", (int)(p - line - 2), line + 2);
    }
    line = end ? end + 1 : NULL;
  }
}

static const known_opt *find(const known_set *k, const char *name, size_t len) {
  for (int i = 0; i < k->n; i++)
    if (strlen(k->opt[i].name) == len && strncmp(k->opt[i].name, name, len) == 0)
      return &k->opt[i];
  return NULL;
}

static int refuse_unknown(const known_set *k, const char *sub, const char *arg, size_t len) {
  char word[NAME_CAP * 2];
  snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word - 1 ? len : sizeof word - 1), arg);
  const char *names[MAX_KNOWN];
  for (int i = 0; i < k->n; i++)
    names[i] = k->opt[i].name;
  const char *near = cli_nearest(word, names, k->n);
  if (near)
    fprintf(stderr, "tshard %s: unknown option '--%s'; did you mean '--%s'?\n", sub, word, near);
  else
    fprintf(stderr, "tshard %s: unknown option '--%s'; see tshard %s --help for its options\n", sub,
            word, sub);
  return CLI_USAGE;
}

int cli_strict_parse(cli_args *a, const char *usage) {
  known_set k;
  read_usage(usage, &k);
  const char *sub = a->argv[0];
  a->npos = 0;
  for (int i = 1; i < a->argc; i++) {
    const char *s = a->argv[i];
    if (strncmp(s, "--", 2) != 0 || s[2] == '\0') {
      if (a->npos >= k.max_pos) {
        if (k.max_pos == CLI_MAX_POS)
          fprintf(stderr, "tshard %s: more than %d arguments\n", sub, CLI_MAX_POS);
        else if (k.max_pos == 0)
          fprintf(stderr,
                  "tshard %s: unexpected argument '%s'; %s takes no positional "
                  "arguments (see tshard %s --help)\n",
                  sub, s, sub, sub);
        else
          fprintf(stderr,
                  "tshard %s: unexpected argument '%s'; %s takes %s (see tshard %s "
                  "--help)\n",
                  sub, s, sub, k.pos_text, sub);
        return CLI_USAGE;
      }
      a->pos[a->npos++] = s;
      continue;
    }
    const char *eq = strchr(s, '=');
    size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
    const known_opt *o = find(&k, s + 2, len);
    if (!o)
      return refuse_unknown(&k, sub, s + 2, len);
    if (!o->value && eq) {
      fprintf(stderr, "tshard %s: option '--%s' takes no value (given '%s')\n", sub, o->name,
              eq + 1);
      return CLI_USAGE;
    }
    if (o->value && !eq) {
      if (i + 1 >= a->argc) {
        fprintf(stderr, "tshard %s: option '--%s' needs a value (see tshard %s --help)\n", sub,
                o->name, sub);
        return CLI_USAGE;
      }
      i++; /* its value, whatever it looks like */
    }
  }
  a->parsed = true;
  return CLI_OK;
}

const char *cli_suggest_option(const char *word, const char *const *usages, int n) {
  static known_set all;
  memset(&all, 0, sizeof all);
  for (int u = 0; u < n; u++) {
    known_set k;
    read_usage(usages[u], &k);
    for (int i = 0; i < k.n && all.n < MAX_KNOWN; i++)
      if (!find(&all, k.opt[i].name, strlen(k.opt[i].name)))
        all.opt[all.n++] = k.opt[i];
  }
  const char *names[MAX_KNOWN];
  for (int i = 0; i < all.n; i++)
    names[i] = all.opt[i].name;
  return cli_nearest(word, names, all.n);
}
