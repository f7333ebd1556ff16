/* Exhaustive tests of src/formats/formats.h. Every expected value comes from the format's
 * definition evaluated in double (sign, exponent, mantissa, bias), never from the codecs. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "formats/formats.h"

/* ---- format descriptions ------------------------------------------------------------ */

enum specials {
    SP_NONE, /* every code finite (e2m1) */
    SP_IEEE, /* exponent all ones: Inf (mantissa 0) or NaN */
    SP_FN,   /* only S.1111.111 is NaN, no Inf */
    SP_FNUZ, /* only the negative-zero code is NaN, no Inf, no -0 */
};

typedef struct {
    const char *name;
    int ebits, mbits, bias;
    enum specials sp;
    int satfinite; /* overflow saturates to the largest finite value, else goes to Inf */
    uint32_t nan_pos, nan_neg; /* codes expected for +NaN / -NaN inputs */
    uint32_t (*enc)(float);
    float (*dec)(uint32_t);
} fmt_t;

static uint32_t enc_e4m3fn(float x) { return qf_e4m3fn_from_f32(x); }
static float dec_e4m3fn(uint32_t c) { return qf_e4m3fn_to_f32((uint8_t)c); }
static uint32_t enc_e4m3fnuz(float x) { return qf_e4m3fnuz_from_f32(x); }
static float dec_e4m3fnuz(uint32_t c) { return qf_e4m3fnuz_to_f32((uint8_t)c); }
static uint32_t enc_e5m2(float x) { return qf_e5m2_from_f32(x); }
static float dec_e5m2(uint32_t c) { return qf_e5m2_to_f32((uint8_t)c); }
static uint32_t enc_e2m1(float x) { return qf_e2m1_from_f32(x); }
static float dec_e2m1(uint32_t c) { return qf_e2m1_to_f32((uint8_t)c); }
static uint32_t enc_f16(float x) { return qf_f16_from_f32(x); }
static float dec_f16(uint32_t c) { return qf_f16_to_f32((uint16_t)c); }
static uint32_t enc_bf16(float x) { return qf_bf16_from_f32(x); }
static float dec_bf16(uint32_t c) { return qf_bf16_to_f32((uint16_t)c); }

static const fmt_t FORMATS[] = {
    {"e4m3fn", 4, 3, 7, SP_FN, 1, 0x7F, 0x7F, enc_e4m3fn, dec_e4m3fn},
    {"e4m3fnuz", 4, 3, 8, SP_FNUZ, 1, 0x80, 0x80, enc_e4m3fnuz, dec_e4m3fnuz},
    {"e5m2", 5, 2, 15, SP_IEEE, 1, 0x7F, 0x7F, enc_e5m2, dec_e5m2},
    {"e2m1", 2, 1, 1, SP_NONE, 1, 0x7, 0x7, enc_e2m1, dec_e2m1},
    {"f16", 5, 10, 15, SP_IEEE, 0, 0x7E00, 0xFE00, enc_f16, dec_f16},
    {"bf16", 8, 7, 127, SP_IEEE, 0, 0x7FC0, 0xFFC0, enc_bf16, dec_bf16},
};

/* Derived facts and the table of non-negative finite values, index = magnitude code. */
typedef struct {
    const fmt_t *f;
    uint32_t ncodes, sign;
    uint32_t max_mag;       /* largest finite magnitude code */
    uint32_t overflow_mag;  /* magnitude code that overflow and Inf encode to */
    double *val;            /* val[m] for m in [0, max_mag] */
} info_t;

static uint32_t bits_of(float x) { return qf_f32_bits(x); }

static float float_of(uint32_t u) { return qf_f32_from_bits(u); }

