/* par_tensor.c - loomTensor (PARALLEL.md section 1) and the view helpers of par.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "par.h"

int64_t par_numel(const loomTensor* t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* The largest element offset (in elements) of a tensor with elements; -1 on overflow. */
static int64_t last_offset(const loomTensor* t) {
  int64_t off = 0;
  for (int d = 0; d < t->ndim; d++) {
    int64_t step;
    if (__builtin_mul_overflow(t->shape[d] - 1, t->strides[d], &step) ||
        __builtin_add_overflow(off, step, &off))
      return -1;
  }
  return off;
}

loomResult_t par_check(loomComm_t comm, const char* fn, const char* name, const loomTensor* t) {
  if (t == NULL) return par_err(comm, fn, "%s is NULL", name);
  if (t->ndim < 0 || t->ndim > LOOM_TENSOR_MAX_DIMS)
    return par_err(comm, fn, "%s.ndim is %d, outside 0..%d", name, t->ndim, LOOM_TENSOR_MAX_DIMS);
  size_t size = par_dtype_size(t->dtype);
  if (size == 0) return par_err(comm, fn, "%s.dtype is %d, not a Loom dtype", name, (int)t->dtype);
  int empty = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0)
      return par_err(comm, fn, "%s.shape[%d] is %lld, below 0", name, d, (long long)t->shape[d]);
    if (t->strides[d] < 0)
      return par_err(comm, fn, "%s.strides[%d] is %lld, below 0", name, d,
                     (long long)t->strides[d]);
    empty |= t->shape[d] == 0;
  }
  if (empty) return loomSuccess;
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(numel, t->shape[d], &numel))
      return par_err(comm, fn, "%s has more than 2^63 elements", name);
  if (t->data == NULL)
    return par_err(comm, fn, "%s.data is NULL but %s has %lld elements", name, name,
                   (long long)numel);
  int64_t last = last_offset(t), bytes;
  if (last < 0 || __builtin_mul_overflow(last + 1, (int64_t)size, &bytes) ||
      (uintptr_t)t->data + (uint64_t)bytes < (uintptr_t)t->data)
    return par_err(comm, fn, "%s's strides reach past the address space", name);
  return loomSuccess;
}

/* Dims of extent > 1 sorted by stride: each stride at least the span of the previous. */
static int self_overlaps(const loomTensor* t) {
  int idx[LOOM_TENSOR_MAX_DIMS], k = 0;
  if (par_numel(t) == 0) return 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] > 1) idx[k++] = d;
  for (int i = 1; i < k; i++) /* insertion sort by stride */
    for (int j = i; j > 0 && t->strides[idx[j]] < t->strides[idx[j - 1]]; j--) {
      int s = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = s;
    }
  for (int i = 0; i < k; i++) {
    int64_t need = i == 0 ? 1 : t->strides[idx[i - 1]] * t->shape[idx[i - 1]];
    if (t->strides[idx[i]] < need) return 1;
  }
  return 0;
}

loomResult_t par_check_out(loomComm_t comm, const char* fn, const char* name, const loomTensor* t) {
  loomResult_t r = par_check(comm, fn, name, t);
  if (r != loomSuccess) return r;
  if (self_overlaps(t)) {
    char sh[160], st[160];
    loomTensor s = *t;
    memcpy(s.shape, t->strides, sizeof(s.shape));
    return par_err(comm, fn, "%s overlaps itself (shape %s, strides %s)", name,
                   par_shape_str(t, sh, sizeof(sh)), par_shape_str(&s, st, sizeof(st)));
  }
  return loomSuccess;
}

void par_span(const loomTensor* t, uintptr_t* lo, uintptr_t* hi) {
  *lo = *hi = (uintptr_t)t->data;
  if (par_numel(t) == 0) return;
  *hi += (uintptr_t)(last_offset(t) + 1) * par_dtype_size(t->dtype);
}

int par_overlap(const loomTensor* a, const loomTensor* b) {
  uintptr_t alo, ahi, blo, bhi;
  par_span(a, &alo, &ahi);
  par_span(b, &blo, &bhi);
  return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

int par_same_view(const loomTensor* a, const loomTensor* b) {
  if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return 0;
  return 1;
}

int par_contiguous(const loomTensor* t) {
  if (par_numel(t) == 0) return 1;
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->strides[d] != expect) return 0;
    expect *= t->shape[d];
  }
  return 1;
}

int par_matrix(const loomTensor* t, int64_t* rows, int64_t* cols, int64_t* ld) {
  if (t->ndim < 1) return 0;
  int n = t->ndim;
  if (t->shape[n - 1] > 1 && t->strides[n - 1] != 1) return 0;
  /* The row dims collapse into one of stride lead (dims of extent 1 say nothing). */
  int64_t r = 1, lead = -1, expect = 0;
  for (int d = n - 2; d >= 0; d--) {
    r *= t->shape[d];
    if (t->shape[d] <= 1) continue;
    if (lead < 0) {
      lead = t->strides[d];
    } else if (t->strides[d] != expect) {
      return 0;
    }
    expect = t->strides[d] * t->shape[d];
  }
  *rows = r;
  *cols = t->shape[n - 1];
  if (lead >= 0 && lead < *cols) return 0; /* rows that overlap are no matrix for a GEMM */
  *ld = lead >= 0 ? lead : PAR_MAX(*cols, 1);
  return 1;
}

