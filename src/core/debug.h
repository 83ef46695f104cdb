/* debug.h - logging: levels, subsystem masks, one line per event. */
#ifndef LOOM_CORE_DEBUG_H
#define LOOM_CORE_DEBUG_H

#include <stdarg.h>
#include <stddef.h>

enum log_level { LOG_NONE = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_TRACE = 3 };

enum log_subsys {
  SUB_INIT = 1 << 0,
  SUB_BOOTSTRAP = 1 << 1,
  SUB_COLL = 1 << 2,
  SUB_P2P = 1 << 3,
  SUB_SHM = 1 << 4,
  SUB_NET = 1 << 5,
  SUB_TUNE = 1 << 6,
  SUB_ENV = 1 << 7,
  SUB_ALLOC = 1 << 8,
  SUB_ALL = 0x1ff
};

extern int log_level_now; /* -1 until parsed */
extern unsigned log_mask_now;

void log_init(void);
void log_emit(enum log_level level, unsigned subsys, const char* file, int line, const char* fmt,
              ...) __attribute__((format(printf, 5, 6)));

/* The level and mask are tested before anything is formatted. */
static inline int log_on(int level, unsigned subsys) {
  int now = __atomic_load_n(&log_level_now, __ATOMIC_ACQUIRE);
  if (__builtin_expect(now < 0, 0)) {
    log_init();
    now = __atomic_load_n(&log_level_now, __ATOMIC_ACQUIRE);
  }
  return now >= level && (log_mask_now & subsys);
}
#define LOOM_LOG_ON(level, subsys) log_on(level, subsys)

#define LOOM_WARN(subsys, ...)                                     \
  do {                                                             \
    if (LOOM_LOG_ON(LOG_WARN, subsys))                             \
      log_emit(LOG_WARN, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define LOOM_INFO(subsys, ...)                                     \
  do {                                                             \
    if (LOOM_LOG_ON(LOG_INFO, subsys))                             \
      log_emit(LOG_INFO, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#ifdef LOOM_ENABLE_TRACE
#define LOOM_TRACE(subsys, ...)                                     \
  do {                                                              \
    if (LOOM_LOG_ON(LOG_TRACE, subsys))                             \
      log_emit(LOG_TRACE, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#else
#define LOOM_TRACE(subsys, ...) \
  do {                          \
  } while (0)
#endif

/* Parses a subsystem list such as "INIT,COLL" or "^SHM". Returns the mask. */
unsigned log_parse_subsys(const char* text);
/* 0 when text is such a list of known names, else -1 with why. Pure. */
int log_subsys_check(const char* text, char* why, size_t len);

#endif