/* The value of code c by the format's definition. */
static double ref_decode(const fmt_t *f, uint32_t c)
{
    uint32_t nbits = (uint32_t)(1 + f->ebits + f->mbits);
    uint32_t sign = 1u << (nbits - 1);
    uint32_t mag = c & (sign - 1u);
    uint32_t e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1u);
    uint32_t e_all = (1u << f->ebits) - 1u, m_all = (1u << f->mbits) - 1u;
    double v;
    if (f->sp == SP_FNUZ && c == sign) return NAN;
    if (f->sp == SP_FN && e == e_all && m == m_all) return NAN;
    if (f->sp == SP_IEEE && e == e_all) {
        if (m != 0) return NAN;
        return (c & sign) ? -INFINITY : INFINITY;
    }
    if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->mbits);
    else
        v = ldexp((double)((1u << f->mbits) + m), (int)e - f->bias - f->mbits);
    return (c & sign) ? -v : v;
}

static info_t make_info(const fmt_t *f)
{
    info_t in;
    uint32_t m;
    in.f = f;
    in.ncodes = 1u << (1 + f->ebits + f->mbits);
    in.sign = in.ncodes >> 1;
    in.max_mag = 0;
    for (m = 0; m < in.sign; m++)
        if (isfinite(ref_decode(f, m))) in.max_mag = m;
    in.overflow_mag = f->satfinite ? in.max_mag : ((1u << f->ebits) - 1u) << f->mbits;
    in.val = malloc(sizeof(double) * (in.max_mag + 1));
    if (!in.val) abort();
    for (m = 0; m <= in.max_mag; m++) in.val[m] = ref_decode(f, m);
    return in;
}

/* Signed code for a magnitude code; fnuz has no negative zero. */
static uint32_t with_sign(const info_t *in, uint32_t mag, int neg)
{
    if (!neg) return mag;
    if (mag == 0 && in->f->sp == SP_FNUZ) return 0;
    return in->sign | mag;
}

/* Reference encoder from the value table: nearest value, ties to the even code,
 * overflow per the format's rule. */
static uint32_t ref_encode(const info_t *in, float x)
{
    double a = fabs((double)x), vmax = in->val[in->max_mag];
    int neg = signbit(x) != 0;
    uint32_t lo = 0, hi = in->max_mag, k;
    double mid;
    if (isnan(x)) return neg ? in->f->nan_neg : in->f->nan_pos;
    if (a > vmax) {
        double half = (vmax - in->val[in->max_mag - 1]) / 2;
        if (!in->f->satfinite && a >= vmax + half) return with_sign(in, in->overflow_mag, neg);
        return with_sign(in, in->max_mag, neg);
    }
    while (lo < hi) { /* largest k with val[k] <= a */
        uint32_t m = (lo + hi + 1) / 2;
        if (in->val[m] <= a)
            lo = m;
        else
            hi = m - 1;
    }
    k = lo;
    if (in->val[k] == a) return with_sign(in, k, neg);
    mid = (in->val[k] + in->val[k + 1]) / 2;
    if (a < mid) return with_sign(in, k, neg);
    if (a > mid) return with_sign(in, k + 1, neg);
    return with_sign(in, (k & 1u) ? k + 1 : k, neg);
}

static int same_value(float got, double want)
{
    if (isnan(want)) return isnan(got);
    return (double)got == want && (signbit(got) != 0) == (signbit(want) != 0);
}

/* ---- generic small-float tests ------------------------------------------------------ */

static void test_decode_all(const info_t *in)
{
    uint32_t c;
    double prev = -1;
    for (c = 0; c < in->ncodes; c++) {
        double want = ref_decode(in->f, c);
        float got = in->f->dec(c);
        CHECK(same_value(got, want), "%s decode 0x%X: got %a, want %a", in->f->name, c, (double)got,
              want);
    }
    for (c = 0; c <= in->max_mag; c++) { /* the value table must be strictly increasing */
        CHECK(in->val[c] > prev, "%s: value of code 0x%X not increasing", in->f->name, c);
        prev = in->val[c];
    }
}

