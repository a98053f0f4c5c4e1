/*
 * api/prepare.c — resolution of the model argument, spec choice, catalog and model (see api/prepare.h).
 */
#include "api/prepare.h"

#include "api/config.h"
#include "api/hub_download.h"
#include "api/s3_model.h"
#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/file_gate.h"
#include "engine/file_table.h"
#include "hub/hub.h"
#include "model/described.h"
#include "model/sharded.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void sl__prepared_free(sl__prepared *p) {
  if (p == NULL)
    return;
  if (p->hub != NULL) { /* a load that never reached its transfer: stop the downloads */
    sl__hub_result r;
    sl__err e;
    sl__err_clear(&e);
    sl__hub_pending_finish(p->hub, true, &r, &e);
    sl__hub_result_free(&r);
    p->hub = NULL;
  }
  sl__file_gate_free(p->gate);
  sl__catalog_free(&p->cat);
  free(p->spec_text);
  free(p->spec_path);
  sl__spec_free(p->spec);
  if (p->have_model)
    sl__model_free(&p->model);
  free(p->commit);
  memset(p, 0, sizeof *p);
}

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Whether the model argument is a local path rather than a Hub repository id: it starts with
 * "./", "../", "/" or "~", or has more than one '/', or names something that exists, or is
 * "org/name" where a local folder "org" exists (a mistyped "models/lama" beside "models/"). Only
 * a plain "name" or "org/name" with nothing of that name here goes to the Hub. */
static bool is_local_path(const char *model) {
  if (model[0] == '/' || model[0] == '~' || strncmp(model, "./", 2) == 0 || strncmp(model, "../", 3) == 0 ||
      strcmp(model, ".") == 0 || strcmp(model, "..") == 0)
    return true;
  const char *slash = strchr(model, '/');
  if (slash != NULL && strchr(slash + 1, '/') != NULL)
    return true;
  if (exists(model))
    return true;
  if (slash == NULL || slash == model)
    return false;
  char *first = sl__strndup(model, (size_t)(slash - model));
  bool local = first != NULL && is_dir(first);
  free(first);
  return local;
}

