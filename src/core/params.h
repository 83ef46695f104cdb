/* params.h - the parsed LOOM_* environment (see params.def).
 *
 * Every value is parsed strictly: the whole string, its unit, its range. A
 * bad value never takes effect: the field keeps its default, and
 * params_check() reports it (an error at init, or for hints one WARN). The
 * parse itself never logs, so it is safe from inside the logger's own
 * set-up. */
#ifndef LOOM_CORE_PARAMS_H
#define LOOM_CORE_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

enum param_type { PARAM_STR, PARAM_INT, PARAM_SIZE, PARAM_BOOL };
enum param_flags {
  P_AGREE = 1, /* every rank of a communicator must have the same value */
  P_HINT = 2   /* a bad value warns and keeps the default; it never fails */
};

struct loom_params {
#define PARAM(field, env, type, def, lo, hi, flags, help) PARAM_FIELD_##type field;
#define PARAM_FIELD_STR const char*
#define PARAM_FIELD_INT long long
#define PARAM_FIELD_SIZE size_t
#define PARAM_FIELD_BOOL int
#include "core/params.def"
#undef PARAM
};

/* One row of the table, for printing and checking. */
struct param_desc {
  const char* env;
  enum param_type type;
  const char* def;  /* the default as text, as written in params.def */
  long long lo, hi; /* INT, SIZE and BOOL: the accepted range */
  unsigned flags;   /* enum param_flags */
  const char* help;
};

/* The parsed values, read once from the environment on first use. Thread
 * safe; never NULL; never changes afterwards; never logs. */
const struct loom_params* params_get(void);
/* loomSuccess when every variable set in the environment was accepted (bad
 * hints only warn). Otherwise loomInvalidArgument, with one WARN line and
 * the last-error text naming each bad variable, its value and what is
 * accepted. Called by every public function that makes a communicator. */
loomResult_t params_check(void);
/* For the checks of names that only an upper layer knows (algorithm
 * families, transports): loomInvalidArgument with the same one line as
 * params_check ("invalid setting: ENV=value: why (accepted: ...)"). */
loomResult_t params_reject(const char* env, const char* why, const char* accepted);
/* Why row i's value from the environment was rejected, or NULL. */
const char* params_bad(int i);
/* What row i accepts ("an integer from 2 to 64", ...). */
void params_accepted(int i, char* buf, size_t len);
/* Parses text as row i would, without keeping it: 0, or -1 with why.
 * Pure (unit tests). */
int params_try(int i, const char* text, char* why, size_t len);
/* The table of every parameter, n_out rows. */
const struct param_desc* params_table(int* n_out);
/* The value of row i as text, as parsed (for loom_info --env). */
void params_value_str(int i, char* buf, size_t len);

/* Logs, under ENV, every variable set in the environment, and one WARN for
 * each bad hint (once; called by the logger's set-up). */
void params_log_changed(void);
/* Parses "4M", "256K", "1G", "123" (binary suffixes K, M, G, T, with an
 * optional trailing B): digits only, no sign, no spaces, no overflow.
 * Returns 0 on success. Pure. */
int params_parse_size(const char* text, size_t* out);

/* The variables every rank of a communicator must agree on (P_AGREE), in
 * table order: a 64-bit digest of each parsed value, so ranks can compare
 * them through the peer table. */
#define PARAMS_AGREED_MAX 12
int params_agreed_count(void);
const char* params_agreed_env(int k);
void params_agreed_digest(uint64_t out[PARAMS_AGREED_MAX]);
/* The index k of the agreed variable env, or -1. */
int params_agreed_find(const char* env);
/* The value of the k-th agreed variable as text ("" unset). */
void params_agreed_value(int k, char* buf, size_t len);

#endif