static void test_round_trip(const info_t *in)
{
    uint32_t c;
    for (c = 0; c < in->ncodes; c++) {
        double v = ref_decode(in->f, c);
        uint32_t want = c, got;
        if (isnan(v)) continue;
        if (isinf(v)) want = with_sign(in, in->overflow_mag, v < 0);
        got = in->f->enc(in->f->dec(c));
        CHECK(got == want, "%s round trip 0x%X: got 0x%X, want 0x%X", in->f->name, c, got, want);
    }
    if (in->f->sp == SP_IEEE && in->f->satfinite) { /* Inf saturates by design */
        CHECK(in->f->enc(INFINITY) == in->max_mag, "%s: +Inf not saturated", in->f->name);
        CHECK(in->f->enc(-INFINITY) == (in->sign | in->max_mag), "%s: -Inf not saturated",
              in->f->name);
    }
}

/* Midpoints of adjacent codes go to the even code, one float ulp either side to the nearer. */
static void test_midpoints(const info_t *in)
{
    uint32_t k;
    int neg;
    for (k = 0; k < in->max_mag; k++) {
        double mid = (in->val[k] + in->val[k + 1]) / 2;
        float fm = (float)mid;
        uint32_t even = (k & 1u) ? k + 1 : k;
        CHECK((double)fm == mid, "%s: midpoint %a not a float", in->f->name, mid);
        for (neg = 0; neg <= 1; neg++) {
            float s = neg ? -1.0f : 1.0f;
            float below = nextafterf(fm, 0.0f), above = nextafterf(fm, INFINITY);
            uint32_t got_mid = in->f->enc(s * fm);
            uint32_t got_below = in->f->enc(s * below);
            uint32_t got_above = in->f->enc(s * above);
            CHECK(got_mid == with_sign(in, even, neg), "%s tie %a: got 0x%X, want 0x%X",
                  in->f->name, (double)(s * fm), got_mid, with_sign(in, even, neg));
            CHECK(got_below == with_sign(in, k, neg), "%s below tie %a: got 0x%X, want 0x%X",
                  in->f->name, (double)(s * below), got_below, with_sign(in, k, neg));
            CHECK(got_above == with_sign(in, k + 1, neg), "%s above tie %a: got 0x%X, want 0x%X",
                  in->f->name, (double)(s * above), got_above, with_sign(in, k + 1, neg));
        }
    }
}

static void test_overflow_nan_zero(const info_t *in)
{
    double vmax = in->val[in->max_mag];
    double half = (vmax - in->val[in->max_mag - 1]) / 2;
    float tie = (float)(vmax + half);
    float cases[8];
    uint32_t nan_payloads[] = {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0x7FA5A5A5u};
    float tiny[3];
    int i, neg;
    cases[0] = tie;
    cases[1] = (float)(2 * vmax);
    cases[2] = 1e30f;
    cases[3] = FLT_MAX;
    cases[4] = INFINITY;
    CHECK((double)tie == vmax + half, "%s: max + half step not a float", in->f->name);
    for (neg = 0; neg <= 1; neg++) {
        float s = neg ? -1.0f : 1.0f;
        uint32_t want_max = with_sign(in, in->max_mag, neg);
        uint32_t want_ovf = with_sign(in, in->overflow_mag, neg);
        uint32_t got = in->f->enc(s * (float)vmax);
        CHECK(got == want_max, "%s %a: got 0x%X, want 0x%X", in->f->name, s * vmax, got, want_max);
        got = in->f->enc(s * nextafterf((float)vmax, INFINITY));
        CHECK(got == want_max, "%s max+ulp: got 0x%X, want 0x%X", in->f->name, got, want_max);
        got = in->f->enc(s * nextafterf(tie, 0.0f));
        CHECK(got == want_max, "%s max+half-ulp: got 0x%X, want 0x%X", in->f->name, got, want_max);
        for (i = 0; i < 5; i++) {
            if ((double)cases[i] < vmax + half) continue; /* in range (1e30 in bf16) */
            got = in->f->enc(s * cases[i]);
            CHECK(got == want_ovf, "%s overflow %a: got 0x%X, want 0x%X", in->f->name,
                  (double)(s * cases[i]), got, want_ovf);
        }
    }
    for (i = 0; i < 4; i++)
        for (neg = 0; neg <= 1; neg++) {
            uint32_t u = nan_payloads[i] | (neg ? 0x80000000u : 0u);
            uint32_t got = in->f->enc(float_of(u)), want = neg ? in->f->nan_neg : in->f->nan_pos;
            CHECK(got == want, "%s NaN 0x%08X: got 0x%X, want 0x%X", in->f->name, u, got, want);
        }
    /* zeros: exact, the smallest float subnormal, and the tie below the first subnormal */
    tiny[0] = 0.0f;
    tiny[1] = float_of(1);
    tiny[2] = (float)(in->val[1] / 2);
    for (i = 0; i < 3; i++) {
        uint32_t got_pos = in->f->enc(tiny[i]), got_neg = in->f->enc(-tiny[i]);
        CHECK(got_pos == 0, "%s %a: got 0x%X, want 0", in->f->name, (double)tiny[i], got_pos);
        CHECK(got_neg == with_sign(in, 0, 1), "%s %a: got 0x%X, want 0x%X", in->f->name,
              -(double)tiny[i], got_neg, with_sign(in, 0, 1));
    }
    CHECK((signbit(in->f->dec(with_sign(in, 0, 1))) != 0) == (in->f->sp != SP_FNUZ),
          "%s: sign of decoded negative zero", in->f->name);
}

