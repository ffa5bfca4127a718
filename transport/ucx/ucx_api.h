/*
 * UCX, loaded at run time: libweft links no UCX library, so it loads and
 * runs on a host without UCX, and the ucx backend says so instead. The
 * headers are UCX's own; each UCX function the backend calls is a pointer
 * in weft_ucx_api, filled by weft_ucx_api_load(), and the macros below
 * turn the calls in this backend's files into calls through it. Include
 * this instead of <ucp/api/ucp.h> and <uct/api/uct.h>. Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_API_H
#define WEFT_TRANSPORT_UCX_UCX_API_H

#include <stddef.h>
#include <weft/types.h>

/* UCX 1.13's headers declare functions without prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>
#pragma GCC diagnostic pop

/* Every UCX function the backend calls. ucp_init is an inline of UCX's
 * header around ucp_init_version, which is the symbol. */
#define WEFT_UCX_FUNCTIONS(X)                                                                    \
    X(ucp_init_version) X(ucp_cleanup) X(ucp_config_read) X(ucp_config_release)                  \
    X(ucp_context_query) X(ucp_get_version_string) X(ucp_worker_create) X(ucp_worker_destroy)    \
    X(ucp_worker_get_address) X(ucp_worker_release_address) X(ucp_worker_progress)               \
    X(ucp_worker_get_efd) X(ucp_worker_arm) X(ucp_ep_create) X(ucp_ep_close_nbx)                  \
    X(ucp_ep_flush_nbx) X(ucp_ep_rkey_unpack) X(ucp_rkey_destroy) X(ucp_rkey_pack)               \
    X(ucp_rkey_buffer_release) X(ucp_mem_map) X(ucp_mem_unmap) X(ucp_mem_query) X(ucp_put_nbx)   \
    X(ucp_am_send_nbx) X(ucp_worker_set_am_recv_handler) X(ucp_ep_print_info) X(ucp_dt_create_generic) \
    X(ucp_request_free) X(ucp_request_check_status) X(ucp_request_cancel) X(ucs_status_string)  \
    X(uct_query_components) X(uct_release_component_list) X(uct_component_query)                 \
    X(uct_md_config_read) X(uct_md_open) X(uct_md_close) X(uct_md_query)                         \
    X(uct_md_query_tl_resources) X(uct_release_tl_resource_list) X(uct_config_release)

typedef struct weft_ucx_api {
#define WEFT_UCX_API_SLOT_(name) __typeof__(name) *name;
    WEFT_UCX_FUNCTIONS(WEFT_UCX_API_SLOT_)
#undef WEFT_UCX_API_SLOT_
} weft_ucx_api_t;

extern weft_ucx_api_t weft_ucx_api;

/*
 * Loads UCX (libucp and what it loads) once per process; later calls
 * return the first one's result. WEFT_OK, or WEFT_ERR_UNSUPPORTED with the
 * loader's reason in *why (static; NULL allowed). Thread-safe. Every
 * entry into the backend calls it before any UCX function.
 */
weft_status_t weft_ucx_api_load(const char **why);

/* From here on, this backend's UCX calls go through weft_ucx_api. */
#define ucp_init(params, config, context) \
    ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, (params), (config), (context))
#define ucp_init_version             weft_ucx_api.ucp_init_version
#define ucp_cleanup                  weft_ucx_api.ucp_cleanup
#define ucp_config_read              weft_ucx_api.ucp_config_read
#define ucp_config_release           weft_ucx_api.ucp_config_release
#define ucp_context_query            weft_ucx_api.ucp_context_query
#define ucp_get_version_string       weft_ucx_api.ucp_get_version_string
#define ucp_worker_create            weft_ucx_api.ucp_worker_create
#define ucp_worker_destroy           weft_ucx_api.ucp_worker_destroy
#define ucp_worker_get_address       weft_ucx_api.ucp_worker_get_address
#define ucp_worker_release_address   weft_ucx_api.ucp_worker_release_address
#define ucp_worker_progress          weft_ucx_api.ucp_worker_progress
#define ucp_worker_get_efd           weft_ucx_api.ucp_worker_get_efd
#define ucp_worker_arm               weft_ucx_api.ucp_worker_arm
#define ucp_ep_create                weft_ucx_api.ucp_ep_create
#define ucp_ep_close_nbx             weft_ucx_api.ucp_ep_close_nbx
#define ucp_ep_flush_nbx             weft_ucx_api.ucp_ep_flush_nbx
#define ucp_ep_rkey_unpack           weft_ucx_api.ucp_ep_rkey_unpack
#define ucp_rkey_destroy             weft_ucx_api.ucp_rkey_destroy
#define ucp_rkey_pack                weft_ucx_api.ucp_rkey_pack
#define ucp_rkey_buffer_release      weft_ucx_api.ucp_rkey_buffer_release
#define ucp_mem_map                  weft_ucx_api.ucp_mem_map
#define ucp_mem_unmap                weft_ucx_api.ucp_mem_unmap
#define ucp_mem_query                weft_ucx_api.ucp_mem_query
#define ucp_put_nbx                  weft_ucx_api.ucp_put_nbx
#define ucp_am_send_nbx              weft_ucx_api.ucp_am_send_nbx
#define ucp_worker_set_am_recv_handler weft_ucx_api.ucp_worker_set_am_recv_handler
#define ucp_ep_print_info            weft_ucx_api.ucp_ep_print_info
#define ucp_dt_create_generic        weft_ucx_api.ucp_dt_create_generic
#define ucp_request_free             weft_ucx_api.ucp_request_free
#define ucp_request_check_status     weft_ucx_api.ucp_request_check_status
#define ucp_request_cancel           weft_ucx_api.ucp_request_cancel
#define ucs_status_string            weft_ucx_api.ucs_status_string
#define uct_query_components         weft_ucx_api.uct_query_components
#define uct_release_component_list   weft_ucx_api.uct_release_component_list
#define uct_component_query          weft_ucx_api.uct_component_query
#define uct_md_config_read           weft_ucx_api.uct_md_config_read
#define uct_md_open                  weft_ucx_api.uct_md_open
#define uct_md_close                 weft_ucx_api.uct_md_close
#define uct_md_query                 weft_ucx_api.uct_md_query
#define uct_md_query_tl_resources    weft_ucx_api.uct_md_query_tl_resources
#define uct_release_tl_resource_list weft_ucx_api.uct_release_tl_resource_list
#define uct_config_release           weft_ucx_api.uct_config_release

#endif
