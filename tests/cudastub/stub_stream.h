/* stub_stream.h - the stand-in driver's streams (stub_stream.c), for its
 * other files. */
#ifndef LOOM_TESTS_STUB_STREAM_H
#define LOOM_TESTS_STUB_STREAM_H

#include <stddef.h>
#include <stdint.h>

#define STUB_API __attribute__((visibility("default")))

/* An operation of a stream: returns 0 when done, 1 to be run again after a
 * short nap (a wait). arg is a copy of at most STUB_OP_ARG bytes. */
typedef int (*stub_op_fn)(void* arg);
#define STUB_OP_ARG 64
/* Queues run(arg) on stream, or runs it now for a default stream. */
int stub_submit(void* stream, stub_op_fn run, const void* arg, size_t bytes);
/* 1 when p is inside memory cuMemAlloc returned. */
int stub_is_device(uintptr_t p);
/* The buffer id of the allocation holding p: 0, or CUDA_ERROR_INVALID_VALUE. */
int stub_alloc_id(uintptr_t p, uint64_t* id);

#endif
