/* The public API's bookkeeping and every error path of qf_quant_per_tensor on the CPU backend:
 * each bad argument gets its own status and a message naming op and argument, and leaves the
 * output untouched. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qfuse.h"
#include "tensors.h"

static void test_version_and_status(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", QF_VERSION_MAJOR, QF_VERSION_MINOR, QF_VERSION_PATCH);
  CHECK(strcmp(qf_version(), want) == 0, "qf_version()=%s, macros say %s", qf_version(), want);
  CHECK(qf_version_number() == QF_VERSION_NUMBER, "qf_version_number()=%d", qf_version_number());
  const qf_status all[] = {QF_OK, QF_ERR_NULL, QF_ERR_DEVICE, QF_ERR_DTYPE, QF_ERR_SHAPE, QF_ERR_LAYOUT,
                           QF_ERR_ALIGNMENT, QF_ERR_VALUE, QF_ERR_UNSUPPORTED, QF_ERR_CUDA, QF_ERR_OUT_OF_MEMORY};
  const int n = (int)(sizeof all / sizeof all[0]);
  for (int i = 0; i < n; i++) {
    CHECK(strcmp(qf_status_str(all[i]), "unknown status") != 0, "status %d has no string", (int)all[i]);
    for (int j = 0; j < i; j++)
      CHECK(strcmp(qf_status_str(all[i]), qf_status_str(all[j])) != 0, "statuses %d and %d share a string", i, j);
  }
  CHECK(strcmp(qf_status_str((qf_status)12345), "unknown status") == 0, "out-of-range status");
}

static void test_dtypes(void) {
  for (int t = 0; t < QF_DTYPE_COUNT; t++) {
    qf_dtype back = QF_DTYPE_COUNT;
    CHECK(qf_dtype_from_dl(qf_dtype_to_dl((qf_dtype)t), &back) == QF_OK && back == (qf_dtype)t,
          "dtype %s does not round-trip through DLPack", qf_dtype_name((qf_dtype)t));
  }
  DLDataType f8 = qf_dtype_to_dl(QF_E4M3FN), bf = qf_dtype_to_dl(QF_BF16), e2 = qf_dtype_to_dl(QF_E2M1X2);
  CHECK(f8.code == 10 && f8.bits == 8 && f8.lanes == 1, "e4m3fn maps to DLPack {10, 8, 1}");
  CHECK(bf.code == kDLBfloat && bf.bits == 16, "bf16 maps to kDLBfloat 16");
  CHECK(e2.code == 17 && e2.bits == 4, "e2m1x2 maps to DLPack {17, 4}");
  qf_dtype out = QF_F32;
  DLDataType u16 = {kDLUInt, 16, 1}, f64 = {kDLFloat, 64, 1}, vec = {kDLFloat, 32, 4};
  CHECK(qf_dtype_from_dl(u16, &out) == QF_ERR_DTYPE && out == QF_F32, "uint16 is not a qfuse dtype");
  CHECK(qf_dtype_from_dl(f64, &out) == QF_ERR_DTYPE, "fp64 is not a qfuse dtype");
  CHECK(qf_dtype_from_dl(vec, &out) == QF_ERR_DTYPE, "lanes != 1 refused");
  CHECK(strcmp(qf_dtype_name((qf_dtype)99), "invalid") == 0, "invalid dtype name");
}

static void test_ctx(void) {
  qf_ctx *ctx = (qf_ctx *)0x1;
  CHECK(qf_ctx_create(NULL, QF_DEVICE_CPU, 0) == QF_ERR_NULL, "NULL out");
  CHECK(qf_ctx_create(&ctx, (qf_device)7, 0) == QF_ERR_VALUE && ctx == NULL, "unknown device kind");
  CHECK(qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) == QF_OK && ctx, "CPU context");
  CHECK(strcmp(qf_ctx_last_error(ctx), "") == 0, "fresh context has no error");
  CHECK(qf_ctx_set_stream(ctx, NULL) == QF_ERR_UNSUPPORTED, "a CPU context has no stream");
  CHECK(strstr(qf_ctx_last_error(ctx), "qf_ctx_set_stream") != NULL, "message names the function");
  CHECK(qf_ctx_set_pdl(ctx, 1) == QF_ERR_UNSUPPORTED, "a CPU context has no programmatic dependent launch");
  CHECK(strstr(qf_ctx_last_error(ctx), "qf_ctx_set_pdl") != NULL, "message names the function");
  CHECK(qf_ctx_set_pdl(NULL, 1) == QF_ERR_NULL, "qf_ctx_set_pdl(NULL)");
  CHECK(qf_ctx_reserve_workspace(ctx, 1 << 20) == QF_ERR_UNSUPPORTED, "a CPU context has no device workspace");
  CHECK(strstr(qf_ctx_last_error(ctx), "qf_ctx_reserve_workspace") != NULL, "message names the function");
  CHECK(qf_ctx_workspace_bytes(ctx) == 0, "a CPU context holds no workspace");
  CHECK(qf_ctx_reserve_workspace(NULL, 1) == QF_ERR_NULL, "qf_ctx_reserve_workspace(NULL)");
  CHECK(qf_ctx_workspace_bytes(NULL) == 0, "qf_ctx_workspace_bytes(NULL)");
  qf_ctx_destroy(ctx);
  qf_ctx_destroy(NULL);
  /* Without a GPU (CI) a CUDA context is refused; with one it works. Either way *out is consistent. */
  qf_ctx *gpu = (qf_ctx *)0x1;
  qf_status st = qf_ctx_create(&gpu, QF_DEVICE_CUDA, 0);
  CHECK((st == QF_OK && gpu) || (st == QF_ERR_UNSUPPORTED && gpu == NULL), "CUDA context: status %s", qf_status_str(st));
  qf_ctx_destroy(gpu);
  CHECK(qf_ctx_create(&gpu, QF_DEVICE_CUDA, 1 << 20) == QF_ERR_UNSUPPORTED && gpu == NULL, "absent CUDA device id");
}

