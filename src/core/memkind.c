/* memkind.c - memory kinds, and the few CUDA driver calls the core needs
 * (pointer attributes, device identity), reached through dlopen so that no
 * build of Loom links libcuda. */
#include "core/memkind.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/checks.h"
#include "core/util.h"

/* The driver API's types and constants, as its ABI defines them (cuda.h):
 * CUresult is an int, CUdevice an int, CUdeviceptr an unsigned integer of
 * pointer width. */
typedef int cu_result;
enum {
  CU_OK = 0,
  CU_ATTR_MEMORY_TYPE = 2,    /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
  CU_ATTR_DEVICE_ORDINAL = 9, /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
  CU_MEMTYPE_DEVICE = 2,      /* CU_MEMORYTYPE_DEVICE */
  CU_MEMTYPE_UNIFIED = 4      /* CU_MEMORYTYPE_UNIFIED */
};

struct cu_api {
  int ok;
  int ndev;
  cu_result (*init)(unsigned flags);
  cu_result (*device_get_count)(int* n);
  cu_result (*device_get)(int* dev, int ordinal);
  cu_result (*device_get_uuid)(uint8_t uuid[16], int dev);
  cu_result (*device_get_pci_bus_id)(char* bus_id, int len, int dev);
  cu_result (*pointer_get_attribute)(void* data, int attr, uintptr_t ptr);
  cu_result (*ctx_get_device)(int* dev);
};

static struct cu_api cu;
static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int cu_ok; /* the driver is attached: cu is usable */
static int cu_load_tried; /* a dlopen that may load the driver failed: never again */

static int is_libcuda(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  (void)arg;
  const char* slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  const char* base = slash ? slash + 1 : info->dlpi_name;
  return base && strncmp(base, "libcuda.so", 10) == 0;
}

/* Attaches to the CUDA driver. load 0: only when this process has loaded it
 * already (a host-only program never starts a driver, nor hands a started
 * one to the processes it forks); load 1: dlopen it if need be. The look
 * of load 0 walks the loaded objects first: a dlopen with RTLD_NOLOAD of a
 * library that is not loaded still searches ld.so.cache, mapping and
 * unmapping it each time, and with ranks outnumbering cores that look,
 * every 4096 calls, made every third slice of 1,500 8-byte broadcasts of 4
 * ranks on 2 vCPUs 1.7x slower (docs/PERFORMANCE.md, "Page faults on the
 * call path"). */
static void cu_attach(int load) {
  pthread_mutex_lock(&cu_lock);
  if (atomic_load(&cu_ok) || (load && cu_load_tried)) goto out;
  if (!load && !dl_iterate_phdr(is_libcuda, NULL)) goto out;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h && load) {
    cu_load_tried = 1;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) goto out;
#define CU_SYM(field, name) *(void**)&cu.field = dlsym(h, name)
  CU_SYM(init, "cuInit");
  CU_SYM(device_get_count, "cuDeviceGetCount");
  CU_SYM(device_get, "cuDeviceGet");
  CU_SYM(device_get_uuid, "cuDeviceGetUuid_v2");
  if (!cu.device_get_uuid) CU_SYM(device_get_uuid, "cuDeviceGetUuid");
  CU_SYM(device_get_pci_bus_id, "cuDeviceGetPCIBusId");
  CU_SYM(pointer_get_attribute, "cuPointerGetAttribute");
  CU_SYM(ctx_get_device, "cuCtxGetDevice");
#undef CU_SYM
  /* A driver without these symbols, or without a device, counts as none;
   * the handle stays open: harmless, and the program may be using it. */
  if (cu.init && cu.device_get_count && cu.device_get && cu.device_get_uuid &&
      cu.device_get_pci_bus_id && cu.pointer_get_attribute && cu.ctx_get_device &&
      cu.init(0) == CU_OK && cu.device_get_count(&cu.ndev) == CU_OK && cu.ndev >= 1)
    atomic_store(&cu_ok, 1);
out:
  pthread_mutex_unlock(&cu_lock);
}

int cuda_present(void) {
  if (!atomic_load(&cu_ok)) cu_attach(1);
  return atomic_load(&cu_ok);
}

void cuda_notice(void) {
  if (!atomic_load(&cu_ok)) cu_attach(0);
}

const char* mem_kind_name(enum mem_kind k) {
  switch (k) {
    case MEM_HOST:
      return "host";
    case MEM_CUDA:
      return "CUDA device";
    default:
      return "unknown";
  }
}