/* The model folder: the argument itself, or the Hub snapshot it names. */
static sl_status resolve_folder(const sl_config *cfg, const sl__opts *o, bool overlap, sl__prepared *p,
                                char **folder, sl__err *err) {
  if (is_dir(o->model)) {
    *folder = sl__strdup(o->model);
    return *folder != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  if (is_local_path(o->model)) { /* at once: never a Hub request for a mistyped local path */
    /* "~/m" that no shell expanded (a path from Python or a config file): the home folder. */
    const char *home = getenv("HOME");
    char *path = NULL;
    if (o->model[0] == '~' && (o->model[1] == '/' || o->model[1] == '\0') && home != NULL && *home != '\0')
      path = sl__asprintf("%s%s", home, o->model + 1);
    const char *where = path != NULL ? path : o->model;
    sl_status st = SL_STATUS_OK;
    if (path != NULL && is_dir(path)) {
      *folder = path;
      return SL_STATUS_OK;
    }
    if (exists(where))
      st = sl__err_set(err, SL_STATUS_NOT_FOUND,
                       "not a folder: %s (a model is a folder with config.json and the weight files)", where);
    else
      st = sl__err_set(err, SL_STATUS_NOT_FOUND,
                       "no such folder: %s (a local path; Hub ids look like org/name)", where);
    free(path);
    return st;
  }
  SL_INFO("resolving '%s' (process %ld): not a folder, trying the Hub", o->model, (long)getpid());
  if (!sl__hub_valid_repo_id(o->model))
    return sl__err_set(
        err, SL_STATUS_NOT_FOUND,
        "model '%s' is neither an existing folder nor a valid Hub repository id (namespace/name)", o->model);
  sl__hub_opts ho;
  char **include = NULL;
  sl_status st = sl__hub_opts_from_config(cfg, &ho, &include, err);
  if (st != SL_STATUS_OK)
    return st;
  ho.select.format = o->format;
  sl__hub_result r;
  memset(&r, 0, sizeof r);
  if (overlap)
    st = sl__hub_resolve_begin(o->model, &ho, &r, &p->hub, err);
  else
    st = sl__hub_resolve(o->model, &ho, &r, err);
  p->hub_format = r.format;
  sl__config_free_list(include);
  if (st != SL_STATUS_OK) { /* what the user may have meant comes first: a local folder */
    char cwd[1024];
    sl__err_prefix(err, "no folder '%s' here (%s), and as a Hub repository id", o->model,
                   getcwd(cwd, sizeof cwd) != NULL ? cwd : "the current folder");
    return st;
  }
  *folder = r.snapshot_dir;
  r.snapshot_dir = NULL;
  p->commit = r.commit;
  r.commit = NULL;
  p->download_bytes = r.bytes_downloaded;
  p->download_files = r.files_downloaded;
  p->download_seconds = r.seconds;
  sl__hub_result_free(&r);
  return SL_STATUS_OK;
}

/* The spec: the one named, or the one of config.json's architecture (its text given: an object
 * store's, NULL when it has none; or read from the folder). */
static sl_status choose_spec(const sl__opts *o, const char *folder, const sl__s3_model *given,
                             sl__prepared *p, sl__err *err) {
  const char *path = NULL;
  sl__spec *found = NULL;
  sl_status st = SL_STATUS_OK;
  if (strcmp(o->arch, "auto") != 0 && (strchr(o->arch, '/') != NULL || sl__str_ends_with(o->arch, ".json"))) {
    path = o->arch;
  } else if (strcmp(o->arch, "auto") != 0) {
    /* an architecture name (vLLM's name of a draft: DeepSeekMTPModel): the spec that lists it */
    st = sl__spec_find(o->arch, &found, err);
    if (st != SL_STATUS_OK)
      return st;
    path = found->path;
  } else {
    char *cfg_path = given == NULL ? sl__path_join(folder, "config.json") : NULL;
    char *text =
        given != NULL && given->config != NULL ? sl__strndup(given->config, given->config_len) : NULL;
    size_t len = given != NULL ? given->config_len : 0;
    if (given != NULL)
      st = given->config == NULL ? SL_STATUS_NOT_FOUND
           : text != NULL        ? SL_STATUS_OK
                                 : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    else
      st = cfg_path != NULL ? sl__read_file(cfg_path, SL_CONFIG_MAX_BYTES, &text, &len, err)
                            : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    if (st == SL_STATUS_NOT_FOUND) {
      sl__err_clear(err);
      st = sl__err_set(err, SL_STATUS_MODEL_CONFIG, "%s has no config.json (needed to know the architecture)",
                       folder);
    }
    free(cfg_path);
    cJSON *cfg = NULL;
    if (st == SL_STATUS_OK) {
      /* Bounded (base/json.h) before cJSON allocates: config.json is the checkpoint's. */
      char what[1024];
      snprintf(what, sizeof what, "%s/config.json", folder);
      st = sl__json_parse(text, len, what, SL_STATUS_MODEL_CONFIG, &cfg, err);
      if (st == SL_STATUS_OK && !cJSON_IsObject(cfg))
        st = sl__err_set(err, SL_STATUS_MODEL_CONFIG, "%s/config.json is not a valid JSON object", folder);
    }
    free(text);
    const char *arch = NULL;
    if (st == SL_STATUS_OK)
      st = sl__model_architecture(cfg, &arch, err);
    if (st == SL_STATUS_OK)
      st = sl__spec_find(arch, &found, err);
    cJSON_Delete(cfg);
    if (st != SL_STATUS_OK)
      return st;
    path = found->path;
  }
  p->spec_path = sl__strdup(path);
  st = p->spec_path != NULL ? sl__read_file(path, SL_SPEC_MAX_BYTES, &p->spec_text, &p->spec_len, err)
                            : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st != SL_STATUS_OK && st != SL_STATUS_NOMEM) {
    if (err != NULL)
      err->status = SL_STATUS_ARCH;
    st = SL_STATUS_ARCH;
  }
  if (st == SL_STATUS_OK)
    st = found != NULL ? SL_STATUS_OK : sl__spec_parse(p->spec_text, p->spec_len, p->spec_path, &found, err);
  /* A vision spec read from its own file travels inlined: no other rank reads a spec folder. */
  char *inlined = NULL;
  size_t inlined_len = 0;
  if (st == SL_STATUS_OK)
    st = sl__spec_inline_vision(p->spec_text, p->spec_len, found, &inlined, &inlined_len, err);
  if (inlined != NULL) {
    free(p->spec_text);
    p->spec_text = inlined;
    p->spec_len = inlined_len;
  }
  if (st == SL_STATUS_OK)
    p->spec = found;
  else
    sl__spec_free(found);
  return st;
}

