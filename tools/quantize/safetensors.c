/* .safetensors reading (safetensors.h): a small JSON scanner over the header, then one seek and
 * read for the tensor asked for. Every length and offset is checked against the file before use. */
#include "safetensors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER ((int64_t)100 << 20) /* the format's own limit on the JSON header */
#define ST_MAX_DEPTH 32

/* ---- the JSON scanner: each function returns 1 and moves past what it read, or 0 ---- */
typedef struct {
  const char *p, *end;
} cursor;

static void skip_space(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int take(cursor *c, char ch) {
  skip_space(c);
  if (c->p < c->end && *c->p == ch) return c->p++, 1;
  return 0;
}

/* A string, unescaped into out (NUL-terminated, cut at out_len - 1 bytes; out may be NULL): its
 * length + 1, or 0 when malformed. A \u escape outside ASCII is kept as '?': such names can be
 * listed, not asked for. */
static size_t read_string(cursor *c, char *out, size_t out_len) {
  size_t n = 0;
  if (!take(c, '"')) return 0;
  while (c->p < c->end) {
    char ch = *c->p++;
    if (ch == '"') {
      if (out) out[n < out_len ? n : out_len - 1] = '\0';
      return n + 1;
    }
    if ((unsigned char)ch < 0x20) return 0;
    if (ch == '\\') {
      if (c->p >= c->end) return 0;
      const char e = *c->p++;
      const char *plain = strchr("\"\\/bfnrt", e);
      if (e == 'u') {
        unsigned v = 0;
        for (int i = 0; i < 4; i++, c->p++) {
          if (c->p >= c->end) return 0;
          const char h = *c->p;
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return 0;
          v = v * 16 + (unsigned)d;
        }
        ch = v < 0x80 && v >= 0x20 ? (char)v : '?';
      } else if (plain && e) {
        ch = "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"];
      } else {
        return 0;
      }
    }
    if (out && n + 1 < out_len) out[n] = ch;
    n++;
  }
  return 0;
}

/* A non-negative integer up to 2^62. */
static int read_int(cursor *c, int64_t *v) {
  skip_space(c);
  const char *start = c->p;
  *v = 0;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (*v > ((int64_t)1 << 62) / 10) return 0;
    *v = *v * 10 + (*c->p++ - '0');
  }
  return c->p > start;
}

static int skip_value(cursor *c, int depth) {
  skip_space(c);
  if (c->p >= c->end || depth > ST_MAX_DEPTH) return 0;
  const char ch = *c->p;
  if (ch == '"') return read_string(c, NULL, 0);
  if (ch == '{' || ch == '[') {
    const char close = ch == '{' ? '}' : ']';
    c->p++;
    if (take(c, close)) return 1;
    do {
      if (ch == '{' && !(read_string(c, NULL, 0) && take(c, ':'))) return 0;
      if (!skip_value(c, depth + 1)) return 0;
    } while (take(c, ','));
    return take(c, close);
  }
  const char *start = c->p; /* a number or true / false / null */
  while (c->p < c->end && strchr("+-.0123456789eEtruefalsn", *c->p) && *c->p) c->p++;
  return c->p > start;
}

/* ---- a tensor's entry ---- */
typedef struct {
  char name[512], dtype[16];
  int cut; /* the name is longer than `name` holds (it is listed cut, and never matches) */
  int ndim;
  int64_t shape[NPY_MAX_DIMS], begin, end;
} entry;

/* An entry's value {"dtype": ..., "shape": [...], "data_offsets": [b, e]} (other keys skipped). */
static int read_entry(cursor *c, entry *t) {
  int have = 0;
  t->ndim = 0;
  if (!take(c, '{')) return 0;
  if (take(c, '}')) return 0;
  do {
    char key[32];
    if (!read_string(c, key, sizeof key) || !take(c, ':')) return 0;
    if (!strcmp(key, "dtype")) {
      if (!read_string(c, t->dtype, sizeof t->dtype)) return 0;
      have |= 1;
    } else if (!strcmp(key, "shape")) {
      if (!take(c, '[')) return 0;
      if (!take(c, ']')) {
        do {
          if (t->ndim == NPY_MAX_DIMS || !read_int(c, &t->shape[t->ndim])) return 0;
          t->ndim++;
        } while (take(c, ','));
        if (!take(c, ']')) return 0;
      }
      have |= 2;
    } else if (!strcmp(key, "data_offsets")) {
      if (!take(c, '[') || !read_int(c, &t->begin) || !take(c, ',') || !read_int(c, &t->end) || !take(c, ']')) return 0;
      have |= 4;
    } else if (!skip_value(c, 1)) {
      return 0;
    }
  } while (take(c, ','));
  return take(c, '}') && have == 7;
}

