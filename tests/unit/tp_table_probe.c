/* tp_table_probe.c - C helpers for test_transport_table.cc: the transport
 * table (transport/transport.h) is C, with atomics the C++ tests cannot
 * include. */
#include <string.h>

#include "transport/transport.h"

/* tp_table_check of each built-in transport: the first that fails, or -1. */
int probe_builtin_tables(void) {
  const struct loom_transport* const all[] = {&loom_transport_local, &loom_transport_shm,
                                              &loom_transport_socket};
  for (int i = 0; i < 3; i++)
    if (tp_table_check(all[i]) != loomSuccess) return i;
  return -1;
}

/* tp_table_check of shm's table with one change: what 0 clears the slot
 * idle, 1 mem_reg, 2 caps.mem_kinds, 3 gives the wrong size. */
loomResult_t probe_broken_table(int what) {
  struct loom_transport t;
  memcpy(&t, &loom_transport_shm, sizeof(t));
  switch (what) {
    case 0:
      t.idle = NULL;
      break;
    case 1:
      t.mem_reg = NULL;
      break;
    case 2:
      t.caps.mem_kinds = 0;
      break;
    default:
      t.size = sizeof(t) - 8;
      break;
  }
  return tp_table_check(&t);
}

/* What the stubs say. */
loomResult_t probe_mem_reg_stub(void) {
  void* h = NULL;
  char buf[64];
  return loom_transport_socket.mem_reg(NULL, buf, sizeof(buf), MEM_HOST, &h);
}

/* Capabilities of the built-in transports: bit 0 local is rendezvous, bit 1
 * shm is, bit 2 socket is; bit 3 every one serves host memory. */
int probe_caps(void) {
  int r = 0;
  r |= loom_transport_local.caps.rendezvous ? 1 : 0;
  r |= loom_transport_shm.caps.rendezvous ? 2 : 0;
  r |= loom_transport_socket.caps.rendezvous ? 4 : 0;
  if ((loom_transport_local.caps.mem_kinds & loom_transport_shm.caps.mem_kinds &
       loom_transport_socket.caps.mem_kinds & MEM_KIND_BIT(MEM_HOST)))
    r |= 8;
  return r;
}
