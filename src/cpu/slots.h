/* Cache slots as the appending ops take them (qf_vq_encode_slots, qf_attention_cache_append). */
#ifndef QF_CPU_SLOTS_H
#define QF_CPU_SLOTS_H

#include "core/backend.h"

/* QF_OK when every slot is below n (`rows`: what they index, for the message) and none is named
 * twice; negative slots skip their rows and may repeat. QF_ERR_VALUE otherwise. */
qf_status qf_cpu_check_slots(qf_ctx *ctx, const char *op, const char *rows, const int32_t *slots, int64_t count, int64_t n);

#endif
