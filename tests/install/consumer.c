/* An engine's view of an installed qfuse: the header and library found through the CMake package
 * or pkg-config (tests/install/check.sh builds this file both ways, as C and as C++), one call on
 * the CPU backend checked against its documented rule. */
#include <qfuse.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  enum { M = 2, K = 128 };
  float x[M][K];
  int8_t q[M][K];
  float scales[M];
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) x[m][k] = (float)((k - 64) * (m + 1)) / 64.0f;  /* row amax m + 1, at k = 0 */
  memset(q, 0x5a, sizeof q);

  int64_t xshape[2] = {M, K}, sshape[1] = {M};
  DLTensor tx, tq, ts;
  memset(&tx, 0, sizeof tx), memset(&tq, 0, sizeof tq), memset(&ts, 0, sizeof ts);
  tx.data = x, tx.device.device_type = kDLCPU, tx.ndim = 2, tx.shape = xshape;
  tx.dtype.code = kDLFloat, tx.dtype.bits = 32, tx.dtype.lanes = 1;
  tq = tx, tq.data = q, tq.dtype.code = kDLInt, tq.dtype.bits = 8;
  ts = tx, ts.data = scales, ts.ndim = 1, ts.shape = sshape;

  qf_ctx *ctx = NULL;
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  const qf_status st = qf_quant_token(ctx, &tx, &tq, &ts, NULL, NULL);
  if (st != QF_OK) printf("qf_quant_token: %s (%s)\n", qf_status_str(st), qf_ctx_last_error(ctx));
  qf_ctx_destroy(ctx);

  /* Symmetric per-token INT8: s = amax / 127, q = rne(x / s); x = -(m + 1) at k = 0, 0 at k = 64. */
  int ok = st == QF_OK && qf_version_number() == QF_VERSION_NUMBER;
  for (int m = 0; m < M && ok; m++)
    ok = fabsf(scales[m] - (float)(m + 1) / 127.0f) <= 1e-6f * (float)(m + 1) && q[m][0] == -127 && q[m][64] == 0 &&
         q[m][80] == 32;  /* x = amax / 4: 31.75 */
  printf("qfuse %s consumer: %s\n", qf_version(), ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
  return ok ? 0 : 1;
}