/* Strided sweeps against the reference encoder: the whole f32 range, then densely over
 * [min subnormal / 8, 4 * max]. An odd stride visits every residue of the low bits. */
static void test_sweep(const info_t *in)
{
    uint32_t lo = bits_of((float)(in->val[1] / 8));
    uint32_t hi = bits_of((float)(in->val[in->max_mag] * 4));
    uint32_t stride = ((hi - lo) / 3000000u) | 1u, u;
    uint64_t i;
    for (i = 0; i < 2000000u; i++) {
        float x = float_of((uint32_t)(i * 2654435761u));
        uint32_t got = in->f->enc(x), want = ref_encode(in, x);
        CHECK(got == want, "%s sweep %a: got 0x%X, want 0x%X", in->f->name, (double)x, got, want);
    }
    for (u = lo; u <= hi && u >= lo; u += stride) {
        float x = float_of(u), nx = -x;
        uint32_t got = in->f->enc(x), want = ref_encode(in, x);
        CHECK(got == want, "%s sweep %a: got 0x%X, want 0x%X", in->f->name, (double)x, got, want);
        got = in->f->enc(nx);
        want = ref_encode(in, nx);
        CHECK(got == want, "%s sweep %a: got 0x%X, want 0x%X", in->f->name, (double)nx, got, want);
    }
}

/* ---- hand-checked anchors (guard the reference formulas themselves) --------------------- */

