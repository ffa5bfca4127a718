/*
 * The GPU placements in a library built without CUDA: creating one says
 * so, and nothing else here is ever reached.
 */
#include "config.h"

#include "optim_impl.h"

#include "common/log.h"

weft_status_t optim_gpu_create(weft_optim_h opt)
{
    (void)opt;
    weft_log_error("weft_optim_create: the staged and resident placements need a library built with CUDA");
    return WEFT_ERR_UNSUPPORTED;
}

void optim_gpu_destroy(weft_optim_h opt)
{
    (void)opt;
}

weft_status_t optim_gpu_state_alloc(weft_optim_h opt, optim_group_t *g)
{
    (void)opt;
    (void)g;
    return WEFT_ERR_UNSUPPORTED;
}

void optim_gpu_state_free(weft_optim_h opt, optim_group_t *g)
{
    (void)opt;
    (void)g;
}

weft_status_t optim_gpu_grad_check(weft_optim_h opt, uint32_t group, const weft_optim_grad_t *grad)
{
    (void)opt;
    (void)group;
    (void)grad;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t optim_gpu_state_copy(weft_optim_h opt, optim_group_t *g, int a, uint64_t offset, void *host,
                                   size_t bytes, int to_device)
{
    (void)opt;
    (void)g;
    (void)a;
    (void)offset;
    (void)host;
    (void)bytes;
    (void)to_device;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t optim_gpu_muon_prepare(weft_optim_h opt, const optim_group_t *g)
{
    (void)opt;
    (void)g;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t optim_gpu_step(weft_optim_h opt, const weft_optim_grad_t *grads, const optim_scalars_t *scalars,
                             const weft_optim_step_params_t *params)
{
    (void)opt;
    (void)grads;
    (void)scalars;
    (void)params;
    return WEFT_ERR_UNSUPPORTED;
}
