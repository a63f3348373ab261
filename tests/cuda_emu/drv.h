// drv.h: helpers shared by the drivers of the host CUDA emulator (test_*.cpp here): element
// conversions, random inputs, error measures, and the Check main. Each driver includes
// emu.h, the generated copy of one engine/cuda/*.cu (gen.py), then this.
//
// Error measure (the project's): the largest absolute error over the largest reference
// magnitude of the output ("relative to the norm"); fp32 must be within 1e-5, bf16/f16
// within 1e-2 against a reference computed from the same rounded inputs.
#pragma once
#include <check.h>
#include <stdarg.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

template <typename T> static T cvt(float x);
template <> inline float cvt<float>(float x) { return x; }
template <> inline __nv_bfloat16 cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> inline __half cvt<__half>(float x) { return __float2half_rn(x); }
static inline float fl(float x) { return x; }
static inline float fl(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float fl(__half x) { return __half2float(x); }
template <typename T> static inline float rnd_to(float x) { return fl(cvt<T>(x)); }

static std::mt19937 R(42);
static inline float urand() { return std::uniform_real_distribution<float>(-1.f, 1.f)(R); }
static inline int irand(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(R); }

template <typename T> static inline bool same_bits(T a, T b) { return memcmp(&a, &b, sizeof a) == 0; }

static inline const char *dt_name(ck_dtype_t t) {
    return t == CK_F32 ? "f32" : t == CK_BF16 ? "bf16" : "f16";
}
static inline double tol_of(ck_dtype_t t) { return t == CK_F32 ? 1e-5 : 1e-2; }

// max |got - ref| / max |ref|, NaN-aware (a NaN anywhere is an infinite error)
struct Err {
    double err = 0, big = 1e-30;
    void add(double got, double ref) {
        double e = fabs(got - ref);
        if (!(e <= err)) err = std::isnan(e) ? INFINITY : e;
        big = std::max(big, fabs(ref));
    }
    double rel() const { return err / big; }
};

// 16-byte aligned scratch of n elements of T (the device allocations are 256-byte aligned)
template <typename T> struct Buf {
    T *p;
    size_t n;
    explicit Buf(size_t n_) : n(n_) {
        p = (T *)aligned_alloc(256, (n * sizeof(T) + 255) / 256 * 256 + 256);
        memset((void *)p, 0xff, n * sizeof(T));
    }
    ~Buf() { free(p); }
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
    T &operator[](size_t i) { return p[i]; }
};

// Counts the cases of one test and reports the failures (one line each).
struct Cases {
    int n = 0, bad = 0;
    void check(bool ok, const std::string &what) {
        n++;
        if (!ok) {
            bad++;
            printf("FAIL %s\n", what.c_str());
            fflush(stdout);
        }
    }
};

static inline std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static inline std::string fmt(const char *f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

// runs one suite of tests, each with a generous timeout (the emulator is slow)
static inline int run_suite(const char *name, const std::vector<const TTest *> &tests) {
    setvbuf(stdout, NULL, _IOLBF, 0);   // a failing test exits without flushing
    Suite *s = suite_create(name);
    TCase *tc = tcase_create("emu");
    tcase_set_timeout(tc, 600);
    for (const TTest *t : tests) _tcase_add_test(tc, t, 0, 0, 0, 1);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    fflush(stdout);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