static void test_anchors(void)
{
    static const float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    static const struct { float x; uint8_t code; } e2m1_ties[] = {
        {0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4},
        {3.5f, 0x6}, {5.0f, 0x6}, {7.0f, 0x7}, {-0.0f, 0x8}, {-5.0f, 0xE},
    };
    unsigned i, lo, hi;
    CHECK(qf_e4m3fn_from_f32(448.0f) == 0x7E, "e4m3fn 448");
    CHECK(qf_e4m3fn_from_f32(464.0f) == 0x7E, "e4m3fn 464 saturates");
    CHECK(qf_e4m3fn_from_f32(-1.0f) == 0xB8, "e4m3fn -1");
    CHECK(qf_e4m3fn_to_f32(0x01) == 0x1p-9f, "e4m3fn min subnormal");
    CHECK(qf_e4m3fn_to_f32(0x08) == 0x1p-6f, "e4m3fn min normal");
    CHECK(qf_e4m3fn_from_f32(-0.0f) == 0x80, "e4m3fn -0");
    CHECK(qf_e4m3fnuz_from_f32(240.0f) == 0x7F, "e4m3fnuz 240");
    CHECK(qf_e4m3fnuz_from_f32(1.0f) == 0x40, "e4m3fnuz 1");
    CHECK(qf_e4m3fnuz_to_f32(0x01) == 0x1p-10f, "e4m3fnuz min subnormal");
    CHECK(qf_e4m3fnuz_from_f32(-0.0f) == 0x00, "e4m3fnuz -0");
    CHECK(qf_e4m3fnuz_from_f32(-INFINITY) == 0xFF, "e4m3fnuz -Inf");
    CHECK(qf_e5m2_from_f32(57344.0f) == 0x7B, "e5m2 max");
    CHECK(qf_e5m2_from_f32(1.0f) == 0x3C, "e5m2 1");
    CHECK(qf_e5m2_to_f32(0x01) == 0x1p-16f, "e5m2 min subnormal");
    CHECK(isinf(qf_e5m2_to_f32(0xFC)) && qf_e5m2_to_f32(0xFC) < 0, "e5m2 -Inf");
    CHECK(isnan(qf_e5m2_to_f32(0x7D)), "e5m2 NaN");
    CHECK(qf_f16_from_f32(1.0f) == 0x3C00, "f16 1");
    CHECK(qf_f16_from_f32(65504.0f) == 0x7BFF, "f16 max");
    CHECK(qf_f16_from_f32(65519.996f) == 0x7BFF, "f16 below overflow tie");
    CHECK(qf_f16_from_f32(65520.0f) == 0x7C00, "f16 overflow tie -> Inf");
    CHECK(qf_f16_to_f32(0x0001) == 0x1p-24f, "f16 min subnormal");
    CHECK(qf_bf16_from_f32(1.0f) == 0x3F80, "bf16 1");
    CHECK(qf_bf16_from_f32(-2.0f) == 0xC000, "bf16 -2");
    CHECK(qf_bf16_to_f32(0x0001) == 0x1p-133f, "bf16 min subnormal");
    for (i = 0; i < 8; i++) {
        CHECK(qf_e2m1_to_f32((uint8_t)i) == e2m1_values[i], "e2m1 code %u", i);
        CHECK(qf_e2m1_to_f32((uint8_t)(i | 8)) == -e2m1_values[i], "e2m1 code %u", i | 8);
    }
    for (i = 0; i < sizeof e2m1_ties / sizeof e2m1_ties[0]; i++)
        CHECK(qf_e2m1_from_f32(e2m1_ties[i].x) == e2m1_ties[i].code, "e2m1 %g: got 0x%X",
              (double)e2m1_ties[i].x, qf_e2m1_from_f32(e2m1_ties[i].x));
    CHECK(qf_e2m1x2_pack(0x1, 0x2) == 0x21, "e2m1x2 pack order");
    for (lo = 0; lo < 16; lo++)
        for (hi = 0; hi < 16; hi++) {
            uint8_t p = qf_e2m1x2_pack((uint8_t)lo, (uint8_t)hi);
            CHECK(qf_e2m1x2_lo(p) == lo && qf_e2m1x2_hi(p) == hi, "e2m1x2 %u %u", lo, hi);
        }
}

/* ---- int8 ---------------------------------------------------------------------------- */

static int ref_int8(float x)
{
    double d = x, f, frac, r;
    if (isnan(x)) return 0;
    if (d > 200) return 127;
    if (d < -200) return -128;
    f = floor(d);
    frac = d - f;
    if (frac > 0.5)
        r = f + 1;
    else if (frac < 0.5)
        r = f;
    else
        r = fmod(f, 2.0) == 0 ? f : f + 1;
    return r > 127 ? 127 : r < -128 ? -128 : (int)r;
}

