/* Tensors of a .safetensors file (the checkpoint format of Hugging Face models), as much as
 * qfuse-quantize needs: one 2-D floating-point tensor read into memory, and the list of them.
 * The file is an 8-byte little-endian header length, a JSON object mapping each tensor's name to
 * {"dtype": "BF16", "shape": [N, K], "data_offsets": [begin, end]} (offsets into the data that
 * follows the header; an optional "__metadata__" entry too), then the data. */
#ifndef QFUSE_TOOLS_SAFETENSORS_H
#define QFUSE_TOOLS_SAFETENSORS_H

#include <stdio.h>

#include "npy.h"

/* Reads tensor `name` into *a with descr "<f4" (F32), "<f2" (F16) or "bf16" (BF16). Returns 0, or
 * -1 after writing why into err: unreadable file or header, no such tensor, another dtype, more
 * than NPY_MAX_DIMS dimensions, or offsets that do not match the shape or lie past the file. */
int safetensors_read(const char *path, const char *name, npy_array *a, char *err, size_t err_len);

/* Prints each tensor's name, dtype and shape to out, one a line. Returns 0, or -1 with err. */
int safetensors_list(const char *path, FILE *out, char *err, size_t err_len);

#endif
