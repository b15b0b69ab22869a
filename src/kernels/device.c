/*
 * device.c: which kernel set a rank runs when it asked for a device
 * ("--kernels cuda" or "auto"), and which device it takes.
 *
 * Plain C over a device API (bt_device_api_t): the CUDA runtime's in a
 * --with-cuda build, none otherwise, or a test's stand-in, so every rule
 * here is tested on a machine without a GPU.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels.h"

/* Never run: bt_kernels_resolve replaces it before any kernel is called. */
const bt_ops_t bt_ops_auto = {.name = "auto"};

#ifdef BT_HAVE_CUDA
extern const bt_device_api_t bt_cuda_device_api;
const bt_device_api_t *const bt_device_default = &bt_cuda_device_api;
#else
const bt_device_api_t *const bt_device_default = NULL;
#endif

int bt_device_pick(int local_rank, int n_devices, int gpu, char *why, size_t n)
{
    if (n_devices <= 0) {
        snprintf(why, n, "no CUDA device");
        return -1;
    }
    if (gpu >= n_devices) {
        snprintf(why, n, "--gpu %d: this node has %d CUDA device%s (0 .. %d)", gpu, n_devices,
                 n_devices == 1 ? "" : "s", n_devices - 1);
        return -1;
    }
    return gpu >= 0 ? gpu : local_rank % n_devices;
}

const bt_ops_t *bt_kernels_resolve(const bt_ops_t *want, const bt_device_api_t *api,
                                   int local_rank, int gpu, int *device, char *why, size_t n)
{
    *device = -1;
    const bool cuda = strcmp(want->name, "cuda") == 0;
    if (!cuda && want != &bt_ops_auto)
        return want;
    if (api == NULL) {
        if (!cuda)
            return &bt_ops_cpu;
        snprintf(why, n, "--kernels cuda: this build has no CUDA (configure --with-cuda)");
        return NULL;
    }
    char reason[200] = "";
    const int count = api->count(reason, sizeof reason);
    if (count <= 0 && !cuda)
        return &bt_ops_cpu;
    if (count <= 0) {
        snprintf(why, n, "--kernels cuda: no usable CUDA device on this node (CUDA runtime: %s)",
                 reason);
        return NULL;
    }
    const int dev = bt_device_pick(local_rank, count, gpu, reason, sizeof reason);
    if (dev < 0) {
        snprintf(why, n, "%s", reason);
        return NULL;
    }
    if (api->open(dev, reason, sizeof reason) != 0) {
        snprintf(why, n, "--kernels %s: cannot use CUDA %s", want->name, reason);
        return NULL;
    }
    *device = dev;
    return api->ops;
}

bool bt_device_fits(const bt_device_api_t *api, int device, uint64_t need, char *why, size_t n)
{
    const uint64_t free_bytes = api->mem_free();
    if (need <= free_bytes)
        return true;
    snprintf(why, n,
             "CUDA device %d (%s): this stage needs %.2f GiB of device memory (weights and "
             "buffers), %.2f GiB are free: use more stages or ranks, or a smaller context",
             device, api->name(), (double)need / (1u << 30), (double)free_bytes / (1u << 30));
    return false;
}