/* One call of qf_quant_per_tensor on a fixture, after `mutate` broke one argument. */
typedef struct {
  _Alignas(16) uint16_t x[4 * 40];
  _Alignas(16) uint8_t q[4 * 40 + 32];
  _Alignas(16) float scale[4];
  tensor2d xt, qt;
  DLTensor st;
  int64_t sshape[1];
} fixture;

static void fixture_init(fixture *f) {
  for (int i = 0; i < 4 * 40; i++) f->x[i] = 0x3f80; /* bf16 1.0 */
  memset(f->q, POISON, sizeof f->q);
  f->scale[0] = 0.5f;
  tensor2d_init(&f->xt, f->x, QF_BF16, 4, 32, 40, kDLCPU);
  tensor2d_init(&f->qt, f->q, QF_E4M3FN, 4, 32, 32, kDLCPU);
  memset(&f->st, 0, sizeof f->st);
  f->sshape[0] = 1;
  f->st.data = f->scale;
  f->st.device.device_type = kDLCPU;
  f->st.ndim = 1;
  f->st.dtype = qf_dtype_to_dl(QF_F32);
  f->st.shape = f->sshape;
}

static int q_untouched(const fixture *f) {
  for (size_t i = 0; i < sizeof f->q; i++)
    if (f->q[i] != POISON) return 0;
  return 1;
}

typedef struct {
  const char *what;
  qf_status want;
  const char *mentions; /* the argument the message must name */
  void (*mutate)(fixture *f);
} bad_case;

static void m_x_null_data(fixture *f) { f->xt.t.data = NULL; }
static void m_x_device(fixture *f) { f->xt.t.device.device_type = kDLCUDA; }
static void m_q_device(fixture *f) { f->qt.t.device.device_type = kDLCUDAHost; }
static void m_scale_device(fixture *f) { f->st.device.device_type = kDLCUDA; }
static void m_x_dtype(fixture *f) { f->xt.t.dtype = qf_dtype_to_dl(QF_I8); }
static void m_x_dtype_unknown(fixture *f) { f->xt.t.dtype.code = kDLUInt; }
static void m_q_dtype(fixture *f) { f->qt.t.dtype = qf_dtype_to_dl(QF_F16); }
static void m_q_dtype_fnuz(fixture *f) { f->qt.t.dtype = qf_dtype_to_dl(QF_E4M3FNUZ); }
static void m_scale_dtype(fixture *f) { f->st.dtype = qf_dtype_to_dl(QF_BF16); }
static void m_x_ndim(fixture *f) { f->xt.t.ndim = 3; }
static void m_x_neg(fixture *f) { f->xt.shape[0] = -1; }
static void m_x_inner_stride(fixture *f) { f->xt.strides[1] = 2; }
static void m_x_overlap(fixture *f) { f->xt.strides[0] = 16; }
static void m_q_overlap(fixture *f) { f->qt.strides[0] = 31; }
static void m_x_misaligned(fixture *f) { f->xt.t.byte_offset = 2; }
static void m_q_misaligned(fixture *f) { f->qt.t.byte_offset = 8; }
static void m_scale_misaligned(fixture *f) { f->st.byte_offset = 2; }
static void m_shape_rows(fixture *f) { f->qt.shape[0] = 3; }
static void m_shape_cols(fixture *f) { f->qt.shape[1] = 24; }
static void m_shape_ndim(fixture *f) { f->qt.t.ndim = 1, f->qt.t.strides = NULL; }
static void m_scale_shape(fixture *f) { f->sshape[0] = 2; }
static void m_scale_null(fixture *f) { f->st.data = NULL; }