const char* par_shape_str(const loomTensor* t, char* buf, size_t len) {
  size_t off = 0;
  off += (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < t->ndim && off < len; d++)
    off += (size_t)snprintf(buf + off, len - off, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (off < len) snprintf(buf + off, len - off, "]");
  return buf;
}

int par_shapes_agree(const loomTensor* a, const loomTensor* b, int except_dim, int* bad) {
  if (a->ndim != b->ndim) {
    *bad = -1;
    return 0;
  }
  for (int d = 0; d < a->ndim; d++)
    if (d != except_dim && a->shape[d] != b->shape[d]) {
      *bad = d;
      return 0;
    }
  return 1;
}

void par_dense_like(const loomTensor* t, void* data, loomTensor* out) {
  *out = *t;
  out->data = data;
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    out->strides[d] = s;
    s *= t->shape[d] > 1 ? t->shape[d] : 1;
  }
}

/* ---- Strided copies ---------------------------------------------------------------------- */

/* One row (the last dim) of n elements of size bytes, with strides in elements. */
static void copy_row(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n, size_t size) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)n * size);
    return;
  }
  switch (size) {
    case 1:
      for (int64_t i = 0; i < n; i++) dst[i * ds] = src[i * ss];
      break;
    case 2:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * 2, src + i * ss * 2, 2);
      break;
    case 4:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * 4, src + i * ss * 4, 4);
      break;
    default:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * 8, src + i * ss * 8, 8);
  }
}

void par_copy(const loomTensor* src, const loomTensor* dst) {
  int64_t n = par_numel(src);
  if (n == 0) return;
  size_t size = par_dtype_size(src->dtype);
  if (src->ndim == 0) {
    memcpy(dst->data, src->data, size);
    return;
  }
  int last = src->ndim - 1;
  int64_t idx[LOOM_TENSOR_MAX_DIMS] = {0}, rows = n / src->shape[last];
  for (int64_t r = 0; r < rows; r++) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < last; d++) {
      so += idx[d] * src->strides[d];
      dof += idx[d] * dst->strides[d];
    }
    copy_row((char*)dst->data + dof * (int64_t)size, dst->strides[last],
             (const char*)src->data + so * (int64_t)size, src->strides[last], src->shape[last],
             size);
    for (int d = last - 1; d >= 0; d--) { /* the next row index */
      if (++idx[d] < src->shape[d]) break;
      idx[d] = 0;
    }
  }
}

void par_pack(const loomTensor* src, void* dense) {
  loomTensor d;
  par_dense_like(src, dense, &d);
  par_copy(src, &d);
}

void par_unpack(const void* dense, const loomTensor* dst) {
  loomTensor s;
  par_dense_like(dst, (void*)dense, &s);
  par_copy(&s, dst);
}

/* ---- The public calls -------------------------------------------------------------------- */

loomResult_t loomTensorMake(void* data, loomDataType_t dtype, int ndim, const int64_t shape[],
                            loomTensor* tensor) {
  static const char fn[] = "loomTensorMake";
  if (tensor == NULL) return par_err(NULL, fn, "tensor is NULL");
  if (ndim < 0 || ndim > LOOM_TENSOR_MAX_DIMS)
    return par_err(NULL, fn, "ndim is %d, outside 0..%d", ndim, LOOM_TENSOR_MAX_DIMS);
  if (ndim > 0 && shape == NULL) return par_err(NULL, fn, "shape is NULL with ndim %d", ndim);
  loomTensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int d = 0; d < ndim; d++) t.shape[d] = shape[d];
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return par_err(NULL, fn, "shape[%d] is %lld, below 0", d, (long long)shape[d]);
  par_dense_like(&t, data, &t);
  loomResult_t r = par_check(NULL, fn, "tensor", &t);
  if (r != loomSuccess) return r;
  *tensor = t;
  return loomSuccess;
}

loomResult_t loomTensorIsContiguous(const loomTensor* tensor, int* contiguous) {
  static const char fn[] = "loomTensorIsContiguous";
  if (contiguous == NULL) return par_err(NULL, fn, "contiguous is NULL");
  loomResult_t r = par_check(NULL, fn, "tensor", tensor);
  if (r != loomSuccess) return r;
  *contiguous = par_contiguous(tensor);
  return loomSuccess;
}

loomResult_t loomTensorNumel(const loomTensor* tensor, int64_t* numel) {
  static const char fn[] = "loomTensorNumel";
  if (numel == NULL) return par_err(NULL, fn, "numel is NULL");
  loomResult_t r = par_check(NULL, fn, "tensor", tensor);
  if (r != loomSuccess) return r;
  *numel = par_numel(tensor);
  return loomSuccess;
}

loomResult_t loomTensorSlice(const loomTensor* tensor, int dim, int64_t start, int64_t length,
                             loomTensor* slice) {
  static const char fn[] = "loomTensorSlice";
  if (slice == NULL) return par_err(NULL, fn, "slice is NULL");
  loomResult_t r = par_check(NULL, fn, "tensor", tensor);
  if (r != loomSuccess) return r;
  if (dim < 0 || dim >= tensor->ndim)
    return par_err(NULL, fn, "dim is %d, outside [0, %d)", dim, tensor->ndim);
  if (start < 0 || length < 0 || start > tensor->shape[dim] - length)
    return par_err(NULL, fn, "start %lld and length %lld do not fit in shape[%d] = %lld",
                   (long long)start, (long long)length, dim, (long long)tensor->shape[dim]);
  loomTensor s = *tensor;
  s.shape[dim] = length;
  if (length > 0)
    s.data =
        (char*)tensor->data + start * tensor->strides[dim] * (int64_t)par_dtype_size(tensor->dtype);
  *slice = s;
  return loomSuccess;
}
