/* devmem.h — the little the tests and the tool need of the CUDA runtime, behind plain C functions, so that
 * they build the same with or without CUDA (without it, fd_dev_available() is 0 and the rest fail). */
#ifndef FDEC_DEVMEM_H
#define FDEC_DEVMEM_H

#include <stddef.h>

int fd_dev_available(void);          /* 1 if CUDA is compiled in and a device is present */
const char *fd_dev_name(void);       /* device 0's name */
void *fd_dev_alloc(size_t bytes);    /* NULL on failure */
void fd_dev_free(void *p);
int fd_h2d(void *dst, const void *src, size_t bytes); /* 0 on success */
int fd_d2h(void *dst, const void *src, size_t bytes);
int fd_dev_memset(void *p, int byte, size_t bytes);
int fd_dev_sync(void);
int fd_dev_count(void);              /* CUDA devices, 0 without CUDA */
int fd_dev_set(int device);          /* cudaSetDevice; 0 on success */
int fd_dev_stream_sync(void *s);     /* 0 on success */
void *fd_dev_stream_create(void);
void fd_dev_stream_destroy(void *s);

/* Device-to-device copy bandwidth over `bytes`, counting bytes read plus bytes written, GB/s (median of 5). */
double fd_dev_copy_bandwidth(size_t bytes);

/* A captured CUDA graph of fn(arg, 0) .. fn(arg, n-1), each enqueuing work on `stream`; NULL on failure. */
void *fd_dev_graph_capture(void *stream, void (*fn)(void *arg, int i), void *arg, int n);
int fd_dev_graph_replay(void *graph, void *stream); /* 0 on success; does not wait */
void fd_dev_graph_destroy(void *graph);

/* Captures fn(arg, 0) .. fn(arg, n-1) (each enqueuing work on `stream`) into one CUDA graph, replays it `reps`
 * times and returns the median seconds of one replay divided by n; negative on failure. */
double fd_dev_time_graph(void *stream, void (*fn)(void *arg, int i), void *arg, int n, int reps);

/* Runs fn(arg, 0) .. fn(arg, n-1) on `stream` `reps` times (no graph: for work that cannot be captured, such
 * as collectives that synchronise with other processes) and returns the median seconds of one call; negative on
 * failure. */
double fd_dev_time_events(void *stream, void (*fn)(void *arg, int i), void *arg, int n, int reps);

#endif