/* Ranges that tests declare device memory (mem_kind_fake_add). */
#define FAKE_MAX 16
static struct {
  uintptr_t lo, hi;
  int dev;
} fakes[FAKE_MAX];
static _Atomic int nfakes_live; /* how many entries are in use; 0: skip the scan */
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

int mem_kind_fake_add(const void* ptr, size_t bytes, int dev) {
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < FAKE_MAX; i++)
    if (fakes[i].hi == 0) {
      fakes[i].lo = (uintptr_t)ptr;
      fakes[i].hi = (uintptr_t)ptr + (bytes ? bytes : 1);
      fakes[i].dev = dev;
      atomic_fetch_add(&nfakes_live, 1);
      pthread_mutex_unlock(&fake_lock);
      return 0;
    }
  pthread_mutex_unlock(&fake_lock);
  return -1;
}

void mem_kind_fake_remove(const void* ptr) {
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < FAKE_MAX; i++)
    if (fakes[i].hi != 0 && fakes[i].lo == (uintptr_t)ptr) {
      fakes[i].lo = fakes[i].hi = 0;
      atomic_fetch_sub(&nfakes_live, 1);
    }
  pthread_mutex_unlock(&fake_lock);
}

static int fake_lookup(uintptr_t p, int* dev_out) {
  int found = 0;
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < FAKE_MAX && !found; i++)
    if (p >= fakes[i].lo && p < fakes[i].hi) {
      *dev_out = fakes[i].dev;
      found = 1;
    }
  pthread_mutex_unlock(&fake_lock);
  return found;
}

/* Whether the driver is attached, looking again (without loading it) every
 * 4096 classifications of a thread while it is not: a program that loads
 * CUDA after its communicators were made is noticed within as many calls. */
static int cuda_attached(void) {
  static __thread unsigned calls LOOM_TLS_HOT;
  if (atomic_load_explicit(&cu_ok, memory_order_acquire)) return 1;
  if ((++calls & 4095) == 0) cuda_notice();
  return atomic_load_explicit(&cu_ok, memory_order_acquire);
}

enum mem_kind mem_kind_of(const void* ptr, int* dev_out) {
  int dev = -1;
  enum mem_kind k = MEM_HOST;
  if (ptr && atomic_load_explicit(&nfakes_live, memory_order_relaxed) > 0 &&
      fake_lookup((uintptr_t)ptr, &dev))
    k = MEM_CUDA;
  else if (ptr && cuda_attached()) {
    unsigned type = 0;
    /* Host memory CUDA never saw fails the query: it is host memory. */
    if (cu.pointer_get_attribute(&type, CU_ATTR_MEMORY_TYPE, (uintptr_t)ptr) == CU_OK &&
        (type == CU_MEMTYPE_DEVICE || type == CU_MEMTYPE_UNIFIED)) {
      k = MEM_CUDA;
      if (cu.pointer_get_attribute(&dev, CU_ATTR_DEVICE_ORDINAL, (uintptr_t)ptr) != CU_OK) dev = -1;
    }
  }
  if (dev_out) *dev_out = k == MEM_CUDA ? dev : -1;
  return k;
}

loomResult_t cuda_device_identity(int dev, struct dev_identity* out) {
  memset(out, 0, sizeof(*out));
  if (!cuda_present())
    return err_set(NULL, loomInvalidUsage,
                   "CUDA device %d: no CUDA driver on this machine (libcuda.so.1 not found, or it "
                   "reports no device)",
                   dev);
  int d;
  if (dev < 0 || dev >= cu.ndev || cu.device_get(&d, dev) != CU_OK)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: CUDA device %d does not exist (this process sees %d)", dev,
                   cu.ndev);
  if (cu.device_get_uuid(out->uuid, d) != CU_OK ||
      cu.device_get_pci_bus_id(out->bus_id, (int)sizeof(out->bus_id), d) != CU_OK)
    return err_set(NULL, loomUnhandledCudaError,
                   "CUDA device %d: cannot read its UUID and PCI bus id", dev);
  return loomSuccess;
}

int cuda_current_device(void) {
  if (!cuda_present()) return -1;
  int dev = 0;
  if (cu.ctx_get_device(&dev) != CU_OK) dev = 0; /* no context yet: CUDA's default device */
  return dev;
}
