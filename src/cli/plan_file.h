/*
 * plan_file.h — `--plan-file FILE` (plan_file.c): every rank's described plan from a JSON file.
 */
#ifndef SL_CLI_PLAN_FILE_H
#define SL_CLI_PLAN_FILE_H

#include "shardload/core.h"

/* world entries (the ranks of a class share a plan), or NULL after a message on stderr naming the
 * file; free with sl_cli_free_plans. cmd: "plan" or "load", for messages. */
sl_plan **sl_cli_read_plans(const char *cmd, const char *path, int world);
void sl_cli_free_plans(sl_plan **plans, int world);

#endif
