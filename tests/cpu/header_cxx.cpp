// The public header compiles as C++ (-std=c++11 -pedantic -Werror) and its declarations link
// with C linkage: this program calls a few of them.
#include "qfuse.h"

#include <cstdio>
#include <cstring>

int main() {
  qf_ctx *ctx = nullptr;
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) return 1;
  const bool ok = std::strcmp(qf_status_str(QF_ERR_SHAPE), "invalid shape") == 0 && qf_version_number() == QF_VERSION_NUMBER;
  qf_ctx_destroy(ctx);
  std::printf("header_cxx: %s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
  return ok ? 0 : 1;
}