static void gate_ready(void *ctx, size_t weight) {
  sl__file_gate_open(ctx, weight);
}

static void gate_failed(void *ctx, const sl__err *e) {
  sl__file_gate_fail(ctx, e);
}

static double hub_last_bytes(void *ctx) {
  return sl__hub_pending_last_bytes(ctx);
}

/* The weights still downloading: the catalog from their headers, a gate, the downloads started.
 * A spec that selects files its own way waits for the download instead (the listing's selection
 * used the default patterns). */
static sl_status catalog_while_downloading(sl__prepared *p, const sl__catalog_opts *co, sl__err *err) {
  const sl__spec *s = p->spec; /* NULL: described plans, the default selection */
  if (s != NULL && (s->allow_patterns_override != NULL || !s->fall_back_to_pt)) {
    sl__hub_result r;
    sl_status st = sl__hub_pending_finish(p->hub, false, &r, err);
    p->hub = NULL;
    if (st == SL_STATUS_OK) {
      p->download_bytes = r.bytes_downloaded;
      p->download_files = r.files_downloaded;
      p->download_seconds = r.seconds;
    }
    sl__hub_result_free(&r);
    return st == SL_STATUS_OK ? sl__catalog_build(co, &p->cat, err) : st;
  }
  size_t n = 0;
  const sl__hub_file *files = sl__hub_pending_files(p->hub, &n);
  sl__cat_header_src *src = calloc(n + 1, sizeof *src);
  if (src == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    src[i] = (sl__cat_header_src){.name = files[i].name,
                                  .size = files[i].size,
                                  .prefix = files[i].header,
                                  .prefix_len = files[i].header_len};
  sl__catalog_opts hco = *co;
  hco.select.format = p->hub_format;
  sl_status st = sl__catalog_from_headers(&hco, src, n, &p->cat, err);
  free(src);
  if (st == SL_STATUS_OK) {
    p->gate = sl__file_gate_create(n, NULL);
    st = p->gate != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  if (st == SL_STATUS_OK)
    st = sl__hub_pending_start(p->hub, gate_ready, gate_failed, p->gate, err);
  return st;
}

/* The catalog options of a model whose spec is chosen: the spec's selection and renames (s NULL:
 * described plans, which name the tensors as stored: the default selection, no renames). */
static sl__catalog_opts catalog_opts(const sl__opts *o, const char *folder, const sl__spec *s) {
  if (s == NULL)
    return (sl__catalog_opts){.folder = folder,
                              .what = o->model,
                              .select = {.format = o->format, .fall_back_to_pt = true},
                              .require_config = true};
  return (sl__catalog_opts){
      .folder = folder,
      .what = o->model,
      .select = {.format = o->format,
                 .fall_back_to_pt = s->fall_back_to_pt,
                 .allow_patterns_override = (const char *const *)s->allow_patterns_override},
      .require_config = true,
      .n_renames = s->n_rename,
      .rename_from = (const char *const *)s->rename_from,
      .rename_to = (const char *const *)s->rename_to,
      .rename_format = s->rename_format,
  };
}

/* An s3:// model (api/s3_model.h): listed, its spec chosen from its config.json, the catalog from
 * its headers; its weights stay in the store. Retries are bounded within the watchdog's timeout. */
static sl_status prepare_s3(const sl__opts *o, bool described, sl__prepared *p, sl__err *err) {
  if (o->format == SL_FORMAT_SHARDED_STATE)
    return sl__err_set(err, SL_STATUS_UNSUPPORTED, "load_format sharded_state reads local folders, not %s",
                       o->model);
  sl__s3_model *m = NULL;
  sl_status st = sl__s3_model_open(o->model, o->timeout_s / 2, &m, err);
  if (st == SL_STATUS_OK && described)
    st = (p->spec_text = sl__strdup("")) != NULL ? SL_STATUS_OK
                                                 : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  else if (st == SL_STATUS_OK)
    st = choose_spec(o, m->location, m, p, err);
  if (st == SL_STATUS_OK) {
    sl__catalog_opts co = catalog_opts(o, m->location, p->spec);
    st = sl__s3_model_catalog(m, &co, &p->cat, err);
  }
  sl__s3_model_free(m);
  if (st != SL_STATUS_OK)
    sl__prepared_free(p);
  return st;
}

sl_status sl__prepare_catalog(const sl_config *cfg, const sl__opts *o, bool overlap, bool described,
                              sl__prepared *p, sl__err *err) {
  memset(p, 0, sizeof *p);
  if (sl__s3_is_url(o->model))
    return prepare_s3(o, described, p, err);
  char *folder = NULL;
  /* Load format auto reads a local folder of part files alone as what --save-sharded wrote. */
  bool sharded = sl__prepare_is_sharded(o);
  /* The overlap needs files opened during the transfer: not with mappings made before it. */
  overlap = overlap && !sharded && o->strategy != SL_STRATEGY_MMAP;
  sl_status st = resolve_folder(cfg, o, overlap, p, &folder, err);
  /* A pre-sharded checkpoint needs no spec: its files already hold each rank's parameters; nor do
   * described plans. */
  if (st == SL_STATUS_OK && sharded && described)
    st = sl__err_set(err, SL_STATUS_UNSUPPORTED, "described plans do not apply to load_format sharded_state");
  if (st == SL_STATUS_OK && (sharded || described)) {
    /* No spec text: an empty one still travels (the broadcast needs a buffer). */
    p->spec_text = sl__strdup("");
    st = p->spec_text != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  if (st == SL_STATUS_OK && sharded)
    st = sl__catalog_build(&(sl__catalog_opts){.folder = folder,
                                               .what = o->model,
                                               .select = {.format = SL_FORMAT_SHARDED_STATE}},
                           &p->cat, err);
  else if (st == SL_STATUS_OK && !described)
    st = choose_spec(o, folder, NULL, p, err);
  if (st == SL_STATUS_OK && !sharded) {
    sl__catalog_opts co = catalog_opts(o, folder, p->spec);
    st = p->hub != NULL ? catalog_while_downloading(p, &co, err) : sl__catalog_build(&co, &p->cat, err);
  }
  free(folder);
  if (st != SL_STATUS_OK)
    sl__prepared_free(p);
  return st;
}

sl_status sl__prepare_gate(sl__prepared *p, sl__comm *c, sl__file_gate **gate, sl__err *err) {
  if (p->hub != NULL) {
    c->abort_hook = sl__file_gate_failed;
    c->abort_hook_ctx = p->gate;
    c->progress_hook = hub_last_bytes;
    c->progress_hook_ctx = p->hub;
  }
  if (p->gate == NULL && p->cat.arriving && p->hub == NULL) {
    const char **paths = calloc(p->cat.n_files + 1, sizeof *paths);
    for (size_t i = 0; paths != NULL && i < p->cat.n_files; i++)
      paths[i] = p->cat.files[i].path;
    p->gate = paths != NULL ? sl__file_gate_create(p->cat.n_files, paths) : NULL;
    free(paths);
    if (p->gate == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  *gate = p->gate;
  return SL_STATUS_OK;
}

sl_status sl__prepare_download_wait(sl__prepared *p, sl__comm *c, sl_status st, sl__err *err) {
  c->abort_hook = NULL;
  if (p->hub == NULL)
    return st;
  /* The rest (files no rank of this load reads, those of other ranks) may still be arriving:
   * answer the watchdog and the abort channel meanwhile, napping. */
  bool cancel = st != SL_STATUS_OK;
  while (!cancel && !sl__hub_pending_done(p->hub)) {
    sl__comm_poll(c);
    cancel = sl__comm_abort_check(c);
    sl__sleep_s(0.005);
  }
  sl__hub_result r;
  sl__err herr;
  sl__err_clear(&herr);
  c->progress_hook = NULL; /* p->hub ends here */
  sl_status hst = sl__hub_pending_finish(p->hub, cancel, &r, &herr);
  p->hub = NULL;
  if (hst == SL_STATUS_OK) {
    p->download_bytes = r.bytes_downloaded;
    p->download_files = r.files_downloaded;
    p->download_seconds = r.seconds;
  } else {
    sl__comm_abort_raise(c);
  }
  sl__hub_result_free(&r);
  if (hst != SL_STATUS_OK && (st == SL_STATUS_OK || st == SL_STATUS_PEER_FAILED)) {
    sl__err_copy(err, &herr);
    st = hst;
  }
  return st;
}

bool sl__prepare_is_sharded(const sl__opts *o) {
  if (o->format == SL_FORMAT_SHARDED_STATE)
    return true;
  return o->format == SL_FORMAT_AUTO && !sl__s3_is_url(o->model) && is_dir(o->model) &&
         sl__sharded_folder(o->model);
}

sl_status sl__prepare_model(const sl__opts *o, const sl__layout *layout, sl__prepared *p, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  if (p->cat.format == SL_FORMAT_SHARDED_STATE) {
    st = sl__sharded_model_build(&p->cat, layout, &p->model, err);
    p->have_model = st == SL_STATUS_OK;
    return st;
  }
  if (p->spec == NULL)
    st = sl__spec_parse(p->spec_text, p->spec_len, p->spec_path != NULL ? p->spec_path : "(broadcast)",
                        &p->spec, err);
  if (st == SL_STATUS_OK && o->skip_vision)
    sl__spec_drop_vision(p->spec); /* the tower's tensors are then skipped by their prefixes */
  if (st == SL_STATUS_OK)
    st = sl__model_build(p->spec, &p->cat, o->layout, &p->model, err);
  if (st == SL_STATUS_OK)
    p->have_model = true;
  if (st == SL_STATUS_OK)
    st = sl__model_vision(&p->model, p->spec, &p->cat, o->skip_vision, err);
  if (st == SL_STATUS_OK && o->enable_ep && p->model.experts == 0)
    SL_INFO("enable_expert_parallel (--enable-expert-parallel) has no effect on %s: the model has no experts",
            p->model.family);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * The pipeline
 * ------------------------------------------------------------------------------------------- */

/* The model of described plans: the pipeline's plans move into it. */
static sl_status described_model(sl__pipeline *p, sl__err *err) {
  if (p->prep.cat.format == SL_FORMAT_SHARDED_STATE)
    return sl__err_set(err, SL_STATUS_UNSUPPORTED,
                       "described plans do not apply to load_format sharded_state");
  sl__described *d = p->described;
  p->described = NULL;
  sl_status st = sl__described_model_build(d, &p->prep.cat, p->opts.pp, &p->prep.model, err);
  p->prep.have_model = st == SL_STATUS_OK;
  return st;
}

/* The pipeline stages' first layers: the configuration's split, or for described plans (which do
 * not use it) the automatic split of the model's layer count, at least pp. */
static sl_status plan_stages(sl__pipeline *p, sl__err *err) {
  if (p->prep.model.described == NULL)
    return sl__pp_starts(&p->opts, p->prep.model.n_layers, &p->pp_starts, err);
  p->pp_starts = calloc((size_t)p->opts.pp + 1, sizeof *p->pp_starts);
  if (p->pp_starts == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  return sl__pp_split_auto(p->prep.model.n_layers, p->opts.pp, p->pp_starts, err);
}

/* The error of a job of several ranks given no sizes (tp = pp = dp = 1). */
static sl_status unsized_job(uint32_t world, sl__err *err) {
  sl__layout l;
  sl_status st = sl__layout_init(&l, 1, 1, 1, world, err);
  return st != SL_STATUS_OK
             ? st
             : sl__err_set(err, SL_STATUS_INTERNAL, "a job of %u ranks took tp=pp=dp=1", world);
}

/* Every rank, with the catalog: a job given no sizes takes a pre-sharded checkpoint's saved
 * layout when its files say it and it fits the world (else the model's check names both); any
 * other model needs the sizes (a catalog received from elsewhere than this pipeline's own
 * catalog stage, as a load from peers' receivers do, is checked here too). */
static sl_status saved_layout(sl__pipeline *p, uint32_t world, sl__err *err) {
  if (!p->layout_defaulted)
    return SL_STATUS_OK;
  if (p->prep.cat.format != SL_FORMAT_SHARDED_STATE)
    return world > 1 ? unsized_job(world, err) : SL_STATUS_OK;
  const sl__sharded_layout *s = &p->prep.cat.saved;
  if (!sl__sharded_layout_known(s) || (uint64_t)s->tp * s->pp * s->dp != world)
    return SL_STATUS_OK;
  p->opts.tp = s->tp;
  p->opts.pp = s->pp;
  p->opts.dp = s->dp;
  return sl__layout_init(&p->layout, s->tp, s->pp, s->dp, world, err);
}

static sl_status run_stage(sl__pipeline *p, const sl__prep_driver *d, sl__prep_stage stage, sl__err *err) {
  switch (stage) {
  case SL_PREP_OPTIONS: {
    sl_status st = sl__opts_from_config(d->cfg, &p->opts, err);
    /* A pre-sharded checkpoint is laid out by its files: without --tp/--pp/--dp it is loaded at
     * the layout they say (SL_PREP_MODEL), meanwhile every rank its own data-parallel replica.
     * With load format auto, whether the model is one is known once rank 0 has looked at it. */
    p->layout_defaulted = st == SL_STATUS_OK && p->opts.tp * p->opts.pp * p->opts.dp == 1 &&
                          (p->opts.format == SL_FORMAT_SHARDED_STATE || p->opts.format == SL_FORMAT_AUTO);
    if (p->layout_defaulted)
      p->opts.dp = d->world;
    if (st == SL_STATUS_OK)
      st = sl__layout_init(&p->layout, p->opts.tp, p->opts.pp, p->opts.dp, d->world, err);
    return st;
  }
  case SL_PREP_CATALOG:
    /* No sizes given on several ranks, and not a pre-sharded folder: the layout error on every rank
     * that sees so (all of them, but where only some see the folder), before any Hub request. */
    if (p->layout_defaulted && d->world > 1 && !sl__prepare_is_sharded(&p->opts))
      return unsized_job(d->world, err);
    return d->builds_catalog
               ? sl__prepare_catalog(d->cfg, &p->opts, !d->dry_run, p->described != NULL, &p->prep, err)
               : SL_STATUS_OK;
  case SL_PREP_MODEL: {
    sl_status st = saved_layout(p, d->world, err);
    if (st != SL_STATUS_OK)
      return st;
    return p->described != NULL ? described_model(p, err)
                                : sl__prepare_model(&p->opts, &p->layout, &p->prep, err);
  }
  case SL_PREP_PLAN: {
    sl_status st = plan_stages(p, err);
    if (st != SL_STATUS_OK)
      return st;
    if (d->dry_run) { /* nodes of ranks_per_node ranks; the files on the first */
      p->nodes = (sl__node_layout){.ranks_per_node = p->opts.ranks_per_node};
      if (p->opts.storage == SL_STORAGE_LOCAL &&
          !sl__visibility_first_node(&p->vis, d->world, (uint32_t)p->prep.cat.n_files, &p->nodes))
        return sl__err_set(err, SL_STATUS_NOMEM, "out of memory placing the checkpoint's files");
    }
    sl__plan_opts po;
    sl__pipeline_plan_opts(p, !d->dry_run, &po); /* a loading rank plans what it needs (plan/plan.h) */
    return sl__schedule_build(&p->prep.model, &p->prep.cat, &po, d->dry_run ? SL_NONE : d->rank,
                              d->dry_run ? NULL : &p->plan, &p->sched, err);
  }
  case SL_PREP_NONE:
    break;
  }
  return SL_STATUS_OK;
}

sl_status sl__pipeline_run(sl__pipeline *p, const sl__prep_driver *d, sl__prep_stage until, sl__err *err) {
  if (!d->dry_run && d->rank >= d->world) /* once a dry run's signal: it says dry_run now */
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "pipeline: rank %u of a job of %u ranks (a dry run sets dry_run)", d->rank, d->world);
  while (p->done < until) {
    sl__prep_stage stage = (sl__prep_stage)(p->done + 1);
    double t0 = sl__now();
    sl_status st = run_stage(p, d, stage, err);
    if (d->after != NULL)
      st = d->after(d->ctx, stage, st, t0, err);
    if (st != SL_STATUS_OK)
      return st;
    p->done = stage;
  }
  return SL_STATUS_OK;
}

void sl__pipeline_plan_opts(const sl__pipeline *p, bool local, sl__plan_opts *out) {
  sl__plan_opts_from(&p->opts, &p->layout, p->pp_starts, out);
  out->vis = sl__pipeline_vis(p);
  out->nodes = &p->nodes;
  out->per_row_files = p->per_row_files;
  out->local = local;
}

void sl__pipeline_free(sl__pipeline *p) {
  if (p == NULL)
    return;
  sl__rank_plan_free(&p->plan);
  sl__schedule_free(&p->sched);
  sl__visibility_free(&p->vis);
  sl__file_table_free(p->files);
  free(p->files);
  free(p->tp_choice);
  free(p->per_row_files);
  free(p->pp_starts);
  sl__prepared_free(&p->prep);
  sl__described_free(p->described);
  free(p->described);
  memset(p, 0, sizeof *p);
}

sl_status sl__prepare_groups(const sl__schedule *s, sl__comm_groups *out, sl__err *err) {
  sl__comm_group *g = calloc(s->n_groups + 1, sizeof *g);
  out->n = 0;
  out->group = g;
  if (g == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
  bool *bcast = calloc(s->n_groups + 1, sizeof *bcast);
  if (bcast == NULL) {
    free(g);
    out->group = NULL;
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating broadcast groups");
  }
  sl__schedule_broadcasting(s, bcast);
  /* A group a loading rank's schedule does not list is one without this rank: no members here. */
  for (size_t i = 0; i < s->n_groups; i++)
    g[i] = sl__group_listed(s, (uint32_t)i)
               ? (sl__comm_group){.n = s->groups[i].n,
                                  .members = &s->group_members[s->groups[i].off],
                                  .broadcasts = bcast[i]}
               : (sl__comm_group){.n = 0, .members = NULL, .broadcasts = bcast[i]};
  free(bcast);
  out->n = s->n_groups;
  return SL_STATUS_OK;
}

void sl__prepare_groups_free(sl__comm_groups *g) {
  if (g == NULL)
    return;
  free((void *)g->group);
  g->group = NULL;
  g->n = 0;
}
