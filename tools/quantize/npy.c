/* NumPy .npy reading and writing (npy.h). The header is a Python dict literal, e.g.
 * {'descr': '<f4', 'fortran_order': False, 'shape': (4096, 4096), } padded with spaces to a
 * multiple of 64 bytes and ended by a newline; the data follows it in C order. */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t npy_elements(const int64_t *shape, int ndim) {
  int64_t count = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] && count > NPY_MAX_ELEMENTS / shape[d])) return -1;
    count *= shape[d];
  }
  return count;
}

int npy_error(char *err, size_t err_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
  return -1;
}

static size_t item_size(const char *descr) {
  if (!strcmp(descr, "<f4")) return 4;
  if (!strcmp(descr, "<f2")) return 2;
  if (!strcmp(descr, "|u1") || !strcmp(descr, "<u1") || !strcmp(descr, "|i1")) return 1;
  return 0;
}

/* The header dict as NumPy writes it: the keys 'descr' (a quoted string), 'fortran_order' (True
 * or False) and 'shape' (a tuple of non-negative integers), each once, in any order, nothing else.
 * Fills a's descr, item, ndim and shape and *count (npy_elements); 0, or -1 with err. */
static int parse_header(const char *path, const char *p, npy_array *a, int64_t *count, char *err, size_t err_len) {
  int seen = 0;
#define QF_NPY_SPACE() \
  while (*p == ' ') p++
  QF_NPY_SPACE();
  if (*p++ != '{') return npy_error(err, err_len, "%s: the header is not a dict", path);
  for (;;) {
    QF_NPY_SPACE();
    if (*p == '}') break;
    const char *key = p + 1, *key_end = *p == '\'' ? strchr(key, '\'') : NULL;
    if (!key_end) return npy_error(err, err_len, "%s: an unreadable header", path);
    const size_t kl = (size_t)(key_end - key);
    const int bit = kl == 5 && !strncmp(key, "descr", 5)           ? 1
                    : kl == 13 && !strncmp(key, "fortran_order", 13) ? 2
                    : kl == 5 && !strncmp(key, "shape", 5)           ? 4
                                                                   : 0;
    if (!bit || (seen & bit))
      return npy_error(err, err_len, "%s: header key '%.*s' unknown or repeated", path, (int)(kl < 40 ? kl : 40), key);
    seen |= bit;
    p = key_end + 1;
    QF_NPY_SPACE();
    if (*p++ != ':') return npy_error(err, err_len, "%s: an unreadable header", path);
    QF_NPY_SPACE();
    if (bit == 1) {
      const char *end = *p == '\'' ? strchr(p + 1, '\'') : NULL;
      if (!end || end - p - 1 >= (long)sizeof a->descr) return npy_error(err, err_len, "%s: an unreadable descr", path);
      memcpy(a->descr, p + 1, (size_t)(end - p - 1));
      p = end + 1;
    } else if (bit == 2) {
      if (!strncmp(p, "True", 4))
        return npy_error(err, err_len, "%s: Fortran order; save a C-order array (np.ascontiguousarray)", path);
      if (strncmp(p, "False", 5)) return npy_error(err, err_len, "%s: an unreadable fortran_order", path);
      p += 5;
    } else {
      if (*p++ != '(') return npy_error(err, err_len, "%s: an unreadable shape", path);
      for (;;) {
        QF_NPY_SPACE();
        if (*p == ')') break;
        char *next;
        errno = 0;
        const long long v = strtoll(p, &next, 10);
        if (next == p || errno || v < 0 || a->ndim == NPY_MAX_DIMS)
          return npy_error(err, err_len, "%s: a shape of more than %d dimensions, or unreadable", path, NPY_MAX_DIMS);
        a->shape[a->ndim++] = v;
        p = next;
        QF_NPY_SPACE();
        if (*p == ',') p++;
        else if (*p != ')') return npy_error(err, err_len, "%s: an unreadable shape", path);
      }
      p++;
    }
    QF_NPY_SPACE();
    if (*p == ',') p++;
    else if (*p != '}') return npy_error(err, err_len, "%s: an unreadable header", path);
  }
#undef QF_NPY_SPACE
  if (seen != 7) return npy_error(err, err_len, "%s: a header without descr, fortran_order and shape", path);
  if ((*count = npy_elements(a->shape, a->ndim)) < 0)
    return npy_error(err, err_len, "%s: more than 2^%d elements", path, NPY_MAX_ELEMENTS_LOG2);
  if (!(a->item = item_size(a->descr)))
    return npy_error(err, err_len, "%s: dtype '%s'; float32 ('<f4'), float16 ('<f2'), uint8 or int8 are read", path,
                     a->descr);
  return 0;
}

