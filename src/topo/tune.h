/* tune.h - the tuner: which algorithm serves a call. For now one family
 * exists (ring); LOOM_ALGO is parsed here so that forcing a choice already
 * works the way it will when more families arrive. */
#ifndef LOOM_TOPO_TUNE_H
#define LOOM_TOPO_TUNE_H

#include <stddef.h>

enum tune_algo { TUNE_RING = 0, TUNE_ALGO_COUNT };

/* The algorithm for an all-reduce of bytes over nranks ranks: LOOM_ALGO's
 * choice when it names one that exists (else one INFO line and the model's),
 * otherwise the model's. Thread safe. */
enum tune_algo tune_pick_allreduce(int nranks, size_t bytes);
const char* tune_algo_name(enum tune_algo a);

#endif
