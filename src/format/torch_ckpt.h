/*
 * format/torch_ckpt.h — PyTorch checkpoints written by torch.save (the zip container of torch ≥ 1.6,
 * docs/spec/FILES.md §8): the zip directory (format/zip.h) plus the state-dict pickle
 * (format/pickle.h) become the same table a safetensors header gives, so the catalog, `inspect`
 * and the engine treat `.bin` / `.pt` files exactly like safetensors ones: every tensor has an
 * absolute byte range in the file that ranks range-read. Pure apart from reading the file.
 */
#ifndef SL_TORCH_CKPT_H
#define SL_TORCH_CKPT_H

#include "format/safetensors.h"
#include "format/zip.h"

#include <stdbool.h>

/* A file name the pickle reader handles: *.bin, *.pt, *.pth. */
bool sl__pt_is_pickle_name(const char *name);

/* Fills out as sl__st_read_file does, with data_start 0 and header_len 0: begin/end are absolute
 * file offsets; tensors sorted by (begin, end, name). meta is empty. Errors are SL_STATUS_PICKLE
 * naming the file (and the entry, key or tensor involved); a legacy (pre-1.6, non-zip) file is
 * refused with a message saying so. */
sl_status sl__pt_parse(const sl__zip_src *src, const char *what, sl__st_header *out, sl__err *err);

/* Opens path and calls sl__pt_parse; I/O failures are SL_STATUS_IO naming the file. */
sl_status sl__pt_read_file(const char *path, sl__st_header *out, sl__err *err);

/* sl__pt_read_file for pickle names, sl__st_read_file otherwise. */
sl_status sl__weights_read_file(const char *path, sl__st_header *out, sl__err *err);

#endif
