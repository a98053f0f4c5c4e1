/*
 * output/paths.h — the paths a load will write (the report, the pre-sharded copy's folder), made
 * ready before it reads a byte: a missing folder is created with its parents (as the save creates
 * its own), and what cannot be written is refused at once naming the path and the option, instead
 * of after the whole load. docs/spec/TRACKING.md §4.6.
 */
#ifndef SL_OUTPUT_PATHS_H
#define SL_OUTPUT_PATHS_H

#include "base/err.h"

/* A folder files will be written into: created with its parents when missing, then a probe file
 * created in it and removed (permissions, a read-only file system, a full inode table all show).
 * `what` names the option in messages ("save_sharded (--save-sharded)"). SL_STATUS_IO on failure. */
sl_status sl__output_dir_ready(const char *dir, const char *what, sl__err *err);

/* A file that will be written whole later: not a folder; when it exists, openable for writing (it
 * is not changed now); when it does not, its folder ready as sl__output_dir_ready makes it. */
sl_status sl__output_file_ready(const char *path, const char *what, sl__err *err);

#endif
