/* Cache slots as the appending ops take them. */
#include "cpu/slots.h"

#include <stdlib.h>

static int by_value(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

qf_status qf_cpu_check_slots(qf_ctx *ctx, const char *op, const char *rows, const int32_t *slots, int64_t count, int64_t n) {
  int32_t *sorted = malloc((size_t)(count > 0 ? count : 1) * sizeof *sorted);
  if (!sorted) return qf_fail(ctx, QF_ERR_OUT_OF_MEMORY, "%s: no memory for %lld slots", op, (long long)count);
  for (int64_t i = 0; i < count; i++) {
    if (slots[i] >= n) {
      free(sorted);
      return qf_fail(ctx, QF_ERR_VALUE, "%s: slots[%lld]=%d is not below the %s %lld", op, (long long)i, (int)slots[i], rows,
                     (long long)n);
    }
    sorted[i] = slots[i];
  }
  qsort(sorted, (size_t)count, sizeof *sorted, by_value);
  for (int64_t i = 1; i < count; i++)
    if (sorted[i] >= 0 && sorted[i] == sorted[i - 1]) {
      const int32_t s = sorted[i];
      free(sorted);
      return qf_fail(ctx, QF_ERR_VALUE, "%s: slot %d is named twice", op, (int)s);
    }
  free(sorted);
  return QF_OK;
}
