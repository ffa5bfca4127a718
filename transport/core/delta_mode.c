/* WEFT_DELTA (core/delta_mode.h). */
#include "config.h"

#include "transport/core/delta_mode.h"

#include "common/env_config.h"
#include "common/log.h"

#include <strings.h>

weft_delta_mode_t weft_delta_mode(void)
{
    const char *value = weft_config_value(WEFT_CONFIG_DELTA);

    if (strcasecmp(value, "auto") == 0) {
        return WEFT_DELTA_AUTO;
    }
    if (strcasecmp(value, "force") == 0) {
        return WEFT_DELTA_FORCE;
    }
    if (strcasecmp(value, "off") != 0) {
        weft_log_error("WEFT_DELTA=%s: expected auto, off or force; taken as off", value);
    }
    return WEFT_DELTA_OFF;
}

const char *weft_delta_mode_name(weft_delta_mode_t mode)
{
    return mode == WEFT_DELTA_AUTO ? "auto" : mode == WEFT_DELTA_FORCE ? "force" : "off";
}
