/* debug.c - log lines: "host:pid:tid LOOM WARN file:line message". */
#include "core/debug.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/params.h"

int log_level_now = -1;
unsigned log_mask_now = SUB_ALL;
static FILE* log_file;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_host[64];

static const struct {
  const char* name;
  unsigned bit;
} subsys_names[] = {{"INIT", SUB_INIT},   {"BOOTSTRAP", SUB_BOOTSTRAP},
                    {"COLL", SUB_COLL},   {"P2P", SUB_P2P},
                    {"SHM", SUB_SHM},     {"NET", SUB_NET},
                    {"TUNE", SUB_TUNE},   {"ENV", SUB_ENV},
                    {"ALLOC", SUB_ALLOC}, {"ALL", SUB_ALL}};

unsigned log_parse_subsys(const char* text) {
  int invert = 0;
  unsigned mask = 0;
  if (!text || !*text) return SUB_ALL;
  if (*text == '^') {
    invert = 1;
    text++;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", text);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
  }
  return invert ? (SUB_ALL & ~mask) : mask;
}

int log_subsys_check(const char* text, char* why, size_t len) {
  if (!text || !*text) return 0;
  const char* p = text + (*text == '^');
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", p);
  char* save = NULL;
  int n = 0;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
    size_t i = 0;
    while (i < sizeof(subsys_names) / sizeof(subsys_names[0]) &&
           strcasecmp(tok, subsys_names[i].name) != 0)
      i++;
    if (i == sizeof(subsys_names) / sizeof(subsys_names[0])) {
      snprintf(why, len, "'%s' is not a subsystem", tok);
      return -1;
    }
  }
  if (n == 0 || strstr(p, ",,") || p[strlen(p) - 1] == ',') {
    snprintf(why, len, "'%s' has an empty name", text);
    return -1;
  }
  return 0;
}

/* Expands %h (host) and %p (pid) in LOOM_DEBUG_FILE. */
static void expand_path(const char* in, char* out, size_t len) {
  size_t o = 0;
  for (const char* p = in; *p && o + 1 < len; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int n = p[1] == 'h' ? snprintf(out + o, len - o, "%s", log_host)
                          : snprintf(out + o, len - o, "%d", (int)getpid());
      if (n > 0) o += (size_t)n < len - o ? (size_t)n : len - o - 1;
      p++;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

static void log_setup(void) {
  const struct loom_params* pm = params_get();
  gethostname(log_host, sizeof(log_host) - 1);
  int level = LOG_WARN, file_err = 0;
  if (strcasecmp(pm->debug, "INFO") == 0)
    level = LOG_INFO;
  else if (strcasecmp(pm->debug, "TRACE") == 0)
    level = LOG_TRACE;
  else if (strcasecmp(pm->debug, "NONE") == 0)
    level = LOG_NONE;
  log_mask_now = log_parse_subsys(pm->debug_subsys);
  log_file = stderr;
  if (pm->debug_file[0]) {
    char path[512];
    expand_path(pm->debug_file, path, sizeof(path));
    FILE* f = fopen(path, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      log_file = f;
    }
    file_err = f ? 0 : errno;
  }
  __atomic_store_n(&log_level_now, level, __ATOMIC_RELEASE);
  if (file_err)
    LOOM_WARN(SUB_ENV, "cannot open LOOM_DEBUG_FILE=%s (%s): logging to stderr", pm->debug_file,
              strerror(file_err));
  params_log_changed();
}

void log_init(void) {
  pthread_once(&log_once, log_setup);
}

void log_emit(enum log_level level, unsigned subsys, const char* file, int line, const char* fmt,
              ...) {
  static const char* names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  pthread_mutex_lock(&log_lock);
  fprintf(log_file ? log_file : stderr, "%s:%d:%ld LOOM %s %s:%d %s\n", log_host, (int)getpid(),
          (long)syscall(SYS_gettid), names[level], base, line, msg);
  pthread_mutex_unlock(&log_lock);
}
