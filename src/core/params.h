/* params.h - the parsed LOOM_* environment (see params.def). */
#ifndef LOOM_CORE_PARAMS_H
#define LOOM_CORE_PARAMS_H

#include <stddef.h>

enum param_type { PARAM_STR, PARAM_INT, PARAM_SIZE, PARAM_BOOL };

struct loom_params {
#define PARAM(field, env, type, def, help) PARAM_FIELD_##type field;
#define PARAM_FIELD_STR const char*
#define PARAM_FIELD_INT long long
#define PARAM_FIELD_SIZE size_t
#define PARAM_FIELD_BOOL int
#include "params.def"
#undef PARAM
};

/* One row of the table, for printing. */
struct param_desc {
  const char* env;
  enum param_type type;
  const char* def; /* the default as text */
  const char* help;
};

/* The parsed values, read once from the environment on first use. Thread
 * safe; never NULL; never changes afterwards. */
const struct loom_params* params_get(void);
/* The table of every parameter, n_out rows. */
const struct param_desc* params_table(int* n_out);
/* The value of row i as text, as parsed (for loom_info --env). */
void params_value_str(int i, char* buf, size_t len);

/* Logs, under ENV, every variable set in the environment (once). */
void params_log_changed(void);
/* Parses "4M", "256K", "1G", "123" (binary suffixes). Returns 0 on success. */
int params_parse_size(const char* text, size_t* out);

#endif
