/* colls.h - the flags of the collectives' table (colls.def). Each layer
 * makes its own enum from the table; all of them share its order. */
#ifndef LOOM_CORE_COLLS_H
#define LOOM_CORE_COLLS_H

enum colls_flags {
  COLLF_REDUCES = 1,   /* results are reductions: PreMulSum and loomAvg apply */
  COLLF_ROOT_SEND = 2, /* only the root has a send buffer */
  COLLF_ROOT_RECV = 4  /* only the root has a receive buffer */
};

#endif
