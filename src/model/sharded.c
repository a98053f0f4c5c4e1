/*
 * model/sharded.c — the model of a pre-sharded checkpoint (see model/sharded.h): the saved world
 * size and layout checked against the job's, then one owned, replicated parameter per catalog tensor and the
 * expected set of all of them. The file names it reads ranks from are model/sharded_name.c.
 */
#include "model/sharded.h"

#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The saved world size: tp·pp·dp of the saved layout when the files say it, else the highest rank
 * of the file names plus one (a rank whose parameters were all empty writes no file, so counting
 * files could undercount). */
static sl_status saved_world(const sl__catalog *cat, uint32_t *world, sl__err *err) {
  *world = 0;
  for (size_t f = 0; f < cat->n_files; f++) {
    uint32_t rank = 0;
    uint32_t part = 0;
    if (!sl__sharded_file_rank(cat->files[f].name, &rank, &part))
      return sl__err_set(err, SL_STATUS_LAYOUT,
                         "sharded_state: %s is not named model-rank-{rank}-part-{part}.safetensors",
                         cat->files[f].path);
    if (rank + 1 > *world)
      *world = rank + 1;
  }
  const sl__sharded_layout *s = &cat->saved;
  if (!sl__sharded_layout_known(s))
    return SL_STATUS_OK;
  uint32_t product = s->tp * s->pp * s->dp; /* fits: checked as the metadata was read */
  if (*world > product)
    return sl__err_set(
        err, SL_STATUS_LAYOUT,
        "sharded_state checkpoint %s: its files say they were saved at tp=%u pp=%u dp=%u (%u ranks), "
        "but it holds files of rank %u",
        cat->folder, s->tp, s->pp, s->dp, product, *world - 1);
  *world = product;
  return SL_STATUS_OK;
}

/* The job against the save: the same world size, and the same layout when the files say theirs. */
static sl_status check_layout(const sl__catalog *cat, const sl__layout *job, sl__err *err) {
  uint32_t saved = 0;
  sl_status st = saved_world(cat, &saved, err);
  if (st != SL_STATUS_OK)
    return st;
  const sl__sharded_layout *s = &cat->saved;
  char at[96] = "";
  if (sl__sharded_layout_known(s))
    snprintf(at, sizeof at, " at tp=%u pp=%u dp=%u", s->tp, s->pp, s->dp);
  if (saved != job->world)
    return sl__err_set(
        err, SL_STATUS_LAYOUT,
        "sharded_state checkpoint %s was saved by %u ranks%s (model-rank-0 .. model-rank-%u), but "
        "this job has %u ranks: load it with %u ranks",
        cat->folder, saved, at, saved > 0 ? saved - 1 : 0, job->world, saved);
  if (sl__sharded_layout_known(s) && (s->tp != job->tp || s->pp != job->pp || s->dp != job->dp))
    return sl__err_set(
        err, SL_STATUS_LAYOUT,
        "sharded_state checkpoint %s was saved%s, but this job asks for tp=%u pp=%u dp=%u: load it "
        "with --tp %u --pp %u --dp %u, or without --tp/--pp/--dp (the saved layout is then taken)",
        cat->folder, at, job->tp, job->pp, job->dp, s->tp, s->pp, s->dp);
  return SL_STATUS_OK;
}

/* One owned parameter per catalog tensor, named without its rank qualifier. */
static sl_status build_params(const sl__catalog *cat, sl__model *m, sl__err *err) {
  m->params = calloc(cat->n_tensors + 1, sizeof *m->params);
  if (m->params == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t t = 0; t < cat->n_tensors; t++) {
    const sl__cat_tensor *ct = &cat->tensors[t];
    sl__mparam *p = &m->params[m->n_params++];
    p->alias_of = SL_NONE;
    p->only_expert = SL_NONE;
    p->style = SL_STYLE_REPLICATED;
    p->place = SL_PLACE_LAYER;
    p->layer = -1;
    p->dtype = ct->dtype;
    p->held_dtype = ct->dtype;
    p->ndim = ct->ndim;
    memcpy(p->shape, ct->shape, sizeof p->shape);
    uint32_t part = 0;
    p->owned = sl__sharded_file_rank(cat->files[ct->file].name, &p->owner, &part);
    const char *slash = strchr(ct->name, '/');
    p->name = sl__strdup(slash != NULL ? slash + 1 : ct->name);
    p->src = calloc(1, sizeof *p->src);
    if (p->name == NULL || p->src == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    p->n_src = 1;
    p->src[0] = (sl__msrc){.name = sl__strdup(ct->name),
                           .tensor = (uint32_t)t,
                           .unit = SL_NONE,
                           .expert = SL_NONE,
                           .ndim = ct->ndim};
    memcpy(p->src[0].shape, ct->shape, sizeof p->src[0].shape);
    if (p->src[0].name == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  return SL_STATUS_OK;
}

/* The expected set: every catalog tensor (rank-qualified names are unique), sorted bytewise. */
static sl_status build_units(const sl__catalog *cat, sl__model *m, sl__err *err) {
  m->units = calloc(cat->n_tensors + 1, sizeof *m->units);
  m->unit_param = calloc(cat->n_tensors + 1, sizeof *m->unit_param);
  m->tensor_fate = calloc(cat->n_tensors + 1, 1);
  if (m->units == NULL || m->unit_param == NULL || m->tensor_fate == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t t = 0; t < cat->n_tensors; t++) {
    m->units[t] = sl__strdup(cat->tensors[t].name);
    if (m->units[t] == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    m->n_units++;
    m->tensor_fate[t] = SL_FATE_CONSUMED;
  }
  qsort(m->units, m->n_units, sizeof *m->units, cmp_cstr);
  for (size_t i = 0; i < m->n_units; i++) {
    uint32_t t = sl__catalog_find(cat, m->units[i]);
    if (t == SL_NONE)
      return sl__err_set(err, SL_STATUS_INTERNAL, "sharded_state: %s not in the catalog", m->units[i]);
    m->params[t].src[0].unit = (uint32_t)i;
    m->unit_param[i] = t;
  }
  return SL_STATUS_OK;
}

sl_status sl__sharded_model_build(const sl__catalog *cat, const sl__layout *job, sl__model *m, sl__err *err) {
  memset(m, 0, sizeof *m);
  sl_status st = check_layout(cat, job, err);
  if (st != SL_STATUS_OK)
    return st;
  uint32_t world = job->world;
  m->family = sl__strdup("sharded_state");
  m->layout = SL_LAYOUT_VLLM;
  /* Pipeline stages are irrelevant to owned parameters; one layer per rank keeps any pp <= world
   * valid for the stage split. */
  m->n_layers = world;
  m->n_group = 1;
  cJSON *config = NULL;
  if (cat->config_json != NULL && sl__model_parse_config(cat, &config, NULL) == SL_STATUS_OK) {
    const char *arch = NULL;
    if (sl__model_architecture(config, &arch, NULL) == SL_STATUS_OK)
      m->architecture = sl__strdup(arch);
  }
  cJSON_Delete(config);
  st = m->family != NULL ? build_params(cat, m, err) : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = build_units(cat, m, err);
  if (st != SL_STATUS_OK)
    sl__model_free(m);
  return st;
}