static void test_quant_per_tensor_errors(void) {
  static const bad_case cases[] = {
      {"x data NULL", QF_ERR_NULL, "x.data", m_x_null_data},
      {"x on CUDA", QF_ERR_DEVICE, "x", m_x_device},
      {"q on CUDA host memory", QF_ERR_DEVICE, "q", m_q_device},
      {"scale on CUDA", QF_ERR_DEVICE, "scale", m_scale_device},
      {"x int8", QF_ERR_DTYPE, "x has dtype int8", m_x_dtype},
      {"x uint16", QF_ERR_DTYPE, "x has dtype unknown", m_x_dtype_unknown},
      {"q fp16", QF_ERR_DTYPE, "q has dtype fp16", m_q_dtype},
      {"q e4m3fnuz", QF_ERR_DTYPE, "q has dtype e4m3fnuz", m_q_dtype_fnuz},
      {"scale bf16", QF_ERR_DTYPE, "scale has dtype bf16", m_scale_dtype},
      {"x 3-D", QF_ERR_SHAPE, "x has ndim=3", m_x_ndim},
      {"x negative extent", QF_ERR_SHAPE, "x.shape[0]=-1", m_x_neg},
      {"x inner stride", QF_ERR_LAYOUT, "x.strides[1]=2", m_x_inner_stride},
      {"x rows overlap", QF_ERR_LAYOUT, "x.strides[0]=16", m_x_overlap},
      {"q rows overlap", QF_ERR_LAYOUT, "q.strides[0]=31", m_q_overlap},
      {"x misaligned", QF_ERR_ALIGNMENT, "x data pointer", m_x_misaligned},
      {"q misaligned", QF_ERR_ALIGNMENT, "q data pointer", m_q_misaligned},
      {"scale misaligned", QF_ERR_ALIGNMENT, "scale data pointer", m_scale_misaligned},
      {"q rows differ", QF_ERR_SHAPE, "q.shape[0]=3", m_shape_rows},
      {"q cols differ", QF_ERR_SHAPE, "q.shape[1]=24", m_shape_cols},
      {"q ndim differs", QF_ERR_SHAPE, "q has ndim=1", m_shape_ndim},
      {"scale [2]", QF_ERR_SHAPE, "scale has shape [2]", m_scale_shape},
      {"scale data NULL", QF_ERR_NULL, "scale.data", m_scale_null},
  };
  qf_ctx *ctx;
  if (qf_ctx_create(&ctx, QF_DEVICE_CPU, 0) != QF_OK) {
    CHECK(0, "no CPU context");
    return;
  }
  fixture f;
  fixture_init(&f);
  CHECK(qf_quant_per_tensor(ctx, &f.xt.t, &f.st, &f.qt.t) == QF_OK, "valid call: %s", qf_ctx_last_error(ctx));
  CHECK(f.q[0] == 0x40 && f.q[127] == 0x40, "1.0 / 0.5 = 2.0 is e4m3fn 0x40, got 0x%02x", f.q[0]);
  CHECK(f.q[128] == POISON, "nothing written past the last row");

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fixture_init(&f);
    cases[i].mutate(&f);
    qf_status st = qf_quant_per_tensor(ctx, &f.xt.t, &f.st, &f.qt.t);
    const char *msg = qf_ctx_last_error(ctx);
    CHECK(st == cases[i].want, "%s: got %s, want %s (%s)", cases[i].what, qf_status_str(st), qf_status_str(cases[i].want), msg);
    CHECK(strstr(msg, "qf_quant_per_tensor") && strstr(msg, cases[i].mentions), "%s: message '%s' lacks '%s'",
          cases[i].what, msg, cases[i].mentions);
    CHECK(q_untouched(&f), "%s: output was written", cases[i].what);
  }

  fixture_init(&f);
  CHECK(qf_quant_per_tensor(NULL, &f.xt.t, &f.st, &f.qt.t) == QF_ERR_NULL, "NULL ctx");
  CHECK(qf_quant_per_tensor(ctx, NULL, &f.st, &f.qt.t) == QF_ERR_NULL && strstr(qf_ctx_last_error(ctx), "x is NULL"), "NULL x");
  CHECK(qf_quant_per_tensor(ctx, &f.xt.t, NULL, &f.qt.t) == QF_ERR_NULL && strstr(qf_ctx_last_error(ctx), "scale is NULL"), "NULL scale");
  CHECK(qf_quant_per_tensor(ctx, &f.xt.t, &f.st, NULL) == QF_ERR_NULL && strstr(qf_ctx_last_error(ctx), "q is NULL"), "NULL q");
  CHECK(q_untouched(&f), "NULL arguments: output was written");

  /* Empty tensors are valid and write nothing; a NULL data pointer is fine when empty. */
  fixture_init(&f);
  f.xt.shape[0] = f.qt.shape[0] = 0;
  f.xt.t.data = NULL;
  CHECK(qf_quant_per_tensor(ctx, &f.xt.t, &f.st, &f.qt.t) == QF_OK && q_untouched(&f), "empty tensors");
  /* A 0-d scale is accepted like [1]; NULL strides mean compact rows. */
  fixture_init(&f);
  f.st.ndim = 0;
  f.xt.t.strides = NULL;
  f.xt.shape[1] = 40;
  f.qt.shape[1] = 40;
  f.qt.strides[0] = 40;
  CHECK(qf_quant_per_tensor(ctx, &f.xt.t, &f.st, &f.qt.t) == QF_OK, "0-d scale, compact x: %s", qf_ctx_last_error(ctx));
  qf_ctx_destroy(ctx);
}

int main(void) {
  test_version_and_status();
  test_dtypes();
  test_ctx();
  test_quant_per_tensor_errors();
  return check_finish("test_api");
}
