/* Kernel time of a timed GPU run from CUPTI's activity records (kernel_timer.c). */
#ifndef QFUSE_TOOLS_KERNEL_TIMER_H
#define QFUSE_TOOLS_KERNEL_TIMER_H

/* Loads libcupti and starts its kernel, memset and memcpy records: 1, or 0 after saying why. */
int qfb_ktimer_open(void);
/* Opens the window of one run, after the GPU has finished everything before it: 1 on success. */
int qfb_ktimer_begin(void);
/* Closes the window, after the GPU has finished the run: the microseconds of its kernels,
 * memsets and memcpys added up, or a negative value after saying why. */
double qfb_ktimer_end(void);

#endif