/* The file's header (malloc'd, NUL-terminated) and where its data starts and ends. */
static int read_header(FILE *f, const char *path, char **json, int64_t *len, int64_t *data0, int64_t *file_end,
                       char *err, size_t err_len) {
  unsigned char n8[8];
  if (fread(n8, 1, 8, f) != 8) return npy_error(err, err_len, "%s: not a .safetensors file (shorter than 8 bytes)", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | n8[i];
  if (fseek(f, 0, SEEK_END) || (*file_end = ftell(f)) < 0 || fseek(f, 8, SEEK_SET))
    return npy_error(err, err_len, "%s: %s", path, strerror(errno));
  if (n < 2 || (int64_t)n > ST_MAX_HEADER || (int64_t)n > *file_end - 8)
    return npy_error(err, err_len, "%s: not a .safetensors file (a header of %llu bytes)", path, (unsigned long long)n);
  if (!(*json = malloc(n + 1))) return npy_error(err, err_len, "%s: no memory for the header", path);
  if (fread(*json, 1, n, f) != n) {
    free(*json);
    return npy_error(err, err_len, "%s: shorter than its header says", path);
  }
  (*json)[n] = '\0';
  *len = (int64_t)n, *data0 = 8 + (int64_t)n;
  return 0;
}

/* Calls visit(t, arg) for each tensor entry of the header in order: 0, or -1 with err where the
 * header is not a JSON object of such entries (checked whole, whatever the visits find). */
static int each_entry(const char *json, int64_t len, const char *path, void (*visit)(const entry *, void *), void *arg,
                      char *err, size_t err_len) {
  cursor c = {json, json + len};
  entry t;
  if (!take(&c, '{')) return npy_error(err, err_len, "%s: the header is not a JSON object", path);
  if (take(&c, '}')) return 0;
  do {
    const size_t n = read_string(&c, t.name, sizeof t.name);
    if (!n || !take(&c, ':')) return npy_error(err, err_len, "%s: unreadable header", path);
    t.cut = n > sizeof t.name;
    if (!strcmp(t.name, "__metadata__")) {
      if (!skip_value(&c, 1)) return npy_error(err, err_len, "%s: unreadable __metadata__", path);
      continue;
    }
    if (!read_entry(&c, &t)) return npy_error(err, err_len, "%s: unreadable entry '%s' in the header", path, t.name);
    visit(&t, arg);
  } while (take(&c, ','));
  if (!take(&c, '}')) return npy_error(err, err_len, "%s: unreadable header", path);
  return 0;
}

/* One pass over a file's header: with `name`, the first entry of that name (`found`); without,
 * every entry printed to `out`. The file stays open (f) for the data that follows. */
typedef struct {
  const char *name;
  FILE *out, *f;
  int found;
  entry first;
  int64_t data0, file_end; /* where the data starts and the file ends */
} scan;

static void visit_entry(const entry *t, void *arg) {
  scan *s = arg;
  if (!s->name) {
    fprintf(s->out, "%s%s  %s [", t->name, t->cut ? "..." : "", t->dtype);
    for (int d = 0; d < t->ndim; d++) fprintf(s->out, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    fprintf(s->out, "]\n");
  } else if (!s->found && !t->cut && !strcmp(t->name, s->name)) {
    s->first = *t, s->found = 1;
  }
}

/* Opens path and scans its header; 0 with s->f open, or -1 with err (and nothing open). */
static int scan_file(const char *path, scan *s, char *err, size_t err_len) {
  if (!(s->f = fopen(path, "rb"))) return npy_error(err, err_len, "%s: %s", path, strerror(errno));
  char *json = NULL;
  int64_t len = 0;
  int rc = read_header(s->f, path, &json, &len, &s->data0, &s->file_end, err, err_len);
  if (!rc) rc = each_entry(json, len, path, visit_entry, s, err, err_len);
  free(json);
  if (rc) fclose(s->f), s->f = NULL;
  return rc;
}

int safetensors_list(const char *path, FILE *out, char *err, size_t err_len) {
  scan s = {.out = out};
  if (scan_file(path, &s, err, err_len)) return -1;
  fclose(s.f);
  return 0;
}

int safetensors_read(const char *path, const char *name, npy_array *a, char *err, size_t err_len) {
  memset(a, 0, sizeof *a);
  scan s = {.name = name};
  if (scan_file(path, &s, err, err_len)) return -1;
  const entry *t = &s.first;
  const int f32 = !strcmp(t->dtype, "F32"), f16 = !strcmp(t->dtype, "F16"), bf16 = !strcmp(t->dtype, "BF16");
  const int64_t count = npy_elements(t->shape, t->ndim), item = f32 ? 4 : 2;
  int rc = 0;
  if (!s.found)
    rc = npy_error(err, err_len, "%s: no tensor '%s' (--list names them)", path, name);
  else if (count < 0)
    rc = npy_error(err, err_len, "%s: '%s' has more than 2^%d elements", path, name, NPY_MAX_ELEMENTS_LOG2);
  else if (!f32 && !f16 && !bf16)
    rc = npy_error(err, err_len, "%s: '%s' is %s; F32, F16 or BF16 are read", path, name, t->dtype);
  else if (t->end - t->begin != count * item || t->begin > t->end || t->end > s.file_end - s.data0)
    rc = npy_error(err, err_len, "%s: '%s' has data offsets [%lld, %lld] that do not hold its shape in the file", path,
                   name, (long long)t->begin, (long long)t->end);
  if (!rc) {
    strcpy(a->descr, f32 ? "<f4" : f16 ? "<f2" : "bf16");
    a->item = (size_t)item;
    a->ndim = t->ndim;
    memcpy(a->shape, t->shape, sizeof a->shape);
    if (!(a->data = malloc((size_t)(count * item) + 1)))
      rc = npy_error(err, err_len, "%s: no memory for '%s'", path, name);
    else if (fseek(s.f, s.data0 + t->begin, SEEK_SET) || fread(a->data, (size_t)item, (size_t)count, s.f) != (size_t)count)
      rc = npy_error(err, err_len, "%s: cannot read '%s'", path, name);
  }
  fclose(s.f);
  if (rc) npy_free(a);
  return rc;
}
