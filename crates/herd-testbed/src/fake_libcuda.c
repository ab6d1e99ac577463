/* A stand-in for NVIDIA's driver library (libcuda.so.1) on the bed, which has no GPU: just
 * what herd's preflight asks of it inside a container image (cuInit, cuDeviceGetCount,
 * cuGetErrorName), with CUDA's rules for CUDA_VISIBLE_DEVICES: the visible devices are the
 * entries up to the first that names no device, and none visible makes cuInit fail with
 * CUDA_ERROR_NO_DEVICE (100).
 *
 * The "container" has 4 devices, or 1 on the node HERD_FAKE_CUDA_SHORT names (by its
 * SLURMD_NODENAME): a runtime that put only one GPU in. */
#include <stdlib.h>
#include <string.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NO_DEVICE 100

static int devices(void) {
    const char *short_node = getenv("HERD_FAKE_CUDA_SHORT");
    const char *node = getenv("SLURMD_NODENAME");
    if (short_node && node && strcmp(short_node, node) == 0)
        return 1;
    return 4;
}

static int visible(void) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int total = devices(), n = 0;
    if (!v)
        return total;
    while (*v) {
        char *end;
        long i = strtol(v, &end, 10);
        if (end == v || i < 0 || i >= total)
            break;
        n++;
        if (*end != ',')
            break;
        v = end + 1;
    }
    return n;
}

int cuInit(unsigned int flags) {
    (void)flags;
    return visible() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

int cuDeviceGetCount(int *count) {
    *count = visible();
    return CUDA_SUCCESS;
}

int cuGetErrorName(int error, const char **name) {
    *name = error == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}
