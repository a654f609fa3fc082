/* test_e2e_bgsave.c - background saves through the C library on 3 real daemons: tshard_save with
 * opts.background returns once the daemons copied the tensor (info: writing, its save id, the
 * bytes and files), a put made right after it does not reach the checkpoint (loaded back and
 * compared with the reference of the save's time), tshard_wait_saves waits for the files,
 * tshard_stats lists the save as done with every byte written, a synchronous save and a load
 * report what they did, tshard_wait_saves with nothing writing returns at once, and
 * tshard_snapshot without --snapshot-dir is refused naming the flag. What to save must be asked
 * (names, a glob, opts.prefix or opts.all; none, or two ways at once, refused), a checkpoint is
 * replaced only with opts.overwrite, and an export asked no tensors is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NP 3

static tse_job job;
static const int64_t shape[2] = {96, 40};
static const int64_t lo[2] = {0, 0};
static float ref[96 * 40], got[96 * 40];

static void background_save(tshard_client *c, const char *dir) {
  TSE_OK(c, tshard_create(c, "w", "f32", 2, shape, "mesh=[3] placements=[S(0)]", NULL, NULL));
  tse_fill_box("f32", 1, 2, shape, lo, shape, ref);
  TSE_OK(c, tshard_put(c, "w", ref, sizeof ref, NULL));
  tshard_ckpt_info info;
  tshard_save_opts so = {.background = 1, .info = &info};
  TSE_CHECK(tshard_save(c, dir, NULL, 0, &so) == TS_INVALID_ARGUMENT &&
                strstr(tshard_last_message(c), "opts.all = 1"),
            "a save asked no tensors is refused saying how to save all: %s",
            tshard_last_message(c));
  so.all = 1;
  TSE_OK(c, tshard_save(c, dir, NULL, 0, &so));
  TSE_CHECK(info.writing && info.save_id > 0 && info.tensors == 1 && info.bytes == sizeof ref &&
                info.files >= 2 && strcmp(info.dir, dir) == 0,
            "background save info: writing %d id %llu tensors %d bytes %llu files %d dir %s",
            info.writing, (unsigned long long)info.save_id, info.tensors,
            (unsigned long long)info.bytes, info.files, info.dir);
  tse_fill_box("f32", 2, 2, shape, lo, shape, got); /* after the save: not in the checkpoint */
  TSE_OK(c, tshard_put(c, "w", got, sizeof got, NULL));
  TSE_OK(c, tshard_wait_saves(c, info.save_id, 60000));
  tshard_stats *st = malloc(sizeof *st);
  TSE_CHECK(st != NULL, "no memory");
  if (st) {
    TSE_OK(c, tshard_stats_get(c, st));
    int found = 0;
    for (int i = 0; i < st->nsaves; i++)
      if (st->saves[i].save_id == info.save_id) {
        found = 1;
        TSE_CHECK(strcmp(st->saves[i].state, "done") == 0 &&
                      st->saves[i].bytes_written == st->saves[i].bytes_total &&
                      st->saves[i].checkpoint_bytes == sizeof ref && st->saves[i].status == TS_OK,
                  "stats: state %s, %llu of %llu bytes", st->saves[i].state,
                  (unsigned long long)st->saves[i].bytes_written,
                  (unsigned long long)st->saves[i].bytes_total);
      }
    TSE_CHECK(found, "stats lists save %llu", (unsigned long long)info.save_id);
    free(st);
  }
  TSE_OK(c, tshard_wait_saves(c, 0, 0)); /* nothing writing: at once */
  TSE_OK(c, tshard_drop(c, "w", NULL));
  tshard_load_opts lo_opts = {.attr = "mesh=[3] placements=[S(1)]", .info = &info};
  TSE_OK(c, tshard_load(c, dir, NULL, 0, &lo_opts));
  TSE_CHECK(!info.writing && info.tensors == 1 && info.bytes == sizeof ref && info.files >= 1,
            "load info: tensors %d bytes %llu files %d", info.tensors,
            (unsigned long long)info.bytes, info.files);
  memset(got, 0, sizeof got);
  TSE_OK(c, tshard_get(c, "w", got, sizeof got));
  TSE_CHECK(tse_compare_box("w", "f32", 1, 2, shape, lo, shape, got) == 0,
            "the checkpoint holds the values at the save");
  tshard_save_opts sync = {.info = &info, .all = 1};
  TSE_CHECK(tshard_save(c, dir, NULL, 0, &sync) == TS_EXISTS &&
                strstr(tshard_last_message(c), dir) && strstr(tshard_last_message(c), "overwrite"),
            "a save over a checkpoint is refused naming it: %s", tshard_last_message(c));
  sync.overwrite = 1;
  TSE_OK(c, tshard_save(c, dir, NULL, 0, &sync));
  TSE_CHECK(!info.writing && info.save_id == 0 && info.bytes == sizeof ref && info.seconds >= 0,
            "synchronous save info: writing %d bytes %llu", info.writing,
            (unsigned long long)info.bytes);
}

