/* handle.h - the live-handle table.
 *
 * What a user holds for a communicator, a stream or a registration is not a
 * pointer to Loom's memory but a number: a slot of this table, the kind of
 * object and the slot's generation. A slot's generation moves on when its
 * handle ends, so a handle that is stale (destroyed, aborted), ended twice,
 * of another kind (a stream passed as a communicator) or made up is told
 * apart from a live one without touching freed memory, even after the heap
 * has reused the object's address. (MPICH's integer handles do the same.)
 *
 * Handles are never 0 and never small numbers, so NULL is never live.
 */
#ifndef LOOM_CORE_HANDLE_H
#define LOOM_CORE_HANDLE_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

enum handle_kind { HANDLE_COMM = 1, HANDLE_STREAM = 2, HANDLE_REG = 3, HANDLE_KIND_MAX };

/* Makes a live handle for obj. Thread safe; takes a mutex. Fails only when
 * out of memory or when a million handles are live at once. */
loomResult_t handle_new(enum handle_kind kind, void* obj, uint64_t* h_out);
/* The object of h when h is a live handle of kind, else NULL. Lock-free,
 * a few loads: callable on every operation. An object ended concurrently by
 * another thread may still be returned (using an object while destroying it
 * is the caller's race, as with any library). */
void* handle_get(uint64_t h, enum handle_kind kind);
/* Ends h: from now on handle_get(h) is NULL. Returns its object, or NULL
 * when h was not a live handle of kind; of two threads ending one handle,
 * exactly one gets the object. Thread safe. */
void* handle_end(uint64_t h, enum handle_kind kind);
/* Why h is not a live handle of kind, for an error message: "NULL", "was
 * destroyed", "is a stream, not a communicator", "is not a Loom handle".
 * Pure reads; never fails. */
const char* handle_why(uint64_t h, enum handle_kind kind);
/* "communicator", "stream", "registration". */
const char* handle_kind_name(enum handle_kind kind);

#endif