static void test_int8(void)
{
    static const struct { float x; int want; } cases[] = {
        {0.5f, 0}, {1.5f, 2}, {2.5f, 2}, {-0.5f, 0}, {-1.5f, -2}, {-2.5f, -2}, {0.49999997f, 0},
        {0.50000006f, 1}, {127.49f, 127}, {127.5f, 127}, {126.5f, 126}, {-127.5f, -128},
        {-128.5f, -128}, {-129.0f, -128}, {1e10f, 127}, {-1e10f, -128}, {0x1p-149f, 0},
        {-0.0f, 0}, {3.0f, 3}, {-3.7f, -4},
    };
    unsigned i;
    int n, k, sign;
    uint32_t u;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = qf_int8_from_f32(cases[i].x);
        CHECK(got == cases[i].want, "int8 %a: got %d, want %d", (double)cases[i].x, got, cases[i].want);
    }
    CHECK(qf_int8_from_f32(INFINITY) == 127, "int8 +Inf");
    CHECK(qf_int8_from_f32(-INFINITY) == -128, "int8 -Inf");
    CHECK(qf_int8_from_f32(NAN) == 0, "int8 NaN");
    CHECK(qf_int8_from_f32(-NAN) == 0, "int8 -NaN");
    CHECK(qf_int8_from_f32(float_of(0x7F800001u)) == 0, "int8 sNaN");
    /* every half-integer and a few ulps around it */
    for (n = -131; n <= 131; n++) {
        float t = (float)n + 0.5f, x = t;
        for (k = 0; k < 3; k++, x = nextafterf(x, INFINITY)) {
            CHECK(qf_int8_from_f32(x) == ref_int8(x), "int8 %a", (double)x);
        }
        for (x = t, k = 0; k < 3; k++, x = nextafterf(x, -INFINITY)) {
            CHECK(qf_int8_from_f32(x) == ref_int8(x), "int8 %a", (double)x);
        }
    }
    /* dense sweep of [-130, 130] */
    for (u = 0; u <= bits_of(130.0f); u += 97)
        for (sign = 0; sign <= 1; sign++) {
            float x = float_of(u | (sign ? 0x80000000u : 0u));
            int got = qf_int8_from_f32(x), want = ref_int8(x);
            CHECK(got == want, "int8 sweep %a: got %d, want %d", (double)x, got, want);
        }
}

/* ---- ue8m0 and pow2_ceil --------------------------------------------------------------- */

/* Smallest ue8m0 code whose value 2^(e-127) is >= x > 0, by frexp: x = f * 2^k, f in [0.5, 1). */
static unsigned ref_ue8m0_ceil(float x)
{
    int k, e;
    double f = frexp((double)x, &k);
    e = (f == 0.5 ? k - 1 : k) + 127;
    return e < 0 ? 0u : e > 254 ? 254u : (unsigned)e;
}

/* Smallest power of two >= x > 0 as a float (Inf past 2^127), by frexp. */
static double ref_pow2_ceil(float x)
{
    int k;
    double f = frexp((double)x, &k), p = f == 0.5 ? (double)x : ldexp(1.0, k);
    return p > FLT_MAX ? INFINITY : p;
}

