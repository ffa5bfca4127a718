/* The cuda backend's descriptor (core/desc.h): the CUDA runtime's probe,
 * and the cuda_ipc transport's plan (pull) and its push mode's server and
 * remote consumer. */
#include "config.h"

#include "common/cuda_util.h"
#include "transport/core/desc.h"
#include "transport/cuda_ipc/push.h"

const weft_transport_desc_t weft_cuda_desc = {
    .backend    = WEFT_BACKEND_CUDA,
    .name       = "cuda",
    .dependency = "CUDA",
    .transport  = WEFT_TRANSPORT_CUDA_IPC,
    .compiled   = 1,
    .probe      = weft_cuda_probe,
    .plan       = &weft_cuda_ipc_plan_ops,
    .server     = &weft_cuda_ipc_server_ops,
    .remote     = &weft_cuda_ipc_remote_ops,
};
