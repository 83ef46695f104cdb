/* topo.h - the facts about this rank's machine that Loom would otherwise
 * probe, probed once or read from LOOM_TOPO_FILE (docs/topology.md):
 *
 *   host     ranks with the same host share memory: shared-memory FIFOs,
 *            direct reads, one level of the hierarchical plans; ranks of
 *            different hosts talk over the network (sockets). Probed: the
 *            boot id and the network namespace (or LOOM_HOSTID).
 *   machine  ranks with the same machine share its cores (how long a waiter
 *            spins). Probed: the boot id.
 *   cpus     the CPUs this process may run on (waiting, the tuner's model).
 *            Probed: the affinity mask.
 *
 * A file gives some or all of them; the others are probed. The collectives
 * layer puts them in the peer table at init (peer_info), where the lower
 * layers read them. */
#ifndef LOOM_TOPO_TOPO_H
#define LOOM_TOPO_TOPO_H

#include <stdint.h>
#include <stdio.h>

#include "loom.h"

#define TOPO_NAME_MAX 128

enum topo_fact { TOPO_HOST = 1, TOPO_MACHINE = 2, TOPO_CPUS = 4 };

struct topo_facts {
  char host[TOPO_NAME_MAX];
  char machine[TOPO_NAME_MAX];
  int cpus;
  uint64_t host_id;    /* hash of host: what peer_info.host_id carries */
  uint64_t machine_id; /* hash of machine: peer_info.machine_id */
  unsigned given;      /* enum topo_fact bits: given by the file or LOOM_HOSTID, not probed */
};

/* The facts in force for this process: LOOM_TOPO_FILE's (and LOOM_HOSTID's)
 * over the probed ones; read once. Thread safe; never NULL. When the file
 * is bad these are the probed facts, and topo_check says why. */
const struct topo_facts* topo_get(void);
/* loomSuccess when LOOM_TOPO_FILE (if set) was read and valid; otherwise
 * loomInvalidArgument with one WARN and the last-error text naming the file,
 * the line and what is wrong. Called at init with the other settings. */
loomResult_t topo_check(void);
/* The probed facts, ignoring LOOM_TOPO_FILE and LOOM_HOSTID. */
void topo_probe(struct topo_facts* out);
/* Writes facts in the file's format (loom_info --topo). */
void topo_print(const struct topo_facts* f, FILE* out);
/* Reads the topology file path over *inout (the facts it gives replace
 * those, and set their bits in given): 0, or -1 with why ("path:line:
 * what"). Pure apart from reading the file (unit tests). */
int topo_read(const char* path, struct topo_facts* inout, char* why, size_t len);

#endif
