/*
 * test_json.c — base/json.c: untrusted JSON is checked against its depth and value limits
 * before cJSON allocates anything, an escaped NUL in a string is refused, the limits can be
 * raised from the environment, and invalid JSON names the byte where parsing stopped.
 */
#include "base/json.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static sl_status parse(const char *text, cJSON **root, sl__err *err) {
  sl__err_clear(err);
  return sl__json_parse(text, strlen(text), "t.json", SL_STATUS_MODEL_CONFIG, root, err);
}

/* n nested arrays around a 1. */
static char *nested(size_t n) {
  char *s = malloc(2 * n + 2);
  memset(s, '[', n);
  s[n] = '1';
  memset(s + n + 1, ']', n);
  s[2 * n + 1] = '\0';
  return s;
}

/* An array of n zeros. */
static char *array_of(size_t n) {
  char *s = malloc(2 * n + 3);
  size_t k = 0;
  s[k++] = '[';
  for (size_t i = 0; i < n; i++) {
    if (i > 0)
      s[k++] = ',';
    s[k++] = '0';
  }
  s[k++] = ']';
  s[k] = '\0';
  return s;
}

int main(void) {
  cJSON *root = NULL;
  sl__err err;

  /* Ordinary documents parse. */
  CHECK(parse("{\"a\": [1, 2.5e3, -3], \"b\": {\"c\": \"x\\\"y\"}, \"d\": true, \"e\": null}", &root, &err) ==
        SL_STATUS_OK);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(root, "a")) == 3);
  cJSON_Delete(root);

  /* Depth: 64 levels are fine, 65 are refused naming the limit and the variable that raises it. */
  char *s = nested(64);
  CHECK(parse(s, &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);
  free(s);
  s = nested(65);
  CHECK(parse(s, &root, &err) == SL_STATUS_MODEL_CONFIG);
  CHECK(root == NULL);
  CHECKF(strstr(err.msg, "t.json: nested deeper than 64 levels") != NULL, "%s", err.msg);
  CHECKF(strstr(err.msg, "SHARDLOAD_JSON_MAX_DEPTH") != NULL, "%s", err.msg);
  setenv("SHARDLOAD_JSON_MAX_DEPTH", "100", 1);
  CHECK(parse(s, &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);
  unsetenv("SHARDLOAD_JSON_MAX_DEPTH");
  free(s);
  /* Brackets inside strings are text, not nesting. */
  CHECK(parse("[\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"]", &root,
              &err) == SL_STATUS_OK);
  cJSON_Delete(root);

  /* Values: an array of 1,999,999 zeros is the container + 1,999,999 values = the limit. */
  s = array_of(1999999);
  CHECK(parse(s, &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);
  free(s);
  s = array_of(2000000);
  CHECK(parse(s, &root, &err) == SL_STATUS_MODEL_CONFIG);
  CHECKF(strstr(err.msg, "more than 2000000 JSON values") != NULL, "%s", err.msg);
  CHECKF(strstr(err.msg, "SHARDLOAD_JSON_MAX_VALUES") != NULL, "%s", err.msg);
  free(s);
  setenv("SHARDLOAD_JSON_MAX_VALUES", "10", 1);
  CHECK(parse("[1,2,3,4,5,6,7,8,9]", &root, &err) == SL_STATUS_OK); /* 10 values */
  cJSON_Delete(root);
  CHECK(parse("[1,2,3,4,5,6,7,8,9,10]", &root, &err) == SL_STATUS_MODEL_CONFIG);
  /* Multi-digit numbers and literals count once each. */
  CHECK(parse("[12345678,true,false,null,-1.5e10]", &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);
  setenv("SHARDLOAD_JSON_MAX_VALUES", "not a number", 1); /* ignored: the default applies */
  CHECK(parse("[1,2,3,4,5,6,7,8,9,10]", &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);
  unsetenv("SHARDLOAD_JSON_MAX_VALUES");

  /* An escaped NUL in a key or a value is refused; an escaped backslash before u0000 text is not
   * an escape of NUL. */
  CHECK(parse("{\"weight_map\": {\"a\\u0000b\": \"x.safetensors\"}}", &root, &err) == SL_STATUS_MODEL_CONFIG);
  CHECKF(strstr(err.msg, "escaped NUL") != NULL, "%s", err.msg);
  CHECK(parse("{\"a\": \"x\\u0000\"}", &root, &err) == SL_STATUS_MODEL_CONFIG);
  CHECK(parse("{\"a\": \"x\\\\u0000\"}", &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);

  /* Invalid JSON names the file and where parsing stopped. */
  CHECK(parse("{\"a\": [1, 2,, 3]}", &root, &err) == SL_STATUS_MODEL_CONFIG);
  CHECKF(strstr(err.msg, "t.json: invalid JSON near byte 12") != NULL, "%s", err.msg);
  CHECK(parse("", &root, &err) == SL_STATUS_MODEL_CONFIG);

  /* A whole document: whitespace may follow the value, nothing else (the index files, the extra
   * config); sl__json_parse itself stops after the value. */
  const char *trailing = "{\"a\": 1} x";
  CHECK(parse(trailing, &root, &err) == SL_STATUS_OK);
  cJSON_Delete(root);
  sl__err_clear(&err);
  CHECK(sl__json_parse_whole(trailing, strlen(trailing), "t.json", SL_STATUS_INDEX, &root, &err) ==
        SL_STATUS_INDEX);
  CHECK(root == NULL);
  CHECKF(strcmp(err.msg, "t.json: text after the JSON value at byte 9") == 0, "%s", err.msg);
  const char *spaced = " {\"a\": 1}\r\n\t ";
  CHECK(sl__json_parse_whole(spaced, strlen(spaced), "t.json", SL_STATUS_INDEX, &root, &err) == SL_STATUS_OK);
  CHECK(root != NULL && cJSON_GetObjectItem(root, "a") != NULL);
  cJSON_Delete(root);
  sl__err_clear(&err); /* the first error of a handle wins */
  CHECK(sl__json_parse_whole("[1,", 3, "t.json", SL_STATUS_INDEX, &root, &err) == SL_STATUS_INDEX &&
        root == NULL);
  CHECKF(strstr(err.msg, "t.json: invalid JSON near byte") != NULL, "%s", err.msg);

  return sl_test_finish();
}
