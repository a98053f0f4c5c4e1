/*
 * model/file_select.h — which weight files of a model folder are loaded (docs/spec/FILES.md): load formats,
 * pattern priority, Mistral detection, index de-duplication, trainer-file filter, natural sort.
 * Pure file-system logic: no MPI, no network. The Hub client reuses the name-list entry points
 * on a repository's file listing.
 */
#ifndef SL_SELECT_H
#define SL_SELECT_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>

#define SL_INDEX_MAX_BYTES ((size_t)256 << 20) /* index files larger than this are refused */

typedef enum sl__format {
  SL_FORMAT_AUTO = 0,
  SL_FORMAT_HF,
  SL_FORMAT_SAFETENSORS,
  SL_FORMAT_MISTRAL,
  SL_FORMAT_PT,
  SL_FORMAT_SHARDED_STATE /* pre-sharded per-rank files (model/sharded.h) */
} sl__format;

/* Case-insensitive (ASCII); NULL means auto. Error (SL_STATUS_CONFIG, X as given):
 * "unknown load format 'X' (accepted: auto, hf, safetensors, mistral, pt, sharded_state)". */
sl_status sl__format_parse(const char *s, sl__format *out, sl__err *err);
const char *sl__format_name(sl__format f);

/* The selection options of one weight source. */
typedef struct sl__select_opts {
  sl__format format;                          /* AUTO is resolved by the functions below */
  bool fall_back_to_pt;                       /* from the architecture spec; default true */
  const char *const *allow_patterns_override; /* NULL-terminated, or NULL */
} sl__select_opts;

/* index_name: sl__select_dir sets it when the folder's index existed and was applied;
 * sl__select_names when the name list holds the format's index, for the caller to apply. */
typedef struct sl__selection {
  sl__format format; /* the effective format (never AUTO) */
  bool use_safetensors;
  char *index_name; /* index file used for de-duplication, or NULL (see above) */
  size_t n_files;
  char **files; /* basenames, natural-sorted */
  /* sl__select_dir: the tensor names of the applied index's weight_map (each once), for the
   * catalog's check that the selected files hold them. */
  size_t n_index_tensors;
  char **index_tensors;
} sl__selection;

/* Frees what a selection owns and zeroes it; NULL and a zeroed struct are fine. */
void sl__selection_free(sl__selection *s);

/* AUTO → MISTRAL when any path (any depth, given as '/'-separated relative paths) has a
 * basename matching consolidated*.safetensors, else HF. Other formats are returned unchanged. */
sl__format sl__format_resolve_auto(sl__format f, const char *const *paths, size_t n_paths);

/* Same, walking a local folder recursively (a walk failure counts as "no match"). Symlinked
 * folders are not entered; a folder that cannot be listed contributes nothing (as os.walk). */
sl__format sl__format_resolve_auto_dir(sl__format f, const char *folder);

/* docs/spec/FILES.md §2 steps 2–7 on a local folder (non-recursive listing, regular files or symlinks
 * to regular files). `what` is the model argument used in "Cannot find any model weights with
 * '<what>'". Index files are parsed and validated (docs/spec/FILES.md §5): a weight_map value that is
 * not a plain relative name is an error; a value naming a file that does not exist is an error. */
sl_status sl__select_dir(const char *folder, const sl__select_opts *opts, const char *what,
                         sl__selection *out, sl__err *err);

/* The pattern-matching part on a list of top-level names (the Hub's siblings), without the index
 * step: returns the matched names of the winning pattern (before index filtering and sorting).
 * AUTO is resolved on the names themselves. Names containing '/' never match. An empty match is
 * not an error here: the caller applies the index, then sl__select_finish. */
sl_status sl__select_names(const char *const *names, size_t n_names, const sl__select_opts *opts,
                           sl__selection *out, sl__err *err);

/* Index step on an already-matched selection: keeps names equal to some weight_map value
 * (input order preserved). index_json is the file's content (length len, need not be
 * NUL-terminated); `what` names it. Errors are SL_STATUS_INDEX: invalid JSON, no weight_map
 * object, a non-string value, a value failing sl__relpath_is_safe, more than 256 MiB. A repeated
 * key keeps its last value. On error sel is left unchanged. */
sl_status sl__select_apply_index(sl__selection *sel, const char *index_json, size_t len, const char *what,
                                 sl__err *err);

/* Trainer-file filter and natural sort (docs/spec/FILES.md §2 step 5 "otherwise" branch and step 7). */
void sl__select_filter_trainer_files(sl__selection *sel);
void sl__select_sort(sl__selection *sel);

/* docs/spec/FILES.md §2 steps 5 (trainer filter, when !use_safetensors), 6 and 7 on a matched (and
 * index-filtered) selection: SL_STATUS_NO_WEIGHTS "Cannot find any model weights with '<what>'" when nothing
 * is left, else the files are sorted. sl__select_dir ends with it; the Hub client calls it after
 * sl__select_names and sl__select_apply_index. */
sl_status sl__select_finish(sl__selection *sel, const char *what, sl__err *err);

/* Natural-order comparison of two basenames (docs/spec/FILES.md §4), ties by bytes. */
int sl__natural_cmp(const char *a, const char *b);

/* The index file name of a safetensors format (NULL for pt). A selection of .bin files uses
 * pytorch_model.bin.index.json instead (docs/spec/FILES.md §5). */
const char *sl__format_index_name(sl__format f);

/* A relative file name from an index or a listing is acceptable (non-empty, no leading '/' or
 * '\\', no '\\', no '.' or '..' segment, no empty segment, no drive prefix, no byte < 0x20). */
bool sl__relpath_is_safe(const char *path);

#endif
