/* NumPy .npy files (format versions 1 to 3), as much as qfuse-quantize needs: C-order arrays of
 * little-endian numbers, read whole into memory and written with a version 1.0 header. */
#ifndef QFUSE_TOOLS_NPY_H
#define QFUSE_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 4
#define NPY_MAX_ELEMENTS_LOG2 40 /* arrays read hold at most 2^40 elements */
#define NPY_MAX_ELEMENTS ((int64_t)1 << NPY_MAX_ELEMENTS_LOG2)

typedef struct {
  char descr[8];                /* NumPy's type string, e.g. "<f4", "<f2", "|u1", "|i1"; "bf16" (NumPy has
                                   none) for bfloat16 read from a .safetensors file */
  int ndim;
  int64_t shape[NPY_MAX_DIMS];
  size_t item;                  /* bytes per element */
  void *data;                   /* malloc'd, item * prod(shape) bytes */
} npy_array;

/* Reads path into *a. Returns 0, or -1 after writing why into err (err_len bytes): unreadable
 * file, not an .npy file, Fortran order, more than NPY_MAX_DIMS dimensions or NPY_MAX_ELEMENTS
 * elements, a type other than little-endian float32 / float16 / uint8 / int8, or fewer data bytes
 * than the shape needs. */
int npy_read(const char *path, npy_array *a, char *err, size_t err_len);

/* Writes an array of type descr ("<f4", "<f2", "|u1" or "|i1") and the given shape from data. Returns 0,
 * or -1 after writing why into err. */
int npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data, char *err,
              size_t err_len);

void npy_free(npy_array *a);

/* The elements of an array of this shape, or -1 past NPY_MAX_ELEMENTS (so that no product of the
 * sizes overflows, in bytes, int64 or size_t). */
int64_t npy_elements(const int64_t *shape, int ndim);

/* Formats a message into err (err_len bytes) and returns -1: the readers' error return. */
int npy_error(char *err, size_t err_len, const char *fmt, ...);

#endif
