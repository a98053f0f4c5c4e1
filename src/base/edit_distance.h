#ifndef SL_BASE_EDIT_DISTANCE_H
#define SL_BASE_EDIT_DISTANCE_H

#include <stddef.h>

/* The longest name compared in full; longer names are compared on their first
 * SL_EDIT_NAME_MAX - 1 characters, which is enough to suggest a configuration key or option. */
#define SL_EDIT_NAME_MAX 64

/* Edit distance between two names (insertions, deletions, substitutions and swaps of two
 * neighbouring characters), for "did you mean" suggestions. Also compiled into the command-line
 * tool, which otherwise uses the public header only. */
size_t sl__edit_distance(const char *a, const char *b);

#endif
