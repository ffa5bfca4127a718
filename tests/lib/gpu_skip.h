/*
 * How many GPUs there are, for a suite function that skips its program
 * or leaves cases out without one (harness.h). The probe runs in a child
 * process: CUDA must not be initialised in the test runner, whose forked
 * test processes could not use it afterwards.
 */
#ifndef WEFT_TESTS_LIB_GPU_SKIP_H
#define WEFT_TESTS_LIB_GPU_SKIP_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Number of CUDA devices, counted in a child process; 0 on any error. */
static inline int weft_test_gpu_count(void)
{
    int   status;
    pid_t pid = fork();

    if (pid < 0) {
        return 0;
    }
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess ? (n > 100 ? 100 : n) : 0);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return 0;
    }
    return WEXITSTATUS(status);
}

#endif