static void test_ue8m0(void)
{
    unsigned c;
    int k;
    uint64_t i;
    for (c = 0; c < 256; c++) {
        float got = qf_ue8m0_to_f32((uint8_t)c);
        if (c == 255) {
            CHECK(isnan(got), "ue8m0 0xFF not NaN");
            continue;
        }
        CHECK((double)got == ldexp(1.0, (int)c - 127), "ue8m0 decode 0x%X: %a", c, (double)got);
        CHECK(qf_ue8m0_from_f32_ceil(got) == c, "ue8m0 round trip 0x%X", c);
    }
    for (k = -149; k <= 127; k++) {
        float p = (float)ldexp(1.0, k);
        unsigned want = k + 127 < 0 ? 0u : (unsigned)(k + 127);
        CHECK(qf_ue8m0_from_f32_ceil(p) == want, "ue8m0 2^%d", k);
        CHECK(qf_pow2_ceil_f32(p) == p, "pow2_ceil 2^%d", k);
        if (k >= -126) { /* normal: 2^k * (1 + 2^-23) rounds up to 2^(k+1) */
            float q = nextafterf(p, INFINITY);
            unsigned want_up = k + 128 > 254 ? 254u : (unsigned)(k + 128);
            CHECK(qf_ue8m0_from_f32_ceil(q) == want_up, "ue8m0 2^%d+ulp: got 0x%X", k,
                  qf_ue8m0_from_f32_ceil(q));
            CHECK((double)qf_pow2_ceil_f32(q) == (k == 127 ? INFINITY : ldexp(1.0, k + 1)),
                  "pow2_ceil 2^%d+ulp", k);
        }
    }
    CHECK(qf_ue8m0_from_f32_ceil(0x1p-127f + 0x1p-149f) == 0x01, "ue8m0 just above 2^-127");
    CHECK(qf_ue8m0_from_f32_ceil(0x1p-126f - 0x1p-149f) == 0x01, "ue8m0 largest subnormal");
    CHECK(qf_ue8m0_from_f32_ceil(0x1p-149f) == 0x00, "ue8m0 smallest subnormal");
    CHECK(qf_ue8m0_from_f32_ceil(0.0f) == 0x00, "ue8m0 0");
    CHECK(qf_ue8m0_from_f32_ceil(-0.0f) == 0x00, "ue8m0 -0");
    CHECK(qf_ue8m0_from_f32_ceil(-1.0f) == 0xFF, "ue8m0 -1");
    CHECK(qf_ue8m0_from_f32_ceil(-0x1p-140f) == 0xFF, "ue8m0 tiny negative");
    CHECK(qf_ue8m0_from_f32_ceil(-INFINITY) == 0xFF, "ue8m0 -Inf");
    CHECK(qf_ue8m0_from_f32_ceil(NAN) == 0xFF, "ue8m0 NaN");
    CHECK(qf_ue8m0_from_f32_ceil(-NAN) == 0xFF, "ue8m0 -NaN");
    CHECK(qf_ue8m0_from_f32_ceil(INFINITY) == 0xFE, "ue8m0 +Inf");
    CHECK(qf_ue8m0_from_f32_ceil(FLT_MAX) == 0xFE, "ue8m0 FLT_MAX");
    CHECK(qf_ue8m0_from_f32_ceil(3.0f) == 128 + 1, "ue8m0 3 -> 4");
    CHECK(qf_pow2_ceil_f32(3.0f) == 4.0f, "pow2_ceil 3");
    CHECK(qf_pow2_ceil_f32(0x1.8p-140f) == 0x1p-139f, "pow2_ceil subnormal");
    CHECK(qf_pow2_ceil_f32(0x1p-126f - 0x1p-149f) == 0x1p-126f, "pow2_ceil largest subnormal");
    CHECK(bits_of(qf_pow2_ceil_f32(0.0f)) == 0, "pow2_ceil 0");
    CHECK(bits_of(qf_pow2_ceil_f32(-0.0f)) == 0, "pow2_ceil -0 -> +0");
    CHECK(isnan(qf_pow2_ceil_f32(NAN)), "pow2_ceil NaN");
    CHECK(isnan(qf_pow2_ceil_f32(-2.0f)), "pow2_ceil negative");
    CHECK(qf_pow2_ceil_f32(INFINITY) == INFINITY, "pow2_ceil +Inf");
    CHECK(qf_pow2_ceil_f32(FLT_MAX) == INFINITY, "pow2_ceil FLT_MAX");
    /* strided sweep over every positive finite float, subnormals included */
    for (i = 1; i < 0x7F800000u; i += 1237) {
        float x = float_of((uint32_t)i);
        unsigned got = qf_ue8m0_from_f32_ceil(x), want = ref_ue8m0_ceil(x);
        double pgot = qf_pow2_ceil_f32(x), pwant = ref_pow2_ceil(x);
        CHECK(got == want, "ue8m0 sweep %a: got 0x%X, want 0x%X", (double)x, got, want);
        CHECK(pgot == pwant, "pow2_ceil sweep %a: got %a, want %a", (double)x, pgot, pwant);
    }
}

int main(void)
{
    unsigned i;
    for (i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) {
        info_t in = make_info(&FORMATS[i]);
        test_decode_all(&in);
        test_round_trip(&in);
        test_midpoints(&in);
        test_overflow_nan_zero(&in);
        test_sweep(&in);
        free(in.val);
    }
    test_anchors();
    test_int8();
    test_ue8m0();
    return check_finish("test_formats");
}
