/* memkind.h - memory kinds: where a buffer lives, asked once per buffer in
 * the API layer, then carried by the task, the plan's buffers and every
 * transfer, so that each layer chooses by kind instead of assuming host
 * memory.
 *
 * The CUDA driver is reached at run time (dlopen of libcuda.so.1), never
 * linked: a build of Loom runs on machines with and without a driver. The
 * classifier uses the driver only once this process has loaded it (looked
 * for at every communicator's init, see cuda_notice, and now and then
 * after); until then, and with no driver, every pointer is host memory. */
#ifndef LOOM_CORE_MEMKIND_H
#define LOOM_CORE_MEMKIND_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mem_kind {
  MEM_HOST = 0, /* pageable or pinned host memory, loomMemAlloc memory */
  MEM_CUDA = 1, /* CUDA device memory (and managed memory) */
  MEM_KIND_COUNT
};
#define MEM_KIND_BIT(k) (1u << (k))

/* "host", "CUDA device"; static text. */
const char* mem_kind_name(enum mem_kind k);

/* Where ptr lives; dev_out (may be NULL) gets the CUDA device ordinal for
 * MEM_CUDA, -1 otherwise. Thread safe, never blocks; a NULL pointer is
 * host memory. */
enum mem_kind mem_kind_of(const void* ptr, int* dev_out);

/* A device identity that other processes can compare: the PCI bus id
 * ("0000:17:00.0") and the UUID of a CUDA device. All zero for host ranks. */
struct dev_identity {
  uint8_t uuid[16];
  char bus_id[24];
};

/* 1 when a CUDA driver is loaded and reports at least one device; loads it
 * if this process has not (explicit device calls only: devlist, device
 * identities). */
int cuda_present(void);
/* Attaches to the CUDA driver if this process has loaded it already, never
 * loading it: at every communicator's init. Cheap once attached. */
void cuda_notice(void);
/* The identity of CUDA device ordinal dev; loomInvalidArgument naming dev
 * when there is no such device, loomInvalidUsage when there is no CUDA
 * driver at all. */
loomResult_t cuda_device_identity(int dev, struct dev_identity* out);
/* The device current on the calling thread (0 when CUDA is present and none
 * was made current), or -1 when there is no CUDA driver. */
int cuda_current_device(void);

/* For tests of the kind checks on machines without a GPU: until the range is
 * removed, mem_kind_of says [ptr, ptr + bytes) is device memory of device
 * dev. At most 16 ranges. Returns 0, or -1 when the table is full. */
int mem_kind_fake_add(const void* ptr, size_t bytes, int dev);
void mem_kind_fake_remove(const void* ptr);

#ifdef __cplusplus
}
#endif

#endif