/* Saves by a glob and by a prefix write exactly the tensors they match (info.tensors, and a load
 * of each alone); misuse refused before anything is sent. */
static void selections(tshard_client *c, const char *dir) {
  const int64_t small[1] = {6};
  TSE_OK(c, tshard_create(c, "layer.a", "f32", 1, small, "mesh=[3] placements=[S(0)]", NULL, NULL));
  TSE_OK(c, tshard_create(c, "layer.b", "f32", 1, small, "mesh=[3] placements=[R]", NULL, NULL));
  char path[160];
  tshard_ckpt_info info;
  const char *glob[1] = {"layer.?"};
  snprintf(path, sizeof path, "%s-glob", dir);
  tshard_save_opts o = {.info = &info};
  TSE_OK(c, tshard_save(c, path, glob, 1, &o));
  TSE_CHECK(info.tensors == 2, "a glob saved %d tensors, want 2", info.tensors);
  snprintf(path, sizeof path, "%s-prefix", dir);
  tshard_save_opts p = {.info = &info, .prefix = "layer.b"};
  TSE_OK(c, tshard_save(c, path, NULL, 0, &p));
  TSE_CHECK(info.tensors == 1, "a prefix saved %d tensors, want 1", info.tensors);
  TSE_OK(c, tshard_drop(c, "layer.b", NULL));
  TSE_OK(c, tshard_load(c, path, NULL, 0, NULL));
  TSE_CHECK(tshard_drop(c, "layer.b", NULL) == TS_OK, "the prefix's checkpoint holds layer.b");
  tshard_save_opts both = {.all = 1, .prefix = "layer."};
  int st = tshard_save(c, path, glob, 1, &both);
  TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "one of"),
            "names with all and a prefix: %s", tshard_last_message(c));
  snprintf(path, sizeof path, "%s-none", dir);
  const char *bad[1] = {"nothing.*"};
  st = tshard_save(c, path, bad, 1, NULL);
  TSE_CHECK(st == TS_NOT_FOUND && strstr(tshard_last_message(c), "'nothing.*' matches no tensor") &&
                access(path, F_OK) != 0,
            "a glob matching nothing: %s", tshard_last_message(c));
  snprintf(path, sizeof path, "%s.safetensors", dir);
  st = tshard_export_safetensors(c, path, NULL, 0, NULL, NULL);
  TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "opts.all = 1") &&
                access(path, F_OK) != 0,
            "an export asked no tensors: %s", tshard_last_message(c));
  TSE_OK(c, tshard_drop(c, "layer.a", NULL));
}

int main(void) {
  if (tse_start(&job, NP, NULL, 120))
    return 1;
  char dir[64];
  if (tse_scratch_dir(dir, sizeof dir, "bgsave"))
    return 1;
  char ckpt[96];
  snprintf(ckpt, sizeof ckpt, "%s/ck", dir);
  tshard_client *c = tse_connect(&job, 1);
  if (c) {
    background_save(c, ckpt);
    selections(c, ckpt);
    int st = tshard_snapshot(c, NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "--snapshot-dir"),
              "snapshot without --snapshot-dir: %s %s", tshard_status_name(st),
              tshard_last_message(c));
    tshard_close(&c);
  }
  int rc = tse_stop(&job);
  TSE_CHECK(rc == 0, "daemons stopped: %d", rc);
  tse_scratch_remove(dir);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