int npy_read(const char *path, npy_array *a, char *err, size_t err_len) {
  memset(a, 0, sizeof *a);
  FILE *f = fopen(path, "rb");
  if (!f) return npy_error(err, err_len, "%s: %s", path, strerror(errno));
  unsigned char pre[12];
  char *header = NULL;
  int rc = -1;
  if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) || pre[6] < 1 || pre[6] > 3) {
    npy_error(err, err_len, "%s: not a NumPy .npy file", path);
    goto done;
  }
  size_t header_len;
  if (pre[6] == 1) {
    if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
    header_len = (size_t)pre[8] | (size_t)pre[9] << 8;
  } else {
    if (fread(pre + 8, 1, 4, f) != 4) goto truncated;
    header_len = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  }
  if (header_len > (1u << 20) || !(header = malloc(header_len + 1))) {
    npy_error(err, err_len, "%s: a header of %zu bytes", path, header_len);
    goto done;
  }
  if (fread(header, 1, header_len, f) != header_len) goto truncated;
  header[header_len] = '\0';

  int64_t count = 0;
  if (parse_header(path, header, a, &count, err, err_len)) goto done;
  /* the data must be in the file before it is read */
  const long here = ftell(f);
  if (here < 0 || fseek(f, 0, SEEK_END) || ftell(f) - here < count * (int64_t)a->item || fseek(f, here, SEEK_SET))
    goto truncated;
  if (!(a->data = malloc((size_t)count * a->item + 1))) {
    npy_error(err, err_len, "%s: no memory for %lld bytes", path, (long long)(count * (int64_t)a->item));
    goto done;
  }
  if (fread(a->data, a->item, (size_t)count, f) != (size_t)count) goto truncated;
  rc = 0;
  goto done;
truncated:
  npy_error(err, err_len, "%s: shorter than its header says", path);
done:
  free(header);
  fclose(f);
  if (rc) npy_free(a);
  return rc;
}

int npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data, char *err,
              size_t err_len) {
  const size_t item = item_size(descr);
  if (!item || ndim < 1 || ndim > NPY_MAX_DIMS) return npy_error(err, err_len, "%s: cannot write dtype %s", path, descr);
  char dict[256], dims[160] = "";
  size_t count = 1, used = 0;
  for (int d = 0; d < ndim; d++) {
    used += (size_t)snprintf(dims + used, sizeof dims - used, "%lld,%s", (long long)shape[d], d + 1 < ndim ? " " : "");
    count *= (size_t)shape[d];
  }
  if (ndim > 1) dims[used - 1] = '\0'; /* (N,) keeps its comma, (N, K) drops the last */
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
  /* pad with spaces so that the 10 bytes before it, it and its newline end on a multiple of 64 */
  const size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64, header_len = total - 10;
  memset(dict + n, ' ', header_len - 1 - (size_t)n);
  dict[header_len - 1] = '\n';
  FILE *f = fopen(path, "wb");
  if (!f) return npy_error(err, err_len, "%s: %s", path, strerror(errno));
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_len & 0xFF),
                                 (unsigned char)(header_len >> 8)};
  const int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, header_len, f) == header_len &&
                 fwrite(data, item, count, f) == count;
  if (fclose(f) || !ok) return npy_error(err, err_len, "%s: write failed", path);
  return 0;
}

void npy_free(npy_array *a) {
  free(a->data);
  a->data = NULL;
}
