// Arch guards for the PTX wrappers: each wrapper's single asm statement goes through one of these,
// so kernels hold no #if. Outside the matching device pass (the host pass, other targets) the
// statement becomes a trap: reaching it means a kernel was built for a target it cannot run on.
#pragma once

// sm_90 and later: mbarrier transaction counts, bulk tensor copies (TMA).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define QF_ASM_SM90(...) asm volatile(__VA_ARGS__)
#else
#define QF_ASM_SM90(...) __trap()
#endif

// sm_90a only (the arch-specific feature set): wgmma, setmaxnreg.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QF_ASM_SM90A(...) asm volatile(__VA_ARGS__)
#else
#define QF_ASM_SM90A(...) __trap()
#endif
