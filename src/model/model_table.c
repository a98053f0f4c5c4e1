/*
 * model/model_table.c — the parameter table of a model (model/model.h sl__mparam): a parameter
 * appended to a build with its "none" fields set, a companion (scales, zeros, group indices) put
 * where its weight sits, and the freeing of a parameter and of a whole model. Shared by every step
 * of the builder (model/model_build.h) and by the model of pre-sharded checkpoints
 * (model/sharded.c).
 */
#include "model/described.h"
#include "model/model_build.h"

#include <stdlib.h>
#include <string.h>

sl__mparam *sl__model_push_param(sl__model_builder *b) {
  sl__mparam *p = sl__vec_push(&b->params);
  if (p == NULL) {
    sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    return NULL;
  }
  p->alias_of = SL_NONE;
  p->only_expert = SL_NONE;
  p->layer = -1;
  p->held_dtype = SL_DT_COUNT; /* its sources' unless set (sl__model_held_dtypes) */
  return p;
}

/* A companion of weight w (scales, zeros, group indices) sits where w sits and shares its heads. */
void sl__mparam_inherit(sl__mparam *p, const sl__mparam *w) {
  p->place = w->place;
  p->layer = w->layer;
  p->q_heads = w->q_heads;
  p->kv_heads = w->kv_heads;
  p->head_dim = w->head_dim;
  p->v_head_dim = w->v_head_dim;
}

void sl__model_mparam_free(sl__mparam *p) {
  free(p->name);
  for (size_t i = 0; i < p->n_src; i++)
    free(p->src[i].name);
  free(p->src);
  free(p->fields);
}

void sl__model_free(sl__model *m) {
  if (m == NULL)
    return;
  free(m->family);
  free(m->architecture);
  for (size_t i = 0; i < m->n_params; i++)
    sl__model_mparam_free(&m->params[i]);
  free(m->params);
  for (size_t i = 0; i < m->n_units; i++)
    free(m->units[i]);
  free(m->units);
  free(m->unit_param);
  free(m->tensor_fate);
  sl__described_free(m->described);
  free(m->described);
  memset(m, 0, sizeof *m);
}
